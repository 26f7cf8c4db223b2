//! The deployment to AWS: the Lambda binaries through a Runtime API emulator against moto's S3 +
//! Glue (`lambda`; under injected faults: `faults`) and S3 Tables (`s3tables`), the same through `sam local invoke` in Docker
//! (`sam_local`, skipped with the reason where Docker is not set up), `template.yaml`'s checks
//! (`template`: cfn-lint and SAM CLI from `.venv-infra`), and a REST catalog on moto's S3 that
//! vends storage credentials (`rest`). One test binary, one module per suite (`cargo test --features e2e
//! --test aws lambda::` runs one of them).

#[path = "../common/mod.rs"]
mod common;
// The Lambda binaries and the S3 + Glue and Runtime API emulators; used by `lambda` and
// `sam_local`.
#[path = "../common/lambda.rs"]
mod lambda_support;

mod faults;
mod lambda;
mod operations;
mod rest;
mod s3tables;
mod sam_local;
mod template;
