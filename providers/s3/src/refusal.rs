//! Requests S3 refused (HTTP 401 or 403): which request, which permission it needs on which
//! resource, and what to change.

use shedlock::Error;

use crate::BACKEND;
use crate::store::S3Store;

/// An S3 request the provider sends: what a refusal of it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    GetObject,
    PutObject,
    DeleteObject,
    ListObjectsV2,
    CreateBucket,
}

impl Call {
    /// The request's name in S3's API.
    fn name(self) -> &'static str {
        match self {
            Call::GetObject => "GetObject",
            Call::PutObject => "PutObject",
            Call::DeleteObject => "DeleteObject",
            Call::ListObjectsV2 => "ListObjectsV2",
            Call::CreateBucket => "CreateBucket",
        }
    }

    /// The IAM action that allows it.
    fn action(self) -> &'static str {
        match self {
            Call::GetObject => "s3:GetObject",
            Call::PutObject => "s3:PutObject",
            Call::DeleteObject => "s3:DeleteObject",
            Call::ListObjectsV2 => "s3:ListBucket",
            Call::CreateBucket => "s3:CreateBucket",
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

impl S3Store {
    /// A request S3 refused (HTTP 401 or 403): [`Error::Setup`] saying what to change — the
    /// credentials, the clock, or the permission `call` needs (S3's `AccessDenied` does not
    /// name it; the provider knows which request it sent). S3's code and message name neither
    /// the secret key nor the signature.
    pub(crate) fn refused(
        &self,
        operation: &'static str,
        call: Call,
        code: &str,
        message: &str,
    ) -> Error {
        let server = if message.is_empty() {
            format!("HTTP 403 {code}")
        } else {
            format!("{code}: {message}")
        };
        let why = match code {
            "InvalidAccessKeyId" => "S3 does not know the client's access key id (deleted, \
                 inactive, or of another account or endpoint): check the credentials the client \
                 was built with"
                .to_owned(),
            "SignatureDoesNotMatch" => "S3 refused the request's signature: the secret access \
                 key does not belong to the access key id (or something between the client and \
                 S3 changed the request)"
                .to_owned(),
            "ExpiredToken" | "InvalidToken" | "TokenRefreshRequired" => "the client's session \
                 token is expired or invalid: its credentials provider must refresh it"
                .to_owned(),
            "RequestTimeTooSkewed" => "this machine's clock differs from S3's by more than 15 \
                 minutes: synchronise it (the provider's leases are client time too)"
                .to_owned(),
            _ => {
                let ours = self.permission(call);
                // S3 names the action in its newer AccessDenied messages ("… is not authorized
                // to perform: s3:GetObject on resource …"), and it may be another one (a KMS
                // key's).
                let need = match named_action(message) {
                    Some(named) if named != call.action() => {
                        format!("{named} (which S3 names; {} itself needs {ours})", call.name())
                    }
                    _ => ours,
                };
                format!(
                    "the credentials need {need} (see \"Permissions\" in the shedlock-s3 README)"
                )
            }
        };
        Error::setup(
            BACKEND,
            format!(
                "S3 refused {} on bucket {:?} in {operation} ({server}): {why}",
                call.name(),
                self.bucket
            ),
        )
    }

    /// The permission `call` needs, on its resource.
    fn permission(&self, call: Call) -> String {
        let (bucket, prefix) = (&self.bucket, &self.prefix);
        match call {
            Call::GetObject => format!(
                "s3:GetObject on arn:aws:s3:::{bucket}/{prefix}*, and s3:ListBucket on \
                 arn:aws:s3:::{bucket} (without it S3 answers 403, not 404, for an object that \
                 does not exist)"
            ),
            Call::PutObject | Call::DeleteObject => {
                format!("{} on arn:aws:s3:::{bucket}/{prefix}*", call.action())
            }
            Call::ListObjectsV2 => format!(
                "s3:ListBucket on arn:aws:s3:::{bucket} (for the prefix {prefix:?}: an s3:prefix \
                 condition must allow \"{prefix}*\")"
            ),
            Call::CreateBucket => format!("s3:CreateBucket on arn:aws:s3:::{bucket}"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    use crate::error::tests::{answered, answered_with, inner, setup_message};

    #[test]
    fn a_refusal_names_the_request_its_permission_and_the_readme() {
        let i = inner();
        for (call, operation, needs) in [
            (Call::PutObject, "try_lock", "s3:PutObject on arn:aws:s3:::locks/shedlock/*"),
            (Call::GetObject, "inspect", "s3:GetObject on arn:aws:s3:::locks/shedlock/*"),
            (
                Call::DeleteObject,
                "force_release",
                "s3:DeleteObject on arn:aws:s3:::locks/shedlock/*",
            ),
            (Call::ListObjectsV2, "list", "s3:ListBucket on arn:aws:s3:::locks"),
            (Call::CreateBucket, "create_bucket", "s3:CreateBucket on arn:aws:s3:::locks"),
        ] {
            // S3's AccessDenied, and a HEAD's 403 without a body (no code, no message).
            for (code, http) in [("AccessDenied", 403), ("unknown", 403)] {
                let m = setup_message(i.map_err(operation, call, answered(code, http)));
                for part in [call.name(), operation, needs, "\"Permissions\""] {
                    assert!(m.contains(part), "{part:?} missing: {m}");
                }
            }
        }
        let m = setup_message(i.map_err("inspect", Call::GetObject, answered("AccessDenied", 403)));
        assert!(m.contains("s3:ListBucket on arn:aws:s3:::locks"), "{m}");
        let kms = "User: arn:aws:iam::1:user/app is not authorized to perform: kms:Decrypt on \
                   resource: arn:aws:kms:us-east-1:1:key/k";
        let m = setup_message(i.map_err(
            "inspect",
            Call::GetObject,
            answered_with("AccessDenied", 403, kms),
        ));
        assert!(m.contains("need kms:Decrypt") && m.contains("s3:GetObject on"), "{m}");
        assert_eq!(named_action(kms), Some("kms:Decrypt"));
        assert_eq!(named_action("Access Denied"), None);
        for (code, says) in [
            ("InvalidAccessKeyId", "access key id"),
            ("SignatureDoesNotMatch", "secret access key"),
            ("ExpiredToken", "session token"),
            ("RequestTimeTooSkewed", "clock"),
        ] {
            let m = setup_message(i.map_err("try_lock", Call::PutObject, answered(code, 403)));
            assert!(m.contains(says) && m.contains(code), "{m}");
        }
    }
}
