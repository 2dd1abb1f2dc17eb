//! The README's "Authentication" and "Permissions", enforced by a SecantusDB of this test's own
//! started with `--auth` (the launcher's runs without): every call as a user holding exactly the
//! README's role, then as users each missing one of its actions; a wrong password, an unknown
//! user and a connection without credentials.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use mongodb::{
    Client, Database,
    bson::{Document, doc},
    options::ClientOptions,
};
use shedlock::{Error, ForceRelease, LockProvider, ProviderBuilder as _};
use shedlock_mongodb::MongoLockProvider;
use shedlock_test_support::{cfg, secrets::error_text, unique};

/// The database of the users, roles and locks.
pub const DB: &str = "app";

/// A SecantusDB of the test's own with SCRAM authentication and roles enforced (`--auth`),
/// on a free port of 127.0.0.1, its users created before (SecantusDB has no localhost
/// exception: users are created without `--auth`, then the server restarts with it). Killed,
/// and its files removed, when dropped.
pub struct AuthServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

fn spawn(dir: &std::path::Path, port: u16, auth: bool) -> Child {
    let server = shedlock_launcher::backends_dir().join("venv/bin/secantusd-py");
    assert!(
        server.is_file(),
        "{} is missing: run `cargo xtask provision` (secantusdb from PyPI)",
        server.display()
    );
    let mut cmd = Command::new(server);
    cmd.args(["--host", "127.0.0.1", "--port", &port.to_string(), "--storage-path"])
        .arg(dir.join("data"))
        .args(["--log-level", "WARNING", "--standalone"])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if auth {
        cmd.arg("--auth");
    }
    let child = cmd.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "SecantusDB did not start on port {port}");
        std::thread::sleep(Duration::from_millis(100));
    }
    child
}

