//! A secret access key given to the provider's client appears nowhere: not in the `Debug` of
//! the provider or its builder, not in an error's `Display`, `Debug` or chain, not in any log
//! line at TRACE (the SDK's included) — for a successful lock cycle, an unreachable endpoint,
//! and a signature S3 refuses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::{Error, LockProvider, ProviderBuilder as _};
use shedlock_s3::S3LockProvider;
use shedlock_test_support::{
    aws, cfg,
    secrets::{Capture, assert_absent, error_text, secret},
    unique,
    unreachable::closed_port,
};

fn client(endpoint: &str, id: &str, secret: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::from(&aws::sdk_config_with(endpoint, id, secret))
        .force_path_style(true)
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

#[tokio::test]
async fn a_secret_key_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let url = crate::common::endpoint(crate::common::service().await.unwrap());
    let key = secret("s3");
    let bucket = unique("leak").replace('_', "-").to_ascii_lowercase();
    // moto with IAM on, for a signature it refuses: a key id it issued, with our secret.
    let moto = aws::MotoIam::start();
    let policy = r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Action": "s3:ListAllMyBuckets", "Resource": "*"}]}"#;
    let (id, _) = moto.enforce(&[("leak", policy.to_owned())]).remove(0);

    let capture = Capture::start();
    // The launcher's moto accepts any secret: a whole lock cycle with ours.
    let builder = S3LockProvider::builder(client(&url, "shedlock", &key), &bucket)
        .operation_timeout(Some(Duration::from_secs(5)));
    let builder_debug = format!("{builder:?}");
    let provider = builder.build().unwrap();
    provider.create_bucket().await.unwrap();
    provider.check().await.unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    // Nothing listens there.
    let unreachable = format!("http://127.0.0.1:{}", closed_port().port());
    let down = S3LockProvider::builder(client(&unreachable, "shedlock", &key), &bucket)
        .build()
        .unwrap()
        .try_lock(&cfg("job", 10_000, 0))
        .await
        .expect_err("nothing listens");
    assert!(matches!(down, Error::Unavailable { .. }), "{down:?}");
    // A signature moto checks and refuses.
    let refused = S3LockProvider::builder(client(moto.url(), &id, &key), &bucket)
        .build()
        .unwrap()
        .try_lock(&cfg("job", 10_000, 0))
        .await
        .expect_err("a wrong secret");
    assert!(
        matches!(&refused, Error::Setup { message, .. } if message.contains("SignatureDoesNotMatch")),
        "{refused:?}"
    );
    let logs = capture.text();
    assert!(!logs.is_empty(), "TRACE captured nothing: the check would prove nothing");
    assert_absent(
        &key,
        &[
            ("the builder's Debug", &builder_debug),
            ("the provider's Debug", &format!("{provider:?}")),
            ("the unreachable server's error", &error_text(&down)),
            ("the refused signature's error", &error_text(&refused)),
            ("the TRACE logs", &logs),
        ],
    );
}
