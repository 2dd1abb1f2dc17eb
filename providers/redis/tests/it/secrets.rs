//! A password given to the provider appears nowhere: not in the `Debug` of the provider or its
//! builder, not in an error's `Display`, `Debug` or chain, not in any log line at TRACE — for a
//! successful lock cycle and for failing ones, over TLS against the launcher's secure server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::LockProvider;
use shedlock_launcher::Backend;
use shedlock_redis::RedisLockProvider;
use shedlock_test_support::{
    cfg,
    secrets::{Capture, assert_absent, error_text, secret},
    unique,
};

use crate::common::secure::{LIST_RULES, LOCKING_RULES, tls_manager};

#[tokio::test]
async fn a_password_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let service = shedlock_test_support::secure::service(Backend::Redis, "Redis").await.unwrap();
    let sec = service.secure().unwrap();
    let addr = service.addr().unwrap();
    let mut admin =
        tls_manager(&sec.url_for(addr, sec.admin_user(), sec.admin_password()), sec.ca_pem())
            .await
            .unwrap();
    let user = unique("leak");
    let prefix = format!("{}:", unique("leak"));
    let password = secret("redis");
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg(&user)
        .arg("on")
        .arg(format!(">{password}"))
        .arg(format!("~{prefix}*"));
    for rule in LOCKING_RULES.split_whitespace().chain(LIST_RULES.split_whitespace()) {
        setuser.arg(rule);
    }
    let () = setuser.query_async(&mut admin).await.unwrap();

    let capture = Capture::start();
    let conn = tls_manager(&sec.url_for(addr, &user, &password), sec.ca_pem()).await.unwrap();
    let builder = RedisLockProvider::builder(conn).key_prefix(&prefix);
    let builder_debug = format!("{builder:?}");
    let provider = builder.build().await.unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    // A prefix its key pattern does not cover: build() refuses it.
    let conn = tls_manager(&sec.url_for(addr, &user, &password), sec.ca_pem()).await.unwrap();
    let denial = RedisLockProvider::builder(conn)
        .key_prefix("someone-else:")
        .build()
        .await
        .expect_err("a prefix outside the user's key pattern");
    // A wrong password: the login is refused.
    let refused = match tls_manager(&sec.url_for(addr, &user, "wrong"), sec.ca_pem()).await {
        Err(e) => e.to_string(),
        Ok(conn) => match RedisLockProvider::builder(conn).key_prefix(&prefix).build().await {
            Err(e) => error_text(&e),
            Ok(_) => panic!("a wrong password was accepted"),
        },
    };
    let logs = capture.text();
    assert!(!logs.is_empty(), "TRACE captured nothing: the check would prove nothing");
    assert_absent(
        &password,
        &[
            ("the builder's Debug", &builder_debug),
            ("the provider's Debug", &format!("{provider:?}")),
            ("the refused login's error", &refused),
            ("the permission error", &error_text(&denial)),
            ("the TRACE logs", &logs),
        ],
    );
    let _: Result<i64, _> =
        redis::cmd("ACL").arg("DELUSER").arg(&user).query_async(&mut admin).await;
}
