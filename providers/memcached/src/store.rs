//! [`MemcachedStore`], the records on one server, and its [`LeaseStore`] implementation: the
//! meta commands each call sends, CAS-checked.

use std::fmt;

use async_trait::async_trait;
use shedlock::{
    Capabilities, Result,
    inspect::{ForceRelease, LockInfo},
    store::{Extension, Granted, LeaseStore, Operation, Request, Settings},
};
use tokio::time::Instant;

use crate::{
    GRANULARITY,
    conn::{Epoch, Pool},
    error::{call_error, map_err, read_error, too_long, unexpected},
    proto::{Reply, at_least_ttl, at_most_ttl, meta_delete, meta_set},
};

/// The records on one memcached server: a key per lock, CAS-checked.
pub(crate) struct MemcachedStore {
    pub(crate) pool: Pool,
    pub(crate) prefix: Vec<u8>,
    pub(crate) max_name_len: usize,
}

impl fmt::Debug for MemcachedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemcachedStore")
            .field("address", &self.pool.address())
            .field("key_prefix", &String::from_utf8_lossy(&self.prefix))
            .field("max_name_len", &self.max_name_len)
            .field("max_connections", &self.pool.max())
            .field("tls", &self.pool.tls())
            .finish()
    }
}
impl MemcachedStore {
    /// The key, value and `ms` command (add only: `ME`) that take the lock of `req`.
    fn take_request(&self, req: &Request<'_>) -> Result<(String, Vec<u8>, Vec<u8>)> {
        let key = self.encode_key(req.name());
        let ttl = at_most_ttl(req.lock_at_most_for()).ok_or_else(|| too_long(req.config()))?;
        let value = format!("{} {}", req.owner().hex(), req.owner().locked_by()).into_bytes();
        let request = meta_set(&key, &value, &format!("T{ttl} ME c"));
        Ok((key, value, request))
    }
}

/// What the reply to a [`MemcachedStore::take_request`] says: `NS` held elsewhere, `HD` with
/// its CAS taken (on the server process `epoch`), anything else an error.
fn taken(
    reply: &Reply,
    key: String,
    value: Vec<u8>,
    epoch: Option<Epoch>,
) -> Result<Option<Granted<Held>>> {
    match (reply.code_str().as_str(), reply.cas(), epoch) {
        ("NS", _, _) => Ok(None),
        ("HD", Some(cas), Some(epoch)) => {
            Ok(Some(Granted::new(Held { key, value, cas, epoch, since: Instant::now() })))
        }
        _ => Err(unexpected("acquire", reply)),
    }
}

/// A held lock: the record's key, value and CAS, and the server process that stored it.
pub(crate) struct Held {
    key: String,
    value: Vec<u8>,
    cas: u64,
    epoch: Epoch,
    /// When the acquire or the last extend was answered: `lock_at_least_for` counts from here
    /// (no earlier than the server stored the record).
    since: Instant,
}

#[async_trait]
impl LeaseStore for MemcachedStore {
    type Held = Held;

    fn capabilities(&self, _: &Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            .with_fencing(false)
            .with_server_time(true)
            .with_owner_checked(true)
            .with_granularity(GRANULARITY)
            .with_max_name_len(Some(self.max_name_len))
            .with_check(true)
            // memcached cannot enumerate its keys (no SCAN; `lru_crawler metadump` walks the
            // whole cache and is not a paged listing), so no `list`.
            .with_inspect(true)
            .with_list(false)
            .with_force_release(true)
            .with_native_batch(true)
    }

    fn enforces_deadline(&self) -> bool {
        true
    }

    /// One meta no-op (`mn`, answered `MN`) on a pooled connection: the server is reachable
    /// and speaks the meta protocol (memcached 1.6 or newer).
    async fn check(&self, _: &Settings) -> Result<()> {
        let mut c = self.pool.checkout(None).await.map_err(map_err)?;
        let reply = c.conn().request(b"mn\r\n", None).await.map_err(map_err)?;
        if reply.is("MN") {
            c.done();
            Ok(())
        } else {
            Err(unexpected("check", &reply))
        }
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let (key, value, request) = self.take_request(req)?;
        let deadline = req.deadline();
        let err = |e| call_error(req, e);
        let mut c = self.pool.checkout(deadline).await.map_err(err)?;
        let reply = c.conn().request(&request, deadline).await.map_err(err)?;
        let granted = taken(&reply, key, value, c.conn().epoch())?;
        c.done();
        Ok(granted)
    }

