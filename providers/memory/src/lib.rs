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
    collections::HashMap,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
    time::{Duration, SystemTime},
};

use async_trait::async_trait;
use shedlock::{
    Acquisition, Capabilities, Error, Lock, LockConfig, LockHandle, LockProvider, Result,
    SharedClock, system_clock,
};

pub use shedlock::TimeSource;

const BACKEND: &str = "memory";

/// One stored lock record, as a backend row would hold it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Until when the lock is held.
    pub lock_until: SystemTime,
    /// When the current acquisition or extension happened (the base of `lock_at_least_for`).
    pub locked_at: SystemTime,
    /// The acquisition that owns the record.
    pub owner: u64,
    /// The fencing token of that acquisition.
    pub token: u64,
}

#[derive(Debug, Default)]
struct State {
    records: HashMap<String, Record>,
    last_token: u64,
}

#[derive(Debug)]
struct ServerInner {
    clock: SharedClock,
    state: Mutex<State>,
    next_owner: AtomicU64,
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
        state
            .records
            .insert(name.to_owned(), Record { lock_until, locked_at: lock_until, owner, token });
    }

    /// Forgets every record, as a restart of a non-durable backend would. The fencing counter is
    /// kept, so tokens stay monotonic.
    pub fn restart(&self) {
        self.state().records.clear();
    }

    /// The server's current time.
    pub fn now(&self) -> SystemTime {
        self.inner.clock.now()
    }
}

/// One node's client of a [`MemoryServer`].
#[derive(Debug, Clone)]
pub struct MemoryLockProvider {
    server: MemoryServer,
    clock: SharedClock,
    time: TimeSource,
    max_name_len: Option<usize>,
}

impl MemoryLockProvider {
    /// A node on `server`, with the system clock and server time.
    pub fn new(server: &MemoryServer) -> Self {
        Self {
            server: server.clone(),
            clock: system_clock(),
            time: TimeSource::Server,
            max_name_len: None,
        }
    }

    /// Sets this node's clock (consulted for expiry only with [`TimeSource::Client`]).
    #[must_use]
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Sets whose clock judges expiry: the server's (the default; declares `server_time`), or
    /// this node's own clock with [`TimeSource::Client`], as client-time backends do (skew between
    /// nodes can then break exclusion: useful to show what the conformance kit's skew checks
    /// detect).
    #[must_use]
    pub fn with_time_source(mut self, time: TimeSource) -> Self {
        self.time = time;
        self
    }

    /// Limits lock names to `max` bytes (longer names are rejected, never truncated), to model
    /// backends with bounded keys.
    #[must_use]
    pub fn with_max_name_len(mut self, max: Option<usize>) -> Self {
        self.max_name_len = max;
        self
    }

    /// The server this node talks to.
    pub fn server(&self) -> &MemoryServer {
        &self.server
    }

    fn now(&self) -> SystemTime {
        match self.time {
            TimeSource::Server => self.server.now(),
            TimeSource::Client => self.clock.now(),
        }
    }
}

#[async_trait]
impl LockProvider for MemoryLockProvider {
    async fn try_lock(&self, config: &LockConfig) -> Result<Option<Lock>> {
        if let Some(max) = self.max_name_len
            && config.name().len() > max
        {
            return Err(Error::InvalidName {
                backend: BACKEND,
                name: config.name().to_owned(),
                reason: format!("longer than {max} bytes"),
            });
        }
        let acquisition = Acquisition::begin(config);
        let now = self.now();
        let lock_until = add(now, config.lock_at_most_for());
        let owner = self.server.inner.next_owner.fetch_add(1, Ordering::Relaxed);
        let token = {
            let mut state = self.server.state();
            if let Some(rec) = state.records.get(config.name())
                && rec.lock_until > now
            {
                return Ok(None);
            }
            state.last_token += 1;
            let token = state.last_token;
            state.records.insert(
                config.name().to_owned(),
                Record { lock_until, locked_at: now, owner, token },
            );
            token
        };
        acquisition.grant(MemoryHandle { node: self.clone(), owner, token }).await.map(Some)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(true)
            .with_owner_checked(true)
            .with_server_time(self.time.is_server())
            .with_granularity(Duration::from_millis(1))
            .with_max_name_len(self.max_name_len)
    }

    fn backend_name(&self) -> &'static str {
        "memory"
    }
}

struct MemoryHandle {
    node: MemoryLockProvider,
    owner: u64,
    token: u64,
}

#[async_trait]
impl LockHandle for MemoryHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let now = self.node.now();
        let mut state = self.node.server.state();
        if let Some(rec) = state.records.get_mut(config.name())
            && rec.owner == self.owner
        {
            let at_least_until = add(rec.locked_at, config.lock_at_least_for());
            if at_least_until > now {
                rec.lock_until = rec.lock_until.min(at_least_until);
            } else {
                rec.lock_until = now;
            }
        }
        Ok(())
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let now = self.node.now();
        let mut state = self.node.server.state();
        match state.records.get_mut(config.name()) {
            Some(rec) if rec.owner == self.owner && rec.lock_until > now => {
                rec.lock_until = add(now, config.lock_at_most_for());
                rec.locked_at = now;
                Ok(())
            }
            _ => Err(Error::LockLost { name: config.name().to_owned() }),
        }
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.token)
    }
}

fn add(t: SystemTime, d: Duration) -> SystemTime {
    t.checked_add(d).unwrap_or(t)
}

#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
