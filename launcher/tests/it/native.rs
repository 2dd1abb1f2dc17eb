//! Every backend started natively, used with an independent client (a real lock-style operation
//! where cheap), restarted (same port, data kept where the server persists it) and stopped.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::*;
use shedlock_launcher::{Backend, Mode, skip_requested};

#[test]
fn postgres_start_query_restart_keeps_data_stop() {
    let s = start(Backend::Postgres);
    assert_eq!(s.mode(), Mode::Native);
    let port = s.addr().unwrap().port().to_string();
    let psql = |sql: &str| {
        run(
            "psql",
            &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", "-d", "postgres", "-Atc", sql],
        )
    };
    psql("CREATE TABLE shedlock(name text primary key, lock_until timestamptz)");
    psql("INSERT INTO shedlock VALUES ('job', now() + interval '1 minute')");
    // The upsert a provider uses: a second acquire of a held lock updates nothing.
    let taken = psql(
        "INSERT INTO shedlock VALUES ('job', now()) ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until \
         WHERE shedlock.lock_until <= now() RETURNING name",
    );
    assert_eq!(taken.trim(), "INSERT 0 0", "a held lock must not be taken over");
    s.restart().unwrap();
    assert_eq!(s.addr().unwrap().port().to_string(), port);
    assert_eq!(psql("SELECT count(*) FROM shedlock").trim(), "1");
    stop_and_check_gone(s);
}

#[test]
fn mariadb_start_query_restart_keeps_data_stop() {
    let s = start(Backend::MariaDb);
    assert!(s.url().ends_with("/shedlock"), "{}", s.url());
    let port = s.addr().unwrap().port().to_string();
    let sql = |q: &str| {
        run(
            "mariadb",
            &[
                "--no-defaults",
                "--protocol=tcp",
                "-h127.0.0.1",
                "-P",
                &port,
                "-uroot",
                "shedlock",
                "-N",
                "-e",
                q,
            ],
        )
    };
    sql("CREATE TABLE shedlock(name VARCHAR(64) PRIMARY KEY, lock_until DATETIME(3))");
    sql("INSERT INTO shedlock VALUES ('job', NOW(3) + INTERVAL 1 MINUTE)");
    let dup = std::process::Command::new("mariadb")
        .args(["--no-defaults", "--protocol=tcp", "-h127.0.0.1", "-P", &port, "-uroot", "shedlock"])
        .args(["-e", "INSERT INTO shedlock VALUES ('job', NOW(3))"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&dup.stderr).contains("1062"),
        "duplicate key must be error 1062"
    );
    s.restart().unwrap();
    assert_eq!(sql("SELECT COUNT(*) FROM shedlock").trim(), "1");
    stop_and_check_gone(s);
}

#[test]
fn sqlite_is_a_fresh_file_url() {
    let s = start(Backend::Sqlite);
    let url = s.url().to_owned();
    let dir = s.dir().unwrap();
    assert!(url.starts_with("sqlite://") && url.contains(dir.to_str().unwrap()), "{url}");
    assert!(s.addr().is_none());
    s.restart().unwrap();
    s.stop().unwrap();
    assert!(!dir.exists());
}

fn redis_like(backend: Backend, cli: &str) {
    let s = start(backend);
    let port = s.addr().unwrap().port().to_string();
    let cli = |args: &[&str]| {
        let mut all = vec!["-p", &port];
        all.extend_from_slice(args);
        run(cli, &all).trim().to_owned()
    };
    assert_eq!(cli(&["SET", "lock:job", "me", "NX", "PX", "60000"]), "OK");
    assert_eq!(cli(&["SET", "lock:job", "you", "NX", "PX", "60000"]), "");
    s.restart().unwrap();
    assert_eq!(cli(&["GET", "lock:job"]), "me", "data must survive restart()");
    stop_and_check_gone(s);
}

#[test]
fn redis_set_nx_restart_keeps_data_stop() {
    redis_like(Backend::Redis, "redis-cli");
}

#[test]
fn valkey_set_nx_restart_keeps_data_stop() {
    if skip_requested(Backend::Valkey) {
        return;
    }
    // valkey-cli may be missing where only valkey-server is installed; redis-cli speaks RESP too.
    let cli =
        if shedlock_launcher::which("valkey-cli").is_some() { "valkey-cli" } else { "redis-cli" };
    redis_like(Backend::Valkey, cli);
}

