//! AWS Lambda entry point of the compaction function: wires the environment, clients and the
//! handler; all logic is in `dms2iceberg::lambda::compact`.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use dms2iceberg::aws::{Aws, check_ca_store};
use dms2iceberg::lambda::compact::{CompactEnv, CompactHandler};
use dms2iceberg::lambda::events::CompactEvent;
use dms2iceberg::lambda::runtime::report_init_error;
use dms2iceberg::lambda::{FunctionEnv, FunctionError, guarded};
use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};

async fn init() -> Result<CompactHandler, FunctionError> {
    let env = FunctionEnv::from_env()?;
    let settings = CompactEnv::from_env()?;
    check_ca_store()?;
    let aws = Aws::from_env().await;
    // A function granted one database cannot list the others (GetDatabases).
    let catalog = aws
        .glue_catalog(&env.warehouse)?
        .only_database(env.database.clone());
    Ok(CompactHandler::new(Arc::new(catalog), &env, settings))
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dms2iceberg::process::tune_allocator();
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
    let handler = match guarded(init()).await {
        Ok(h) => Arc::new(h),
        Err(e) => {
            tracing::error!(kind = %e.kind, error = %e.message, "initialisation failed");
            report_init_error(&e);
            return Err(e.into());
        }
    };
    lambda_runtime::run(service_fn(move |event: LambdaEvent<CompactEvent>| {
        let handler = handler.clone();
        // The context's deadline is wall-clock milliseconds; turn it into an Instant.
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let deadline =
            Instant::now() + Duration::from_millis(event.context.deadline.saturating_sub(now_ms));
        async move {
            guarded(handler.handle(event.payload, Some(deadline)))
                .await
                .map_err(|e| Diagnostic {
                    error_type: e.kind,
                    error_message: e.message,
                })
        }
    }))
    .await
}
