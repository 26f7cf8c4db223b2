//! AWS Lambda entry point of the compaction function: the process is
//! `dms2iceberg::lambda::serve::compact` (environment, clients, handler, loop).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dms2iceberg::lambda::serve::compact().await
}
