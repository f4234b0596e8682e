//! Rejecting a record: the UDF's own way to send an element or timer to the pipeline's
//! dead-letter output, with a reason, and go on.

use std::fmt;

/// A record (or timer) the UDF refuses, returned as the error of
/// [`process_element`](crate::ProcessFunction::process_element) or
/// [`on_timer`](crate::ProcessFunction::on_timer): the host takes back everything the
/// call did (emitted records, state writes, timer changes), writes the element to the
/// dead-letter output with `reason`, and goes on, whatever the pipeline's `on_error`
/// policy. It is not a failure: a new version's probation does not count it. Context
/// added to it (`.context(..)`) stays out of the reason. Usually written with
/// [`reject`]: `return weir::reject(format!("cost {cost:?} is not a number"));`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject {
    reason: String,
}

impl Reject {
    /// A rejection with `reason`, the text the dead letter carries.
    pub fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }

    /// The reason given.
    pub fn reason(&self) -> &str {
        &self.reason
    }

    /// The rejection in `error`'s chain, if there is one.
    pub fn find(error: &anyhow::Error) -> Option<&Reject> {
        error
            .chain()
            .find_map(|cause| cause.downcast_ref::<Reject>())
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rejected: {}", self.reason)
    }
}

impl std::error::Error for Reject {}

/// Rejects the element or timer being processed with `reason`: `Err(Reject::new(reason))`
/// for a `?`-free early return, `return weir::reject("no order id");`.
pub fn reject<T>(reason: impl Into<String>) -> crate::result::Result<T> {
    Err(Reject::new(reason).into())
}
