//! Fault injection for the crash and race tests, compiled only with the `failpoints` feature
//! (which only the test build enables): release binaries carry none of it.
//!
//! `DMS2ICEBERG_FAILPOINT=<name>` fails at that step with an error, `<name>:kill` aborts the
//! process there, `<name>:sleep=MS` pauses there (without blocking the runtime) to force races.
//! Several, separated by commas, act each at its own step.

use crate::error::Result;

#[cfg(feature = "failpoints")]
pub(crate) async fn failpoint(name: &str) -> Result<()> {
    let Ok(v) = std::env::var("DMS2ICEBERG_FAILPOINT") else {
        return Ok(());
    };
    let Some(action) = v.split(',').find_map(|spec| {
        let (point, action) = spec.split_once(':').unwrap_or((spec, "error"));
        (point == name).then_some(action)
    }) else {
        return Ok(());
    };
    if action == "kill" {
        eprintln!("failpoint {name}: killing the process");
        std::process::abort();
    }
    if let Some(ms) = action
        .strip_prefix("sleep=")
        .and_then(|m| m.parse::<u64>().ok())
    {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        return Ok(());
    }
    Err(crate::error::Error::Internal(format!("failpoint {name}")))
}

#[cfg(not(feature = "failpoints"))]
#[inline(always)]
pub(crate) async fn failpoint(_name: &str) -> Result<()> {
    Ok(())
}
