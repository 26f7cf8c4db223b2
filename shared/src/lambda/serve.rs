//! The functions' process, start to end: allocator and JSON logs, initialisation (its failure
//! reported to the Runtime API), then the invocation loop. Each binary's `main` is one call to
//! [`ingest`] or [`compact`]; what an invocation does is in the handlers.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};

use super::compact::{CompactEnv, CompactHandler};
use super::events::{CompactEvent, IngestEvent};
use super::ingest::IngestHandler;
use super::runtime::report_init_error;
use super::{FunctionEnv, FunctionError, Services, guarded};
use crate::aws::{Aws, S3Objects, SqsDeadLetters, SsmParameters, check_ca_store};
use crate::files::{CacheLimits, TableCache};

/// The ingest function: one warm cache of table files and one catalog (Glue or S3 Tables) for
/// its lifetime.
pub async fn ingest() -> Result<(), lambda_runtime::Error> {
    let handler = start(async {
        let env = FunctionEnv::from_env()?;
        check_ca_store()?;
        let aws = Aws::from_env().await;
        // Owned here, for the function's lifetime: warm invocations read back nothing the
        // function wrote or read before.
        let cache = Arc::new(TableCache::new(CacheLimits {
            key_bytes: env.key_cache_bytes,
        }));
        let catalog = aws.catalog(&env.catalog, Some(cache), None).await?;
        let services = Services {
            objects: Arc::new(S3Objects::new(aws.s3.clone(), env.spool.clone())),
            parameters: env
                .config
                .as_deref()
                .is_some_and(|c| c.starts_with("ssm:"))
                .then(|| {
                    Arc::new(SsmParameters(aws_sdk_ssm::Client::new(&aws.sdk)))
                        as Arc<dyn crate::storage::ParameterStore>
                }),
            dead_letters: env.dead_letter_queue.clone().map(|queue_url| {
                Arc::new(SqsDeadLetters {
                    client: aws_sdk_sqs::Client::new(&aws.sdk),
                    queue_url,
                }) as Arc<dyn crate::storage::DeadLetters>
            }),
        };
        Ok(IngestHandler::new(env, catalog, services).await?)
    })
    .await?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<IngestEvent>| {
        let handler = handler.clone();
        // Answer a few seconds before Lambda's deadline: the records' outcome must reach it.
        let deadline =
            deadline_of(&event.context).map(|d| d.checked_sub(Duration::from_secs(3)).unwrap_or(d));
        async move {
            guarded(handler.handle_until(event.payload, deadline))
                .await
                .map_err(diagnostic)
        }
    }))
    .await
}

/// The invocation's deadline (the context's, wall-clock milliseconds) as an `Instant`; `None`
/// when the Runtime API gave none.
fn deadline_of(context: &lambda_runtime::Context) -> Option<Instant> {
    if context.deadline == 0 {
        return None;
    }
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    Some(Instant::now() + Duration::from_millis(context.deadline.saturating_sub(now_ms)))
}

/// The compaction function, with the invocation's deadline passed to the handler (it stops
/// starting work it could not finish).
pub async fn compact() -> Result<(), lambda_runtime::Error> {
    let handler = start(async {
        let env = FunctionEnv::from_env()?;
        let settings = CompactEnv::from_env()?;
        check_ca_store()?;
        let aws = Aws::from_env().await;
        // A function granted one database cannot list the others (GetDatabases).
        let catalog = aws
            .catalog(&env.catalog, None, env.database.clone())
            .await?;
        Ok(CompactHandler::new(catalog, &env, settings))
    })
    .await?;
    lambda_runtime::run(service_fn(move |event: LambdaEvent<CompactEvent>| {
        let handler = handler.clone();
        let deadline = deadline_of(&event.context);
        async move {
            guarded(handler.handle(event.payload, deadline))
                .await
                .map_err(diagnostic)
        }
    }))
    .await
}

/// Tunes the allocator, starts JSON logging and runs `init`; a failure is logged and posted to
/// the Runtime API's init-error endpoint before the process exits with it.
async fn start<H>(
    init: impl Future<Output = Result<H, FunctionError>>,
) -> Result<Arc<H>, lambda_runtime::Error> {
    crate::process::tune_allocator();
    let started = Instant::now();
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
    match guarded(init).await {
        Ok(h) => {
            tracing::info!(
                init_ms = started.elapsed().as_millis() as u64,
                "initialised"
            );
            Ok(Arc::new(h))
        }
        Err(e) => {
            tracing::error!(kind = %e.kind, error = %e.message, "initialisation failed");
            report_init_error(&e);
            Err(e.into())
        }
    }
}

fn diagnostic(e: FunctionError) -> Diagnostic {
    Diagnostic {
        error_type: e.kind,
        error_message: e.message,
    }
}
