//! AWS Lambda entry point of the ingest function: the process is
//! `dms2iceberg::lambda::serve::ingest` (environment, clients, cache, handler, loop).

#[tokio::main]
async fn main() -> Result<(), lambda_runtime::Error> {
    dms2iceberg::lambda::serve::ingest().await
}
