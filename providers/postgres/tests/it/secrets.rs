//! A password given to the provider appears nowhere: not in the `Debug` of the provider or its
//! builder, not in an error's `Display`, `Debug` or chain, not in any log line at TRACE — for a
//! successful lock cycle and for a failing one, over TLS against the launcher's secure server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::LockProvider;
use shedlock_launcher::Backend;
use shedlock_postgres::{PostgresLockProvider, recommended_pool_options};
use shedlock_test_support::{
    cfg,
    secrets::{Capture, assert_absent, error_text, secret},
    unique,
};
use sqlx::{AssertSqlSafe, postgres::PgConnectOptions};

#[tokio::test]
async fn a_password_appears_in_no_debug_error_or_trace_log_of_a_good_or_a_failing_call() {
    let service =
        shedlock_test_support::secure::service(Backend::Postgres, "PostgreSQL").await.unwrap();
    let sec = service.secure().unwrap();
    let addr = service.addr().unwrap();
    let admin_opts: PgConnectOptions =
        sec.url_for(addr, sec.admin_user(), sec.admin_password()).parse().unwrap();
    let admin = recommended_pool_options().connect_with(admin_opts).await.unwrap();
    let role = unique("leak");
    let table = unique("leak_t");
    let password = secret("postgres");
    sqlx::raw_sql(AssertSqlSafe(format!("CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")))
        .execute(&admin)
        .await
        .unwrap();
    PostgresLockProvider::builder(admin.clone())
        .table(&table)
        .build()
        .unwrap()
        .create_table()
        .await
        .unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON \"{table}\" TO \"{role}\""
    )))
    .execute(&admin)
    .await
    .unwrap();

    let capture = Capture::start();
    let good: PgConnectOptions = sec.url_for(addr, &role, &password).parse().unwrap();
    let pool = recommended_pool_options().connect_lazy_with(good);
    let builder = PostgresLockProvider::builder(pool).table(&table);
    let builder_debug = format!("{builder:?}");
    let provider = builder.build().unwrap();
    let lock = provider.try_lock(&cfg("job", 10_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();
    // The same role, a wrong password: the server refuses the login.
    let bad: PgConnectOptions = sec.url_for(addr, &role, "wrong-password").parse().unwrap();
    let refused = PostgresLockProvider::builder(recommended_pool_options().connect_lazy_with(bad))
        .table(&table)
        .build()
        .unwrap();
    let error = refused.try_lock(&cfg("job", 10_000, 0)).await.expect_err("a wrong password");
    // The right password on a table the role may not touch: a permission error.
    let denied = PostgresLockProvider::builder(
        recommended_pool_options()
            .connect_lazy_with(sec.url_for(addr, &role, &password).parse().unwrap()),
    )
    .table("pg_authid")
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
    let _ = sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE \"{table}\"; DROP ROLE \"{role}\"")))
        .execute(&admin)
        .await;
}
