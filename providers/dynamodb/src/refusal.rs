//! Requests DynamoDB refused for their credentials or permissions: which request, which IAM
//! action it needs, and what to change.

use shedlock::Error;

use crate::BACKEND;
use crate::store::DynamoStore;

/// A DynamoDB request the provider sends: what a refusal of it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    UpdateItem,
    GetItem,
    Scan,
    DeleteItem,
    DescribeTable,
    CreateTable,
}

impl Call {
    /// The request's name in DynamoDB's API.
    fn name(self) -> &'static str {
        match self {
            Call::UpdateItem => "UpdateItem",
            Call::GetItem => "GetItem",
            Call::Scan => "Scan",
            Call::DeleteItem => "DeleteItem",
            Call::DescribeTable => "DescribeTable",
            Call::CreateTable => "CreateTable",
        }
    }

    /// The IAM action that allows it.
    fn action(self) -> &'static str {
        match self {
            Call::UpdateItem => "dynamodb:UpdateItem",
            Call::GetItem => "dynamodb:GetItem",
            Call::Scan => "dynamodb:Scan",
            Call::DeleteItem => "dynamodb:DeleteItem",
            Call::DescribeTable => "dynamodb:DescribeTable",
            Call::CreateTable => "dynamodb:CreateTable",
        }
    }
}

/// The action an access-denied message names (`… is not authorized to perform: <action> on
/// resource …`), if it names one.
fn named_action(message: &str) -> Option<&str> {
    let rest = &message[message.find("perform: ")? + "perform: ".len()..];
    let action = rest.split_whitespace().next()?.trim_end_matches(['.', ',']);
    action.contains(':').then_some(action)
}

impl DynamoStore {
    /// A request DynamoDB refused for its credentials or permissions: [`Error::Setup`] saying
    /// what to change — the credentials, the clock, or the IAM action `call` needs (or the one
    /// DynamoDB names, such as a KMS key's). DynamoDB's code and message name neither the secret
    /// key nor the signature.
    pub(crate) fn refused(
        &self,
        operation: &'static str,
        call: Call,
        code: &str,
        message: &str,
    ) -> Error {
        let server = match (code, message) {
            ("unknown", "") => "HTTP 403 without an error code".to_owned(),
            (code, "") => code.to_owned(),
            (code, message) => format!("{code}: {message}"),
        };
        let why = match code {
            "UnrecognizedClientException" | "InvalidClientTokenId" => "DynamoDB does not know \
                 the client's access key id or session token (deleted, inactive, or of another \
                 account or endpoint): check the credentials the client was built with"
                .to_owned(),
            "InvalidSignatureException" | "SignatureDoesNotMatch" | "IncompleteSignature"
                if message.contains("Signature expired") =>
            {
                "this machine's clock differs from AWS's by more than 5 minutes: synchronise it \
                 (the provider's leases are client time too)"
                    .to_owned()
            }
            "InvalidSignatureException" | "SignatureDoesNotMatch" | "IncompleteSignature" => {
                "DynamoDB refused the request's signature: the secret access key does not belong \
                 to the access key id (or something between the client and DynamoDB changed \
                 the request)"
                    .to_owned()
            }
            "MissingAuthenticationToken" => "the request was not signed: give the client a \
                 credentials provider"
                .to_owned(),
            "ExpiredTokenException" | "ExpiredToken" => "the client's session token has expired: \
                 its credentials provider must refresh it"
                .to_owned(),
            _ => {
                let ours = format!(
                    "{} on the table's ARN, arn:aws:dynamodb:<region>:<account>:table/{}",
                    call.action(),
                    self.table
                );
                let need = match named_action(message) {
                    Some(named) if named != call.action() => {
                        format!(
                            "{named} (which DynamoDB names; {} itself needs {ours})",
                            call.name()
                        )
                    }
                    _ => ours,
                };
                // Without a code, the refusal may as well be of the credentials themselves.
                let whose = if code == "unknown" {
                    "the credentials were refused, or they"
                } else {
                    "the credentials"
                };
                format!("{whose} need {need} (see \"Permissions\" in the shedlock-dynamodb README)")
            }
        };
        Error::setup(
            BACKEND,
            format!(
                "DynamoDB refused {} on table {:?} in {operation} ({server}): {why}",
                call.name(),
                self.table
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use super::*;
    use crate::error::tests::{answered, inner, setup_message};

    #[test]
    fn a_refusal_names_the_request_its_permission_and_the_readme() {
        let i = inner();
        let aws = "User: arn:aws:iam::123456789012:user/app is not authorized to perform: \
                   dynamodb:GetItem on resource: arn:aws:dynamodb:us-east-1:123456789012:table/\
                   shedlock because no identity-based policy allows the dynamodb:GetItem action";
        for (call, operation, needs, message) in [
            (Call::UpdateItem, "try_lock", "need dynamodb:UpdateItem on the table's ARN", "no"),
            (Call::GetItem, "inspect", "need dynamodb:GetItem on the table's ARN", aws),
            (Call::Scan, "list", "need dynamodb:Scan", ""),
            (Call::DeleteItem, "force_release", "need dynamodb:DeleteItem", "no"),
            (Call::DescribeTable, "check", "need dynamodb:DescribeTable", "no"),
            (Call::CreateTable, "create_table", "need dynamodb:CreateTable", "no"),
        ] {
            for code in ["AccessDeniedException", "AccessDenied"] {
                let m = setup_message(i.map_err(operation, call, answered(code, message)));
                for part in [call.name(), operation, needs, "\"Permissions\"", "table/shedlock"] {
                    assert!(m.contains(part), "{part:?} missing: {m}");
                }
            }
        }
        // An action DynamoDB names that is not the request's own (a KMS key's) is named too.
        let kms = "User: arn:aws:iam::1:user/app is not authorized to perform: kms:Decrypt on \
                   resource: arn:aws:kms:us-east-1:1:key/k";
        let m = setup_message(i.map_err(
            "try_lock",
            Call::UpdateItem,
            answered("AccessDeniedException", kms),
        ));
        assert!(m.contains("need kms:Decrypt") && m.contains("dynamodb:UpdateItem"), "{m}");
        for (code, message, says) in [
            (
                "UnrecognizedClientException",
                "The security token included in the request is invalid.",
                "access key id",
            ),
            (
                "InvalidSignatureException",
                "The request signature we calculated does not match",
                "secret access key",
            ),
            (
                "InvalidSignatureException",
                "Signature expired: 20260101T000000Z is now earlier than",
                "clock",
            ),
            (
                "ExpiredTokenException",
                "The security token included in the request is expired",
                "session token",
            ),
            ("MissingAuthenticationToken", "Request is missing Authentication Token", "not signed"),
        ] {
            let m = setup_message(i.map_err("try_lock", Call::UpdateItem, answered(code, message)));
            assert!(m.contains(says) && m.contains(code), "{m}");
        }
        assert_eq!(named_action(aws), Some("dynamodb:GetItem"));
        assert_eq!(named_action("Access Denied"), None);
    }
}
