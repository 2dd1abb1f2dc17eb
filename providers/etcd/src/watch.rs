//! The loss watch: reports a held lock lost the moment etcd says its key is gone (its lease was
//! revoked by an operator or expired, or the key was deleted), instead of at the next extend or
//! at the lock's own deadline.
//!
//! One watch stream per provider, opened when the first lock has been held for [`START_DELAY`]
//! and shared by every lock the provider holds: one watch per key held that long, created from
//! the revision right after the acquiring put (so no event between the acquire and the watch can
//! be missed: etcd replays it), cancelled when the lock's handle goes. A lock released within
//! the delay never had a watch on the server. A delete of the key, or a put that recreated it (another
//! `create_revision`), fires the lock's [`Lease::report_lost`]. A released lock's lease ignores
//! that, so the holder's own unlock never reads as a loss.
//!
//! A broken stream (a node killed, a connection cut) is opened again with backoff and every watch
//! re-created from the revision it had reached; a watch the server cancelled (its start revision
//! compacted away) is replaced after a read of the key, which reports the loss if the key is no
//! longer this acquisition's. None of this runs on a lock call's path.

use std::{
    collections::HashMap,
    sync::{
        Mutex, PoisonError,
        atomic::{AtomicI64, Ordering},
    },
    time::Duration,
};

use etcd_client::{Client, EventType, WatchOptions, WatchResponse, WatchStream};
use shedlock::Lease;
use tokio::{
    sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel},
    time::Instant,
};

/// The time limit of each step of the watch task (open a stream, send a request, read a key).
const STEP_TIMEOUT: Duration = Duration::from_secs(5);
/// The first pause before a broken stream is opened again; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a held lock goes before its watch is created. A lock released sooner (a short task,
/// every loser-free herd tick) costs the server no watch create and cancel at all; a loss in
/// that time is not missed, since the watch starts from the revision after the acquiring put
/// and etcd replays what happened since, so it is reported when the watch starts.
pub(crate) const START_DELAY: Duration = Duration::from_millis(200);

enum Cmd {
    Add { id: i64, key: Vec<u8>, revision: i64, lease: Lease },
    Remove { id: i64 },
}

/// The provider's side: starts the watch task on first use.
pub(crate) struct LossWatch {
    client: Client,
    tx: Mutex<Option<UnboundedSender<Cmd>>>,
    /// Watch ids are chosen here (etcd ≥ 3.4 takes a client's `watch_id`), never reused.
    next_id: AtomicI64,
}

/// A reserved watch of one held lock. Dropped with the lock's handle: the watch is cancelled.
pub(crate) struct Watching {
    id: i64,
    tx: UnboundedSender<Cmd>,
}

impl Watching {
    /// What starts this watch once the lock is granted (the handle owns the `Watching`).
    pub(crate) fn starter(&self) -> Starter {
        Starter { id: self.id, tx: self.tx.clone() }
    }
}

/// Starts a reserved watch.
pub(crate) struct Starter {
    id: i64,
    tx: UnboundedSender<Cmd>,
}

impl Starter {
    /// Starts watching `key`, acquired at `revision`, for the lock whose lease is `lease`.
    pub(crate) fn start(self, key: Vec<u8>, revision: i64, lease: Lease) {
        let _ = self.tx.send(Cmd::Add { id: self.id, key, revision, lease });
    }
}

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.tx.send(Cmd::Remove { id: self.id });
    }
}

impl LossWatch {
    pub(crate) fn new(client: Client) -> Self {
        Self { client, tx: Mutex::new(None), next_id: AtomicI64::new(1) }
    }

    /// A watch for one lock about to be granted; `None` outside a tokio runtime.
    pub(crate) fn reserve(&self) -> Option<Watching> {
        let rt = tokio::runtime::Handle::try_current().ok()?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let sender = match tx.as_ref() {
            Some(s) if !s.is_closed() => s.clone(),
            _ => {
                let (s, r) = unbounded_channel();
                rt.spawn(run(self.client.clone(), r));
                *tx = Some(s.clone());
                s
            }
        };
        Some(Watching { id, tx: sender })
    }
}

struct Entry {
    key: Vec<u8>,
    /// The acquiring put's revision: the key's `create_revision` while the lock is this one.
    revision: i64,
    lease: Lease,
    /// The revision to watch from when the watch is (re)created.
    from: i64,
}

fn options(id: i64, from: i64) -> WatchOptions {
    WatchOptions::new().with_watch_id(id).with_start_revision(from)
}

