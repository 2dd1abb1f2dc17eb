//! [`MemcachedLockProviderBuilder`]: the address, the key prefix, the pool size, TLS and the
//! checks `build` makes (no I/O).

use shedlock::{
    ProviderBuilder, Result,
    store::{ProviderSettings, StoreProvider},
};

use crate::{
    BACKEND, DEFAULT_KEY_PREFIX, DEFAULT_MAX_CONNECTIONS, KEY_DELIMITER, MAX_KEY_LEN,
    MemcachedLockProvider, conn::Pool, store::MemcachedStore, tls::TlsSettings,
};

// Named only in doc links.
use shedlock::Error;

/// Builds a [`MemcachedLockProvider`].
///
/// The shared setters (`operation_timeout`, `locked_by`) come from [`ProviderBuilder`], in scope
/// with `use shedlock_memcached::ProviderBuilder;`. Here the time limit includes waiting for a
/// connection and connecting; ownership rests on the record's CAS value, never on `locked_by`.
#[must_use]
#[derive(Debug)]
pub struct MemcachedLockProviderBuilder {
    address: String,
    prefix: Vec<u8>,
    settings: ProviderSettings,
    max_connections: usize,
    tls: TlsSettings,
}

impl ProviderBuilder for MemcachedLockProviderBuilder {
    fn settings_mut(&mut self) -> &mut ProviderSettings {
        &mut self.settings
    }
}

impl MemcachedLockProviderBuilder {
    /// The start of every key (default [`DEFAULT_KEY_PREFIX`]): any bytes, since keys are sent
    /// base64-encoded. A non-empty prefix that does not end with [`KEY_DELIMITER`] (`:`) gets
    /// one appended (`myapp` is `myapp:`; `myapp:lock:` stays as it is), so that providers with
    /// different prefixes never share a key (see [Keys](crate#keys)); the empty prefix stays
    /// empty. It shortens the longest lock name: prefix (with its `:`) and name together hold at
    /// most [`MAX_KEY_LEN`] bytes.
    pub fn key_prefix(mut self, prefix: impl AsRef<[u8]>) -> Self {
        self.prefix = prefix.as_ref().to_vec();
        self
    }

    /// How many connections the provider opens at most (default [`DEFAULT_MAX_CONNECTIONS`],
    /// at least 1). Calls beyond that wait for a free connection (within the operation timeout).
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }

    /// Connect over TLS, trusting exactly the certificate authorities in `pem` (PEM text: one
    /// CA, or a bundle of several, each trusted): memcached's certificate (`-o
    /// ssl_chain_cert=…`) must be signed by one of them. The client trusts no system roots, so
    /// TLS needs this setting; any TLS setting turns TLS on for every connection of the
    /// provider, reconnects included. Needs the `tls` feature (without it [`build`](Self::build)
    /// fails with [`Error::Setup`]). See [TLS](crate#tls).
    pub fn tls_ca_pem(mut self, pem: impl Into<String>) -> Self {
        self.tls.ca_pem = Some(pem.into());
        self
    }

    /// The name memcached's certificate is verified against (a DNS name or an IP address),
    /// when it is not the host of the address (default): e.g. an address given as an IP, a
    /// certificate issued for `cache.internal`. Turns TLS on (see [`tls_ca_pem`](Self::tls_ca_pem)).
    pub fn tls_server_name(mut self, name: impl Into<String>) -> Self {
        self.tls.server_name = Some(name.into());
        self
    }

    /// A client certificate (PEM; its chain may follow it) and its private key (PEM: PKCS#8,
    /// RSA or SEC1), presented to a memcached that asks for one (`-o ssl_verify_mode=2` with
    /// `ssl_ca_cert=…`): with this client, the only way memcached can keep clients out (see
    /// [Security](crate#security)). The key is never printed. Turns TLS on (see [`tls_ca_pem`](Self::tls_ca_pem)).
    pub fn tls_identity(mut self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Self {
        self.tls.identity = Some((cert_pem.into(), key_pem.into()));
        self
    }

    /// Validates the configuration and builds the provider. An address that is not
    /// `host:port` (optionally `memcache://host:port`), a prefix that leaves no room for a name,
    /// a `locked_by` over 255 bytes, zero connections, or TLS settings that are not usable (no
    /// CA, PEM text that does not parse, a server name that is neither a DNS name nor an IP
    /// address, TLS asked for without the `tls` feature) give [`Error::Setup`]. Does no I/O.
    pub fn build(self) -> Result<MemcachedLockProvider> {
        let address = parse_address(&self.address)?;
        let tls = self.tls.connector(host_of(&address))?;
        let prefix = delimited(self.prefix);
        if prefix.len() >= MAX_KEY_LEN {
            return Err(Error::setup(
                BACKEND,
                format!(
                    "the key prefix is {} bytes long (its final ':' included); prefix and lock name \
                 together hold at most {MAX_KEY_LEN} bytes",
                    prefix.len()
                ),
            ));
        }
        let settings = self.settings.validate(BACKEND)?;
        if self.max_connections == 0 {
            return Err(Error::setup(BACKEND, "max_connections must be at least 1"));
        }
        let store = MemcachedStore {
            pool: Pool::new(address, tls, self.max_connections),
            max_name_len: MAX_KEY_LEN - prefix.len(),
            prefix,
        };
        Ok(MemcachedLockProvider { inner: StoreProvider::new(store, settings) })
    }
}

