//! A digest password given to the provider appears nowhere: not in the `Debug` of the provider
//! or its builder, not in an error's `Display`, `Debug` or chain, not in any log line at TRACE —
//! for a lock cycle over TLS against the launcher's secure ZooKeeper (which enforces digest
//! authentication), and for a wrong password.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::LockProvider;
use shedlock_test_support::{
    cfg,
    secrets::{Capture, assert_absent, error_text, secret},
    unique,
};
use shedlock_zookeeper::ZooKeeperLockProvider;

use crate::common::secure::service;

#[tokio::test]
async fn a_password_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let s = service().await.unwrap();
    let sec = s.secure().unwrap();
    let cs = s.url().to_owned();
    // Any digest identity is accepted by the server; its nodes are then its own.
    let user = unique("leak");
    let password = secret("zookeeper");
    let root = format!("/{}", unique("leak"));

    let capture = Capture::start();
    let builder = ZooKeeperLockProvider::builder(&cs)
        .root(&root)
        .digest_auth(&user, &password)
        .tls_ca_pem(sec.ca_pem());
    let builder_debug = format!("{builder:?}");
    let provider = builder.build().unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    // The same user with a wrong password, on the nodes the right one created: refused.
    let wrong = ZooKeeperLockProvider::builder(&cs)
        .root(&root)
        .digest_auth(&user, "wrong-password")
        .tls_ca_pem(sec.ca_pem())
        .build()
        .unwrap();
    let error = wrong.try_lock(&cfg("job", 10_000, 0)).await.expect_err("another identity");
    let logs = capture.text();
    assert!(!logs.is_empty(), "TRACE captured nothing: the check would prove nothing");
    assert_absent(
        &password,
        &[
            ("the builder's Debug", &builder_debug),
            ("the provider's Debug", &format!("{provider:?}")),
            ("the refused identity's error", &error_text(&error)),
            ("the TRACE logs", &logs),
        ],
    );
}