/// Stops a server: SIGTERM (a clean shutdown), then waits.
fn stop(child: &mut Child) {
    let _ = Command::new("kill").arg(child.id().to_string()).status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl AuthServer {
    /// Starts a server, runs `commands` on database [`DB`] (`createRole`, `createUser`, …)
    /// without authentication, and restarts it with `--auth`. Blocks the thread while the
    /// server starts (a test's runtime has nothing else to do meanwhile).
    pub async fn start(commands: Vec<Document>) -> AuthServer {
        let dir = std::env::temp_dir().join(unique("secantus-auth"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = free_port();
        let mut open = spawn(&dir, port, false);
        let client = client(&format!("mongodb://127.0.0.1:{port}/")).await;
        for c in commands {
            client.database(DB).run_command(c.clone()).await.unwrap_or_else(|e| panic!("{c}: {e}"));
        }
        client.shutdown().await;
        stop(&mut open);
        let port = free_port();
        let child = spawn(&dir, port, true);
        AuthServer { child, port, dir }
    }

    /// The connection string of `user` with `password` (none: no credentials).
    pub fn url(&self, login: Option<(&str, &str)>) -> String {
        match login {
            Some((user, password)) => {
                format!("mongodb://{user}:{password}@127.0.0.1:{}/{DB}?authSource={DB}", self.port)
            }
            None => format!("mongodb://127.0.0.1:{}/{DB}", self.port),
        }
    }
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        stop(&mut self.child);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A client with short timeouts.
pub async fn client(url: &str) -> Client {
    let mut o = ClientOptions::parse(url).await.unwrap();
    o.server_selection_timeout = Some(Duration::from_secs(5));
    o.connect_timeout = Some(Duration::from_secs(5));
    Client::with_options(o).unwrap()
}

/// The actions of the README's `shedlockLocking` role.
fn readme_actions() -> Vec<String> {
    let readme = include_str!("../../README.md");
    let section = &readme[readme.find("## Permissions").expect("a Permissions section")..];
    let role = &section[section.find("role: \"shedlockLocking\"").expect("the role")..];
    let list = &role[role.find("actions: [").unwrap() + "actions: [".len()..];
    list[..list.find(']').unwrap()]
        .split(',')
        .map(|a| a.trim().trim_matches('"').to_owned())
        .collect()
}

/// `createRole` of `name` with `actions` on the lock collection, and `createUser` of `name`
/// (password `password`) holding it.
fn role_and_user(name: &str, password: &str, actions: &[String]) -> [Document; 2] {
    [
        doc! {
            "createRole": name,
            "privileges": [{ "resource": { "db": DB, "collection": "shedLock" }, "actions": actions }],
            "roles": [],
        },
        doc! { "createUser": name, "pwd": password, "roles": [name] },
    ]
}

async fn provider(server: &AuthServer, user: &str, password: &str) -> MongoLockProvider {
    let db: Database = client(&server.url(Some((user, password)))).await.database(DB);
    MongoLockProvider::builder(db).operation_timeout(Some(Duration::from_secs(10))).build().unwrap()
}

/// Every call, and the actions SecantusDB asks of it (one per command).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Check,
    /// `try_lock` of a fresh name (`findAndModify`), `extend` (`update`), `unlock` (`delete`).
    Cycle,
    /// `try_lock` of a name held elsewhere.
    Contend,
    Inspect,
    List,
    ForceRelease,
    CreateCollection,
}

const CALLS: [Call; 7] = [
    Call::Check,
    Call::Cycle,
    Call::Contend,
    Call::Inspect,
    Call::List,
    Call::ForceRelease,
    Call::CreateCollection,
];

fn needs(call: Call) -> &'static [&'static str] {
    match call {
        Call::Check => &["find", "update", "remove"],
        Call::Cycle => &["update", "remove"],
        Call::Contend => &["update"],
        Call::Inspect | Call::List => &["find"],
        Call::ForceRelease => &["find", "remove"],
        Call::CreateCollection => &["createCollection"],
    }
}

async fn run(
    call: Call,
    p: &MongoLockProvider,
    owner: &MongoLockProvider,
    held: &str,
) -> Result<(), Error> {
    match call {
        Call::Check => p.check().await,
        Call::Cycle => {
            let mut lock = p.try_lock(&cfg(&unique("cycle"), 60_000, 0)).await?.expect("free");
            lock.extend(Duration::from_secs(60), Duration::ZERO).await?;
            lock.unlock().await
        }
        Call::Contend => {
            assert!(p.try_lock(&cfg(held, 60_000, 0)).await?.is_none(), "held elsewhere");
            Ok(())
        }
        Call::Inspect => {
            assert!(p.inspect(held).await?.expect("a document").held);
            Ok(())
        }
        Call::List => {
            assert!(!p.list("", None, 100).await?.records.is_empty());
            Ok(())
        }
        Call::ForceRelease => {
            let name = unique("victim");
            let lock = owner.try_lock(&cfg(&name, 60_000, 0)).await?.expect("free");
            let seen = owner.inspect(&name).await?.unwrap();
            let r = p.force_release(&seen).await;
            // After a forced release the holder's unlock changes nothing.
            lock.unlock().await?;
            assert!(matches!(r?, ForceRelease::Released(_)));
            Ok(())
        }
        Call::CreateCollection => p.create_collection().await,
    }
}

#[tokio::test]
async fn every_call_works_with_exactly_the_readme_role_and_each_missing_action_is_named() {
    let actions = readme_actions();
    assert_eq!(actions, ["find", "insert", "update", "remove"]);
    let password = |user: &str| format!("pw-{user}-{}", std::process::id());
    let mut commands = Vec::new();
    commands.extend(role_and_user("app", &password("app"), &actions));
    for missing in &actions {
        let rest: Vec<String> = actions.iter().filter(|a| *a != missing).cloned().collect();
        commands.extend(role_and_user(&format!("no-{missing}"), &password(missing), &rest));
    }
    let with_create: Vec<String> =
        actions.iter().cloned().chain(["createCollection".into()]).collect();
    commands.extend(role_and_user("migrator", &password("migrator"), &with_create));
    let server = AuthServer::start(commands).await;
    let all_passwords: Vec<String> = ["app", "migrator"]
        .into_iter()
        .chain(actions.iter().map(String::as_str))
        .map(password)
        .collect();
    let assert_no_password = |e: &Error, what: &str| {
        let text = error_text(e);
        for p in &all_passwords {
            assert!(!text.contains(p.as_str()), "{what}: a password in {text}");
        }
    };

    // Exactly the README's role: every call but create_collection (set-up, not in it).
    let app = provider(&server, "app", &password("app")).await;
    let held = unique("held");
    let holder = app.try_lock(&cfg(&held, 600_000, 0)).await.unwrap().expect("free");
    let other = provider(&server, "app", &password("app")).await;
    for call in CALLS {
        match run(call, &other, &app, &held).await {
            Ok(()) => assert_ne!(call, Call::CreateCollection, "createCollection is not granted"),
            Err(e) if call == Call::CreateCollection => {
                assert!(
                    matches!(&e, Error::Setup { message, .. }
                        if message.contains("refused create on app.shedLock")
                            && message.contains("createCollection")
                            && message.contains("\"Permissions\"")),
                    "{e:?}"
                );
                assert_no_password(&e, "create_collection");
            }
            Err(e) => panic!("{call:?}: {e:?}"),
        }
    }
    let migrator = provider(&server, "migrator", &password("migrator")).await;
    migrator.create_collection().await.unwrap();

    // Each action removed in turn: exactly the calls that need it fail, naming it.
    for missing in &actions {
        let p = provider(&server, &format!("no-{missing}"), &password(missing)).await;
        for call in CALLS.into_iter().filter(|c| *c != Call::CreateCollection) {
            let what = format!("{call:?} without {missing}");
            match run(call, &p, &app, &held).await {
                Ok(()) => assert!(!needs(call).contains(&missing.as_str()), "{what} succeeded"),
                Err(e) => {
                    assert!(needs(call).contains(&missing.as_str()), "{what} failed: {e:?}");
                    match &e {
                        Error::Setup { message, .. } => {
                            for part in [
                                "Unauthorized",
                                &format!("the server names the action {missing}"),
                                "\"Permissions\"",
                            ] {
                                assert!(message.contains(part), "{what}: {part:?} in {message}");
                            }
                        }
                        other => panic!("{what}: expected Setup, got {other:?}"),
                    }
                    assert_no_password(&e, &what);
                }
            }
        }
    }

    // Refused logins: a wrong password, an unknown user, no credentials at all.
    let wrong = password("app").replace("pw-", "wrong-");
    for (login, says) in [
        (Some(("app", wrong.as_str())), "refused the client's credentials"),
        (Some(("nobody", wrong.as_str())), "refused the client's credentials"),
        (None, "not authenticated"),
    ] {
        let db = client(&server.url(login)).await.database(DB);
        let p = MongoLockProvider::builder(db)
            .operation_timeout(Some(Duration::from_secs(10)))
            .build()
            .unwrap();
        for e in [p.check().await.unwrap_err(), p.try_lock(&cfg("x", 60_000, 0)).await.unwrap_err()]
        {
            match &e {
                Error::Setup { message, .. } => assert!(message.contains(says), "{message}"),
                other => panic!("{login:?}: expected Setup, got {other:?}"),
            }
            assert_no_password(&e, says);
            assert!(!error_text(&e).contains(&wrong), "the wrong password in {e:?}");
        }
    }
    holder.unlock().await.unwrap();
}
