//! The store a URL names, as a provider. Only the providers that implement inspection are
//! offered; the URL (which may hold a password) is never printed.

// A build with only some of the backends leaves parts of the shared code unused.
#![allow(unused)]

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
use std::str::FromStr;
use std::{sync::Arc, time::Duration};

use shedlock::LockProvider;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
use shedlock::ProviderBuilder;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use shedlock_sql::{DedicatedConnection, ShedlockTable, SqlLockProviderBuilder};

use crate::{StoreArgs, stores};

/// The environment variable whose value, when set, is the password (instead of the URL's).
pub(crate) const PASSWORD_ENV: &str = "SHEDLOCK_PASSWORD";

/// The schemes this tool knows, for the error that names them.
const SCHEMES: &str = "postgres://, mysql:// (mariadb://), sqlite://, redis:// (rediss://), \
                       memcache://, nats:// (tls://), mongodb://, etcd:// (http://, https://), \
                       zookeeper://, dynamodb://, s3://";

/// The provider for `args`' URL, built like the application's (same table, prefix, bucket or
/// collection, and mode). Opening the SQL stores does no I/O; the others connect here.
pub(crate) async fn open(args: &StoreArgs) -> Result<Arc<dyn LockProvider>, String> {
    let url = args.url.as_deref().ok_or(
        "no store given: pass --url (or set SHEDLOCK_URL), e.g. postgres://user@host/db, \
         redis://host:6379 or sqlite://path/to/locks.db",
    )?;
    let scheme = url.split_once("://").map_or("", |(s, _)| s).to_ascii_lowercase();
    let timeout = args.timeout();
    let password = std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty());
    let compat_unsupported = |what: &str| -> Opened {
        Err(format!("{what} has no ShedLock-compatible mode in shedlock-rs").into())
    };
    let no_tls = |what: &str| -> Opened {
        Err(format!(
            "a CA file is given (--ca-file or SHEDLOCK_CA_FILE), but {what}: TLS cannot be used \
             with this store"
        )
        .into())
    };
    let opened: Opened = match scheme.as_str() {
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => postgres(url, password, args, timeout),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => mysql(url, password, args, timeout),
        #[cfg(feature = "sqlite")]
        "sqlite" if args.ca_file.is_some() => no_tls("SQLite is a local file"),
        #[cfg(feature = "sqlite")]
        "sqlite" => sqlite(url, args, timeout),
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "valkey" | "valkeys" => {
            stores::redis(url, password, args, timeout).await
        }
        #[cfg(feature = "memcached")]
        "memcache" | "memcached" if args.shedlock_compatible => compat_unsupported("memcached"),
        #[cfg(feature = "memcached")]
        "memcache" | "memcached" => stores::memcached(url, args),
        #[cfg(feature = "nats")]
        "nats" | "tls" if args.shedlock_compatible => compat_unsupported("NATS"),
        #[cfg(feature = "nats")]
        "nats" | "tls" => stores::nats(url, password, args).await,
        #[cfg(feature = "mongodb")]
        "mongodb" => stores::mongodb(url, password, args).await,
        #[cfg(feature = "etcd")]
        "etcd" | "http" | "https" if args.shedlock_compatible => compat_unsupported("etcd"),
        #[cfg(feature = "etcd")]
        "etcd" | "http" | "https" => stores::etcd(url, password, args).await,
        #[cfg(feature = "zookeeper")]
        "zookeeper" | "zk" if args.shedlock_compatible => compat_unsupported("ZooKeeper"),
        #[cfg(feature = "zookeeper")]
        "zookeeper" | "zk" => stores::zookeeper(url, password, args),
        #[cfg(feature = "dynamodb")]
        "dynamodb" => stores::dynamodb(url, args),
        #[cfg(feature = "s3")]
        "s3" if args.shedlock_compatible => compat_unsupported("S3"),
        #[cfg(feature = "s3")]
        "s3" => stores::s3(url, args),
        "" => Err(format!("the URL has no scheme: use one of {SCHEMES}").into()),
        s => Err(format!(
            "unknown URL scheme {s:?}: use one of {SCHEMES} (those of the features this binary \
             was built with)"
        )
        .into()),
    };
    let _ = (compat_unsupported, no_tls);
    opened.map_err(|e| e.to_string())
}

/// A provider, or why it could not be opened (never quoting the URL).
pub(crate) type Opened = Result<Arc<dyn LockProvider>, Box<dyn std::error::Error>>;

/// A bad URL, said without repeating it (it may hold a password).
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
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

/// The error of a URL that asks for plaintext while a CA file is given.
pub(crate) fn plaintext_with_ca(what: &str) -> Box<dyn std::error::Error> {
    format!(
        "a CA file is given (--ca-file or SHEDLOCK_CA_FILE), but the URL asks for plaintext \
         ({what}): drop one or the other"
    )
    .into()
}

#[cfg(feature = "postgres")]
fn postgres(url: &str, password: Option<String>, args: &StoreArgs, timeout: Duration) -> Opened {
    use sqlx::postgres::PgSslMode;

    let mut options = sqlx::postgres::PgConnectOptions::from_str(url).map_err(bad_url)?;
    if let Some(p) = password {
        options = options.password(&p);
    }
    if let Some(ca) = &args.ca_file {
        // A CA means verified TLS: `verify-ca` if the URL asks for it, else `verify-full`.
        let mode = match options.get_ssl_mode() {
            PgSslMode::Disable => return Err(plaintext_with_ca("sslmode=disable")),
            PgSslMode::VerifyCa => PgSslMode::VerifyCa,
            _ => PgSslMode::VerifyFull,
        };
        options = options.ssl_mode(mode).ssl_root_cert(ca);
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
    if let Some(ca) = &args.ca_file {
        use sqlx::mysql::MySqlSslMode;
        // A CA means verified TLS: `VERIFY_CA` if the URL asks for it, else `VERIFY_IDENTITY`.
        let mode = match options.get_ssl_mode() {
            MySqlSslMode::Disabled => return Err(plaintext_with_ca("ssl-mode=DISABLED")),
            MySqlSslMode::VerifyCa => MySqlSslMode::VerifyCa,
            _ => MySqlSslMode::VerifyIdentity,
        };
        options = options.ssl_mode(mode).ssl_ca(ca);
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
