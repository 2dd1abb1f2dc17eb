//! The in-memory reference provider for [`shedlock`].
//!
//! A [`MemoryServer`] plays the part of a shared backend; each [`MemoryLockProvider`] built on it is
//! one application node with its own client and, optionally, its own (skewed) [`Clock`](shedlock::Clock). It supports
//! every capability — extend, fencing tokens, owner-checked unlock and extend, server time — and is
//! the model the conformance kit compares real providers against. It is not a distributed lock: all
//! nodes must live in one process.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> shedlock::Result<()> {
//! use std::time::Duration;
//! use shedlock::{LockConfig, LockProvider};
//! use shedlock_memory::{MemoryLockProvider, MemoryServer};
//!
//! let server = MemoryServer::new();
//! let node_a = MemoryLockProvider::new(&server);
//! let node_b = MemoryLockProvider::new(&server);
//! let cfg = LockConfig::new("job", Duration::from_secs(60), Duration::ZERO)?;
//! let lock = node_a.try_lock(&cfg).await?.expect("free");
//! assert!(node_b.try_lock(&cfg).await?.is_none());
//! lock.unlock().await?;
//! assert!(node_b.try_lock(&cfg).await?.is_some());
//! # Ok(()) }
//! ```

use std::{
    collections::BTreeMap,
    ops::Bound,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use shedlock::{
    Capabilities, ForceRelease, LockInfo, LockPage, LockProvider, Result, SharedClock,
    store::{DelegatingProvider, Extension, Granted, LeaseStore, Request, Settings, StoreProvider},
    system_clock,
};

pub use shedlock::TimeSource;

const BACKEND: &str = "memory";

/// One stored lock record, as a backend row would hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// Until when the lock is held.
    pub lock_until: SystemTime,
    /// When the current acquisition or extension happened (the base of `lock_at_least_for`).
    pub locked_at: SystemTime,
    /// The acquisition that owns the record.
    pub owner: u64,
    /// The fencing token of that acquisition.
    pub token: u64,
    /// Who holds (or last held) it: the provider's `locked_by`.
    pub locked_by: String,
}

#[derive(Debug, Default)]
struct State {
    records: BTreeMap<String, Record>,
    last_token: u64,
}

#[derive(Debug)]
struct ServerInner {
    clock: SharedClock,
    state: Mutex<State>,
    next_owner: AtomicU64,
    restarts: AtomicU64,
}

/// The shared "backend": lock records, the fencing counter and the server clock.
#[derive(Debug, Clone)]
pub struct MemoryServer {
    inner: Arc<ServerInner>,
}

impl Default for MemoryServer {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryServer {
    /// A server on the system clock.
    pub fn new() -> Self {
        Self::with_clock(system_clock())
    }

