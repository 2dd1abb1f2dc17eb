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
    sdk_config_with(endpoint, &id, &secret)
}

/// [`sdk_config`] with the credentials `id` and `secret` instead of the [`credentials`] (a
/// stand-in's IAM user, or a secret a test looks for in the logs).
pub fn sdk_config_with(endpoint: &str, id: &str, secret: &str) -> SdkConfig {
    SdkConfig::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
            id.to_owned(),
            secret.to_owned(),
            None,
            None,
            "tests",
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

/// A moto server of the test's own (the launcher's `venv/bin/moto_server`, on a free port of
/// 127.0.0.1) that can be told to enforce IAM: moto 5 checks no credentials until asked, then
/// checks every request's SigV4 signature against the secret of its access key id and its
/// action (`s3:GetObject`, `dynamodb:UpdateItem`, …) and resource against the policies of the
/// key's IAM user. Killed when dropped.
///
/// What moto enforces, found by reading and running moto 5.2.5: `Action` and `Resource`
/// patterns of identity policies (an S3 request's resource is `arn:aws:s3:::<bucket>` or
/// `arn:aws:s3:::<bucket>/<key>`; every DynamoDB request's is `*`, so a statement naming a
/// table ARN matches none); `Deny` before `Allow`. Not enforced: conditions other than
/// `StringEquals` (so `StringLike` on `s3:prefix` is ignored), and S3's 403 for a missing object
/// to a caller without `s3:ListBucket` (moto answers 404). `HeadBucket` is the moto-only action
/// `s3:HeadBucket` (AWS checks `s3:ListBucket`).
pub struct MotoIam {
    child: std::process::Child,
    url: String,
}

impl MotoIam {
    /// Starts moto without enforcement (any credentials pass, as with the launcher's), and
    /// waits until it answers.
    pub fn start() -> MotoIam {
        let venv = shedlock_launcher::backends_dir().join("venv/bin");
        let server = venv.join("moto_server");
        assert!(
            server.is_file(),
            "{} is missing: run `cargo xtask provision` (moto from PyPI)",
            server.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = std::process::Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .current_dir(std::env::temp_dir())
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let moto = MotoIam { child, url: format!("http://127.0.0.1:{port}") };
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < deadline, "moto did not start on port {port}");
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// The endpoint URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Creates an IAM user per `(name, policy document)`, each with the policy as its only
    /// (inline) policy and an access key, then turns enforcement on: from here every request
    /// must be signed by one of these keys and allowed by its user's policy. Answers each
    /// user's `(access key id, secret access key)`, in the order given. Runs the venv's Python
    /// with boto3 (moto's dependency) against this server.
    pub fn enforce(&self, users: &[(&str, String)]) -> Vec<(String, String)> {
        const SCRIPT: &str = r#"
import json, sys, urllib.request, boto3
endpoint, users = sys.argv[1], json.loads(sys.argv[2])
iam = boto3.client("iam", endpoint_url=endpoint, region_name="us-east-1",
                   aws_access_key_id="AKIASETUP", aws_secret_access_key="setup")
for name, policy in users:
    iam.create_user(UserName=name)
    iam.put_user_policy(UserName=name, PolicyName="shedlock", PolicyDocument=policy)
    key = iam.create_access_key(UserName=name)["AccessKey"]
    print(key["AccessKeyId"], key["SecretAccessKey"])
urllib.request.urlopen(urllib.request.Request(
    endpoint + "/moto-api/reset-auth", data=b"0", headers={"Content-Type": "text/plain"}))
"#;
        let python = shedlock_launcher::backends_dir().join("venv/bin/python");
        let spec = format!(
            "[{}]",
            users
                .iter()
                .map(|(name, policy)| format!("[{}, {}]", json_string(name), json_string(policy)))
                .collect::<Vec<_>>()
                .join(",")
        );
        let out = std::process::Command::new(python)
            .args(["-c", SCRIPT, &self.url, &spec])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "the IAM set-up failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let keys: Vec<(String, String)> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let (id, secret) = l.split_once(' ').unwrap();
                (id.to_owned(), secret.to_owned())
            })
            .collect();
        assert_eq!(keys.len(), users.len());
        keys
    }
}

impl Drop for MotoIam {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
