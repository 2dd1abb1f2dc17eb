//! Least privilege against a real MariaDB server (both flavors of the MySQL dialect): each call
//! works with exactly the grants the README's "Permissions" documents, and a call whose
//! privilege is missing fails with `Error::Setup` naming the privilege and the grant, never
//! `Error::Backend`. Each test creates users of its own through the root connection and drops
//! them afterwards (best effort).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use shedlock::{Error, ForceRelease, LockProvider, Result};
use shedlock_mysql::{Flavor, MySqlLockProvider, recommended_pool_options};
use shedlock_test_support::{cfg, unique};
use sqlx::{AssertSqlSafe, MySqlPool, mysql::MySqlConnectOptions};

const PASSWORD: &str = "grantee-password";
/// The database of the tables (the launcher's URL names another one, `shedlock`, on which the
/// users here have no privilege).
const DB: &str = "shedlock_grants";

async fn url() -> String {
    shedlock_test_support::url(shedlock_launcher::Backend::MariaDb, "MariaDB").await
}

async fn admin() -> MySqlPool {
    let admin = recommended_pool_options().connect(&url().await).await.expect("connect to MariaDB");
    exec(&admin, format!("CREATE DATABASE IF NOT EXISTS {DB}")).await;
    admin
}

async fn exec(pool: &MySqlPool, sql: String) {
    sqlx::raw_sql(AssertSqlSafe(sql.clone()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A user of its own (`'name'@'%'`), created by root.
struct User {
    name: String,
    admin: MySqlPool,
}

impl User {
    async fn new(admin: &MySqlPool) -> User {
        let name = unique("grantee");
        exec(admin, format!("CREATE USER '{name}'@'%' IDENTIFIED BY '{PASSWORD}'")).await;
        User { name, admin: admin.clone() }
    }

    /// `GRANT <privileges> ON <table> TO <user>` (`table`: `db.table`).
    async fn grant(&self, privileges: &str, table: &str) {
        exec(&self.admin, format!("GRANT {privileges} ON {table} TO '{}'@'%'", self.name)).await;
    }

    async fn revoke(&self, privileges: &str, table: &str) {
        exec(&self.admin, format!("REVOKE {privileges} ON {table} FROM '{}'@'%'", self.name)).await;
    }

    /// A pool that connects as this user, to [`DB`].
    async fn pool(&self) -> std::result::Result<MySqlPool, sqlx::Error> {
        let opts: MySqlConnectOptions = url().await.parse().unwrap();
        let opts = opts.username(&self.name).password(PASSWORD).database(DB);
        recommended_pool_options().connect_with(opts).await
    }

    /// A provider on `table` as this user.
    async fn provider(&self, table: &str, flavor: Flavor) -> MySqlLockProvider {
        let pool = self.pool().await.expect("connect as the user");
        MySqlLockProvider::builder(pool).table(table).option(flavor).build().unwrap()
    }

    /// Drops the user; a failure is only printed.
    async fn drop(self) {
        let sql = format!("DROP USER IF EXISTS '{}'@'%'", self.name);
        if let Err(e) = sqlx::raw_sql(AssertSqlSafe(sql.clone())).execute(&self.admin).await {
            println!("cleanup: {sql}: {e}");
        }
    }
}

/// A fresh lock table in [`DB`], created by root.
async fn table(admin: &MySqlPool) -> String {
    let table = format!("{DB}.{}", unique("granted"));
    let p = MySqlLockProvider::builder(admin.clone()).table(&table).build().unwrap();
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
    p: &MySqlLockProvider,
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
async fn a_user_with_exactly_the_documented_grants_can_do_every_call_in_both_flavors() {
    let admin = admin().await;
    for flavor in [Flavor::MariaDb, Flavor::MySql, Flavor::Detect] {
        let table = table(&admin).await;
        let user = User::new(&admin).await;
        user.grant(DOCUMENTED, &table).await;
        let p = user.provider(&table, flavor).await;
        let held = p.try_lock(&cfg("held", 60_000, 0)).await.unwrap().expect("free");
        let _other = p.try_lock(&cfg("other", 60_000, 0)).await.unwrap().expect("free");
        let seen = p.inspect("other").await.unwrap().expect("a record");
        for (call, r) in every_call(&p, held, &seen).await {
            assert!(r.is_ok(), "{flavor:?}: {call} with the documented grants: {r:?}");
        }
        user.drop().await;
    }
}

#[tokio::test]
async fn each_call_lacking_a_privilege_it_needs_is_a_setup_error_naming_it_in_both_flavors() {
    let admin = admin().await;
    for flavor in [Flavor::MariaDb, Flavor::MySql] {
        for privilege in ["SELECT", "INSERT", "UPDATE", "DELETE"] {
            let table = table(&admin).await;
            let user = User::new(&admin).await;
            user.grant(DOCUMENTED, &table).await;
            let p = user.provider(&table, flavor).await;
            let held = p.try_lock(&cfg("held", 60_000, 0)).await.unwrap().expect("free");
            let _other = p.try_lock(&cfg("other", 60_000, 0)).await.unwrap().expect("free");
            let seen = p.inspect("other").await.unwrap().expect("a record");
            // Revoked while the provider's connections are open: table privileges take effect
            // at the connection's next statement.
            user.revoke(privilege, &table).await;
            for (call, r) in every_call(&p, held, &seen).await {
                let needs = NEEDS.iter().find(|(c, _)| *c == call).unwrap().1;
                if needs.contains(&privilege) {
                    assert_names(call, privilege, &table, &r);
                } else {
                    assert!(r.is_ok(), "{flavor:?}: {call} needs no {privilege}: {r:?}");
                }
            }
            user.drop().await;
        }
    }
}

#[tokio::test]
async fn check_as_a_read_only_user_is_a_setup_error_naming_insert_and_update() {
    let admin = admin().await;
    for flavor in [Flavor::MariaDb, Flavor::MySql] {
        let table = table(&admin).await;
        let user = User::new(&admin).await;
        user.grant("SELECT", &table).await;
        let p = user.provider(&table, flavor).await;
        // Reading works: what check() alone proved before it proved write access.
        p.inspect("x").await.unwrap();
        p.list("", None, 10).await.unwrap();
        for privilege in ["INSERT", "UPDATE"] {
            assert_names("check", privilege, &table, &p.check().await);
        }
        let r = p.try_lock(&cfg("x", 60_000, 0)).await.map(drop);
        assert_names("try_lock", "INSERT", &table, &r);
        // check() wrote nothing, and a user with the locking grants passes it.
        user.grant("INSERT, UPDATE", &table).await;
        p.check().await.unwrap();
        assert_eq!(p.list("", None, 10).await.unwrap().records.len(), 0, "check wrote no row");
        user.drop().await;
    }
}

#[tokio::test]
async fn create_table_needs_create_on_the_table_even_when_it_exists() {
    let admin = admin().await;
    let table = format!("{DB}.{}", unique("created"));
    let user = User::new(&admin).await;
    // A privilege on another table, so that the user may connect to the database.
    user.grant("SELECT", &self::table(&admin).await).await;
    let p = user.provider(&table, Flavor::Detect).await;
    assert_names("create_table", "CREATE", &table, &p.create_table().await);
    // MariaDB grants CREATE (only) on a table that does not exist yet; the rest once it does.
    user.grant("CREATE", &table).await;
    p.create_table().await.unwrap();
    user.grant("SELECT, INSERT, UPDATE", &table).await;
    p.check().await.unwrap();
    p.try_lock(&cfg("created", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
    // The table exists now: CREATE TABLE IF NOT EXISTS still asks for CREATE.
    user.revoke("CREATE", &table).await;
    assert_names("create_table", "CREATE", &table, &p.create_table().await);
    user.drop().await;
}

#[tokio::test]
async fn a_user_without_access_to_the_database_is_a_setup_error() {
    let admin = admin().await;
    let table = table(&admin).await;
    let user = User::new(&admin).await;
    // No privilege at all in the database the pool names: the server refuses the connection
    // (1044, access denied to the database).
    let opts: MySqlConnectOptions = url().await.parse().unwrap();
    let pool = recommended_pool_options()
        .acquire_timeout(std::time::Duration::from_secs(2))
        .connect_lazy_with(opts.username(&user.name).password(PASSWORD).database(DB));
    let p = MySqlLockProvider::builder(pool).table(&table).build().unwrap();
    match p.try_lock(&cfg("x", 60_000, 0)).await.map(drop) {
        Err(Error::Setup { message, .. }) => {
            assert!(message.contains("Access denied") && message.contains("GRANT"), "{message}");
        }
        other => panic!("a setup error, got {other:?}"),
    }
    user.drop().await;
}

#[tokio::test]
async fn the_shedlock_compatible_mode_needs_the_same_grants() {
    let admin = admin().await;
    let table = format!("{DB}.{}", unique("compat"));
    let compat = |pool: MySqlPool| {
        MySqlLockProvider::builder(pool).table(&table).shedlock_compatible().build().unwrap()
    };
    compat(admin.clone()).create_table().await.unwrap();
    let user = User::new(&admin).await;
    user.grant("SELECT, INSERT, UPDATE", &table).await;
    let p = compat(user.pool().await.unwrap());
    p.check().await.unwrap();
    let mut lock = p.try_lock(&cfg("compat", 60_000, 0)).await.unwrap().expect("free");
    lock.extend(std::time::Duration::from_secs(60), Default::default()).await.unwrap();
    let seen = p.inspect("compat").await.unwrap().expect("a record");
    assert_names("force_release", "DELETE", &table, &p.force_release(&seen).await.map(drop));
    user.revoke("UPDATE", &table).await;
    assert_names("check", "UPDATE", &table, &p.check().await);
    assert_names("unlock", "UPDATE", &table, &lock.unlock().await);
    user.drop().await;
}
