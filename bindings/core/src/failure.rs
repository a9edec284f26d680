//! The one error payload of every binding: the core's
//! [`burrow::api::ErrorBody`] (what `burrow serve` answers too), so every
//! language sees the same code and fields (`id`, `actual_id`, `name`,
//! `status`, `operation`, `subject`, `reason`, `after_ms`, `guest`, `path`,
//! `sandboxes`, `limit`, `retry_after_ms`).

use burrow::api::ErrorBody;
use burrow::{Error, ErrorCode};

/// A failed call.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure(Box<ErrorBody>);

impl Failure {
    /// A bad argument of the binding's own (an input that does not parse, a
    /// process object used in a fork child): `invalid_argument`, naming the
    /// argument.
    pub fn argument(subject: impl Into<String>, reason: impl Into<String>) -> Failure {
        let (subject, reason) = (subject.into(), reason.into());
        Failure::from(Error::InvalidArgument {
            argument: subject,
            reason,
        })
    }

    /// A failure of the binding itself (its runtime cannot start): `io`.
    pub fn internal(message: impl Into<String>) -> Failure {
        let message = message.into();
        Failure(Box::new(ErrorBody {
            code: ErrorCode::Io.as_str().to_owned(),
            subject: Some("burrow binding".into()),
            reason: Some(message.clone()),
            message,
            ..ErrorBody::default()
        }))
    }

    /// The error body.
    pub fn body(&self) -> &ErrorBody {
        &self.0
    }

    /// The error body, owned.
    pub fn into_body(self) -> ErrorBody {
        *self.0
    }

    /// The code (`not_found`, `sandbox_replaced`, ...).
    pub fn code(&self) -> &str {
        &self.0.code
    }

    /// The body as JSON text (what adapters without structured values hand
    /// on).
    pub fn to_json(&self) -> String {
        serde_json::to_string(&*self.0).unwrap_or_else(|_| {
            format!(
                "{{\"code\":\"io\",\"message\":{:?}}}",
                "the error could not be encoded"
            )
        })
    }

    /// The core error this body describes.
    pub(crate) fn into_core(self) -> Error {
        self.0.into_error()
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure(Box::new(ErrorBody::from(&e)))
    }
}

impl From<&Error> for Failure {
    fn from(e: &Error) -> Self {
        Failure(Box::new(ErrorBody::from(e)))
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.0.message, self.0.code)
    }
}

impl std::error::Error for Failure {}