#[test]
fn memcached_add_is_exclusive_and_restart_works() {
    let s = start(Backend::Memcached);
    let a = s.addr().unwrap();
    let add = b"add lock 0 60 2\r\nme\r\n";
    assert!(tcp_exchange(a, add, |r| r.ends_with("\r\n")).starts_with("STORED"));
    assert!(tcp_exchange(a, add, |r| r.ends_with("\r\n")).starts_with("NOT_STORED"));
    s.restart().unwrap();
    // memcached keeps nothing across a restart: the lock is free again.
    assert!(tcp_exchange(a, add, |r| r.ends_with("\r\n")).starts_with("STORED"));
    stop_and_check_gone(s);
}

#[test]
fn nats_jetstream_answers_and_restart_works() {
    let s = start(Backend::Nats);
    assert!(s.url().starts_with("nats://127.0.0.1:"));
    let a = s.addr().unwrap();
    let js_info = b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\nSUB _INBOX.t 1\r\nPUB $JS.API.INFO _INBOX.t 0\r\n\r\n";
    let check = || {
        let reply = tcp_exchange(a, js_info, |r| r.contains("account_info_response"));
        assert!(reply.contains("io.nats.jetstream.api.v1.account_info_response"), "{reply}");
        assert!(!reply.contains("\"error\""), "{reply}");
    };
    check();
    s.restart().unwrap();
    check();
    stop_and_check_gone(s);
}

#[test]
fn mongodb_unique_insert_and_restart_keeps_data() {
    let s = start(Backend::MongoDb);
    let py = venv_python();
    let script = |code: &str| {
        let full = format!(
            "import pymongo, sys\nc = pymongo.MongoClient(sys.argv[1], serverSelectionTimeoutMS=20000)\ncol = c.shedlock.locks\n{code}"
        );
        run(py.to_str().unwrap(), &["-c", &full, s.url()])
    };
    let first = script(
        "col.insert_one({'_id': 'job', 'by': 'me'})\ntry:\n    col.insert_one({'_id': 'job', 'by': 'you'})\n    print('no-dup')\nexcept pymongo.errors.DuplicateKeyError:\n    print('dup')",
    );
    assert_eq!(first.trim(), "dup");
    s.restart().unwrap();
    let out = script("print(col.find_one({'_id': 'job'})['by'])");
    assert_eq!(out.trim(), "me");
    stop_and_check_gone(s);
}

