//! Mapping DynamoDB's answers to [`shedlock::Error`]: [`DynamoDbError`], the source of each
//! error, and what a failed request means for the caller.

use std::fmt;

use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use shedlock::Error;

use crate::{ATTR_ID, BACKEND, refusal::Call, store::DynamoStore};

/// Why a DynamoDB request failed: the [`source`](std::error::Error::source) of the
/// [`shedlock::Error`] a call returns. Downcast to it to tell throttling from other failures:
///
/// ```
/// # fn f(e: shedlock::Error) {
/// use shedlock_dynamodb::DynamoDbError;
/// let throttled = std::error::Error::source(&e)
///     .and_then(|s| s.downcast_ref::<DynamoDbError>())
///     .is_some_and(|d| matches!(d, DynamoDbError::Throttled { .. }));
/// # }
/// ```
///
/// It never holds the request, the client or its credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DynamoDbError {
    /// DynamoDB refused the request for capacity (`ProvisionedThroughputExceededException`,
    /// `ThrottlingException`, `RequestLimitExceeded`), after the SDK's own retries. Nothing was
    /// changed; the call's error is [`Error::Unavailable`] (retryable): try again later.
    #[error("{operation}: throttled by DynamoDB ({code}): {message}")]
    Throttled {
        /// The lock operation.
        operation: &'static str,
        /// DynamoDB's error code.
        code: String,
        /// DynamoDB's message.
        message: String,
    },
    /// DynamoDB answered with another error.
    #[error("{operation}: DynamoDB answered {code}: {message}")]
    Service {
        /// The lock operation.
        operation: &'static str,
        /// DynamoDB's error code.
        code: String,
        /// DynamoDB's message.
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

/// The HTTP status of a raw response (a trait so that the classification is testable without
/// one).
pub(crate) trait HasStatus {
    fn status(&self) -> u16;
}

impl HasStatus for aws_sdk_dynamodb::config::http::HttpResponse {
    fn status(&self) -> u16 {
        self.status().as_u16()
    }
}

/// Whether a failed request failed its condition expression.
pub(crate) fn condition_failed<E: ProvideErrorMetadata, R>(e: &SdkError<E, R>) -> bool {
    e.as_service_error().and_then(ProvideErrorMetadata::code)
        == Some("ConditionalCheckFailedException")
}

impl DynamoStore {
    /// What a failed `call` means for the caller. Throttling and server-side faults are
    /// retryable ([`Error::Unavailable`]); a missing table or a wrong key schema is
    /// [`Error::Setup`]; refused credentials or permissions are [`Error::Setup`] too
    /// ([`refused`](Self::refused)). The [`DynamoDbError`] source keeps DynamoDB's code and
    /// message, never the request.
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
        let service = |code: &str, message: &str| DynamoDbError::Service {
            operation,
            code: code.to_owned(),
            message: message.to_owned(),
        };
        let http = e.raw_response().map_or(0, HasStatus::status);
        match &e {
            SdkError::ServiceError(s) => {
                let code = s.err().code().unwrap_or("unknown");
                let message = s.err().message().unwrap_or("");
                match code {
                    "ResourceNotFoundException" => self.missing_table(),
                    "ProvisionedThroughputExceededException"
                    | "ThrottlingException"
                    | "RequestLimitExceeded"
                    | "Throttling" => Error::unavailable(
                        BACKEND,
                        DynamoDbError::Throttled {
                            operation,
                            code: code.to_owned(),
                            message: message.to_owned(),
                        },
                    ),
                    "InternalServerError" | "InternalFailure" | "ServiceUnavailable" => {
                        Error::unavailable(BACKEND, service(code, message))
                    }
                    "ValidationException" if message.contains("key element does not match") => {
                        Error::setup(
                            BACKEND,
                            format!(
                                "the table {:?} does not have the string partition key {ATTR_ID:?} \
                             (and no sort key) that the provider needs ({message})",
                                self.table
                            ),
                        )
                    }
                    "AccessDeniedException"
                    | "AccessDenied"
                    | "UnrecognizedClientException"
                    | "InvalidClientTokenId"
                    | "MissingAuthenticationToken"
                    | "InvalidSignatureException"
                    | "SignatureDoesNotMatch"
                    | "IncompleteSignature"
                    | "ExpiredTokenException"
                    | "ExpiredToken" => self.refused(operation, call, code, message),
                    _ if matches!(http, 401 | 403) => self.refused(operation, call, code, message),
                    _ => Error::backend(BACKEND, service(code, message)),
                }
            }
            SdkError::ConstructionFailure(_) => Error::setup(
                BACKEND,
                format!(
                    "the request could not be built ({}): check the client's region, endpoint and \
                 credentials provider",
                    DisplayErrorContext(&e)
                ),
            ),
            _ => Error::unavailable(
                BACKEND,
                DynamoDbError::Transport {
                    operation,
                    message: DisplayErrorContext(&e).to_string(),
                },
            ),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use aws_sdk_dynamodb::{
        Client,
        config::BehaviorVersion,
        error::{ErrorMetadata, SdkError},
        operation::update_item::UpdateItemError,
        types::AttributeValue,
    };

    use super::*;
    use crate::DEFAULT_TABLE;

    pub(crate) fn inner() -> DynamoStore {
        let conf =
            aws_sdk_dynamodb::Config::builder().behavior_version(BehaviorVersion::latest()).build();
        DynamoStore {
            client: Client::from_conf(conf),
            table: DEFAULT_TABLE.into(),
            locked_by: AttributeValue::S("me".into()),
            compat: false,
        }
    }

    impl HasStatus for () {
        fn status(&self) -> u16 {
            400
        }
    }

    pub(crate) fn answered(code: &str, message: &str) -> SdkError<UpdateItemError, ()> {
        let meta = ErrorMetadata::builder().code(code).message(message).build();
        SdkError::service_error(UpdateItemError::generic(meta), ())
    }

    #[test]
    fn throttling_is_a_retryable_typed_error() {
        let i = inner();
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "RequestLimitExceeded",
        ] {
            let e = i.map_err("try_lock", Call::UpdateItem, answered(code, "slow down"));
            assert!(matches!(e, Error::Unavailable { .. }) && e.is_retryable(), "{e:?}");
            let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref());
            assert_eq!(
                source,
                Some(&DynamoDbError::Throttled {
                    operation: "try_lock",
                    code: code.to_owned(),
                    message: "slow down".to_owned()
                })
            );
        }
    }

    #[test]
    fn server_faults_are_retryable_and_refusals_are_setup_errors() {
        let i = inner();
        let e = i.map_err("unlock", Call::UpdateItem, answered("InternalServerError", "oops"));
        assert!(e.is_retryable(), "{e:?}");
        for code in ["AccessDeniedException", "UnrecognizedClientException"] {
            let e = i.map_err("try_lock", Call::UpdateItem, answered(code, "no"));
            assert!(matches!(e, Error::Setup { .. }), "{e:?}");
        }
        let e =
            i.map_err("try_lock", Call::UpdateItem, answered("ResourceNotFoundException", "gone"));
        assert!(
            matches!(e, Error::Setup { ref message, .. } if message.contains("create_table()"))
        );
        let e = i.map_err("try_lock", Call::UpdateItem, answered("SomethingElse", "?"));
        assert!(matches!(e, Error::Backend { .. }) && !e.is_retryable(), "{e:?}");
    }

    pub(crate) fn setup_message(e: Error) -> String {
        match e {
            Error::Setup { message, .. } => message,
            other => panic!("expected Setup, got {other:?}"),
        }
    }

    #[test]
    fn a_failed_condition_is_recognised() {
        assert!(condition_failed(&answered("ConditionalCheckFailedException", "")));
        assert!(!condition_failed(&answered("ValidationException", "")));
    }
}
