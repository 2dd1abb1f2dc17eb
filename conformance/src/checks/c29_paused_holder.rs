//! C29 `paused_holder`: a process frozen while it holds a lock (a GC pause, swap, a VM
//! migration: here SIGSTOP) wakes up after another node took the name. It must find its lease
//! ended before it touches the resource again, the resource must refuse its writes by fencing
//! token, and its extend and unlock must change nothing.

use std::{
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::{Duration, Instant},
};

use super::common::LONG;
use crate::{
    node::{
        HolderLog, HolderReady, NODE_ENV, NodeSpec, PausedHolder, RUN_ID_ENV, monotonic_ns, run_id,
        tail,
    },
    outcome::Verdict,
    suite::Suite,
    tools::{
        calls::{R, finish, instances, ms, must_not_lock, poll_acquire, unlock},
        fenced::FencedRegister,
    },
};

/// C29: a node process takes a lock for the short `lock_at_most_for` and works under it,
/// checking its lease before each write; it is frozen (SIGSTOP) until another instance has
/// taken the name after the lease ran out, and that instance wrote to a fenced register. Then
/// the node is resumed (SIGCONT). It must find its lease ended (`valid_until` passed, the lost
/// signal fired) before any further write: a write it checked as valid after the takeover
/// fails. Its one deliberate write after that (and any write that was checked before the pause
/// but landed after the takeover) must be refused by the register where fencing is declared.
/// Its extend must not succeed, and after its unlock the new holder still holds the name.
/// Not applicable without [`Hooks::with_node_env`](crate::Hooks::with_node_env) or off Unix.
pub async fn c29_paused_holder(suite: &Suite) -> Verdict {
    finish(c29(suite).await)
}

/// The node process, frozen or not; on drop (also on any early return) it is resumed and
/// killed, so no stopped process outlives the check.
struct Node {
    child: Child,
}

impl Node {
    fn signal(&self, stop: bool) -> std::io::Result<()> {
        crate::tools::signal::signal_pid(self.child.id(), stop, false)
            .map_err(std::io::Error::other)
    }