/// `prefix` ending with [`KEY_DELIMITER`]: as it is when it already does (or is empty), else
/// with one appended.
pub(crate) fn delimited(mut prefix: Vec<u8>) -> Vec<u8> {
    if prefix.last().is_some_and(|b| *b != KEY_DELIMITER) {
        prefix.push(KEY_DELIMITER);
    }
    prefix
}

/// The host of a checked `host:port` (an IPv6 address keeps its brackets).
pub(crate) fn host_of(address: &str) -> &str {
    address.rsplit_once(':').map_or(address, |(host, _)| host)
}

/// `host:port` from `host:port`, `memcache://host:port` or `memcached://host:port` (a trailing
/// `/` allowed).
pub(crate) fn parse_address(address: &str) -> Result<String> {
    let a = address.trim();
    let a = a
        .strip_prefix("memcache://")
        .or_else(|| a.strip_prefix("memcached://"))
        .unwrap_or(a)
        .trim_end_matches('/');
    let valid = match a.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && port.parse::<u16>().is_ok_and(|p| p != 0)
                && !host.contains(|c: char| c.is_whitespace() || c == '/' || c == '@')
        }
        None => false,
    };
    if valid {
        Ok(a.to_owned())
    } else {
        Err(Error::setup(
            BACKEND,
            format!(
                "address {address:?} is not host:port (e.g. 127.0.0.1:11211 or memcache://host:11211)"
            ),
        ))
    }
}
impl MemcachedLockProvider {
    /// Starts a builder for the server at `address`: `host:port`, or `memcache://host:port`.
    pub fn builder(address: impl Into<String>) -> MemcachedLockProviderBuilder {
        MemcachedLockProviderBuilder {
            address: address.into(),
            prefix: DEFAULT_KEY_PREFIX.as_bytes().to_vec(),
            settings: ProviderSettings::new(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            tls: TlsSettings::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]

    use shedlock::{Error, LockProvider};

    use crate::proto::base64;

    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        assert_eq!(parse_address("127.0.0.1:11211").unwrap(), "127.0.0.1:11211");
        assert_eq!(parse_address("memcache://127.0.0.1:11311/").unwrap(), "127.0.0.1:11311");
        assert_eq!(parse_address("memcached://cache.local:1").unwrap(), "cache.local:1");
        assert_eq!(parse_address("[::1]:11211").unwrap(), "[::1]:11211");
        for bad in ["", "127.0.0.1", ":11211", "host:0", "host:x", "a b:1", "memcache://"] {
            assert!(matches!(parse_address(bad), Err(Error::Setup { .. })), "{bad:?}");
        }
    }

    #[test]
    fn build_checks_prefix_locked_by_and_connections_without_io() {
        let b = || MemcachedLockProvider::builder("127.0.0.1:1");
        let p = b().build().unwrap();
        assert_eq!(p.max_name_len(), MAX_KEY_LEN - DEFAULT_KEY_PREFIX.len());
        assert_eq!(p.capabilities().max_name_len, Some(177));
        assert_eq!(p.key("a").unwrap(), base64(b"shedlock:a"));
        let p = b().key_prefix("").build().unwrap();
        assert_eq!(p.max_name_len(), MAX_KEY_LEN);
        // The appended ':' counts: 184 bytes and ':' leave one byte of name, 185 none.
        let p = b().key_prefix(vec![b'p'; MAX_KEY_LEN - 2]).build().unwrap();
        assert_eq!(p.max_name_len(), 1);
        assert!(b().key_prefix(vec![b':'; MAX_KEY_LEN - 1]).build().is_ok());
        assert!(matches!(
            b().key_prefix(vec![b'p'; MAX_KEY_LEN - 1]).build(),
            Err(Error::Setup { .. })
        ));
        assert!(matches!(b().locked_by("x".repeat(256)).build(), Err(Error::Setup { .. })));
        assert!(matches!(b().max_connections(0).build(), Err(Error::Setup { .. })));
    }

    #[test]
    fn a_prefix_gets_a_final_colon_unless_it_has_one_or_is_empty() {
        let prefix = |p: &str| {
            MemcachedLockProvider::builder("127.0.0.1:1")
                .key_prefix(p)
                .build()
                .unwrap()
                .key_prefix()
                .to_vec()
        };
        assert_eq!(prefix("app"), b"app:");
        assert_eq!(prefix("app:"), b"app:");
        assert_eq!(prefix("myapp:lock:"), b"myapp:lock:");
        assert_eq!(prefix("a/"), b"a/:");
        assert_eq!(prefix(""), b"");
        assert_eq!(prefix(DEFAULT_KEY_PREFIX), DEFAULT_KEY_PREFIX.as_bytes());
        let p = MemcachedLockProvider::builder("127.0.0.1:1").key_prefix("app").build().unwrap();
        assert_eq!(p.max_name_len(), MAX_KEY_LEN - 4);
        assert_eq!(p.key("x").unwrap(), base64(b"app:x"));
    }
}
