//! Least privilege: Redis ACL users with exactly the rules of the README's "Permissions"
//! section (read from the README itself, so the documentation is what is tested), on Redis 7.0,
//! Valkey 8.0 and the Redis Cluster, and on the launcher's secure Redis Cluster (TLS only,
//! `default` off) over `rediss://` trusting only the launcher's CA. Every call works with them; a user without any one of the
//! documented commands gets `Error::Setup` naming it on the call that needs it; a user granted
//! one prefix cannot reach another's locks; a refused login is `Error::Setup` and no password
//! is ever printed. Each test makes its own users and deletes them (also when it fails).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use shedlock::ProviderBuilder as _;

use std::{sync::Arc, time::Duration};

use shedlock::{Error, LockProvider, inspect::ForceRelease};
use shedlock_launcher::{Backend, LaunchOptions, Service};
use shedlock_redis::{RedisConnection, RedisLockProvider};
use shedlock_test_support::{cfg, host_port, unique};

const README: &str = include_str!("../../README.md");

/// The rules of the README's `ACL SETUSER shedlock <first> …` line.
fn documented(first: &str) -> Vec<&'static str> {
    README
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() > 3 && w[..3] == ["ACL", "SETUSER", "shedlock"] && w[3] == first)
        .unwrap_or_else(|| panic!("the README has no line `ACL SETUSER shedlock {first} …`"))
        .split_off(3)
}

/// The README's locking line for `password` and `prefix`, plus the extra lines starting with
/// each of `extra`.
fn rules(password: &str, prefix: &str, extra: &[&str]) -> Vec<String> {
    let mut rules: Vec<String> = documented("on")
        .into_iter()
        .map(|r| match r {
            ">password" => format!(">{password}"),
            "~shedlock:*" => format!("~{prefix}*"),
            other => other.to_owned(),
        })
        .collect();
    assert!(rules.iter().any(|r| r == &format!("~{prefix}*")), "no key pattern: {rules:?}");
    for first in extra {
        rules.extend(documented(first).into_iter().map(str::to_owned));
    }
    rules
}

/// The commands (`+name`) of `rules`, without the `+`.
fn commands(rules: &[String]) -> Vec<String> {
    rules.iter().filter_map(|r| r.strip_prefix('+')).map(str::to_owned).collect()
}

/// An ACL user on one or more servers (every node of a cluster), deleted on drop.
struct User {
    name: String,
    password: String,
    /// Superuser URLs of the servers it exists on.
    admins: Vec<String>,
    /// The CA the servers' certificates are verified against (`rediss://` URLs), if any.
    ca: Option<String>,
}

impl User {
    async fn create(admins: &[&str], password: &str, rules: &[String]) -> Self {
        Self::create_on(admins, None, password, rules).await
    }

    /// [`create`](Self::create) on servers reached over TLS verified against `ca` (PEM).
    async fn create_on(
        admins: &[&str],
        ca: Option<&str>,
        password: &str,
        rules: &[String],
    ) -> Self {
        let user = Self {
            name: unique("shedlock-acl"),
            password: password.to_owned(),
            admins: admins.iter().map(|a| (*a).to_owned()).collect(),
            ca: ca.map(str::to_owned),
        };
        for admin in admins {
            let mut c = admin_conn_on(admin, ca).await;
            let _: () = redis::cmd("ACL")
                .arg("SETUSER")
                .arg(&user.name)
                .arg(rules)
                .query_async(&mut c)
                .await
                .unwrap_or_else(|e| panic!("ACL SETUSER {rules:?}: {e}"));
        }
        user
    }

    /// The URL of this user on the server of `admin`.
    fn url(&self, admin: &str) -> String {
        let scheme = admin.split_once("://").map_or("redis", |(s, _)| s);
        format!("{scheme}://{}:{}@{}", self.name, self.password, host_port(admin))
    }
}

