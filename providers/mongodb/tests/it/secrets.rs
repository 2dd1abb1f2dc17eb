//! A password in the connection string appears nowhere: not in the `Debug` of the provider or
//! its builder, not in an error's `Display`, `Debug` or chain, not in any log line at TRACE —
//! for a successful lock cycle as a user of a SecantusDB with authentication on, a wrong
//! password, and an unreachable server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use mongodb::bson::doc;
use shedlock::{Error, LockProvider, ProviderBuilder as _};
use shedlock_mongodb::MongoLockProvider;
use shedlock_test_support::{
    cfg,
    secrets::{Capture, assert_absent, error_text, secret},
    unreachable::closed_port,
};

use crate::auth::{AuthServer, DB, client};

#[tokio::test]
async fn a_password_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let password = secret("mongodb");
    let server = AuthServer::start(vec![
        doc! { "createUser": "leak", "pwd": &password, "roles": [{ "role": "readWrite", "db": DB }] },
    ])
    .await;

    let capture = Capture::start();
    let db = client(&server.url(Some(("leak", &password)))).await.database(DB);
    let builder = MongoLockProvider::builder(db).operation_timeout(Some(Duration::from_secs(10)));
    let builder_debug = format!("{builder:?}");
    let provider = builder.build().unwrap();
    provider.check().await.unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    // The same user, the password cut short by one character: refused.
    let cut = &password[..password.len() - 1];
    let refused =
        MongoLockProvider::builder(client(&server.url(Some(("leak", cut)))).await.database(DB))
            .operation_timeout(Some(Duration::from_secs(10)))
            .build()
            .unwrap()
            .try_lock(&cfg("job", 10_000, 0))
            .await
            .expect_err("a wrong password");
    assert!(matches!(refused, Error::Setup { .. }), "{refused:?}");
    // The right password, nothing listening.
    let nowhere = format!("mongodb://leak:{password}@127.0.0.1:{}/{DB}", closed_port().port());
    let down = MongoLockProvider::builder(client(&nowhere).await.database(DB))
        .operation_timeout(Some(Duration::from_secs(3)))
        .build()
        .unwrap()
        .try_lock(&cfg("job", 10_000, 0))
        .await
        .expect_err("nothing listens");
    let logs = capture.text();
    assert!(!logs.is_empty(), "TRACE captured nothing: the check would prove nothing");
    assert_absent(
        &password,
        &[
            ("the builder's Debug", &builder_debug),
            ("the provider's Debug", &format!("{provider:?}")),
            ("the refused login's error", &error_text(&refused)),
            ("the unreachable server's error", &error_text(&down)),
            ("the TRACE logs", &logs),
        ],
    );
}