#[test]
fn dynamodb_conditional_put_and_restart_keeps_data() {
    let s = start(Backend::DynamoDb);
    let a = s.addr().unwrap();
    let call = |target: &str, body: &str| {
        let t = format!("DynamoDB_20120810.{target}");
        http(
            a,
            "POST",
            "/",
            &[
                ("Content-Type", "application/x-amz-json-1.0"),
                ("X-Amz-Target", &t),
                ("X-Amz-Date", "20250101T000000Z"),
                (
                    "Authorization",
                    "AWS4-HMAC-SHA256 Credential=x/20250101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=0",
                ),
            ],
            body,
        )
    };
    let (st, body) = call(
        "CreateTable",
        r#"{"TableName":"shedlock","KeySchema":[{"AttributeName":"name","KeyType":"HASH"}],"AttributeDefinitions":[{"AttributeName":"name","AttributeType":"S"}],"BillingMode":"PAY_PER_REQUEST"}"#,
    );
    assert_eq!(st, 200, "{body}");
    // dynalite turns the table ACTIVE on a timer, even with --createTableMs 0.
    assert!(wait_until(Duration::from_secs(10), || {
        call("DescribeTable", r#"{"TableName":"shedlock"}"#).1.contains("\"ACTIVE\"")
    }));
    let put = r##"{"TableName":"shedlock","Item":{"name":{"S":"job"}},"ConditionExpression":"attribute_not_exists(#n)","ExpressionAttributeNames":{"#n":"name"}}"##;
    let (st, body) = call("PutItem", put);
    assert_eq!(st, 200, "{body}");
    let (st, body) = call("PutItem", put);
    assert_eq!(st, 400);
    assert!(body.contains("ConditionalCheckFailedException"), "{body}");
    s.restart().unwrap();
    let (st, body) = call("GetItem", r#"{"TableName":"shedlock","Key":{"name":{"S":"job"}}}"#);
    assert_eq!(st, 200);
    assert!(body.contains("\"job\""), "data must survive restart(): {body}");
    stop_and_check_gone(s);
}

#[test]
fn s3_conditional_put_and_restart_works() {
    let s = start(Backend::S3);
    let a = s.addr().unwrap();
    let auth = "AWS4-HMAC-SHA256 Credential=x/20250101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0";
    let h = [("Authorization", auth), ("X-Amz-Date", "20250101T000000Z")];
    let (st, body) = http(a, "PUT", "/shedlock", &h, "");
    assert_eq!(st, 200, "{body}");
    let cond = [h[0], h[1], ("If-None-Match", "*")];
    assert_eq!(http(a, "PUT", "/shedlock/job", &cond, "me").0, 200);
    assert_eq!(http(a, "PUT", "/shedlock/job", &cond, "you").0, 412);
    s.restart().unwrap();
    // moto keeps its state in memory: after a restart the server answers, with no buckets.
    let (st, body) = http(a, "GET", "/", &h, "");
    assert_eq!(st, 200);
    assert!(body.contains("ListAllMyBucketsResult"));
    stop_and_check_gone(s);
}

#[test]
fn etcd_put_get_restart_keeps_data() {
    let s = start(Backend::Etcd);
    let ep = s.url().to_owned();
    let ctl = |args: &[&str]| {
        let mut all = vec!["--endpoints", &ep];
        all.extend_from_slice(args);
        run_with_env("etcdctl", &all)
    };
    ctl(&["put", "lock/job", "me"]);
    s.restart().unwrap();
    assert!(ctl(&["get", "lock/job"]).contains("me"));
    stop_and_check_gone(s);
}

fn run_with_env(program: &str, args: &[&str]) -> String {
    let out =
        std::process::Command::new(program).args(args).env("ETCDCTL_API", "3").output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn etcd_cluster_has_three_members_and_survives_a_node_loss() {
    let s = start(Backend::EtcdCluster);
    let endpoints = s.url().to_owned();
    assert_eq!(endpoints.split(',').count(), 3);
    assert_eq!(s.addrs().len(), 3);
    let members = run_with_env("etcdctl", &["--endpoints", &endpoints, "member", "list"]);
    assert_eq!(members.lines().count(), 3, "{members}");
    s.stop_node(0).unwrap();
    let rest: Vec<&str> = endpoints.split(',').skip(1).collect();
    let rest = rest.join(",");
    // Two of three still form a quorum.
    run_with_env("etcdctl", &["--endpoints", &rest, "--command-timeout=10s", "put", "k", "v"]);
    s.start_node(0).unwrap();
    let first = endpoints.split(',').next().unwrap();
    assert!(run_with_env("etcdctl", &["--endpoints", first, "get", "k"]).contains('v'));
    stop_and_check_gone(s);
}

#[test]
fn zookeeper_standalone_and_restart() {
    let s = start(Backend::ZooKeeper);
    let a = s.addr().unwrap();
    assert_eq!(zk_mode(a), "standalone");
    s.restart().unwrap();
    assert_eq!(zk_mode(a), "standalone");
    stop_and_check_gone(s);
}

#[test]
fn zookeeper_ensemble_elects_one_leader() {
    let s = start(Backend::ZooKeeperEnsemble);
    let addrs = s.addrs();
    assert_eq!(addrs.len(), 3);
    let mut modes: Vec<String> = addrs.iter().map(|a| zk_mode(*a)).collect();
    modes.sort();
    assert_eq!(modes, ["follower", "follower", "leader"]);
    assert_eq!(s.url().split(',').count(), 3);
    let leader = addrs.iter().position(|a| zk_mode(*a) == "leader").unwrap();
    s.stop_node(leader).unwrap();
    let others: Vec<_> = (0..3).filter(|i| *i != leader).map(|i| addrs[i]).collect();
    assert!(
        wait_until(Duration::from_secs(30), || others.iter().any(|a| zk_mode(*a) == "leader")),
        "no new leader after the old one stopped"
    );
    s.start_node(leader).unwrap();
    stop_and_check_gone(s);
}
