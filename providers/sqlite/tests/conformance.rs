//! The shedlock conformance suite (C01–C32) against SQLite, two suites: `sqlite` (database time)
//! and `sqlite-client-time` (`cargo test --test conformance -- sqlite-client-time::` runs one).
//! Each has one database file in a fresh temp dir, each instance its own pool on it (like
//! separate processes on one host).
//!
//! SQLite is embedded: there is no server address for the kit's fault proxy (C24) and no server
//! to restart (C25), so those report "not applicable" — declared below as expected, so that any
//! other non-pass outcome fails the run.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{path::PathBuf, sync::Arc};

use shedlock::{BoxError, LockProvider};
use shedlock_conformance::{Hooks, InstanceOptions, Options, ProviderFactory, SuiteSpec};
use shedlock_sqlite::{
    SqliteLockProvider, TimeSource, recommended_connect_options, recommended_pool_options,
};
use shedlock_test_support::Records;

struct Sqlite {
    name: &'static str,
    dir: PathBuf,
    path: PathBuf,
    client_time: bool,
    admin: SqliteLockProvider,
    version: String,
}

impl Sqlite {
    async fn new(client_time: bool) -> Result<Self, BoxError> {
        // One database per suite; C28's node processes (this binary, re-executed) share the run
        // id, so they open the same file.
        let mode = if client_time { "ct-" } else { "" };
        let dir = std::env::temp_dir()
            .join(format!("shedlock-sqlite-conformance-{mode}{}", shedlock_conformance::run_id()));
        std::fs::create_dir_all(&dir)?;
        let path = dir.join("locks.db");
        let pool =
            recommended_pool_options().connect_with(recommended_connect_options(&path)).await?;
        let version: String =
            sqlx::query_scalar("SELECT sqlite_version()").fetch_one(&pool).await?;
        let admin = SqliteLockProvider::builder(pool).build()?;
        admin.create_table().await?;
        let name = if client_time { "sqlite-client-time" } else { "sqlite" };
        Ok(Self { name, dir, path, client_time, admin, version })
    }
}

#[async_trait::async_trait]
impl ProviderFactory for Sqlite {
    fn name(&self) -> &str {
        self.name
    }

    async fn create(&self, options: InstanceOptions) -> Result<Arc<dyn LockProvider>, BoxError> {
        let pool = recommended_pool_options()
            .max_connections(2)
            .connect_lazy_with(recommended_connect_options(&self.path));
        let mut b = shedlock_test_support::instance(SqliteLockProvider::builder(pool), &options);
        if self.client_time {
            b = b.time_source(TimeSource::Client);
        }
        Ok(Arc::new(b.build()?))
    }

    fn hooks(&self) -> Hooks {
        let hooks = Hooks::new().with_records(Records(self.admin.records()));
        if self.client_time {
            // C28's node processes open the same file (its path follows the run id).
            hooks.with_node_env(Vec::<(String, String)>::new())
        } else {
            hooks
        }
    }

    fn server(&self) -> Option<String> {
        Some(format!(
            "SQLite {}, embedded (the libsqlite3 that sqlx links), one database file shared by \
             every instance",
            self.version
        ))
    }

    async fn teardown(&self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn main() -> std::process::ExitCode {
    let options = || {
        Options::from_env()
            .expect_not_applicable("C24", "SQLite is embedded: no network address to cut")
            .expect_not_applicable("C25", "SQLite is embedded: no server to restart")
    };
    let database_time = options()
        .expect_not_applicable(
            "C28",
            "SQLite is embedded: its database time is read inside each node process, which \
         libfaketime would skew; the processes sharing a database file share one host clock, \
         so per-process offsets cannot happen (the client-time mode runs C28)",
        )
        .expect_not_applicable(
            "C29",
            "this mode offers node processes no environment (so that C28 cannot start any); the \
         client-time mode runs C29 on the same kind of database file",
        );
    shedlock_conformance::harness_suites(vec![
        SuiteSpec::new("sqlite", database_time, || Sqlite::new(false)),
        SuiteSpec::new("sqlite-client-time", options(), || Sqlite::new(true)),
    ])
}
