//! AWS Lambda entry point of the compaction function: wires the environment, clients and the
//! handler; all logic is in `dms2iceberg::lambda::compact`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dms2iceberg::aws::Aws;
use dms2iceberg::lambda::FunctionEnv;
use dms2iceberg::lambda::compact::{CompactEnv, CompactHandler};
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    tracing_subscriber::fmt()
        .json()
        .with_current_span(false)
        .with_target(false)
        .without_time()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let env = FunctionEnv::from_env()?;
    let aws = Aws::from_env().await;
    let handler = Arc::new(CompactHandler::new(&aws, &env, CompactEnv::from_env()?)?);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let handler = handler.clone();
        // The context's deadline is wall-clock milliseconds; turn it into an Instant.
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let deadline =
            Instant::now() + Duration::from_millis(event.context.deadline.saturating_sub(now_ms));
        async move {
            handler
                .handle(event.payload, Some(deadline))
                .await
                .map_err(|e| lambda_runtime::Diagnostic::from(e.to_string()))
        }
    }))
    .await
}
