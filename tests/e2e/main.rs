//! The CLI on a local warehouse (SQLite catalog in a temp dir): every suite that needs the
//! Python test tools (`.venv`: the DMS generator, PyIceberg, DuckDB, pyarrow) and nothing else.
//! One test binary, one module per suite (`cargo test --features e2e --test e2e reload::` runs
//! one of them); each test has its own work dir, so they share the process safely.

#[path = "../common/mod.rs"]
mod common;
// Concurrency, crash and compaction helpers (the library in-process, CLI processes, history
// checks); used by `compact`, `crash`, `repair` and `stress`.
#[path = "../common/stress.rs"]
mod stress_support;
// The widened-columns scenario, shared with tests/spark.rs; used by `widen`.
#[path = "../common/widen.rs"]
mod widen_support;

mod compact;
mod crash;
mod e2e;
mod examples;
mod fullload;
mod hostile;
mod messages;
mod modes;
mod ordering;
mod reload;
mod repair;
mod rest;
mod settings;
mod stress;
mod types;
mod widen;
