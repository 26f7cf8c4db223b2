//! AWS Lambda entry point of the ingest function: wires the environment, clients and the
//! handler; all logic is in `dms2iceberg::lambda::ingest`.

use std::sync::Arc;

use dms2iceberg::aws::Aws;
use dms2iceberg::lambda::FunctionEnv;
use dms2iceberg::lambda::ingest::IngestHandler;
use lambda_runtime::{LambdaEvent, service_fn};
use serde_json::Value;

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    let started = std::time::Instant::now();
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
    let handler = Arc::new(IngestHandler::new(&aws, env).await?);
    tracing::info!(
        init_ms = started.elapsed().as_millis() as u64,
        "initialised"
    );
    lambda_runtime::run(service_fn(move |event: LambdaEvent<Value>| {
        let handler = handler.clone();
        async move {
            handler
                .handle(event.payload)
                .await
                .map_err(|e| lambda_runtime::Diagnostic::from(e.to_string()))
        }
    }))
    .await
}