impl Drop for User {
    fn drop(&mut self) {
        for admin in &self.admins {
            let client = match &self.ca {
                Some(ca) => {
                    redis::Client::build_with_tls(admin.as_str(), common::secure::only_ca(ca))
                }
                None => redis::Client::open(admin.as_str()),
            };
            let deleted = client.and_then(|c| {
                let mut c = c.get_connection()?;
                redis::cmd("ACL").arg("DELUSER").arg(&self.name).query::<i64>(&mut c)
            });
            if let Err(e) = deleted {
                eprintln!("could not delete the ACL user {}: {e}", self.name);
            }
        }
    }
}

async fn admin_conn(url: &str) -> redis::aio::MultiplexedConnection {
    admin_conn_on(url, None).await
}

/// A connection to `url`, over TLS verified against `ca` (PEM) when given.
async fn admin_conn_on(url: &str, ca: Option<&str>) -> redis::aio::MultiplexedConnection {
    let client = match ca {
        Some(ca) => redis::Client::build_with_tls(url, common::secure::only_ca(ca)),
        None => redis::Client::open(url),
    };
    client.unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// The shared servers, by name.
async fn servers() -> Vec<(&'static str, String)> {
    vec![
        ("Redis", shedlock_test_support::url(Backend::Redis, "Redis").await),
        ("Valkey", shedlock_test_support::url(Backend::Valkey, "Valkey").await),
    ]
}

/// A server of this test's own, where scripts may be flushed without slowing others' calls.
async fn own(backend: Backend) -> Arc<Service> {
    let opts = LaunchOptions::new().ignore_env(true);
    let s = tokio::task::spawn_blocking(move || Service::start(backend, &opts))
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{} is not available: {e}", backend.name()));
    Arc::new(s)
}

fn builder<C: RedisConnection>(
    conn: C,
    prefix: &str,
) -> shedlock_redis::RedisLockProviderBuilder<C> {
    RedisLockProvider::builder(conn)
        .key_prefix(prefix)
        .operation_timeout(Some(Duration::from_secs(3)))
}

/// The call that failed, and how.
type Failed = (&'static str, Error);

fn at(step: &'static str) -> impl FnOnce(Error) -> Failed {
    move |e| (step, e)
}

/// Every call of the provider, in order, on `conn` and `prefix`: build, try_lock, extend,
/// unlock, try_lock and unlock within `lock_at_least_for`, try_lock, inspect, list,
/// force_release. With `flush`, the scripts are flushed from that server after `build`, so that
/// every script then runs by `EVAL`. The first call that fails, if any.
async fn every_call<C: RedisConnection>(
    conn: C,
    prefix: &str,
    flush: Option<&str>,
) -> Result<(), Failed> {
    every_call_of(builder(conn, prefix), flush).await
}

/// [`every_call`] with the provider `builder` builds.
async fn every_call_of<C: RedisConnection>(
    builder: shedlock_redis::RedisLockProviderBuilder<C>,
    flush: Option<&str>,
) -> Result<(), Failed> {
    let p = builder.build().await.map_err(at("build"))?;
    if let Some(admin) = flush {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut admin_conn(admin).await)
            .await
            .unwrap();
    }
    let mut a = p.try_lock(&cfg("a", 60_000, 0)).await.map_err(at("try_lock"))?.expect("free");
    a.extend(Duration::from_secs(60), Duration::ZERO).await.map_err(at("extend"))?;
    a.unlock().await.map_err(at("unlock"))?;
    let b = p.try_lock(&cfg("b", 60_000, 5_000)).await.map_err(at("try_lock"))?.expect("free");
    b.unlock().await.map_err(at("unlock within lock_at_least_for"))?;
    assert!(p.try_lock(&cfg("b", 60_000, 0)).await.unwrap().is_none(), "kept for at-least");
    let c = p.try_lock(&cfg("c", 60_000, 0)).await.map_err(at("try_lock"))?.expect("free");
    let info = p.inspect("c").await.map_err(at("inspect"))?.expect("c is held");
    assert!(info.held && info.fencing_token == c.fencing_token(), "{info:?}");
    let page = p.list("", None, 100).await.map_err(at("list"))?;
    // SCAN answers in the order of the server's hash table, not by name.
    let mut names: Vec<&str> = page.records.iter().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["b", "c"], "{page:?}");
    let released = p.force_release(&info).await.map_err(at("force_release"))?;
    assert!(matches!(released, ForceRelease::Released(_)), "{released:?}");
    assert!(p.inspect("c").await.unwrap().is_none(), "force-released");
    c.unlock().await.unwrap();
    Ok(())
}