    /// The batch's `ms` commands in one pipeline on one connection (one round trip); each
    /// reply is read as [`acquire`](LeaseStore::acquire) reads its own.
    async fn acquire_many(&self, reqs: &[Request<'_>]) -> Result<Vec<Option<Granted<Held>>>> {
        let Some(first) = reqs.first() else { return Ok(Vec::new()) };
        let mut taking = Vec::with_capacity(reqs.len());
        let mut requests = Vec::with_capacity(reqs.len());
        for req in reqs {
            let (key, value, request) = self.take_request(req)?;
            taking.push((key, value));
            requests.push(request);
        }
        let deadline = first.deadline();
        let err = |e| call_error(first, e);
        let mut c = self.pool.checkout(deadline).await.map_err(err)?;
        let replies = c.conn().pipeline(&requests, deadline).await.map_err(err)?;
        let epoch = c.conn().epoch();
        // An unexpected reply fails the batch as a whole; the connection is then dropped (not
        // given back), and what the batch took expires after lock_at_most_for.
        let out = replies
            .iter()
            .zip(taking)
            .map(|(reply, (key, value))| taken(reply, key, value, epoch))
            .collect::<Result<Vec<_>>>()?;
        c.done();
        Ok(out)
    }

    fn batch_limit(&self) -> usize {
        200
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        let remaining = req.lock_at_least_for().saturating_sub(held.since.elapsed());
        let cas = held.cas;
        let request = if remaining.is_zero() {
            meta_delete(&held.key, &format!("C{cas}"))
        } else {
            meta_set(&held.key, &held.value, &format!("C{cas} T{}", at_least_ttl(remaining)))
        };
        let deadline = req.deadline();
        let err = |e| call_error(req, e);
        let mut c = self.pool.checkout(deadline).await.map_err(err)?;
        if c.conn().epoch() != Some(held.epoch) {
            // Another server process: it lost every record, this lock's included.
            c.done();
            return Ok(());
        }
        let reply = c.conn().request(&request, deadline).await.map_err(err)?;
        // HD: released (or kept for at least); EX: another holder's record; NF: gone.
        if reply.is("HD") || reply.is("EX") || reply.is("NF") {
            c.done();
            Ok(())
        } else {
            Err(unexpected("unlock", &reply))
        }
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let ttl = at_most_ttl(req.lock_at_most_for()).ok_or_else(|| too_long(req.config()))?;
        let request = meta_set(&held.key, &held.value, &format!("C{} T{ttl} c", held.cas));
        let deadline = req.deadline();
        let err = |e| call_error(req, e);
        let mut c = self.pool.checkout(deadline).await.map_err(err)?;
        if c.conn().epoch() != Some(held.epoch) {
            c.done();
            return Ok(Extension::Lost);
        }
        let reply = c.conn().request(&request, deadline).await.map_err(err)?;
        if reply.is("EX") || reply.is("NF") {
            c.done();
            return Ok(Extension::Lost);
        }
        let cas = match (reply.is("HD"), reply.cas()) {
            (true, Some(cas)) => {
                c.done();
                cas
            }
            _ => return Err(unexpected("extend", &reply)),
        };
        held.cas = cas;
        held.since = Instant::now();
        Ok(Extension::Extended)
    }

    /// One meta get (`mg <key> b v t c`): held while the record exists, since memcached expires
    /// it by its own clock.
    async fn inspect(&self, name: &str, settings: &Settings) -> Result<Option<LockInfo>> {
        let key = self.encode_key(name);
        let err = |e| read_error(Operation::Inspect, settings, e);
        let mut c = self.pool.checkout(settings.deadline()).await.map_err(err)?;
        let read = self.read(&mut c, name, &key, settings, Operation::Inspect).await?;
        c.done();
        Ok(read.map(|(info, _)| info))
    }

    /// A meta get, and if the record is still the acquisition seen a meta delete conditioned on
    /// the CAS just read (`md <key> b C<cas>`), on one connection (so on one server process).
    async fn force_release(&self, seen: &LockInfo, settings: &Settings) -> Result<ForceRelease> {
        let key = self.encode_key(&seen.name);
        let op = Operation::ForceRelease;
        let err = |e| read_error(op, settings, e);
        let mut c = self.pool.checkout(settings.deadline()).await.map_err(err)?;
        let Some((current, cas)) = self.read(&mut c, &seen.name, &key, settings, op).await? else {
            c.done();
            return Ok(ForceRelease::Changed(None));
        };
        if current.acquisition != seen.acquisition {
            c.done();
            return Ok(ForceRelease::Changed(Some(current)));
        }
        let reply = c
            .conn()
            .request(&meta_delete(&key, &format!("C{cas}")), settings.deadline())
            .await
            .map_err(err)?;
        if reply.is("HD") {
            c.done();
            return Ok(ForceRelease::Released(current));
        }
        if !(reply.is("EX") || reply.is("NF")) {
            return Err(unexpected("force_release", &reply));
        }
        // Changed between the two requests: what is there now.
        let now = self.read(&mut c, &seen.name, &key, settings, op).await?;
        c.done();
        Ok(ForceRelease::Changed(now.map(|(info, _)| info)))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use std::time::Duration;

    use shedlock::LockProvider;

    use crate::MemcachedLockProvider;

    #[test]
    fn capabilities_are_the_documented_ones() {
        let c = MemcachedLockProvider::builder("127.0.0.1:1").build().unwrap().capabilities();
        assert!(c.extend && c.server_time && c.owner_checked && !c.fencing);
        assert_eq!(c.granularity, Duration::from_secs(2));
    }
}
