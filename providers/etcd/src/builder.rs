//! The builder: the provider's settings, their checks, and `build`.

use std::{
    collections::HashMap,
    fmt,
    sync::{Arc, Mutex},
};

use etcd_client::Client;
use shedlock::{Result, store::ProviderSettings};

use crate::{BACKEND, EtcdLockProvider, ProviderBuilder, keys, provider::Inner, watch};

#[cfg(doc)]
use shedlock::Error;

#[cfg(doc)]
use crate::MAX_PREFIX_LEN;

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "shedlock/";

/// Builds an [`EtcdLockProvider`]; see [`EtcdLockProvider::builder`].
///
/// The shared setters (`operation_timeout`, `locked_by`) come from [`ProviderBuilder`], in scope
/// with `use shedlock_etcd::ProviderBuilder;`. Here `locked_by` is stored as the key's value
/// (ownership rests on the acquisition's revision); when every endpoint is down, an operation
/// waits for one to come back until its time limit.
#[must_use]
pub struct EtcdLockProviderBuilder {
    client: Client,
    prefix: String,
    settings: ProviderSettings,
    reuse: bool,
    watch_for_loss: bool,
}

impl fmt::Debug for EtcdLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockProviderBuilder")
            .field("prefix", &self.prefix)
            .field("settings", &self.settings)
            .field("reuse_leases", &self.reuse)
            .field("watch_for_loss", &self.watch_for_loss)
            .finish_non_exhaustive()
    }
}

impl ProviderBuilder for EtcdLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl EtcdLockProviderBuilder {
    /// The key prefix (default [`DEFAULT_PREFIX`], `shedlock/`). Not empty, at most
    /// [`MAX_PREFIX_LEN`] bytes, no control characters; a `/` is added when it does not end with
    /// one (`billing` is `billing/`). Lock `N` is the key `<prefix>/<N>`, with `%` and `/` in `N`
    /// written `%25` and `%2F`: the last `/` of a key ends the prefix, so two prefixes never
    /// share a key (`app` + `2x` is `app/2x`, `app2` + `x` is `app2/x`). Give every application
    /// (or environment) sharing a cluster its own prefix, and grant its etcd role exactly that
    /// prefix (README, "Permissions").
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Whether to keep the leases of released locks (and of attempts that found the name held)
    /// for the next acquire with the same TTL (default `true`). A kept lease makes an acquire one
    /// round trip instead of two: the transaction goes out together with a keep-alive of the
    /// lease, which restarts its full TTL. The cost: each instance keeps up to 8 idle leases per
    /// distinct TTL on the server until they expire unused (after one TTL), and the leases are
    /// renewed (never a raft write) on each reuse. With `false`, every acquire grants a new lease
    /// and every unlock revokes it.
    pub fn reuse_leases(mut self, reuse: bool) -> Self {
        self.reuse = reuse;
        self
    }

    /// Whether held locks are watched (default `true`): the moment etcd deletes a held lock's key
    /// (an operator revoked its lease or deleted the key, or the lease expired while this
    /// process was stalled), the lock's lost signal fires ([`shedlock::Lock::lost_signal`]; the
    /// executor and [`shedlock::KeepAliveProvider`] report it), instead of at the next extend or
    /// at the lock's own deadline. The cost: one watch stream per provider, open while it is in
    /// use, and one watch created and cancelled on it per lock held longer than 200 ms, off the
    /// call's path (a loss in those first 200 ms is reported when the watch starts: etcd replays
    /// every event since the acquiring put). With
    /// `false` a revoked lease is noticed at the next extend (`LockLost`) or the deadline.
    pub fn watch_for_loss(mut self, watch: bool) -> Self {
        self.watch_for_loss = watch;
        self
    }

    /// Checks the settings and builds the provider. Does no I/O: an unreachable cluster shows at
    /// the first lock call ([`Error::Unavailable`] or [`Error::Timeout`]).
    pub fn build(self) -> Result<EtcdLockProvider> {
        let prefix = keys::normalize_prefix(&self.prefix)?;
        let settings = self.settings.validate(BACKEND)?;
        let loss = self.watch_for_loss.then(|| watch::LossWatch::new(self.client.clone()));
        Ok(EtcdLockProvider {
            inner: Arc::new(Inner {
                loss,
                client: self.client,
                prefix: prefix.into_bytes(),
                locked_by: settings.locked_by().to_owned(),
                timeout: settings.timeout(),
                reuse: self.reuse,
                pool: Mutex::new(HashMap::new()),
            }),
        })
    }
}

impl EtcdLockProvider {
    /// A builder over `client`; see [`EtcdLockProviderBuilder`].
    pub fn builder(client: Client) -> EtcdLockProviderBuilder {
        EtcdLockProviderBuilder {
            client,
            prefix: DEFAULT_PREFIX.to_owned(),
            settings: ProviderSettings::new(),
            reuse: true,
            watch_for_loss: true,
        }
    }
}
