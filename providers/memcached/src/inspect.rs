//! What `inspect` and `force_release` read: a lock's record and its CAS, with one meta get.

use std::time::{Duration, SystemTime};

use shedlock::{Result, TimeSource, inspect::LockInfo, store::Operation, store::Settings};

use crate::{
    conn::Checkout,
    error::{read_error, unexpected},
    proto::meta_get,
    store::MemcachedStore,
};

impl MemcachedStore {
    /// `mg <key> b v t c` on `c`: lock `name`'s record (value, remaining TTL) and its CAS, or
    /// `None` (`EN`).
    pub(crate) async fn read(
        &self,
        c: &mut Checkout<'_>,
        name: &str,
        key: &str,
        settings: &Settings,
        operation: Operation,
    ) -> Result<Option<(LockInfo, u64)>> {
        let deadline = settings.deadline();
        let err = |e| read_error(operation, settings, e);
        let reply = c.conn().request(&meta_get(key, "v t c"), deadline).await.map_err(err)?;
        if reply.is("EN") {
            return Ok(None);
        }
        let (Some(value), Some(cas), true) = (reply.value.as_deref(), reply.cas(), reply.is("VA"))
        else {
            return Err(unexpected("inspect", &reply));
        };
        let text = String::from_utf8_lossy(value);
        let (owner, locked_by) = text.split_once(' ').unwrap_or((&text, ""));
        let mut info =
            LockInfo::new(name, owner, true, TimeSource::Server).with_locked_by(locked_by);
        // `t`: the seconds the server still keeps the record (-1: no expiry).
        if let Some(ttl) = reply.flag('t').and_then(|t| t.parse::<u64>().ok())
            && let Some(until) = SystemTime::now().checked_add(Duration::from_secs(ttl))
        {
            info = info.with_lock_until(until);
        }
        Ok(Some((info, cas)))
    }
}
