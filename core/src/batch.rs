//! Many lock names at once: [`LockProvider::try_lock_many`] and what it is built from.
//!
//! When a fleet's jobs fall due at the same tick, each instance would otherwise send one
//! `try_lock` per job: N instances × J jobs requests, and up to a whole pool of connections per
//! instance. A batch asks for all of an instance's due names in one call, and answers per name
//! exactly what a `try_lock` of that name would have:
//!
//! - names are independent: a batch answers in part (free names are granted, held ones
//!   refused), never all-or-nothing;
//! - each name's lease is begun before the request that takes it is sent
//!   ([`Acquisition::begin`](crate::Acquisition::begin)), and each name has its own fencing
//!   tokens;
//! - a batch that names one lock twice is refused as a whole
//!   ([`ConfigError::DuplicateInBatch`]), holding nothing;
//! - a dropped or timed-out batch leaves nothing held beyond each name's `lock_at_most_for`.
//!
//! The default [`LockProvider::try_lock_many`] runs the names' `try_lock`s, at most
//! [`BatchOptions::concurrency`] at a time ([`try_lock_each`]), so every provider batches, and a
//! third-party one unchanged. Providers whose backend takes many conditional writes in one
//! request declare [`Capabilities::native_batch`](crate::Capabilities::native_batch) and answer
//! a batch in one round trip per [`BatchOptions::concurrency`] chunk.

use std::{
    collections::HashSet,
    future::Future,
    num::NonZeroUsize,
    pin::Pin,
    task::{Context, Poll},
};

use crate::{
    config::LockConfig,
    error::{ConfigError, Result},
    provider::{Lock, LockProvider},
};

/// How many requests of one batch are in flight at once unless told otherwise: 2, so that a
/// tick takes at most two connections from a pool, whatever the number of jobs.
pub const DEFAULT_BATCH_CONCURRENCY: NonZeroUsize = NonZeroUsize::MIN.saturating_add(1);

/// The answer of a batch: one entry per name, in the order asked, each what a `try_lock` of that
/// name would answer (`Ok(Some(lock))` won, `Ok(None)` held elsewhere, `Err` not answered).
pub type BatchOutcome = Vec<Result<Option<Lock>>>;

/// How a batch is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BatchOptions {
    /// The most requests (and so connections) of this batch in flight at once. Default
    /// [`DEFAULT_BATCH_CONCURRENCY`].
    pub concurrency: NonZeroUsize,
}

impl BatchOptions {
    /// The defaults: [`DEFAULT_BATCH_CONCURRENCY`] requests at once.
    pub fn new() -> Self {
        Self { concurrency: DEFAULT_BATCH_CONCURRENCY }
    }

    /// Sets [`concurrency`](Self::concurrency); 0 is taken as 1.
    #[must_use]
    pub fn with_concurrency(mut self, concurrency: usize) -> Self {
        self.concurrency = NonZeroUsize::new(concurrency).unwrap_or(NonZeroUsize::MIN);
        self
    }
}

impl Default for BatchOptions {
    fn default() -> Self {
        Self::new()
    }
}

/// Refuses a batch that names one lock twice ([`ConfigError::DuplicateInBatch`]): its two
/// entries could not both be answered as a `try_lock` would.
pub fn check_distinct(configs: &[LockConfig]) -> Result<()> {
    let mut seen = HashSet::with_capacity(configs.len());
    for c in configs {
        if !seen.insert(c.name()) {
            return Err(ConfigError::DuplicateInBatch { name: c.name().to_owned() }.into());
        }
    }
    Ok(())
}

/// The default batch: each name's [`try_lock`](LockProvider::try_lock), at most
/// `options.concurrency` at a time, answered in the order asked. For providers without a
/// native batch, and for native ones to fall back on.
pub async fn try_lock_each<P: LockProvider + ?Sized>(
    provider: &P,
    configs: &[LockConfig],
    options: BatchOptions,
) -> Result<BatchOutcome> {
    check_distinct(configs)?;
    // A loop, not `map` with a closure: the closure's lifetimes would not be general enough
    // for the `Send` future `async_trait` asks of the default method.
    let mut calls = Vec::with_capacity(configs.len());
    for c in configs {
        calls.push(provider.try_lock(c));
    }
    Ok(in_order(calls, options.concurrency.get()).await)
}

/// How many `try_lock`s of one batch [`try_lock_pipelined`] keeps in flight at once on a client
/// that carries every request over one connection.
pub const PIPELINED_REQUESTS: usize = 16;