    /// A server judging time by `clock`.
    pub fn with_clock(clock: SharedClock) -> Self {
        Self {
            inner: Arc::new(ServerInner {
                clock,
                state: Mutex::new(State::default()),
                next_owner: AtomicU64::new(1),
                restarts: AtomicU64::new(0),
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The raw record of `name`, if any (expired records are kept until overwritten).
    pub fn record(&self, name: &str) -> Option<Record> {
        self.state().records.get(name).cloned()
    }

    /// Deletes the raw record of `name`, as an operator might. Returns whether one existed.
    pub fn delete_record(&self, name: &str) -> bool {
        self.state().records.remove(name).is_some()
    }

    /// Stores a raw record, as left behind by an earlier process. Uses a fresh owner id.
    pub fn insert_record(&self, name: &str, lock_until: SystemTime) {
        let owner = self.inner.next_owner.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state();
        state.last_token += 1;
        let token = state.last_token;
        let record =
            Record { lock_until, locked_at: lock_until, owner, token, locked_by: String::new() };
        state.records.insert(name.to_owned(), record);
    }

    /// Forgets every record, as a restart of a non-durable backend would. The fencing counter is
    /// kept, so tokens stay monotonic.
    pub fn restart(&self) {
        self.state().records.clear();
        self.inner.restarts.fetch_add(1, Ordering::Relaxed);
    }

    /// How many times [`restart`](Self::restart) has run: the "server identity" a test can use
    /// to tell that a restart happened.
    pub fn restarts(&self) -> u64 {
        self.inner.restarts.load(Ordering::Relaxed)
    }

    /// The server's current time.
    pub fn now(&self) -> SystemTime {
        self.inner.clock.now()
    }
}

/// One node's client of a [`MemoryServer`]: a [`StoreProvider`] over the server's records, like
/// every provider whose backend keeps a record per lock.
#[derive(Debug, Clone)]
pub struct MemoryLockProvider {
    inner: StoreProvider<MemoryStore>,
}

impl MemoryLockProvider {
    /// A node on `server`, with the system clock and server time.
    pub fn new(server: &MemoryServer) -> Self {
        // In-process calls never wait: no time limit.
        let settings = Settings::new(BACKEND).with_timeout(None);
        Self::on(MemoryStore { server: server.clone(), max_name_len: None }, settings)
    }

    fn on(store: MemoryStore, settings: Settings) -> Self {
        Self { inner: StoreProvider::new(store, settings) }
    }

    fn store(&self) -> MemoryStore {
        self.inner.store().clone()
    }

    /// Sets this node's clock (consulted for expiry only with [`TimeSource::Client`]).
    #[must_use]
    pub fn with_clock(self, clock: SharedClock) -> Self {
        Self::on(self.store(), self.inner.settings().clone().with_clock(clock))
    }

    /// Sets whose clock judges expiry: the server's (the default; declares `server_time`), or
    /// this node's own clock with [`TimeSource::Client`], as client-time backends do (skew between
    /// nodes can then break exclusion: useful to show what the conformance kit's skew checks
    /// detect).
    #[must_use]
    pub fn with_time_source(self, time: TimeSource) -> Self {
        Self::on(self.store(), self.inner.settings().clone().with_time_source(time))
    }

    /// Limits lock names to `max` bytes (longer names are rejected, never truncated), to model
    /// backends with bounded keys.
    #[must_use]
    pub fn with_max_name_len(self, max: Option<usize>) -> Self {
        let store = MemoryStore { max_name_len: max, ..self.store() };
        Self::on(store, self.inner.settings().clone())
    }

    /// The server this node talks to.
    pub fn server(&self) -> &MemoryServer {
        &self.inner.store().server
    }
}

impl DelegatingProvider for MemoryLockProvider {
    fn delegate(&self) -> &dyn LockProvider {
        &self.inner
    }
}

/// The [`LeaseStore`] of a [`MemoryServer`]: the record of each name, as a backend row holds it.
#[derive(Debug, Clone)]
struct MemoryStore {
    server: MemoryServer,
    max_name_len: Option<usize>,
}

impl MemoryStore {
    /// The time that judges expiry: the node's clock in client-time mode (`client_now` of the
    /// request or of the settings), else the server's.
    fn now(&self, client_now: Option<SystemTime>) -> SystemTime {
        client_now.unwrap_or_else(|| self.server.now())
    }
}

/// Takes the lock of `req` at `now` if it is free: the record is written and the next token
/// handed out.
fn take(state: &mut State, req: &Request<'_>, now: SystemTime) -> Option<Granted<()>> {
    if let Some(rec) = state.records.get(req.name())
        && rec.lock_until > now
    {
        return None;
    }
    state.last_token += 1;
    let token = state.last_token;
    let record = Record {
        lock_until: add(now, req.lock_at_most_for()),
        locked_at: now,
        owner: req.owner().id(),
        token,
        locked_by: req.owner().locked_by().to_owned(),
    };
    state.records.insert(req.name().to_owned(), record);
    Some(Granted::new(()).with_fencing_token(token))
}

#[async_trait]
impl LeaseStore for MemoryStore {
    type Held = ();

    fn capabilities(&self, settings: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_owner_checked(true)
            .with_server_time(settings.time_source().is_server())
            .with_granularity(Duration::from_millis(1))
            // Records keep the clock's full precision: nothing is truncated.
            .with_clock_step(Duration::ZERO)
            .with_max_name_len(self.max_name_len)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
            .with_native_batch(true)
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<()>>> {
        Ok(take(&mut self.server.state(), req, self.now(req.client_now())))
    }

    /// The whole batch under one hold of the server's state: one request.
    async fn acquire_many(&self, reqs: &[Request<'_>]) -> Result<Vec<Option<Granted<()>>>> {
        let mut state = self.server.state();
        Ok(reqs.iter().map(|req| take(&mut state, req, self.now(req.client_now()))).collect())
    }

    async fn release(&self, req: &Request<'_>, _: &mut ()) -> Result<()> {
        let now = self.now(req.client_now());
        let mut state = self.server.state();
        if let Some(rec) = state.records.get_mut(req.name())
            && rec.owner == req.owner().id()
        {
            let at_least_until = add(rec.locked_at, req.lock_at_least_for());
            if at_least_until > now {
                rec.lock_until = rec.lock_until.min(at_least_until);
            } else {
                rec.lock_until = now;
            }
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, _: &mut ()) -> Result<Extension> {
        let now = self.now(req.client_now());
        let mut state = self.server.state();
        match state.records.get_mut(req.name()) {
            Some(rec) if rec.owner == req.owner().id() && rec.lock_until > now => {
                rec.lock_until = add(now, req.lock_at_most_for());
                rec.locked_at = now;
                Ok(Extension::Extended)
            }
            _ => Ok(Extension::Lost),
        }
    }

    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        let now = self.now(settings.client_now());
        let time = settings.time_source();
        Ok(self.server.state().records.get(name).map(|r| r.info(name, now, time)))
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        settings: &Settings,
    ) -> Result<LockPage> {
        let now = self.now(settings.client_now());
        let time = settings.time_source();
        let state = self.server.state();
        let start = match cursor {
            Some(after) => Bound::Excluded(after),
            None => Bound::Included(prefix),
        };
        let mut under = state
            .records
            .range::<str, _>((start, Bound::Unbounded))
            .take_while(|(name, _)| name.starts_with(prefix));
        let records: Vec<LockInfo> =
            under.by_ref().take(limit).map(|(name, r)| r.info(name, now, time)).collect();
        let next = match under.next() {
            Some(_) => records.last().map(|r| r.name.clone()),
            None => None,
        };
        Ok(LockPage::new(records, next))
    }

    async fn force_release(&self, seen: &LockInfo, settings: &Settings) -> Result<ForceRelease> {
        let now = self.now(settings.client_now());
        let time = settings.time_source();
        let mut state = self.server.state();
        let Some(record) = state.records.get(&seen.name) else {
            return Ok(ForceRelease::Changed(None));
        };
        let info = record.info(&seen.name, now, time);
        if info.acquisition != seen.acquisition {
            return Ok(ForceRelease::Changed(Some(info)));
        }
        state.records.remove(&seen.name);
        Ok(ForceRelease::Released(info))
    }
}

impl Record {
    fn info(&self, name: &str, now: SystemTime, judged_by: TimeSource) -> LockInfo {
        LockInfo::new(name, self.owner.to_string(), self.lock_until > now, judged_by)
            .with_locked_by(self.locked_by.clone())
            .with_locked_at(self.locked_at)
            .with_lock_until(self.lock_until)
            .with_fencing_token(Some(self.token))
    }
}

fn add(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d).unwrap_or(t)
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