/// A `Setup` error that names `+command` and the README section.
fn assert_names_rule(e: &Error, rule: &str, context: &str) {
    match e {
        Error::Setup { message, .. } => {
            assert!(message.contains(rule), "{context}: {message}");
            assert!(message.contains("\"Permissions\""), "{context}: {message}");
        }
        other => panic!("{context}: expected Error::Setup naming {rule}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_user_with_the_documented_rules_can_make_every_call_in_both_modes() {
    for (server, admin) in servers().await {
        let prefix = format!("{}:", unique("acl-ok"));
        let user = User::create(&[&admin], "pw-ok", &rules("pw-ok", &prefix, &["+scan"])).await;
        let conn = common::manager(&user.url(&admin)).await.unwrap();
        if let Err((step, e)) = every_call(conn, &prefix, None).await {
            panic!("{server}: {step} failed with the documented rules: {e:?}");
        }
        // The ShedLock-compatible mode: the same rules on ShedLock's keys,
        // `<keyPrefix>:<environment>:<name>`.
        let key_prefix = unique("acl-compat");
        let pattern = format!("{key_prefix}:default:");
        let user = User::create(&[&admin], "pw-ok", &rules("pw-ok", &pattern, &["+scan"])).await;
        let conn = common::manager(&user.url(&admin)).await.unwrap();
        let compat = builder(conn, &key_prefix).shedlock_compatible();
        if let Err((step, e)) = every_call_of(compat, None).await {
            panic!("{server}, ShedLock-compatible: {step} failed with the documented rules: {e:?}");
        }
    }
}

/// The call each documented command is first needed by, in `every_call`'s order.
const NEEDED_BY: &[(&str, &str)] = &[
    ("evalsha", "build"),
    ("script|load", "build"),
    ("get", "build"),
    // Needed only once scripts are gone from the server (flushed after build here).
    ("eval", "try_lock"),
    ("set", "try_lock"),
    ("time", "try_lock"),
    ("del", "unlock"),
    ("pttl", "unlock within lock_at_least_for"),
    ("pexpire", "unlock within lock_at_least_for"),
    ("scan", "list"),
    ("type", "list"),
    ("cluster|slots", "list"),
];

#[tokio::test]
async fn a_user_lacking_any_one_documented_command_gets_setup_naming_it_on_the_call_needing_it() {
    for backend in [Backend::Redis, Backend::Valkey] {
        let service = own(backend).await;
        let admin = service.url().to_owned();
        let all = commands(&rules("pw", "x:", &["+scan"]));
        for cmd in &all {
            let needed_by = NEEDED_BY
                .iter()
                .find(|(c, _)| c == cmd)
                .unwrap_or_else(|| panic!("the README documents +{cmd}, which no call here needs"))
                .1;
            let prefix = format!("{}:", unique("acl-lack"));
            let without: Vec<String> = rules("pw", &prefix, &["+scan"])
                .into_iter()
                .filter(|r| r != &format!("+{cmd}"))
                .collect();
            let user = User::create(&[&admin], "pw", &without).await;
            let conn = common::manager(&user.url(&admin)).await.unwrap();
            let context = format!("{} without +{cmd}", backend.name());
            match every_call(conn, &prefix, Some(&admin)).await {
                Ok(()) => panic!("{context}: every call succeeded"),
                Err((step, e)) => {
                    assert_eq!(step, needed_by, "{context}: failed at {step}: {e:?}");
                    assert_names_rule(&e, &format!("+{cmd}"), &context);
                }
            }
        }
        // And with all of them, on this server too (the flush included).
        let prefix = format!("{}:", unique("acl-all"));
        let user = User::create(&[&admin], "pw", &rules("pw", &prefix, &["+scan"])).await;
        let conn = common::manager(&user.url(&admin)).await.unwrap();
        if let Err((step, e)) = every_call(conn, &prefix, Some(&admin)).await {
            panic!("{}: {step} failed with the documented rules: {e:?}", backend.name());
        }
    }
}

#[tokio::test]
async fn wait_for_replicas_needs_wait_and_a_user_without_it_gets_a_setup_error_naming_it() {
    for (server, admin) in servers().await {
        for extra in [&[][..], &["+wait"][..]] {
            let prefix = format!("{}:", unique("acl-wait"));
            let user = User::create(&[&admin], "pw", &rules("pw", &prefix, extra)).await;
            let p = builder(common::manager(&user.url(&admin)).await.unwrap(), &prefix)
                .wait_for_replicas(1, Duration::from_millis(50))
                .build()
                .await
                .unwrap();
            let e = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
            if extra.is_empty() {
                assert_names_rule(&e, "+wait", server);
            } else {
                // Allowed: a server without replicas acknowledges nothing (not a setup error).
                assert!(matches!(e, Error::Unavailable { .. }), "{server}: {e:?}");
            }
            // Either way the grant was taken back.
            assert!(p.inspect("job").await.unwrap().is_none(), "{server}: left held");
        }
    }
}

#[tokio::test]
async fn a_user_granted_one_prefix_gets_setup_on_another_and_cannot_read_or_release_its_locks() {
    for (server, admin) in servers().await {
        let (ours, theirs) =
            (format!("{}:", unique("acl-ours")), format!("{}:", unique("acl-theirs")));
        let other_app =
            builder(common::manager(&admin).await.unwrap(), &theirs).build().await.unwrap();
        let held = other_app.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free");
        let before = other_app.inspect("job").await.unwrap().expect("held");

        let user = User::create(&[&admin], "pw", &rules("pw", &ours, &["+scan"])).await;
        let url = user.url(&admin);
        // A provider of this user on the other application's prefix: refused at build.
        let e = builder(common::manager(&url).await.unwrap(), &theirs).build().await.unwrap_err();
        assert_names_rule(&e, &format!("~{theirs}*"), server);

        // On its own prefix, whatever it is given, it only reaches keys under that prefix.
        let mine = builder(common::manager(&url).await.unwrap(), &ours).build().await.unwrap();
        let r = mine.force_release(&before).await.unwrap();
        assert!(matches!(r, ForceRelease::Changed(None)), "{server}: {r:?}");
        assert!(mine.inspect("job").await.unwrap().is_none(), "{server}");
        assert!(mine.list("", None, 100).await.unwrap().records.is_empty(), "{server}");

        // Direct commands on the other application's keys, as this user: refused.
        let mut c = admin_conn(&url).await;
        let key = other_app.key("job");
        let attempts: [(&str, redis::Cmd); 4] = [
            ("GET", redis::cmd("GET").arg(&key).clone()),
            ("DEL", redis::cmd("DEL").arg(&key).clone()),
            (
                "EVAL of a DEL on the key",
                redis::cmd("EVAL")
                    .arg("return redis.call('DEL', KEYS[1])")
                    .arg(1)
                    .arg(&key)
                    .clone(),
            ),
            (
                "EVAL reaching the key undeclared",
                redis::cmd("EVAL")
                    .arg("return redis.call('DEL', ARGV[1])")
                    .arg(1)
                    .arg(format!("{ours}x"))
                    .arg(&key)
                    .clone(),
            ),
        ];
        for (what, cmd) in attempts {
            let r: redis::RedisResult<redis::Value> = cmd.query_async(&mut c).await;
            let e = r.expect_err(what);
            let text = e.to_string();
            let denied = e.code() == Some("NOPERM")
                || text.contains("ACL failure")
                || text.contains("can't access");
            assert!(denied, "{server}: {what}: {text}");
        }
        // The other application's lock is untouched: same acquisition, still held.
        let after = other_app.inspect("job").await.unwrap().expect("still held");
        assert_eq!(after.acquisition, before.acquisition, "{server}");
        held.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn a_refused_login_is_a_setup_error_and_the_password_is_in_no_debug_or_error_output() {
    for (server, admin) in servers().await {
        let password = format!("s3cret-redis-{}", unique("pw"));
        let prefix = format!("{}:", unique("acl-pw"));
        let changed = User::create(&[&admin], &password, &rules(&password, &prefix, &[])).await;
        let deleted = User::create(&[&admin], &password, &rules(&password, &prefix, &[])).await;
        let shows = |text: &str| text.contains(&password) || text.contains("s3cret-redis");

        let b = builder(common::manager(&changed.url(&admin)).await.unwrap(), &prefix);
        assert!(!shows(&format!("{b:?}")), "{server}: builder {b:?}");
        let p1 = b.build().await.unwrap();
        assert!(!shows(&format!("{p1:?}")), "{server}: provider {p1:?}");
        p1.try_lock(&cfg("job", 60_000, 0)).await.unwrap().expect("free").unlock().await.unwrap();
        let p2 = builder(common::manager(&deleted.url(&admin)).await.unwrap(), &prefix)
            .build()
            .await
            .unwrap();

        // A first connection with a wrong password fails in the redis crate, before any
        // provider: its error does not carry the password either.
        let wrong = format!("{}-wrong", changed.url(&admin));
        let e = common::manager(&wrong).await.unwrap_err();
        assert!(!shows(&format!("{e} {e:?}")), "{server}: {e:?}");
        let unknown = changed.url(&admin).replacen(&changed.name, "no-such-user", 1);
        let e = common::manager(&unknown).await.unwrap_err();
        assert!(!shows(&format!("{e} {e:?}")), "{server}: {e:?}");

        // The password changes (p1) or the user goes (p2) while the providers run: the
        // connection is cut and its reconnection refused.
        let mut c = admin_conn(&admin).await;
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", &changed.name, "resetpass", ">another-one"][..])
            .query_async(&mut c)
            .await
            .unwrap();
        let _: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "USER", &changed.name][..])
            .query_async(&mut c)
            .await
            .unwrap();
        let _: i64 = redis::cmd("ACL")
            .arg(&["DELUSER", &deleted.name][..])
            .query_async(&mut c)
            .await
            .unwrap();
        for (what, p) in [("password changed", &p1), ("user deleted", &p2)] {
            let mut seen = Vec::new();
            let setup = loop {
                let e = p.try_lock(&cfg("job", 60_000, 0)).await.unwrap_err();
                let text = format!("{e} {e:?}");
                assert!(!shows(&text), "{server}, {what}: {text}");
                match e {
                    Error::Setup { message, .. } => break message,
                    // The cut connection itself, before the reconnection is tried.
                    e @ Error::Unavailable { .. } if seen.len() < 5 => seen.push(e),
                    e => {
                        panic!("{server}, {what}: expected Error::Setup, got {e:?} after {seen:?}")
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            assert!(
                setup.contains("WRONGPASS") || setup.contains("authentication failed"),
                "{setup}"
            );
            assert!(setup.contains("\"Permissions\""), "{setup}");
        }
    }
}

#[tokio::test]
async fn on_redis_cluster_a_user_with_the_documented_rules_on_every_node_can_make_every_call() {
    let service =
        shedlock_test_support::service(Backend::RedisCluster, "Redis Cluster").await.unwrap();
    // Every node of the cluster, from its URL (`redis://a,redis://b,…`): a cluster given by
    // `SHEDLOCK_REDIS_CLUSTER_URL` has no launcher-known addresses beyond the first.
    let admins: Vec<String> = service.url().split(',').map(|u| u.trim().to_owned()).collect();
    let admins: Vec<&str> = admins.iter().map(String::as_str).collect();
    let prefix = format!("{}:", unique("acl-cluster"));
    let rules = rules("pw", &prefix, &["+scan", "+wait", "+cluster|slots"]);
    let user = User::create(&admins, "pw", &rules).await;
    let urls: Vec<String> = admins.iter().map(|a| user.url(a)).collect();
    let conn = common::cluster_connection(&urls.join(",")).await.unwrap();
    if let Err((step, e)) = every_call(conn.clone(), &prefix, None).await {
        panic!("Redis Cluster: {step} failed with the documented rules: {e:?}");
    }
    // Locks on every master, so that `list` walks them all.
    let p =
        builder(conn, &prefix).wait_for_replicas(1, Duration::from_secs(2)).build().await.unwrap();
    let names: Vec<String> = (0..12).map(|i| format!("spread-{i}")).collect();
    let mut locks = Vec::new();
    for n in &names {
        locks.push(p.try_lock(&cfg(n, 60_000, 0)).await.unwrap().expect("free"));
    }
    let mut listed: Vec<String> = Vec::new();
    let mut cursor = None;
    loop {
        let page = p.list("spread-", cursor.as_deref(), 5).await.unwrap();
        listed.extend(page.records.into_iter().map(|r| r.name));
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    listed.sort();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(listed, expected);
    for l in locks {
        l.unlock().await.unwrap();
    }
}

#[tokio::test]
async fn on_the_secure_redis_cluster_the_documented_rules_work_over_tls_and_one_less_is_setup() {
    let service = shedlock_test_support::secure::service(Backend::RedisCluster, "Redis Cluster")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let sec = service.secure().expect("a secure launch says what it made");
    let ca = sec.ca_pem();
    let nodes = service.addrs();
    assert_eq!(nodes.len(), 6, "{nodes:?}");
    // The administrator's URL of every node, masters and replicas: ACL users are per node.
    let admins: Vec<String> =
        nodes.iter().map(|a| sec.url_for(*a, sec.admin_user(), sec.admin_password())).collect();
    let admins: Vec<&str> = admins.iter().map(String::as_str).collect();
    // Exactly the README's lines for locking, `list` and Redis Cluster.
    let password = sec.app_password();
    let prefix = format!("{}:", unique("acl-secure-cluster"));
    let rules = rules(password, &prefix, &["+scan", "+cluster|slots"]);
    let user = User::create_on(&admins, Some(ca), password, &rules).await;
    let urls: Vec<String> = admins.iter().map(|a| user.url(a)).collect();
    assert!(urls.iter().all(|u| u.starts_with("rediss://")));

    let conn = common::secure::tls_cluster_connection(&urls, ca).await.unwrap();
    if let Err((step, e)) = every_call(conn, &prefix, None).await {
        panic!("secure Redis Cluster: {step} failed with the documented rules: {e:?}");
    }

    // The same user without one documented rule (`+set`, which the acquire script calls):
    // the typed Setup error naming it, on the call that needs it.
    let prefix = format!("{}:", unique("acl-secure-cluster-lack"));
    let without: Vec<String> = self::rules(password, &prefix, &["+scan", "+cluster|slots"])
        .into_iter()
        .filter(|r| r != "+set")
        .collect();
    let lacking = User::create_on(&admins, Some(ca), password, &without).await;
    let urls: Vec<String> = admins.iter().map(|a| lacking.url(a)).collect();
    let conn = common::secure::tls_cluster_connection(&urls, ca).await.unwrap();
    match every_call(conn, &prefix, None).await {
        Ok(()) => panic!("secure Redis Cluster without +set: every call succeeded"),
        Err((step, e)) => {
            assert_eq!(step, "try_lock", "failed at {step}: {e:?}");
            assert_names_rule(&e, "+set", "secure Redis Cluster without +set");
            assert!(!format!("{e} {e:?}").contains(password), "the password in {e:?}");
        }
    }

    // Neither plaintext nor a TLS client that does not trust the launcher's CA gets in.
    let plain: Vec<String> = urls.iter().map(|u| u.replacen("rediss://", "redis://", 1)).collect();
    let e = common::cluster_connection(&plain.join(",")).await.err().expect("plaintext refused");
    assert!(!e.to_string().contains(password), "{e}");
    let untrusted = redis::cluster::ClusterClientBuilder::new(urls.clone())
        .connection_timeout(Duration::from_secs(1))
        .response_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let e = untrusted.get_async_connection().await.err().expect("the system roots trust no node");
    assert!(!e.to_string().contains(password), "{e}");
}
