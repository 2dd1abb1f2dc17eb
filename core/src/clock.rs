//! Injectable wall clocks. Each provider instance takes its own [`Clock`], so two instances in one
//! process can run skewed clocks (the conformance kit relies on this).

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
    time::{Duration, SystemTime},
};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// A shared clock.
pub type SharedClock = Arc<dyn Clock>;

/// The operating system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// The default clock: [`SystemClock`].
pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}

/// A clock that follows tokio's clock: it starts at the system time when created and then advances
/// with [`tokio::time::Instant`]. Under a paused tokio runtime (`start_paused = true`) time moves
/// only when tokio's time is advanced, which makes timing tests exact and fast.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base_wall: SystemTime,
    base: tokio::time::Instant,
}

impl TokioClock {
    /// Starts a clock at the current system time.
    pub fn new() -> Self {
        Self { base_wall: SystemTime::now(), base: tokio::time::Instant::now() }
    }

    /// Starts a clock at `wall`.
    pub fn starting_at(wall: SystemTime) -> Self {
        Self { base_wall: wall, base: tokio::time::Instant::now() }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> SystemTime {
        let elapsed = self.base.elapsed();
        self.base_wall.checked_add(elapsed).unwrap_or(self.base_wall)
    }
}

/// A clock offset from another by a fixed amount, ahead or behind (clock-skew injection).
#[derive(Debug, Clone)]
pub struct SkewedClock {
    inner: SharedClock,
    ahead: bool,
    offset: Duration,
}

impl SkewedClock {
    /// A clock `offset` ahead of `inner`.
    pub fn ahead(inner: SharedClock, offset: Duration) -> Self {
        Self { inner, ahead: true, offset }
    }

    /// A clock `offset` behind `inner`.
    pub fn behind(inner: SharedClock, offset: Duration) -> Self {
        Self { inner, ahead: false, offset }
    }

    /// A clock skewed by `offset_ms` milliseconds (negative: behind).
    pub fn by_millis(inner: SharedClock, offset_ms: i64) -> Self {
        let offset = Duration::from_millis(offset_ms.unsigned_abs());
        Self { inner, ahead: offset_ms >= 0, offset }
    }
}

impl Clock for SkewedClock {
    fn now(&self) -> SystemTime {
        let now = self.inner.now();
        if self.ahead {
            now.checked_add(self.offset).unwrap_or(now)
        } else {
            now.checked_sub(self.offset).unwrap_or(SystemTime::UNIX_EPOCH)
        }
    }
}

/// A clock that only moves when told to. For tests.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<SystemTime>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: SystemTime) -> Self {
        Self { now: Arc::new(Mutex::new(start)) }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(PoisonError::into_inner);
        *now += by;
    }

    /// Sets the clock (it may go backwards).
    pub fn set(&self, to: SystemTime) {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.now.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
