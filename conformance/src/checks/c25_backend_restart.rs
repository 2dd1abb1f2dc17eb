//! C25 `backend_restart`: the provider recovers from a backend restart.

use std::time::{Duration, Instant};

use tokio::{io::AsyncReadExt, net::TcpStream};

use super::common::{Fence, recover};
use crate::{
    factory::RestartHook,
    outcome::Verdict,
    suite::Suite,
    tools::calls::{R, at, bounded, finish, instances, ms, must_lock, poll_acquire, unlock},
};

/// C25: backend restarted while the process runs: the provider recovers without a process
/// restart, and a lock held across the restart frees within `lock_at_most_for`. When the
/// provider declares `fencing`, tokens after the restart exceed every token before it. Needs
/// [`Hooks::with_restart`](crate::Hooks::with_restart).
///
/// The hook must be seen to act, or a hook that does nothing would pass as a durable backend:
/// [`RestartHook::identity`](crate::RestartHook::identity) must change, or, when the hook gives
/// none, a connection the kit opens to the backend address before the restart must be closed by
/// it.
pub async fn c25_backend_restart(suite: &Suite) -> Verdict {
    finish(c25(suite).await)
}

async fn c25(suite: &Suite) -> R {
    let Some(hook) = suite.hooks().restart().cloned() else {
        return Err(Verdict::not_applicable(
            "the factory offers no restart hook (Hooks::with_restart)",
        ));
    };
    let t = suite.timing();
    let p = instances(suite, 2).await?;
    let cfg = suite.config(&suite.lock_name("c25"), t.at_most, Duration::ZERO)?;
    let mut fence = Fence::new(suite);
    for (i, inst) in p.iter().enumerate() {
        let l = must_lock(suite, inst, &cfg, "warm-up before the restart").await?;
        fence.saw(&l, &format!("warm-up on instance {i} before the restart"))?;
        unlock(suite, l).await?;
    }
    let held = must_lock(suite, &p[0], &cfg, "lock before the restart").await?;
    fence.saw(&held, "the lock held across the restart")?;
    fence.settle(suite).await;
    let witness = Witness::before(suite, hook.as_ref()).await?;
    let restart_started = Instant::now();
    tokio::time::timeout(suite.options().recovery_bound, hook.restart())
        .await
        .map_err(|_| Verdict::fail("the restart hook did not finish within the recovery bound"))?
        .map_err(|e| Verdict::fail(format!("the restart hook failed: {e}")))?;
    let restarted = Instant::now();
    let proof = witness.after(suite, hook.as_ref()).await?;
    let r0 = recover(suite, &p[0]).await?;
    let r1 = recover(suite, &p[1]).await?;
    // The pre-restart lock: its unlock returns (whatever it says) and the name frees in time.
    let _ = bounded(suite, "unlock of a lock taken before the restart", held.unlock()).await?;
    let (l, _) = poll_acquire(
        suite,
        &p[1],
        &cfg,
        restarted,
        Duration::ZERO,
        t.at_most + t.slack + r0.max(r1),
        "the lock held across the restart",
    )
    .await?;
    fence.saw(&l, "the first lock after the restart")?;
    unlock(suite, l).await?;
    let l = must_lock(suite, &p[0], &cfg, "relock after the restart").await?;
    fence.saw(&l, "a relock after the restart")?;
    unlock(suite, l).await?;
    Ok(format!(
        "restart took {} ms ({proof}); instances recovered after {} and {} ms{}",
        at(restart_started, restarted),
        r0.as_millis(),
        r1.as_millis(),
        fence.summary("across the restart")
    ))
}

/// What shows that the restart hook restarted the backend.
enum Witness {
    /// A raw connection to the backend address, opened before the restart: it must be closed.
    Connection(TcpStream),
    /// The hook's identity before the restart: it must change.
    Identity(String),
}

impl Witness {
    /// The hook's identity when it gives one; else a connection to the backend address (which
    /// a server that stops gracefully may wait for: gRPC servers do, so an identity is better).
    async fn before(suite: &Suite, hook: &dyn RestartHook) -> Result<Self, Verdict> {
        let identity = bounded(suite, "RestartHook::identity", hook.identity())
            .await?
            .map_err(|e| Verdict::fail(format!("RestartHook::identity failed: {e}")))?;
        if let Some(id) = identity {
            return Ok(Witness::Identity(id));
        }
        let Some(addr) = suite.hooks().backend_address() else {
            bail!(
                "the kit cannot see that the restart hook restarts anything: implement \
                 RestartHook::identity (a server run id, start time or pids), or give the \
                 factory the backend's address (Hooks::with_backend_address), whose connections \
                 a restart closes"
            )
        };
        let conn = bounded(suite, "a connection to the backend", TcpStream::connect(addr))
            .await?
            .map_err(|e| {
            Verdict::fail(format!("could not connect to the backend at {addr}: {e}"))
        })?;
        Ok(Witness::Connection(conn))
    }

    async fn after(self, suite: &Suite, hook: &dyn RestartHook) -> R {
        match self {
            Witness::Connection(mut conn) => {
                // A server that stopped has closed it; one that never stopped keeps it open (it
                // may send a greeting first).
                let mut buf = [0u8; 1024];
                let mut received = 0usize;
                let closed = tokio::time::timeout(CLOSE_WAIT, async {
                    loop {
                        match conn.read(&mut buf).await {
                            Ok(0) => return "closed",
                            Err(_) => return "reset",
                            Ok(n) => received += n,
                        }
                    }
                })
                .await;
                match closed {
                    Ok(how) => Ok(format!(
                        "a connection opened before it was {how} by it (no identity given)"
                    )),
                    Err(_) => bail!(
                        "the restart hook returned, but a connection the kit opened to the \
                         backend before it was still open {} ms later ({received} bytes received \
                         meanwhile, neither closed nor reset): either the hook did not restart \
                         the backend, or the restart left old connections half-open, as a \
                         crashed host does; this witness cannot tell them apart. Implement \
                         RestartHook::identity (a server run id, start time or pids) so the kit \
                         sees a new server generation",
                        ms(CLOSE_WAIT)
                    ),
                }
            }
            Witness::Identity(before) => {
                let after = bounded(suite, "RestartHook::identity", hook.identity())
                    .await?
                    .map_err(|e| Verdict::fail(format!("RestartHook::identity failed: {e}")))?;
                match after {
                    Some(after) if after != before => {
                        Ok(format!("the backend's identity changed: {before} → {after}"))
                    }
                    Some(_) => bail!(
                        "the restart hook returned, but RestartHook::identity still says \
                         {before:?}: no new server generation, so the hook did not restart the \
                         backend"
                    ),
                    None => bail!(
                        "RestartHook::identity said {before:?} before the restart and nothing \
                         after it: the kit cannot tell whether a new server generation started \
                         (the identity must be given both times)"
                    ),
                }
            }
        }
    }
}

/// How long a connection to a stopped server may take to be seen closed.
const CLOSE_WAIT: Duration = Duration::from_secs(2);
