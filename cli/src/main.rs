//! `shedlock`: see who holds the locks of a shedlock (or ShedLock) store, and release a stuck
//! one safely. See the crate's README for the commands, URLs and exit codes.

mod backend;
mod render;
mod secrets;
mod stores;

use std::{
    io::{BufRead, IsTerminal, Write},
    path::PathBuf,
    process::ExitCode,
    time::Duration,
};

use clap::{Args, Parser, Subcommand};
use shedlock::{ForceRelease, LockInfo, LockProvider};

use crate::{render::Format, secrets::Secrets};

/// Exit code: done (`show`: the lock is held; `release`: released).
const OK: u8 = 0;
/// Exit code: `show`: the lock is free or has no record; `release`: nothing to release.
const FREE: u8 = 1;
/// Exit code: an error (bad arguments, unreachable store, missing table, unsupported backend).
const ERROR: u8 = 2;
/// Exit code: `release` refused: the record changed since it was shown, or not confirmed.
const REFUSED: u8 = 3;

/// See who holds the locks of a shedlock store and release a stuck one safely.
///
/// The store is chosen by URL (`--url` or `SHEDLOCK_URL`): postgres://, mysql:// (or
/// mariadb://), sqlite://, redis:// or rediss:// (several comma-separated for a cluster),
/// memcache://, nats:// or tls://, mongodb://HOST/DATABASE, etcd:// (or http://, https://),
/// zookeeper://HOSTS/ROOT, dynamodb://TABLE, s3://BUCKET/PREFIX (AWS settings from the
/// environment).
///
/// Credentials: the user in the URL, the password best in `SHEDLOCK_PASSWORD` (it overrides the
/// URL's; for NATS without a user it is the token) so that it is neither in the shell history
/// nor in `ps`. No password, token or key is ever printed, errors included.
///
/// TLS: `--ca-file` (or `SHEDLOCK_CA_FILE`) trusts that CA alone and requires TLS verified
/// against it, host name included. Or the URL's own settings: PostgreSQL
/// `?sslmode=verify-full&sslrootcert=CA.pem`, MySQL `?ssl-mode=VERIFY_IDENTITY&ssl-ca=CA.pem`,
/// `rediss://`, NATS `tls://`, MongoDB `?tls=true&tlsCAFile=CA.pem` (etcd `https://` and
/// ZooKeeper: with `--ca-file`, which they require).
#[derive(Debug, Parser)]
#[command(name = "shedlock", version, about)]
struct Cli {
    #[command(flatten)]
    store: StoreArgs,
    /// Print JSON instead of a table (one document per `list`/`show`/`release`, one line per
    /// refresh of `watch`).
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// Where the locks are. Its `Debug` shows the URL's scheme only.
#[derive(Args)]
pub(crate) struct StoreArgs {
    /// The store's URL: postgres://…, mysql://…, sqlite://PATH, redis://…, memcache://…,
    /// nats://…, mongodb://…/DATABASE, etcd://…, zookeeper://…/ROOT, dynamodb://TABLE,
    /// s3://BUCKET/PREFIX.
    #[arg(long, env = "SHEDLOCK_URL", global = true, hide_env_values = true)]
    pub(crate) url: Option<String>,
    /// The lock table (`table` or `schema.table`) of a SQL store, as given to the provider.
    #[arg(long, default_value = "shedlock", global = true)]
    pub(crate) table: String,
    /// The key prefix of a Redis, memcached or etcd store, as given to the provider (default:
    /// the provider's).
    #[arg(long = "prefix", global = true)]
    pub(crate) key_prefix: Option<String>,
    /// The environment segment of a Redis store's keys, as given to the provider.
    #[arg(long, global = true)]
    pub(crate) environment: Option<String>,
    /// The collection of a MongoDB store (default: the provider's, `shedLock`).
    #[arg(long, global = true)]
    pub(crate) collection: Option<String>,
    /// The key-value bucket of a NATS store (default: the provider's, `shedlock`).
    #[arg(long, global = true)]
    pub(crate) bucket: Option<String>,
    /// The store uses ShedLock's own layout (the provider's `shedlock_compatible()`).
    #[arg(long, global = true)]
    pub(crate) shedlock_compatible: bool,
    /// The limit of each call to the store, in seconds.
    #[arg(long, default_value_t = 10, global = true)]
    pub(crate) timeout_secs: u64,
    /// A CA certificate (PEM file) to trust instead of the system's: the connection then must
    /// use TLS verified against it, host name included (PostgreSQL `verify-full`, MySQL
    /// `VERIFY_IDENTITY`, Redis `rediss://`, NATS, MongoDB, etcd `https://`, ZooKeeper's
    /// secure port, an HTTPS AWS endpoint). A URL that asks for plaintext (`sslmode=disable`,
    /// `redis://`, `http://`) is then an error, and so is a store without TLS (SQLite,
    /// memcached).
    #[arg(
        long,
        env = "SHEDLOCK_CA_FILE",
        global = true,
        value_name = "PEM",
        hide_env_values = true
    )]
    pub(crate) ca_file: Option<PathBuf>,
}

