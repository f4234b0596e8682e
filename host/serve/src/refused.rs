//! The admin API's errors: an HTTP status and a message naming the cause.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use weir_control::Refusal;

/// Why a call was refused: an HTTP status and a message naming the cause.
#[derive(Debug)]
pub struct Refused {
    /// The HTTP status.
    pub status: u16,
    /// What was wrong, for people.
    pub message: String,
}

impl Refused {
    /// A refusal with `status` and `message`.
    pub fn new(status: u16, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

/// The status each kind of UDF-lifecycle refusal is answered with.
impl From<Refusal> for Refused {
    fn from(refusal: Refusal) -> Self {
        let status = match &refusal {
            Refusal::Rejected(_) => 400,
            Refusal::NotReady(_) => 409,
            Refusal::Failed(_) => 500,
            Refusal::NotPublished(_) => 502,
            Refusal::TimedOut(_) => 504,
        };
        Self::new(status, refusal.message())
    }
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::BAD_REQUEST);
        (status, Json(json!({ "error": self.message }))).into_response()
    }
}
