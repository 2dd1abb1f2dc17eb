//! NATS with a user, a password and TLS, on a `nats-server` of the test's own (the launcher
//! cannot secure NATS): the tool logs in with the URL's credentials (not only with
//! `SHEDLOCK_PASSWORD`), takes `tls://` URLs and `--ca-file`, refuses a server it cannot verify,
//! and never prints the password.

use std::{
    net::{SocketAddr, TcpListener, TcpStream},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;
use shedlock::{LockProvider, ProviderBuilder};
use shedlock_launcher::Backend;

use crate::{HOLDER, cfg, pki::Pki, shedlock, unique};

const USER: &str = "cli-ops";
const PASSWORD: &str = "s3cret-cli-nats";

/// A `nats-server` with JetStream, one user and TLS required, killed on drop.
struct NatsServer {
    child: Child,
    addr: SocketAddr,
    pki: Pki,
    _dir: tempfile::TempDir,
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The `nats-server` the launcher uses (installed by it if needed).
async fn nats_server_binary() -> PathBuf {
    // Makes sure the launcher's NATS is installed (and proves it runs).
    let _ = shedlock_test_support::url(Backend::Nats, "NATS").await;
    let local = shedlock_launcher::backends_dir().join("venv/bin/nats-server");
    if local.exists() {
        return local;
    }
    shedlock_launcher::which("nats-server").expect("nats-server (the launcher found one)")
}

impl NatsServer {
    async fn start() -> NatsServer {
        let binary = nats_server_binary().await;
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::generate(dir.path());
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        // The password in a config file, not on the command line.
        let config = dir.path().join("nats.conf");
        std::fs::write(
            &config,
            format!(
                "listen: \"127.0.0.1:{port}\"\njetstream {{ store_dir: {:?} }}\n\
                 authorization {{ user: {USER:?}, password: {PASSWORD:?} }}\n\
                 tls {{ cert_file: {:?}, key_file: {:?} }}\n",
                dir.path().join("js").display().to_string(),
                pki.server_cert.display().to_string(),
                pki.server_key.display().to_string(),
            ),
        )
        .unwrap();
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        let server = NatsServer { child, addr, pki, _dir: dir };
        let start = Instant::now();
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(start.elapsed() < Duration::from_secs(20), "nats-server did not listen");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        server
    }

    fn ca(&self) -> String {
        self.pki.ca.display().to_string()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_credentials_in_the_url_log_in_over_tls_verified_against_the_ca_and_are_never_printed()
{
    let server = NatsServer::start().await;
    let addr = server.addr;
    let client = async_nats::ConnectOptions::new()
        .user_and_password(USER.into(), PASSWORD.into())
        .add_root_certificates(server.pki.ca.clone())
        .require_tls(true)
        .connect(format!("tls://{addr}"))
        .await
        .unwrap();
    let bucket = unique("cli").replace(['-', '.'], "_");
    let holder = shedlock_nats::NatsLockProvider::builder(client)
        .bucket(&bucket)
        .locked_by(HOLDER)
        .build()
        .unwrap();
    holder.create_bucket().await.unwrap();
    let _lock = holder.try_lock(&cfg("nightly")).await.unwrap().expect("free");
    let ca = server.ca();
    let wrong = "s3cret-cli-nats-wrong";
    let secrets = [PASSWORD, wrong];
    let run = async |url: &str, extra: &[&str], env: &[(&str, &str)]| {
        let mut args = vec!["--url", url, "--bucket", &bucket, "--timeout-secs", "5"];
        args.extend(extra);
        args.extend(["--json", "show", "nightly"]);
        let ran = shedlock(&args, env, "").await;
        ran.assert_hides(&secrets);
        ran
    };

    // The URL's user and password (SHEDLOCK_PASSWORD unset), tls:// or nats:// with the CA.
    let tls_url = format!("tls://{USER}:{PASSWORD}@{addr}");
    let nats_url = format!("nats://{USER}:{PASSWORD}@{addr}");
    let user_only = format!("tls://{USER}@{addr}");
    for ran in [
        run(&tls_url, &["--ca-file", &ca], &[]).await,
        run(&nats_url, &[], &[("SHEDLOCK_CA_FILE", &ca)]).await,
        run(&user_only, &["--ca-file", &ca], &[("SHEDLOCK_PASSWORD", PASSWORD)]).await,
    ] {
        assert_eq!(ran.code, 0, "{}", ran.stderr);
        let v: Value = serde_json::from_str(&ran.stdout).expect(&ran.stdout);
        assert_eq!((v["held"].clone(), v["locked_by"].clone()), (true.into(), HOLDER.into()));
    }

    // Without the CA, the server's certificate is not trusted.
    let ran = run(&tls_url, &[], &[]).await;
    assert_eq!(ran.code, 2, "{}", ran.stdout);
    assert!(ran.stderr.to_ascii_lowercase().contains("certificate"), "{}", ran.stderr);

    // A wrong password, in the URL or the environment; no credentials at all.
    let no_credentials = format!("tls://{addr}");
    for ran in [
        run(&format!("tls://{USER}:{wrong}@{addr}"), &["--ca-file", &ca], &[]).await,
        run(&user_only, &["--ca-file", &ca], &[("SHEDLOCK_PASSWORD", wrong)]).await,
        run(&no_credentials, &["--ca-file", &ca], &[]).await,
    ] {
        assert_eq!(ran.code, 2, "{}", ran.stdout);
        assert!(ran.stderr.to_ascii_lowercase().contains("authoriz"), "{}", ran.stderr);
    }
    assert!(holder.inspect("nightly").await.unwrap().unwrap().held);
}