impl std::fmt::Debug for StoreArgs {
    /// Everything but the URL, of which only the scheme is shown (it may hold a password).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = self.url.as_deref().map(|u| u.split_once("://").map_or("?", |(s, _)| s));
        f.debug_struct("StoreArgs")
            .field("url", &scheme.map(|s| format!("{s}://{}", secrets::MASK)))
            .field("table", &self.table)
            .field("key_prefix", &self.key_prefix)
            .field("environment", &self.environment)
            .field("collection", &self.collection)
            .field("bucket", &self.bucket)
            .field("shedlock_compatible", &self.shedlock_compatible)
            .field("timeout_secs", &self.timeout_secs)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

impl StoreArgs {
    /// The limit of each call to the store (at least a second).
    pub(crate) fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_secs.max(1))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Lists the locks whose names start with PREFIX (all without one), held and free.
    List {
        /// The name prefix.
        #[arg(default_value = "")]
        prefix: String,
        /// List at most this many.
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Shows one lock. Exits 0 if it is held, 1 if it is free or has no record.
    Show {
        /// The lock name.
        name: String,
    },
    /// Releases a held lock after showing it, only if its record is still the one shown.
    Release {
        /// The lock name.
        name: String,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
    /// Shows the locks under PREFIX again and again.
    Watch {
        /// The name prefix.
        #[arg(default_value = "")]
        prefix: String,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2)]
        interval_secs: u64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
}

/// How a command ended: its exit code, or an error to print (exit code 2).
type Outcome = Result<u8, String>;

fn main() -> ExitCode {
    let secrets = Secrets::of_this_process();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // `--help`, `--version`: nothing of the environment's values is in them.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(OK);
        }
        // A usage error may quote an argument (a URL given in the wrong place).
        Err(e) => {
            eprint!("{}", secrets.redact(&e.render().to_string()));
            return ExitCode::from(ERROR);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return fail(&format!("cannot start the async runtime: {e}"), &secrets),
    };
    match runtime.block_on(run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(message) => fail(&message, &secrets),
    }
}

/// Prints `message` without any of the run's secrets; exit code 2.
fn fail(message: &str, secrets: &Secrets) -> ExitCode {
    eprintln!("shedlock: {}", secrets.redact(message));
    // The providers' errors name their builders' settings; say which of this tool's is meant.
    let lower = message.to_ascii_lowercase();
    if ["unknownissuer", "certificate is not signed", "tls_ca_pem", "add_root_certificates"]
        .iter()
        .any(|w| lower.contains(w))
    {
        eprintln!(
            "shedlock: to trust the CA that signed the server's certificate, give its PEM file: \
             --ca-file or SHEDLOCK_CA_FILE"
        );
    }
    if lower.contains("allow_password_over_plaintext") {
        eprintln!("shedlock: this tool sends an etcd password over https:// only");
    }
    ExitCode::from(ERROR)
}

