//! What the answer to one swap request (Glue `UpdateTable`/`CreateTable`, S3 Tables
//! `UpdateTableMetadataLocation`) says about whether it took effect.
//!
//! The SDKs retry 5xx answers, throttles and transport errors on their own. For a swap that
//! hides the one fact the commit loop needs: when the first attempt was applied and its answer
//! lost, the retry is refused (the version it presents has moved, by our own update) and looks
//! exactly like a lost race. So swap requests are sent once, without the SDK's retries
//! ([`single_attempt`]), and their answer is classified here; the commit loop does the retrying,
//! and looks at the table after anything [`SwapError::Unknown`].

use aws_sdk_glue::config::http::HttpResponse as Response;
use aws_sdk_glue::config::retry::RetryConfig;
use aws_sdk_glue::error::{ProvideErrorMetadata, SdkError};

use super::SwapError;
use crate::error::Error;

/// Error codes of a request refused before it took effect because of the request rate.
const THROTTLED: &[&str] = &[
    "ThrottlingException",
    "Throttling",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "SlowDown",
];

/// The retry setting for a swap request: one attempt (see the module doc).
pub(super) fn single_attempt() -> RetryConfig {
    RetryConfig::disabled()
}

/// What kind of answer a single swap request got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Answer {
    /// The service refused the swap because the version it presented is stale.
    Conflict,
    Throttled,
    /// A 5xx, or no answer (timeout, dispatch or response failure): may have taken effect.
    Unknown,
    /// Never sent (the request could not be built) or refused for good (a 4xx).
    Refused,
}

/// Classifies the error a single (not retried) swap request got. `is_conflict` says which
/// service error means "the version moved" for this request.
pub(super) fn answer<E, F>(e: &SdkError<E, Response>, is_conflict: F) -> Answer
where
    E: ProvideErrorMetadata,
    F: Fn(&E) -> bool,
{
    match e {
        SdkError::ConstructionFailure(_) => Answer::Refused,
        SdkError::ServiceError(ctx) => service_answer(
            is_conflict(ctx.err()),
            ctx.err().code(),
            ctx.raw().status().as_u16(),
        ),
        // Timeouts, dispatch and response failures, and whatever else the SDK adds: the
        // request may have reached the service.
        _ => Answer::Unknown,
    }
}

/// An answer the service gave: its error code and HTTP status.
fn service_answer(conflict: bool, code: Option<&str>, status: u16) -> Answer {
    if conflict {
        Answer::Conflict
    } else if code.is_some_and(|c| THROTTLED.contains(&c)) || status == 429 {
        Answer::Throttled
    } else if status >= 500 {
        Answer::Unknown
    } else {
        Answer::Refused
    }
}

/// The [`SwapError`] for a failed single swap request, with `what` (service and operation)
/// and the SDK's account of the error in its message.
pub(super) fn swap_error<E, F>(e: SdkError<E, Response>, what: &str, is_conflict: F) -> SwapError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    F: Fn(&E) -> bool,
{
    let kind = answer(&e, is_conflict);
    let message = format!("{what}: {}", aws_sdk_glue::error::DisplayErrorContext(&e));
    match kind {
        Answer::Conflict => SwapError::Conflict,
        Answer::Throttled => SwapError::Refused(message),
        Answer::Unknown => SwapError::Unknown(message),
        Answer::Refused => SwapError::Failed(Error::Catalog(message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_glue::operation::update_table::UpdateTableError;

    #[test]
    fn a_single_answer_is_classified_by_what_it_proves() {
        assert_eq!(
            service_answer(true, Some("ConcurrentModificationException"), 400),
            Answer::Conflict
        );
        assert_eq!(
            service_answer(false, Some("ThrottlingException"), 400),
            Answer::Throttled
        );
        assert_eq!(service_answer(false, None, 429), Answer::Throttled);
        assert_eq!(
            service_answer(false, Some("InternalServiceException"), 500),
            Answer::Unknown
        );
        assert_eq!(service_answer(false, None, 503), Answer::Unknown);
        assert_eq!(
            service_answer(false, Some("EntityNotFoundException"), 400),
            Answer::Refused
        );
        assert_eq!(
            service_answer(false, Some("AccessDeniedException"), 403),
            Answer::Refused
        );
        let conflict = |e: &UpdateTableError| e.is_concurrent_modification_exception();
        let timeout: SdkError<UpdateTableError, Response> =
            SdkError::timeout_error("read timed out");
        assert_eq!(answer(&timeout, conflict), Answer::Unknown);
        assert!(matches!(
            swap_error(timeout, "Glue UpdateTable", conflict),
            SwapError::Unknown(m) if m.starts_with("Glue UpdateTable")
        ));
        let never: SdkError<UpdateTableError, Response> =
            SdkError::construction_failure("bad input");
        assert_eq!(answer(&never, conflict), Answer::Refused);
        assert!(matches!(
            swap_error(never, "Glue UpdateTable", conflict),
            SwapError::Failed(_)
        ));
    }
}