/// The batch of a provider whose client multiplexes every request over one connection (an
/// HTTP/2 channel, a NATS connection, a ZooKeeper session): each name's
/// [`try_lock`](LockProvider::try_lock), up to [`PIPELINED_REQUESTS`] (or
/// `options.concurrency`, if more) in flight at once, answered in the order asked. The batch
/// still uses the one connection, so it keeps to what `options.concurrency` bounds (the
/// connections a tick takes), while its requests overlap instead of waiting for each other.
pub async fn try_lock_pipelined<P: LockProvider + ?Sized>(
    provider: &P,
    configs: &[LockConfig],
    options: BatchOptions,
) -> Result<BatchOutcome> {
    let depth = options.concurrency.get().max(PIPELINED_REQUESTS);
    try_lock_each(provider, configs, options.with_concurrency(depth)).await
}

/// Runs `futures`, at most `limit` at a time, and returns their outputs in order. Dropping it
/// drops the futures in flight (each must be cancel safe) and starts no more.
pub async fn in_order<F: Future>(
    futures: impl IntoIterator<Item = F>,
    limit: usize,
) -> Vec<F::Output> {
    InOrder::new(futures, limit).await
}

struct InOrder<I: Iterator<Item = F>, F: Future> {
    pending: std::iter::Enumerate<I>,
    running: Vec<(usize, Pin<Box<F>>)>,
    out: Vec<Option<F::Output>>,
    limit: usize,
}

impl<I: Iterator<Item = F>, F: Future> InOrder<I, F> {
    fn new(futures: impl IntoIterator<IntoIter = I>, limit: usize) -> Self {
        let pending = futures.into_iter();
        let out = Vec::with_capacity(pending.size_hint().0);
        Self { pending: pending.enumerate(), running: Vec::new(), out, limit: limit.max(1) }
    }
}

// Nothing is pinned in place: the futures are boxed.
impl<I: Iterator<Item = F>, F: Future> Unpin for InOrder<I, F> {}

impl<I: Iterator<Item = F>, F: Future> Future for InOrder<I, F> {
    type Output = Vec<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        loop {
            while this.running.len() < this.limit {
                let Some((i, f)) = this.pending.next() else { break };
                this.running.push((i, Box::pin(f)));
            }
            if this.running.is_empty() {
                return Poll::Ready(this.out.drain(..).flatten().collect());
            }
            let mut finished = false;
            let mut k = 0;
            while k < this.running.len() {
                if let Poll::Ready(v) = this.running[k].1.as_mut().poll(cx) {
                    let (i, _) = this.running.swap_remove(k);
                    if this.out.len() <= i {
                        this.out.resize_with(i + 1, || None);
                    }
                    this.out[i] = Some(v);
                    finished = true;
                } else {
                    k += 1;
                }
            }
            if !finished {
                return Poll::Pending;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{
        sync::{
            Arc,
            atomic::{AtomicUsize, Ordering},
        },
        time::Duration,
    };

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn in_order_keeps_the_order_and_never_runs_more_than_the_limit() {
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let futs = (0..10u64).map(|i| {
            let (now, peak) = (now.clone(), peak.clone());
            async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                // Later ones finish first: the answer must still be in the order asked.
                tokio::time::sleep(Duration::from_millis(100 - i * 10)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                i
            }
        });
        let out = in_order(futs, 3).await;
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        assert_eq!(peak.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn in_order_of_nothing_is_empty_and_a_zero_limit_means_one() {
        let none: Vec<std::future::Ready<u8>> = Vec::new();
        assert!(in_order(none, 2).await.is_empty());
        assert_eq!(in_order([std::future::ready(1), std::future::ready(2)], 0).await, [1, 2]);
    }

    #[test]
    fn a_duplicate_name_is_refused_with_its_name() {
        let c = |n: &str| LockConfig::new(n, Duration::from_secs(1), Duration::ZERO).unwrap();
        assert!(check_distinct(&[c("a"), c("b")]).is_ok());
        let e = check_distinct(&[c("a"), c("b"), c("a")]).unwrap_err();
        assert!(e.to_string().contains("\"a\""), "{e}");
        assert!(e.to_string().contains("more than once"), "{e}");
    }

    #[test]
    fn concurrency_defaults_to_two_and_zero_is_one() {
        assert_eq!(BatchOptions::new().concurrency.get(), 2);
        assert_eq!(BatchOptions::new().with_concurrency(0).concurrency.get(), 1);
        assert_eq!(BatchOptions::default().with_concurrency(8).concurrency.get(), 8);
    }
}
