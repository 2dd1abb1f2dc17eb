//! Mapping S3's answers to [`shedlock::Error`]: [`S3Error`], the source of each error, and what
//! a failed request means for the caller.

use std::fmt;

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use shedlock::Error;

use crate::{BACKEND, refusal::Call, store::S3Store};

/// Why an S3 request failed: the [`source`](std::error::Error::source) of the
/// [`shedlock::Error`] a call returns. It never holds the request, the client or its
/// credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum S3Error {
    /// S3 asked to slow down (`SlowDown`, HTTP 503) after the SDK's own retries, or a
    /// conditional write met a concurrent one (`ConditionalRequestConflict`, HTTP 409). Nothing
    /// was written; the call's error is [`Error::Unavailable`] (retryable).
    #[error("{operation}: S3 answered {code} (HTTP {status}): {message}")]
    Throttled {
        /// The lock operation.
        operation: &'static str,
        /// S3's error code.
        code: String,
        /// The HTTP status.
        status: u16,
        /// S3's message.
        message: String,
    },
    /// S3 answered with another error.
    #[error("{operation}: S3 answered {code} (HTTP {status}): {message}")]
    Service {
        /// The lock operation.
        operation: &'static str,
        /// S3's error code.
        code: String,
        /// The HTTP status.
        status: u16,
        /// S3's message.
        message: String,
    },
    /// The request did not get an answer (connection refused or cut, a timeout of the SDK, an
    /// unreadable response): its effect is unknown.
    #[error("{operation}: {message}")]
    Transport {
        /// The lock operation.
        operation: &'static str,
        /// What the SDK reported.
        message: String,
    },
}

/// The HTTP status of a failed request's response, if there was one.
pub(crate) fn status<E, R: HasStatus>(e: &SdkError<E, R>) -> Option<u16> {
    e.raw_response().map(HasStatus::status)
}

/// The HTTP status of a raw response (a trait so that the classification is testable without
/// one).
pub(crate) trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_sdk_s3::config::http::HttpResponse {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

impl S3Store {
    /// What a failed `call` means for the caller.
    pub(crate) fn map_err<E, R>(
        &self,
        operation: &'static str,
        call: Call,
        e: SdkError<E, R>,
    ) -> Error
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: HasStatus + fmt::Debug,
    {
        let http = status(&e).unwrap_or(0);
        if let SdkError::ServiceError(s) = &e {
            let code = s.err().code().unwrap_or("unknown").to_owned();
            let message = s.err().message().unwrap_or("").to_owned();
            return match (code.as_str(), http) {
                ("NoSuchBucket", _) => self.missing_bucket(),
                ("SlowDown" | "ConditionalRequestConflict" | "RequestTimeout", _)
                | (_, 503 | 409) => Error::unavailable(
                    BACKEND,
                    S3Error::Throttled { operation, code, status: http, message },
                ),
                ("NotImplemented", _) | (_, 501) => Error::setup(
                    BACKEND,
                    format!(
                        "the server does not support a request the provider needs ({operation}: \
                     {code}: {message}); the provider needs conditional writes (If-None-Match \
                     and If-Match on PutObject)"
                    ),
                ),
                ("InternalError" | "ServiceUnavailable", _) | (_, 500..=599) => Error::unavailable(
                    BACKEND,
                    S3Error::Service { operation, code, status: http, message },
                ),
                (_, 401 | 403) => self.refused(operation, call, &code, &message),
                (
                    "AccessDenied"
                    | "InvalidAccessKeyId"
                    | "SignatureDoesNotMatch"
                    | "ExpiredToken"
                    | "InvalidToken"
                    | "TokenRefreshRequired"
                    | "RequestTimeTooSkewed",
                    _,
                ) => self.refused(operation, call, &code, &message),
                _ => Error::backend(
                    BACKEND,
                    S3Error::Service { operation, code, status: http, message },
                ),
            };
        }
        if let SdkError::ConstructionFailure(_) = &e {
            return Error::setup(
                BACKEND,
                format!(
                    "the request could not be built ({}): check the client's region, endpoint and \
                 credentials provider",
                    DisplayErrorContext(&e)
                ),
            );
        }
        Error::unavailable(
            BACKEND,
            S3Error::Transport { operation, message: DisplayErrorContext(&e).to_string() },
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    use std::sync::Mutex;

    use aws_sdk_s3::{
        Client, config::BehaviorVersion, error::ErrorMetadata,
        operation::put_object::PutObjectError,
    };

    use crate::DEFAULT_PREFIX;

    #[derive(Debug)]
    pub(crate) struct Raw(u16);

    impl HasStatus for Raw {
        fn status(&self) -> u16 {
            self.0
        }
    }

    pub(crate) fn inner() -> S3Store {
        let conf =
            aws_sdk_s3::Config::builder().behavior_version(BehaviorVersion::latest()).build();
        S3Store {
            client: Client::from_conf(conf),
            bucket: "locks".into(),
            prefix: DEFAULT_PREFIX.into(),
            seen: Mutex::default(),
        }
    }

    pub(crate) fn answered(code: &str, status: u16) -> SdkError<PutObjectError, Raw> {
        answered_with(code, status, "m")
    }

    pub(crate) fn answered_with(
        code: &str,
        status: u16,
        message: &str,
    ) -> SdkError<PutObjectError, Raw> {
        let meta = ErrorMetadata::builder().code(code).message(message).build();
        SdkError::service_error(PutObjectError::generic(meta), Raw(status))
    }

    #[test]
    fn errors_are_classified_for_retries_and_setup() {
        let i = inner();
        let put = Call::PutObject;
        for (code, http) in [("SlowDown", 503), ("ConditionalRequestConflict", 409)] {
            let e = i.map_err("try_lock", put, answered(code, http));
            assert!(e.is_retryable(), "{e:?}");
            let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<S3Error>());
            assert!(matches!(source, Some(S3Error::Throttled { status, .. }) if *status == http));
        }
        assert!(i.map_err("unlock", put, answered("InternalError", 500)).is_retryable());
        for (code, http) in [("NoSuchBucket", 404), ("AccessDenied", 403), ("NotImplemented", 501)]
        {
            let e = i.map_err("try_lock", put, answered(code, http));
            assert!(matches!(e, Error::Setup { .. }), "{code}: {e:?}");
        }
        let e = i.map_err("try_lock", put, answered("InvalidArgument", 400));
        assert!(matches!(e, Error::Backend { .. }) && !e.is_retryable(), "{e:?}");
    }

    pub(crate) fn setup_message(e: Error) -> String {
        match e {
            Error::Setup { message, .. } => message,
            other => panic!("expected Setup, got {other:?}"),
        }
    }
}