/// The watch task: ends when the provider (the last sender) is gone.
async fn run(client: Client, mut rx: UnboundedReceiver<Cmd>) {
    let mut entries: HashMap<i64, Entry> = HashMap::new();
    // Watches not created yet (see START_DELAY), with the instant each is due.
    let mut pending: HashMap<i64, (Instant, Entry)> = HashMap::new();
    let mut stream: Option<WatchStream> = None;
    let mut backoff = MIN_BACKOFF;
    let mut retry_at: Option<Instant> = None;
    loop {
        if stream.is_none() && !entries.is_empty() && retry_at.is_none_or(|t| Instant::now() >= t) {
            match open(&client, &entries).await {
                Some(s) => {
                    stream = Some(s);
                    backoff = MIN_BACKOFF;
                    retry_at = None;
                }
                None => {
                    retry_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        let wake = retry_at.unwrap_or_else(Instant::now);
        let due = pending.values().map(|(at, _)| *at).min().unwrap_or_else(Instant::now);
        tokio::select! {
            cmd = rx.recv() => match cmd {
                None => return,
                Some(Cmd::Add { id, key, revision, lease }) => {
                    let entry = Entry { key, revision, lease, from: revision + 1 };
                    pending.insert(id, (Instant::now() + START_DELAY, entry));
                }
                Some(Cmd::Remove { id }) => {
                    // A watch never created needs no cancel.
                    if pending.remove(&id).is_none()
                        && entries.remove(&id).is_some()
                        && let Some(s) = stream.as_mut()
                        && !matches!(tokio::time::timeout(STEP_TIMEOUT, s.cancel(id)).await, Ok(Ok(())))
                    {
                        stream = None;
                    }
                }
            },
            msg = next(&mut stream) => match msg {
                Ok(Some(resp)) => {
                    if !handle(&client, resp, &mut entries, stream.as_mut()).await {
                        stream = None;
                    }
                }
                Ok(None) | Err(_) => {
                    tracing::debug!("etcd: the loss watch stream ended; opening it again");
                    stream = None;
                    retry_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            },
            () = tokio::time::sleep_until(wake), if stream.is_none() && retry_at.is_some() => {}
            () = tokio::time::sleep_until(due), if !pending.is_empty() => {
                let now = Instant::now();
                let ready: Vec<i64> =
                    pending.iter().filter(|(_, (at, _))| *at <= now).map(|(id, _)| *id).collect();
                for id in ready {
                    let Some((_, entry)) = pending.remove(&id) else { continue };
                    // Without a stream, the top of the loop opens one with every entry.
                    if let Some(s) = stream.as_mut()
                        && !send_watch(s, id, &entry).await
                    {
                        stream = None;
                    }
                    entries.insert(id, entry);
                }
            }
        }
    }
}

async fn next(
    stream: &mut Option<WatchStream>,
) -> Result<Option<WatchResponse>, etcd_client::Error> {
    match stream {
        Some(s) => s.message().await,
        None => std::future::pending().await,
    }
}

async fn send_watch(s: &mut WatchStream, id: i64, e: &Entry) -> bool {
    let sent = s.watch(e.key.clone(), Some(options(id, e.from)));
    matches!(tokio::time::timeout(STEP_TIMEOUT, sent).await, Ok(Ok(())))
}

/// A stream with a watch for every entry; `None` when it could not be opened.
async fn open(client: &Client, entries: &HashMap<i64, Entry>) -> Option<WatchStream> {
    let mut iter = entries.iter();
    let (first_id, first) = iter.next()?;
    let mut wc = client.watch_client();
    let opened = wc.watch(first.key.clone(), Some(options(*first_id, first.from)));
    let mut s = match tokio::time::timeout(STEP_TIMEOUT, opened).await {
        Ok(Ok(s)) => s,
        Ok(Err(error)) => {
            tracing::debug!(%error, "etcd: the loss watch stream could not be opened");
            return None;
        }
        Err(_) => return None,
    };
    for (id, e) in iter {
        if !send_watch(&mut s, *id, e).await {
            return None;
        }
    }
    Some(s)
}

fn lost(e: &Entry, why: &str) {
    tracing::warn!(
        key = %String::from_utf8_lossy(&e.key),
        revision = e.revision,
        "etcd: the key of a held lock {why}; lock lost"
    );
    e.lease.report_lost();
}

/// Applies one watch response; `false` when the stream should be given up.
async fn handle(
    client: &Client,
    resp: WatchResponse,
    entries: &mut HashMap<i64, Entry>,
    stream: Option<&mut WatchStream>,
) -> bool {
    let id = resp.watch_id();
    let mut gone = false;
    if let Some(e) = entries.get_mut(&id) {
        for ev in resp.events() {
            let Some(kv) = ev.kv() else { continue };
            if ev.event_type() == EventType::Delete {
                lost(
                    e,
                    "was deleted (its lease was revoked or expired, or an operator deleted it)",
                );
                gone = true;
                break;
            }
            if kv.create_revision() != e.revision {
                lost(e, "was recreated by another acquisition");
                gone = true;
                break;
            }
            e.from = kv.mod_revision() + 1;
        }
    }
    if gone {
        entries.remove(&id);
        if let Some(s) = stream {
            return matches!(tokio::time::timeout(STEP_TIMEOUT, s.cancel(id)).await, Ok(Ok(())));
        }
        return true;
    }
    if !resp.canceled() {
        return true;
    }
    // The server cancelled a watch (its start revision compacted away, or it refused it): read
    // the key, then watch again from the revision read.
    let Some(e) = entries.get_mut(&id) else { return true };
    tracing::debug!(
        watch = id,
        compact_revision = resp.compact_revision(),
        reason = resp.cancel_reason(),
        "etcd: a loss watch was cancelled by the server; reading the key"
    );
    let mut kv = client.kv_client();
    let read = match tokio::time::timeout(STEP_TIMEOUT, kv.get(e.key.clone(), None)).await {
        Ok(Ok(r)) => r,
        // Unknown for now: the stream is opened again, which re-creates the watch.
        _ => return false,
    };
    let ours = read.kvs().first().is_some_and(|k| k.create_revision() == e.revision);
    if !ours {
        lost(e, "is gone or belongs to another acquisition");
        entries.remove(&id);
        return true;
    }
    e.from = read.header().map_or(e.from, |h| h.revision() + 1);
    match stream {
        Some(s) => send_watch(s, id, e).await,
        None => true,
    }
}
