//! A password given to the client builder appears nowhere: not in the `Debug` of the builder or
//! the provider, not in an error's `Display`, `Debug` or chain, not in any log line at TRACE —
//! for a lock cycle over TLS against the launcher's secure etcd, and for a wrong password.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use etcd_client::PermissionType;
use shedlock::LockProvider;
use shedlock_etcd::{EtcdClientBuilder, EtcdLockProvider};
use shedlock_launcher::Backend;
use shedlock_test_support::{
    self as testing, cfg,
    secrets::{Capture, assert_absent, error_text, secret},
    unique,
};

use crate::common::{self, Login};

#[tokio::test]
async fn a_password_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let s = testing::secure::service(Backend::Etcd, "etcd").await.unwrap();
    let root = Login::root(s).client(s.url()).await.unwrap();
    let user = unique("leak");
    let password = secret("etcd");
    let prefix = format!("{}/", unique("leak"));
    common::grant(&root, &unique("role"), PermissionType::Readwrite, &prefix, &user, &password)
        .await
        .unwrap();
    let ca = s.secure().unwrap().ca_pem().to_owned();

    let capture = Capture::start();
    let builder = EtcdClientBuilder::new([s.url()]).tls_ca_pem(&ca).user(&user, &password);
    let builder_debug = format!("{builder:?}");
    let client = builder.connect().await.unwrap();
    let provider = EtcdLockProvider::builder(client).key_prefix(&prefix).build().unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    let refused = EtcdClientBuilder::new([s.url()])
        .tls_ca_pem(&ca)
        .user(&user, format!("{password}-not"))
        .connect()
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
