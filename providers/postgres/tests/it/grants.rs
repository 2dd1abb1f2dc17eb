//! Least privilege against a real PostgreSQL server: each call works with exactly the grants the
//! README's "Permissions" documents, and a call whose privilege is missing fails with
//! `Error::Setup` naming the privilege and the grant, never `Error::Backend`. Each test creates
//! roles of its own through the superuser connection and drops them afterwards (best effort).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::{Error, ForceRelease, LockProvider, Result};
use shedlock_postgres::{PostgresLockProvider, recommended_pool_options};
use shedlock_test_support::{cfg, unique};
use sqlx::{AssertSqlSafe, PgPool, postgres::PgConnectOptions};

const PASSWORD: &str = "grantee-password";

async fn url() -> String {
    shedlock_test_support::url(shedlock_launcher::Backend::Postgres, "PostgreSQL").await
}

async fn admin() -> PgPool {
    recommended_pool_options().connect(&url().await).await.expect("connect to PostgreSQL")
}

async fn exec(pool: &PgPool, sql: String) {
    sqlx::raw_sql(AssertSqlSafe(sql.clone()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A login role of its own, created by the superuser. The launcher's server trusts local TCP
/// connections (so the password is not asked); a server that asks gets it.
struct Role {
    name: String,
    admin: PgPool,
}

impl Role {
    async fn new(admin: &PgPool) -> Role {
        let name = unique("grantee");
        exec(admin, format!("CREATE ROLE \"{name}\" LOGIN PASSWORD '{PASSWORD}'")).await;
        Role { name, admin: admin.clone() }
    }

    /// `GRANT <privileges> ON <on> TO <role>` (`on`: `"table"` or `SCHEMA "s"`).
    async fn grant(&self, privileges: &str, on: &str) {
        exec(&self.admin, format!("GRANT {privileges} ON {on} TO \"{}\"", self.name)).await;
    }

    async fn revoke(&self, privileges: &str, on: &str) {
        exec(&self.admin, format!("REVOKE {privileges} ON {on} FROM \"{}\"", self.name)).await;
    }

    /// A provider on `table` whose pool connects as this role.
    async fn provider(&self, table: &str) -> PostgresLockProvider {
        let opts: PgConnectOptions = url().await.parse().unwrap();
        let pool = recommended_pool_options()
            .connect_with(opts.username(&self.name).password(PASSWORD))
            .await
            .expect("connect as the role");
        PostgresLockProvider::builder(pool).table(table).build().unwrap()
    }

    /// Drops what the role owns and the role itself; failures are only printed.
    async fn drop(self) {
        for sql in
            [format!("DROP OWNED BY \"{0}\"", self.name), format!("DROP ROLE \"{0}\"", self.name)]
        {
            if let Err(e) = sqlx::raw_sql(AssertSqlSafe(sql.clone())).execute(&self.admin).await {
                println!("cleanup: {sql}: {e}");
            }
        }
    }
}

/// A fresh lock table in the public schema, created by the superuser.
async fn table(admin: &PgPool) -> String {
    let table = unique("granted");
    let p = PostgresLockProvider::builder(admin.clone()).table(&table).build().unwrap();
    p.create_table().await.unwrap();
    table
}

/// The table privileges of every call: locking, inspection, force_release (README
/// "Permissions").
const DOCUMENTED: &str = "SELECT, INSERT, UPDATE, DELETE";

/// What each call needs on the lock table, as documented.
const NEEDS: [(&str, &[&str]); 7] = [
    ("try_lock", &["SELECT", "INSERT", "UPDATE"]),
    ("check", &["SELECT", "INSERT", "UPDATE"]),
    ("extend", &["SELECT", "UPDATE"]),
    ("inspect", &["SELECT"]),
    ("list", &["SELECT"]),
    ("force_release", &["SELECT", "DELETE"]),
    ("unlock", &["SELECT", "UPDATE"]),
];

/// Runs every call of `p`, in the order of [`NEEDS`]: a fresh `try_lock`, `check`, `extend` and
/// `unlock` of a lock `p` already holds (`held`), `inspect` and `list` of it, and
/// `force_release` of the lock `seen`.
async fn every_call(
    p: &PostgresLockProvider,
    mut held: shedlock::Lock,
    seen: &shedlock::LockInfo,
) -> Vec<(&'static str, Result<()>)> {
    let name = held.name().to_owned();
    let mut out = Vec::new();
    out.push(("try_lock", p.try_lock(&cfg(&unique("fresh"), 60_000, 0)).await.map(drop)));
    out.push(("check", p.check().await));
    out.push(("extend", held.extend(std::time::Duration::from_secs(60), Default::default()).await));
    let inspected = p.inspect(&name).await;
    if let Ok(info) = &inspected {
        assert!(info.as_ref().is_some_and(|i| i.held), "{name} is held: {info:?}");
    }
    out.push(("inspect", inspected.map(drop)));
    out.push(("list", p.list("", None, 100).await.map(drop)));
    let forced = p.force_release(seen).await;
    if let Ok(f) = &forced {
        assert!(matches!(f, ForceRelease::Released(_)), "{f:?}");
    }
    out.push(("force_release", forced.map(drop)));
    out.push(("unlock", held.unlock().await));
    out
}

/// Asserts that the call failed with `Error::Setup` naming the call, the privilege, the table
/// and the grant.
fn assert_names(call: &str, privilege: &str, table: &str, r: &Result<()>) {
    match r {
        Err(Error::Setup { message, .. }) => {
            println!("{call} without {privilege}: {message}");
            for word in [privilege, table, "GRANT", call, "Permissions"] {
                assert!(message.contains(word), "{call}: the message names {word:?}: {message}");
            }
        }
        other => panic!("{call} without {privilege}: a setup error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_role_with_exactly_the_documented_grants_can_do_every_call() {
    let admin = admin().await;
    let table = table(&admin).await;
    let role = Role::new(&admin).await;
    role.grant(DOCUMENTED, &format!("\"{table}\"")).await;
    let p = role.provider(&table).await;
    let held = p.try_lock(&cfg("held", 60_000, 0)).await.unwrap().expect("free");
    let _other = p.try_lock(&cfg("other", 60_000, 0)).await.unwrap().expect("free");
    let seen = p.inspect("other").await.unwrap().expect("a record");
    for (call, r) in every_call(&p, held, &seen).await {
        assert!(r.is_ok(), "{call} with the documented grants: {r:?}");
    }
    role.drop().await;
}

#[tokio::test]
async fn each_call_lacking_a_privilege_it_needs_is_a_setup_error_naming_it() {
    let admin = admin().await;
    for privilege in ["SELECT", "INSERT", "UPDATE", "DELETE"] {
        let table = table(&admin).await;
        let role = Role::new(&admin).await;
        role.grant(DOCUMENTED, &format!("\"{table}\"")).await;
        let p = role.provider(&table).await;
        let held = p.try_lock(&cfg("held", 60_000, 0)).await.unwrap().expect("free");
        let _other = p.try_lock(&cfg("other", 60_000, 0)).await.unwrap().expect("free");
        let seen = p.inspect("other").await.unwrap().expect("a record");
        // Revoked on the server while the provider's connections are open: PostgreSQL checks
        // privileges at each statement.
        role.revoke(privilege, &format!("\"{table}\"")).await;
        for (call, r) in every_call(&p, held, &seen).await {
            let needs = NEEDS.iter().find(|(c, _)| *c == call).unwrap().1;
            if needs.contains(&privilege) {
                assert_names(call, privilege, &table, &r);
            } else {
                assert!(r.is_ok(), "{call} needs no {privilege}: {r:?}");
            }
        }
        role.drop().await;
    }
}

#[tokio::test]
async fn check_as_a_read_only_role_is_a_setup_error_naming_insert_and_update() {
    let admin = admin().await;
    let table = table(&admin).await;
    let role = Role::new(&admin).await;
    role.grant("SELECT", &format!("\"{table}\"")).await;
    let p = role.provider(&table).await;
    // Reading works: what check() alone proved before it proved write access.
    p.inspect("x").await.unwrap();
    p.list("", None, 10).await.unwrap();
    for privilege in ["INSERT", "UPDATE"] {
        assert_names("check", privilege, &table, &p.check().await);
    }
    assert_names("try_lock", "INSERT", &table, &p.try_lock(&cfg("x", 60_000, 0)).await.map(drop));
    // check() wrote nothing, and a role with the locking grants passes it.
    role.grant("INSERT, UPDATE", &format!("\"{table}\"")).await;
    p.check().await.unwrap();
    assert_eq!(p.list("", None, 10).await.unwrap().records.len(), 0, "check wrote no row");
    role.drop().await;
}

#[tokio::test]
async fn create_table_needs_create_on_the_schema_even_when_the_table_exists() {
    let admin = admin().await;
    let schema = unique("granted_schema");
    exec(&admin, format!("CREATE SCHEMA \"{schema}\"")).await;
    let role = Role::new(&admin).await;
    let on_schema = format!("SCHEMA \"{schema}\"");
    let table = format!("{schema}.locks");

    // USAGE without CREATE: create_table names CREATE on the schema.
    role.grant("USAGE", &on_schema).await;
    let p = role.provider(&table).await;
    let e = p.create_table().await;
    assert_names("create_table", "CREATE", &table, &e);
    let message = e.unwrap_err().to_string();
    assert!(message.contains(&format!("CREATE ON SCHEMA \"{schema}\"")), "{message}");

    // With CREATE the role creates the table, owns it, and locks on it with no other grant.
    role.grant("CREATE", &on_schema).await;
    p.create_table().await.unwrap();
    let lock = p.try_lock(&cfg("owner", 60_000, 0)).await.unwrap().expect("free");
    lock.unlock().await.unwrap();

    // A role with the locking grants on the existing table, but no CREATE: check and locking
    // work, create_table does not (CREATE TABLE IF NOT EXISTS checks CREATE first).
    let locker = Role::new(&admin).await;
    locker.grant("USAGE", &on_schema).await;
    exec(
        &admin,
        format!("GRANT SELECT, INSERT, UPDATE ON \"{schema}\".\"locks\" TO \"{}\"", locker.name),
    )
    .await;
    let q = locker.provider(&table).await;
    q.check().await.unwrap();
    q.try_lock(&cfg("locker", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
    assert_names("create_table", "CREATE", &table, &q.create_table().await);

    // Without USAGE on the schema, every call names it.
    locker.revoke("USAGE", &on_schema).await;
    let r = q.try_lock(&cfg("usage", 60_000, 0)).await.map(drop);
    assert_names("try_lock", "USAGE", &table, &r);
    assert_names("check", "USAGE", &table, &q.check().await);

    locker.drop().await;
    role.drop().await;
    exec(&admin, format!("DROP SCHEMA \"{schema}\" CASCADE")).await;
}

#[tokio::test]
async fn the_shedlock_compatible_mode_needs_the_same_grants() {
    let admin = admin().await;
    let table = unique("granted_compat");
    let compat = |pool: PgPool| {
        PostgresLockProvider::builder(pool).table(&table).shedlock_compatible().build().unwrap()
    };
    compat(admin.clone()).create_table().await.unwrap();
    let role = Role::new(&admin).await;
    role.grant("SELECT, INSERT, UPDATE", &format!("\"{table}\"")).await;
    let opts: PgConnectOptions = url().await.parse().unwrap();
    let pool = recommended_pool_options()
        .connect_with(opts.username(&role.name).password(PASSWORD))
        .await
        .unwrap();
    let p = compat(pool);
    p.check().await.unwrap();
    let mut lock = p.try_lock(&cfg("compat", 60_000, 0)).await.unwrap().expect("free");
    lock.extend(std::time::Duration::from_secs(60), Default::default()).await.unwrap();
    let seen = p.inspect("compat").await.unwrap().expect("a record");
    assert_names("force_release", "DELETE", &table, &p.force_release(&seen).await.map(drop));
    role.revoke("UPDATE", &format!("\"{table}\"")).await;
    assert_names("check", "UPDATE", &table, &p.check().await);
    assert_names("unlock", "UPDATE", &table, &lock.unlock().await);
    role.drop().await;
}