    /// Waits up to `limit` for the process to exit: its status, or `None` (then killed).
    async fn wait(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let since = Instant::now();
        loop {
            match self.child.try_wait() {
                Ok(Some(s)) => return Some(s),
                Ok(None) if since.elapsed() < limit => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                _ => return None,
            }
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.signal(false);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn c29(suite: &Suite) -> R {
    if !cfg!(unix) {
        return Err(Verdict::not_applicable("freezing a process (SIGSTOP) needs Unix"));
    }
    let Some(node_env) = suite.hooks().node_env().map(<[_]>::to_vec) else {
        return Err(Verdict::not_applicable(
            "the factory offers no node environment (Hooks::with_node_env): a node process \
             could not reach the same backend",
        ));
    };
    let exe = std::env::current_exe()
        .map_err(|e| Verdict::fail(format!("cannot find the test binary to re-execute: {e}")))?;
    let dir = std::env::temp_dir().join(format!(
        "shedlock-c29-{}-{}",
        std::process::id(),
        suite.rng().u64(..)
    ));
    std::fs::create_dir_all(&dir).map_err(|e| Verdict::fail(format!("temp dir: {e}")))?;
    let result = run(suite, &exe, &node_env, &dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run(suite: &Suite, exe: &Path, node_env: &[(String, String)], dir: &Path) -> R {
    let t = suite.timing();
    let caps = suite.capabilities().clone();
    let name = suite.lock_name("c29");
    let give_up = t.at_most * 20 + Duration::from_secs(30);
    let (out, err, ready) = (dir.join("node.json"), dir.join("node.stderr"), dir.join("ready"));
    let mut node = start(suite, exe, node_env, &name, &out, &err, &ready, give_up)?;

    // The node holds the lock.
    let since = Instant::now();
    let held: HolderReady = loop {
        if let Ok(bytes) = std::fs::read(&ready) {
            break serde_json::from_slice(&bytes)
                .map_err(|e| Verdict::fail(format!("the node's ready file: {e}")))?;
        }
        if let Ok(Some(status)) = node.child.try_wait() {
            bail!(
                "the node exited with {status} before it held the lock; stderr:\n{}",
                tail(&err, 15)
            );
        }
        if since.elapsed() > give_up {
            bail!("the node did not take a free name within {} ms", ms(give_up));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let register = FencedRegister::new();
    if let Some(token) = held.token {
        register
            .write(token, "the node, before its pause")
            .map_err(|e| Verdict::fail(format!("the node's first write was refused: {e}")))?;
    }

    // It works a quarter of its lease; then it is frozen, its lease runs out, and another
    // instance takes the name and writes.
    tokio::time::sleep(t.at_most / 4).await;
    node.signal(true).map_err(|e| Verdict::fail(format!("SIGSTOP: {e}")))?;
    let stopped_at = Instant::now();
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&name, LONG, Duration::ZERO)?;
    let deadline = t.at_most * 3 + t.slack * 2 + Duration::from_secs(2);
    let what = "taking the name of a frozen holder";
    let (b, _) =
        poll_acquire(suite, &p[0], &cfg, stopped_at, Duration::ZERO, deadline, what).await?;
    let taken_ns = monotonic_ns();
    let tb = b.fencing_token();
    if caps.fencing {
        let Some(tb) = tb else { bail!("the new holder's lock has no fencing token") };
        register.write(tb, "the new holder").map_err(|e| {
            Verdict::fail(format!(
                "the new holder's write was refused: {e} (the node had {:?})",
                held.token
            ))
        })?;
    }
    let paused = stopped_at.elapsed();

    // Resumed: it finds its lease ended, writes once more on purpose, extends and unlocks.
    let resumed_ns = monotonic_ns();
    node.signal(false).map_err(|e| Verdict::fail(format!("SIGCONT: {e}")))?;
    let status = node.wait(give_up).await;
    if !status.is_some_and(|s| s.success()) {
        bail!(
            "the resumed node did not finish ({}); stderr:\n{}",
            status.map_or("killed after waiting".to_owned(), |s| s.to_string()),
            tail(&err, 15)
        );
    }
    let log: HolderLog = std::fs::read(&out)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| Verdict::fail("the node wrote no readable log"))?;
    suite.count_checked(log.writes.len() + 1);

    if let Some(w) = log.writes.iter().find(|w| w.checked_ns >= taken_ns) {
        bail!(
            "the resumed node found its lease valid {} ms after another instance had taken the \
             name (frozen {} ms, lock_at_most_for {} ms): its Lock::valid_until outlived the \
             lease on the backend",
            (w.checked_ns - taken_ns) / 1_000_000,
            ms(paused),
            ms(t.at_most)
        );
    }
    let Some(saw_end_ns) = log.saw_end_ns else {
        bail!("the resumed node never found its lease ended within {} ms", ms(give_up));
    };
    ensure!(
        log.lost_signal,
        "the resumed node found its lease ended, but its lost signal had not fired"
    );
    ensure!(
        log.extend != "extended",
        "the resumed node's extend succeeded although another instance holds the name"
    );
    // Writes that land after the takeover: the deliberate one, and any checked before the
    // pause but made after it. The register must refuse them all where fencing is declared.
    let late: Vec<u64> = log
        .writes
        .iter()
        .map(|w| w.written_ns)
        .chain(log.stale_write_ns)
        .filter(|&at| at >= taken_ns)
        .collect();
    let mut refused = 0;
    if let (true, Some(ta)) = (caps.fencing, log.token) {
        for _ in &late {
            match register.write(ta, "the resumed node") {
                Err(_) => refused += 1,
                Ok(()) => bail!(
                    "the resumed node's write with token {ta} was accepted after the new holder \
                     wrote with token {tb:?}"
                ),
            }
        }
    }
    // Its unlock changed nothing: the new holder still holds the name.
    must_not_lock(suite, &p[1], &cfg, "after the resumed node's unlock").await?;
    let mut b = b;
    if caps.extend {
        b.extend(LONG, Duration::ZERO).await.map_err(|e| {
            Verdict::fail(format!("the new holder lost its lock after the node's unlock: {e}"))
        })?;
    }
    unlock(suite, b).await?;
    let fenced = if caps.fencing {
        format!("; the register refused its {refused} late write(s) by token")
    } else {
        format!("; no fencing declared: {} late write(s) unprotected", late.len())
    };
    Ok(format!(
        "a holder frozen {} ms (lease {} ms) found its lease ended {} ms after resuming, \
         {} writes before; extend {}, unlock {}{fenced}",
        ms(paused),
        ms(t.at_most),
        saw_end_ns.saturating_sub(resumed_ns) / 1_000_000,
        log.writes.len(),
        log.extend,
        log.unlock
    ))
}

/// Starts the node process holding `name`.
#[allow(clippy::too_many_arguments)]
fn start(
    suite: &Suite,
    exe: &Path,
    node_env: &[(String, String)],
    name: &str,
    out: &Path,
    err: &Path,
    ready: &Path,
    give_up: Duration,
) -> Result<Node, Verdict> {
    let t = suite.timing();
    let spec = NodeSpec {
        provider: suite.factory().name().to_owned(),
        index: 0,
        names: vec![name.to_owned()],
        start_ns: 0,
        run_for_ms: 0,
        at_most_ms: u64::try_from(t.at_most.as_millis()).unwrap_or(300),
        hold_max_ms: 0,
        leaders: Vec::new(),
        lead_ms: 0,
        warm_up: suite.lock_name("c29w"),
        out: out.to_owned(),
        seed: suite.seed(),
        faults: false,
        paused_holder: Some(PausedHolder {
            name: name.to_owned(),
            ready: PathBuf::from(ready),
            give_up_ms: u64::try_from(give_up.as_millis()).unwrap_or(u64::MAX),
        }),
    };
    let spec =
        serde_json::to_string(&spec).map_err(|e| Verdict::fail(format!("node spec: {e}")))?;
    let stderr = std::fs::File::create(err)
        .map_err(|e| Verdict::fail(format!("creating {}: {e}", err.display())))?;
    let child = std::process::Command::new(exe)
        .env(RUN_ID_ENV, run_id())
        .env(NODE_ENV, spec)
        .envs(node_env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .map_err(|e| {
            Verdict::fail(format!("cannot start the node process {}: {e}", exe.display()))
        })?;
    Ok(Node { child })
}
