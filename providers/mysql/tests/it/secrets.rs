//! A password given to the provider appears nowhere: not in the `Debug` of the provider or its
//! builder, not in an error's `Display`, `Debug` or chain, not in any log line at TRACE — for a
//! successful lock cycle and for failing ones, over TLS against the launcher's secure server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::LockProvider;
use shedlock_launcher::Backend;
use shedlock_mysql::{MySqlLockProvider, recommended_pool_options};
use shedlock_test_support::{
    cfg,
    secrets::{Capture, assert_absent, error_text, secret},
    unique,
};
use sqlx::{AssertSqlSafe, mysql::MySqlConnectOptions};

#[tokio::test]
async fn a_password_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let service =
        shedlock_test_support::secure::service(Backend::MariaDb, "MariaDB").await.unwrap();
    let sec = service.secure().unwrap();
    let addr = service.addr().unwrap();
    let admin_opts: MySqlConnectOptions =
        sec.url_for(addr, sec.admin_user(), sec.admin_password()).parse().unwrap();
    let admin = recommended_pool_options().connect_with(admin_opts).await.unwrap();
    let user = unique("leak");
    let table = format!("shedlock.{}", unique("leak_t"));
    let password = secret("mariadb");
    sqlx::raw_sql(AssertSqlSafe(format!(
        "CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{password}' REQUIRE SSL"
    )))
    .execute(&admin)
    .await
    .unwrap();
    MySqlLockProvider::builder(admin.clone())
        .table(&table)
        .build()
        .unwrap()
        .create_table()
        .await
        .unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON {table} TO '{user}'@'127.0.0.1'"
    )))
    .execute(&admin)
    .await
    .unwrap();

    let capture = Capture::start();
    let url = |pw: &str| sec.url_for(addr, &user, pw).parse::<MySqlConnectOptions>().unwrap();
    let builder =
        MySqlLockProvider::builder(recommended_pool_options().connect_lazy_with(url(&password)))
            .table(&table);
    let builder_debug = format!("{builder:?}");
    let provider = builder.build().unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    let refused =
        MySqlLockProvider::builder(recommended_pool_options().connect_lazy_with(url("wrong")))
            .table(&table)
            .build()
            .unwrap();
    let error = refused.try_lock(&cfg("job", 10_000, 0)).await.expect_err("a wrong password");
    let denied =
        MySqlLockProvider::builder(recommended_pool_options().connect_lazy_with(url(&password)))
            .table("mysql.user")
            .build()
            .unwrap();
    let denial = denied.try_lock(&cfg("job", 10_000, 0)).await.expect_err("no grant");
    let logs = capture.text();
    assert!(!logs.is_empty(), "TRACE captured nothing: the check would prove nothing");
    assert_absent(
        &password,
        &[
            ("the builder's Debug", &builder_debug),
            ("the provider's Debug", &format!("{provider:?}")),
            ("the refused login's error", &error_text(&error)),
            ("the permission error", &error_text(&denial)),
            ("the TRACE logs", &logs),
        ],
    );
    let _ =
        sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE {table}; DROP USER '{user}'@'127.0.0.1'")))
            .execute(&admin)
            .await;
}
