//! AWS Lambda entry point of the ingest function: wires the environment, clients and the
//! handler; all logic is in `dms2iceberg::lambda::ingest`.

use std::sync::Arc;

use dms2iceberg::aws::{Aws, S3Objects, check_ca_store};
use dms2iceberg::lambda::events::IngestEvent;
use dms2iceberg::lambda::ingest::IngestHandler;
use dms2iceberg::lambda::runtime::report_init_error;
use dms2iceberg::lambda::{FunctionEnv, FunctionError, guarded};
use dms2iceberg::{CacheLimits, TableCache};
use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};

async fn init() -> Result<IngestHandler, FunctionError> {
    let env = FunctionEnv::from_env()?;
    check_ca_store()?;
    let aws = Aws::from_env().await;
    // The function's cache of table files: warm invocations read back nothing it wrote.
    let cache = TableCache::new(CacheLimits {
        key_bytes: env.key_cache_bytes,
    });
    let catalog = Arc::new(
        aws.glue_catalog(&env.warehouse)?
            .with_cache(Arc::new(cache)),
    );
    let objects = Arc::new(S3Objects::new(aws.s3.clone(), env.spool.clone()));
    Ok(IngestHandler::new(env, catalog, objects).await?)
}

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dms2iceberg::process::tune_allocator();
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
    let handler = match guarded(init()).await {
        Ok(h) => Arc::new(h),
        Err(e) => {
            tracing::error!(kind = %e.kind, error = %e.message, "initialisation failed");
            report_init_error(&e);
            return Err(e.into());
        }
    };
    tracing::info!(
        init_ms = started.elapsed().as_millis() as u64,
        "initialised"
    );
    lambda_runtime::run(service_fn(move |event: LambdaEvent<IngestEvent>| {
        let handler = handler.clone();
        async move {
            guarded(handler.handle(event.payload))
                .await
                .map_err(|e| Diagnostic {
                    error_type: e.kind,
                    error_message: e.message,
                })
        }
    }))
    .await
}
