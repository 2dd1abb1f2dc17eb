//! The store a URL names, as a provider. Only the providers that implement inspection are
//! offered; the URL (which may hold a password) is never printed.

// A build with only some of the backends leaves parts of the shared code unused.
#![cfg_attr(not(all(feature = "postgres", feature = "mysql", feature = "sqlite")), allow(unused))]

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
use std::str::FromStr;
use std::{sync::Arc, time::Duration};

use shedlock::LockProvider;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
use shedlock::ProviderBuilder;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use shedlock_sql::{DedicatedConnection, ShedlockTable, SqlLockProviderBuilder};

use crate::StoreArgs;

/// The environment variable whose value, when set, is the password (instead of the URL's).
pub(crate) const PASSWORD_ENV: &str = "SHEDLOCK_PASSWORD";

/// The URL schemes of the backends that cannot be inspected yet.
const NOT_YET: [&str; 10] = [
    "redis",
    "rediss",
    "memcache",
    "nats",
    "mongodb",
    "etcd",
    "http",
    "zookeeper",
    "dynamodb",
    "s3",
];

/// The provider for `args`' URL, built like the application's (same table and mode).
pub(crate) fn open(args: &StoreArgs) -> Result<Arc<dyn LockProvider>, String> {
    let url = args.url.as_deref().ok_or(
        "no store given: pass --url (or set SHEDLOCK_URL), e.g. postgres://user@host/db, \
         mysql://user@host/db or sqlite://path/to/locks.db",
    )?;
    let scheme = url.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase();
    let timeout = Duration::from_secs(args.timeout_secs.max(1));
    let password = std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty());
    let opened: Opened = match scheme.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => postgres(url, password, args, timeout),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => mysql(url, password, args, timeout),
        #[cfg(feature = "sqlite")]
        "sqlite" => sqlite(url, args, timeout),
        s if NOT_YET.contains(&s) => Err(format!(
            "{s}:// stores cannot be inspected yet: their provider does not implement \
             inspection (only the SQL providers do so far)"
        )
        .into()),
        "" => Err("the URL has no scheme (postgres://, mysql://, sqlite://)".into()),
        s => Err(format!(
            "unknown URL scheme {s:?}: use postgres://, mysql:// (mariadb://) or sqlite:// \
             (those of the features this binary was built with)"
        )
        .into()),
    };
    opened.map_err(|e| e.to_string())
}

type Opened = Result<Arc<dyn LockProvider>, Box<dyn std::error::Error>>;

/// A bad URL, said without repeating it (it may hold a password).
fn bad_url(e: sqlx::Error) -> String {
    format!("the URL could not be read: {e}")
}

/// A one-connection pool that connects at its first use, each wait bounded by `timeout`.
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
fn pool<DB: sqlx::Database>(
    options: <DB::Connection as sqlx::Connection>::Options,
    timeout: Duration,
) -> sqlx::Pool<DB> {
    sqlx::pool::PoolOptions::<DB>::new()
        .max_connections(1)
        .acquire_timeout(timeout)
        .connect_lazy_with(options)
}

/// A database server's provider, built as the application's (table, mode), each statement on a
/// pooled connection (the tool holds no lock, so it needs no connection of its own).
#[cfg(any(feature = "postgres", feature = "mysql"))]
fn server_provider<D>(
    builder: SqlLockProviderBuilder<D>,
    args: &StoreArgs,
    timeout: Duration,
) -> Opened
where
    D: DedicatedConnection + ShedlockTable,
{
    let mut b =
        builder.table(&args.table).dedicated_connection(false).operation_timeout(Some(timeout));
    if args.shedlock_compatible {
        b = b.shedlock_compatible();
    }
    Ok(Arc::new(b.build()?))
}

#[cfg(feature = "postgres")]
fn postgres(url: &str, password: Option<String>, args: &StoreArgs, timeout: Duration) -> Opened {
    let mut options = sqlx::postgres::PgConnectOptions::from_str(url).map_err(bad_url)?;
    if let Some(p) = password {
        options = options.password(&p);
    }
    let builder = shedlock_postgres::PostgresLockProvider::builder(pool(options, timeout));
    server_provider(builder, args, timeout)
}

#[cfg(feature = "mysql")]
fn mysql(url: &str, password: Option<String>, args: &StoreArgs, timeout: Duration) -> Opened {
    let url = url
        .strip_prefix("mariadb://")
        .map_or_else(|| url.to_owned(), |rest| format!("mysql://{rest}"));
    let mut options = sqlx::mysql::MySqlConnectOptions::from_str(&url).map_err(bad_url)?;
    if let Some(p) = password {
        options = options.password(&p);
    }
    let builder = shedlock_mysql::MySqlLockProvider::builder(pool(options, timeout));
    server_provider(builder, args, timeout)
}

#[cfg(feature = "sqlite")]
fn sqlite(url: &str, args: &StoreArgs, timeout: Duration) -> Opened {
    if args.shedlock_compatible {
        return Err("SQLite has no ShedLock-compatible mode (ShedLock has no SQLite table)".into());
    }
    // An existing database only: a mistyped path must not create an empty one.
    let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)
        .map_err(bad_url)?
        .create_if_missing(false)
        .busy_timeout(timeout);
    let provider = shedlock_sqlite::SqliteLockProvider::builder(pool(options, timeout))
        .table(&args.table)
        .operation_timeout(Some(timeout))
        .build()?;
    Ok(Arc::new(provider))
}
