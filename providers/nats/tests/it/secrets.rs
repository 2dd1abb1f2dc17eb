//! A password given through `ConnectOptions` appears nowhere: not in the `Debug` of the builder
//! or the provider, not in an error's `Display`, `Debug` or chain, not in any log line at TRACE
//! — for a lock cycle over TLS against the launcher's secure NATS, and for a wrong password.
//! (The administrator is used: the application user's permissions are other tests' to change.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use async_nats::ConnectOptions;
use shedlock::LockProvider;
use shedlock_launcher::Backend;
use shedlock_nats::NatsLockProvider;
use shedlock_test_support::{
    cfg,
    secrets::{Capture, assert_absent, error_text},
    unique,
};

#[tokio::test]
async fn a_password_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let s = shedlock_test_support::secure::service(Backend::Nats, "NATS").await.unwrap();
    let sec = s.secure().unwrap();
    let url = format!("tls://{}", s.addr().unwrap());
    let password = sec.admin_password().to_owned();
    let options = |pw: &str| {
        ConnectOptions::new()
            .require_tls(true)
            .add_root_certificates(sec.ca_path())
            .user_and_password(sec.admin_user().to_owned(), pw.to_owned())
            .connection_timeout(Duration::from_secs(3))
    };

    let capture = Capture::start();
    let builder = NatsLockProvider::connect(&url, options(&password)).await.unwrap();
    let builder = builder.bucket(unique("leak"));
    let builder_debug = format!("{builder:?}");
    let provider = builder.build().unwrap();
    provider.create_bucket().await.unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    let refused = NatsLockProvider::connect(&url, options(&format!("{password}-not")))
        .await
        .map(drop)
        .expect_err("a wrong password");
    let logs = capture.text();
    assert!(!logs.is_empty(), "TRACE captured nothing: the check would prove nothing");
    assert_absent(
        &password,
        &[
            ("the builder's Debug", &builder_debug),
            ("the provider's Debug", &format!("{provider:?}")),
            ("the refused login's error", &error_text(&refused)),
            ("the TRACE logs", &logs),
        ],
    );
}
