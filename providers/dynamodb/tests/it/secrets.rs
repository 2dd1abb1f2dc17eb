//! A secret access key given to the provider's client appears nowhere: not in the `Debug` of
//! the provider or its builder, not in an error's `Display`, `Debug` or chain, not in any log
//! line at TRACE (the SDK's included) — for a successful lock cycle (dynalite accepts any
//! credentials), an unreachable endpoint, and a signature moto with IAM on refuses.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use shedlock::{Error, LockProvider, ProviderBuilder as _};
use shedlock_dynamodb::DynamoDbLockProvider;
use shedlock_test_support::{
    aws, cfg,
    secrets::{Capture, assert_absent, error_text, secret},
    unique,
    unreachable::closed_port,
};

fn builder(
    endpoint: &str,
    id: &str,
    secret: &str,
    table: &str,
) -> shedlock_dynamodb::DynamoDbLockProviderBuilder {
    let client = aws_sdk_dynamodb::Client::new(&aws::sdk_config_with(endpoint, id, secret));
    DynamoDbLockProvider::builder(client)
        .table(table)
        .operation_timeout(Some(Duration::from_secs(5)))
}

#[tokio::test]
async fn a_secret_key_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let url = crate::common::service().await.unwrap().url().trim_end_matches('/').to_owned();
    let key = secret("dynamodb");
    let table = unique("leak");
    let moto = aws::MotoIam::start();
    let policy = r#"{"Version": "2012-10-17", "Statement": [{"Effect": "Allow",
        "Action": "dynamodb:ListTables", "Resource": "*"}]}"#;
    let (id, _) = moto.enforce(&[("leak", policy.to_owned())]).remove(0);

    let capture = Capture::start();
    let b = builder(&url, "shedlock", &key, &table);
    let builder_debug = format!("{b:?}");
    let provider = b.build().unwrap();
    provider.create_table().await.unwrap();
    provider.check().await.unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    let unreachable = format!("http://127.0.0.1:{}", closed_port().port());
    let down = builder(&unreachable, "shedlock", &key, &table)
        .build()
        .unwrap()
        .try_lock(&cfg("job", 10_000, 0))
        .await
        .expect_err("nothing listens");
    assert!(matches!(down, Error::Unavailable { .. }), "{down:?}");
    // A key id moto issued, with our secret: a signature it checks and refuses.
    let refused = builder(moto.url(), &id, &key, &table)
        .build()
        .unwrap()
        .try_lock(&cfg("job", 10_000, 0))
        .await
        .expect_err("a wrong secret");
    assert!(
        matches!(&refused, Error::Setup { message, .. } if message.contains("were refused")),
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
