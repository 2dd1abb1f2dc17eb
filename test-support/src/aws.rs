//! The AWS-API stand-ins' side of the DynamoDB and S3 tests (dynalite, moto, MinIO, DynamoDB
//! Local): one SDK configuration for a local endpoint over plain HTTP ([`sdk_config`]), the
//! credentials it uses, and the checks both providers' tests run against such a server. Behind
//! the `aws` feature.

use std::{net::SocketAddr, time::Duration};

use aws_credential_types::Credentials;
use aws_smithy_runtime_api::client::behavior_version::BehaviorVersion;
use aws_types::{
    SdkConfig,
    region::Region,
    sdk_config::{RetryConfig, SharedCredentialsProvider, TimeoutConfig},
};
use shedlock::{Error, LockProvider};

use crate::{
    cfg,
    unreachable::{REFUSED, UNRESOLVABLE_HOST, UNRESOLVED, assert_named, closed_port},
};

/// The secret key of the test clients when the environment names none: tests check that the
/// secret in use never shows in `Debug` or errors.
pub const DEFAULT_SECRET: &str = "shedlock-test-secret-key-0123456789";

/// The credentials of the test clients: `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` when set
/// (CI's compose services need MinIO's), else dummy ones (dynalite, moto and DynamoDB Local
/// accept any).
pub fn credentials() -> (String, String) {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    match (var("AWS_ACCESS_KEY_ID"), var("AWS_SECRET_ACCESS_KEY")) {
        (Some(id), Some(secret)) => (id, secret),
        _ => ("shedlock".to_owned(), DEFAULT_SECRET.to_owned()),
    }
}

/// The SDK configuration of a test client for a local `endpoint` over plain HTTP (the SDK's
/// hyper client without TLS), with the [`credentials`], short timeouts (a cut connection fails
/// fast: C24) and one retry; each service's client is built from it (`Client::new(&config)`, or
/// its `Config` builder `from` it for service-specific settings).
pub fn sdk_config(endpoint: &str) -> SdkConfig {
    let (id, secret) = credentials();
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            id, secret, None, None, "tests",
        )))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .timeout_config(
            TimeoutConfig::builder()
                .connect_timeout(Duration::from_secs(2))
                .operation_attempt_timeout(Duration::from_secs(3))
                .build(),
        )
        .retry_config(
            RetryConfig::standard()
                .with_max_attempts(2)
                .with_initial_backoff(Duration::from_millis(20)),
        )
        .build()
}

/// The endpoint an instance of the conformance kit uses: `url`, or the kit's proxy at `address`.
pub fn endpoint_for(address: Option<SocketAddr>, url: &str) -> String {
    match address {
        Some(a) => format!("http://{a}"),
        None => url.to_owned(),
    }
}

/// C28's node processes (this binary, re-executed) share the run id, so they address the same
/// table or bucket; repeated runs against one server never share records. The run id with
/// every character but ASCII letters, digits and `-` replaced by `_`.
pub fn run_tag() -> String {
    shedlock_conformance::run_id()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' })
        .collect()
}

/// An unreachable server is `Unavailable` (retryable) and says why, and the secret key never
/// shows: `provider(endpoint)` is a provider on such an endpoint (a closed port, then a host
/// that does not resolve); `is_transport` tells whether the error's source is the provider's own
/// transport error for `try_lock`.
pub async fn an_unreachable_server_is_unavailable_says_why_and_hides_the_secret<P>(
    provider: impl Fn(&str) -> P,
    is_transport: impl Fn(&(dyn std::error::Error + 'static)) -> bool,
) where
    P: LockProvider + std::fmt::Debug,
{
    let p = provider(&format!("http://127.0.0.1:{}", closed_port().port()));
    let e = p.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }) && e.is_retryable(), "{e:?}");
    let source = std::error::Error::source(&e);
    assert!(source.is_some_and(is_transport), "a transport error: {e:?}");
    for text in [format!("{e:?}"), e.to_string(), format!("{p:?}")] {
        assert!(!text.contains(&credentials().1), "the secret key leaked: {text}");
    }
    assert_named(&p, "a closed port", REFUSED).await;
    let p = provider(&format!("http://{UNRESOLVABLE_HOST}:9000"));
    assert_named(&p, "an unresolvable host", UNRESOLVED).await;
}

/// Both errors (`try_lock`'s and the setup check's) are [`Error::Setup`] whose message says how
/// to create what is missing: it contains each of `says`.
pub fn assert_setup_errors_say(errors: [Error; 2], says: &[&str]) {
    for e in errors {
        match e {
            Error::Setup { message, .. } => {
                for s in says {
                    assert!(message.contains(s), "{message}");
                }
            }
            other => panic!("expected Setup, got {other:?}"),
        }
    }
}
