//! The session watch of a held lock: the lock is reported lost as soon as its session is gone,
//! or could be, before the server can expire it.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use shedlock::Lease;
use tokio::{sync::oneshot, time::Instant};
use zookeeper_client::{SessionState, StateWatcher};

/// How long after the client reports `Disconnected` a held lock is reported lost: before the
/// server can have expired the session, and so before another node can hold the lock.
///
/// The server expires a session `session` after it last heard from it. The client notices a
/// silent connection only after its connection timeout (`connection`, by default 2/5 of the
/// session timeout) plus one tick of its timer (1/20 of the session timeout, or 1/8 of a
/// configured connection timeout up to 3/5 of the session's), counted from the last answer it
/// received. This delay is half of what is left of the session then: the other half is the
/// margin for a timer that fires late (a loaded machine, a process paused) and for the server
/// having heard the client a little before its last answer arrived. A connection that fails at
/// once (reset, refused) is noticed earlier, and the lock is then reported lost earlier still.
pub(crate) fn lost_after_disconnect(session: Duration, connection: Option<Duration>) -> Duration {
    let (detect, tick) = match connection {
        Some(c) if !c.is_zero() && c <= session * 3 / 5 => (c, c / 8),
        _ => (session * 2 / 5, session / 20),
    };
    session.saturating_sub(detect + tick) / 2
}

/// Reports a held lock lost as soon as its session is known to be gone, or could be, without
/// waiting for an extend: when the session reaches a terminal state (expired, closed,
/// authentication failed), or when the client has been disconnected for `lost_after` (see
/// [`lost_after_disconnect`]: soon the server may expire the session and delete the ephemeral
/// lock node; the client itself learns "expired" only once it reconnects). The session counts
/// as gone (`gone`: unlock and extend then know there is nothing to release) only once it is
/// terminated, or disconnected for a whole `session_timeout`, when the server has surely
/// expired it; until then an unlock still tries to delete the node (an error while
/// disconnected, the delete once reconnected within the session). Ends when the handle is
/// dropped (unlock, or the `Lock` dropped).
pub(crate) async fn watch_session(
    mut watcher: StateWatcher,
    lost_after: Duration,
    session_timeout: Duration,
    lease: Lease,
    gone: Arc<AtomicBool>,
    mut stopped: oneshot::Receiver<()>,
) {
    // When the current disconnection was noticed, and whether the loss was reported.
    let mut since: Option<Instant> = None;
    let mut reported = false;
    loop {
        let state = watcher.state();
        if state.is_terminated() {
            tracing::warn!(?state, "the ZooKeeper session of a held lock ended; lock lost");
            gone.store(true, Ordering::Release);
            lease.report_lost();
            return;
        }
        if matches!(state, SessionState::Disconnected) {
            since.get_or_insert_with(Instant::now);
        } else {
            since = None;
        }
        let next = since.map(|s| s + if reported { session_timeout } else { lost_after });
        let far = Instant::now() + Duration::from_secs(3600);
        tokio::select! {
            _ = &mut stopped => return,
            _ = watcher.changed() => {}
            () = tokio::time::sleep_until(next.unwrap_or(far)), if next.is_some() => {
                if reported {
                    gone.store(true, Ordering::Release);
                    return;
                }
                tracing::warn!(
                    ?lost_after,
                    "disconnected from ZooKeeper for as long as the server may keep the \
                     session; lock lost"
                );
                lease.report_lost();
                reported = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_disconnected_lock_is_lost_before_the_server_can_expire_its_session() {
        let ms = Duration::from_millis;
        // Defaults: noticed after 2/5 + 1/20 of the session; lost half-way through the rest.
        assert_eq!(lost_after_disconnect(ms(10_000), None), ms(2_750));
        // A configured connection timeout: noticed after it plus 1/8 of it.
        assert_eq!(lost_after_disconnect(ms(10_000), Some(ms(4_000))), ms(2_750));
        assert_eq!(lost_after_disconnect(ms(10_000), Some(ms(2_000))), ms(3_875));
        // One above 3/5 of the session is the client's default again.
        assert_eq!(lost_after_disconnect(ms(10_000), Some(ms(9_000))), ms(2_750));
        for session in [1_000, 1_500, 10_000, 40_000] {
            for connection in [None, Some(ms(1)), Some(ms(session / 3)), Some(ms(session))] {
                let after = lost_after_disconnect(ms(session), connection);
                let noticed_by = match connection {
                    Some(c) if c <= ms(session) * 3 / 5 => c + c / 8,
                    _ => ms(session) * 9 / 20,
                };
                // Half of the rest is left as margin.
                assert!(noticed_by + after * 2 <= ms(session), "{session} {connection:?}");
            }
        }
    }
}
