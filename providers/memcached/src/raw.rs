//! [`RawConnection`] and [`RawReply`]: a bare meta-protocol connection, outside the provider's
//! pool and logic.

use std::fmt;

use shedlock::{Error, Result};

use crate::{
    BACKEND,
    builder::parse_address,
    conn::{Conn, ConnError},
    error::map_err,
};

// Named only in doc links.
#[cfg(doc)]
use crate::{MAX_LINE_LEN, MAX_VALUE_LEN, MemcachedLockProvider};

/// A bare meta-protocol connection, for tests, benchmarks and operators: it sends the bytes it
/// is given and reads one reply, with none of the provider's logic (no key encoding, no pool,
/// no time limit). Combine it with [`MemcachedLockProvider::key`] to inspect or remove a lock's
/// record (`mg <key> b t v`, `md <key> b`). It reads what the provider reads: values up to
/// [`MAX_VALUE_LEN`] bytes and lines up to [`MAX_LINE_LEN`]. After an error other than an error
/// line from the server the connection is closed, and every later request fails with
/// [`Error::Unavailable`]: open a new one.
pub struct RawConnection {
    /// `None` once an exchange failed and the connection was closed.
    pub(crate) conn: Option<Conn>,
}

impl fmt::Debug for RawConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RawConnection").field("conn", &self.conn).finish()
    }
}

/// The reply to one meta command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RawReply {
    /// The two-letter return code: `HD`, `VA`, `EN`, `NS`, `EX`, `NF`, `MN`.
    pub code: String,
    /// The returned flags, e.g. `c42` (CAS) or `t10` (TTL left).
    pub flags: Vec<String>,
    /// The value, for a `VA` reply.
    pub value: Option<Vec<u8>>,
}

impl RawReply {
    /// The token of flag `f`, e.g. `Some("42")` for `c42` and `f = 'c'`.
    pub fn flag(&self, f: char) -> Option<&str> {
        self.flags.iter().find_map(|t| t.strip_prefix(f))
    }
}

impl RawConnection {
    /// Connects to `address` (`host:port` or `memcache://host:port`), in plaintext. For TLS,
    /// open one with [`MemcachedLockProvider::raw_connection`] on a provider built with the TLS
    /// settings.
    pub async fn connect(address: &str) -> Result<Self> {
        let address = parse_address(address)?;
        Ok(Self { conn: Some(Conn::open(&address, None).await.map_err(map_err)?) })
    }

    /// Sends `request` — a meta command line and, for `ms`, its data block, each ending in
    /// `\r\n` — and reads the reply. An error line (`ERROR`, `CLIENT_ERROR …`,
    /// `SERVER_ERROR …`) is [`Error::Backend`]; a broken connection
    /// [`Error::Unavailable`]; a reply over this client's limits (a value over
    /// [`MAX_VALUE_LEN`], a line over [`MAX_LINE_LEN`]) [`Error::Backend`], read no further.
    /// After any error but an error line the connection is closed.
    pub async fn request(&mut self, request: &[u8]) -> Result<RawReply> {
        let conn = self.conn.as_mut().ok_or_else(|| {
            Error::unavailable(
                BACKEND,
                ConnError::Io(std::io::Error::other(
                    "this connection was closed after an earlier error; open a new one",
                )),
            )
        })?;
        match conn.request(request, None).await {
            Ok(r) => Ok(RawReply { code: r.code_str(), flags: r.flags, value: r.value }),
            Err(e @ ConnError::Server(_)) => Err(map_err(e)),
            Err(e) => {
                // Out of step with the server (or broken): never read from it again.
                self.conn = None;
                Err(map_err(e))
            }
        }
    }
}