async fn run(cli: Cli) -> Outcome {
    let format = if cli.json { Format::Json } else { Format::Table };
    let provider = backend::open(&cli.store).await?;
    let p = provider.as_ref();
    match cli.command {
        Command::List { prefix, limit } => {
            let records = list(p, &prefix, limit).await?;
            render::records(&records, format);
            Ok(OK)
        }
        Command::Show { name } => {
            let info = p.inspect(&name).await.map_err(|e| e.to_string())?;
            render::one(&name, info.as_ref(), format);
            Ok(if info.is_some_and(|i| i.held) { OK } else { FREE })
        }
        Command::Release { name, yes } => release(p, &name, yes, format).await,
        Command::Watch { prefix, interval_secs, count } => {
            watch(p, &prefix, Duration::from_secs(interval_secs.max(1)), count, format).await
        }
    }
}

/// Every record under `prefix`, page by page (at most `limit`).
async fn list(
    p: &dyn LockProvider,
    prefix: &str,
    limit: Option<usize>,
) -> Result<Vec<LockInfo>, String> {
    let mut records = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let want = limit.map_or(shedlock::inspect::MAX_PAGE, |l| l - records.len());
        if want == 0 {
            break;
        }
        let page = p.list(prefix, cursor.as_deref(), want).await.map_err(|e| e.to_string())?;
        records.extend(page.records);
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(records)
}

async fn release(p: &dyn LockProvider, name: &str, yes: bool, format: Format) -> Outcome {
    let Some(seen) = p.inspect(name).await.map_err(|e| e.to_string())? else {
        render::note(&format!("{name}: no record; nothing to release"), format);
        return Ok(FREE);
    };
    if !seen.held {
        render::one(name, Some(&seen), format);
        render::note(&format!("{name} is free; nothing to release"), format);
        return Ok(FREE);
    }
    render::one(name, Some(&seen), format);
    if !yes && !confirm(name)? {
        render::note("not released (not confirmed)", format);
        return Ok(REFUSED);
    }
    match p.force_release(&seen).await.map_err(|e| e.to_string())? {
        ForceRelease::Released(was) => {
            render::released(&was, format);
            Ok(OK)
        }
        ForceRelease::Changed(now) => {
            render::note(
                &format!("{name}: NOT released: the record changed since it was shown"),
                format,
            );
            render::one(name, now.as_ref(), format);
            Ok(REFUSED)
        }
        _ => Err("the provider answered an outcome this tool does not know".to_owned()),
    }
}

/// Asks on the terminal; anything but `y`/`yes` declines (so does a closed stdin).
fn confirm(name: &str) -> Result<bool, String> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        eprint!("release {name}? (stdin is not a terminal; pass --yes to release without asking) ");
    } else {
        eprint!(
            "Release {name}? Its holder may still be running; it loses the lock at its next extend. [y/N] "
        );
    }
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer).map_err(|e| format!("reading the answer: {e}"))?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

async fn watch(
    p: &dyn LockProvider,
    prefix: &str,
    every: Duration,
    count: Option<u64>,
    format: Format,
) -> Outcome {
    let mut done = 0u64;
    loop {
        let records = list(p, prefix, None).await?;
        render::refresh(&records, format);
        done += 1;
        if count.is_some_and(|c| done >= c) {
            return Ok(OK);
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = tokio::signal::ctrl_c() => return Ok(OK),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_urls_scheme_only() {
        let cli = Cli::try_parse_from([
            "shedlock",
            "--url",
            "postgres://ops:s3cret-debug@db/app?sslmode=verify-full",
            "list",
        ])
        .unwrap();
        let shown = format!("{cli:?}");
        assert!(!shown.contains("s3cret-debug") && !shown.contains("ops"), "{shown}");
        assert!(shown.contains("postgres://***"), "{shown}");
    }
}
