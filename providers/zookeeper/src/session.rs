//! The provider's shared state and its ZooKeeper session (opened on first use, reopened once it
//! ended), and the creation of the root and other persistent nodes.

use std::{collections::HashMap, time::Duration};

use shedlock::{Error, Result};
use tokio::{sync::Mutex, time::Instant};
use zookeeper_client::{Acl, Acls, Client, CreateMode, CreateOptions, SessionState};

use crate::{
    BACKEND, NodeAcl,
    auth::{Credential, Op},
    error::HostsFailed,
    tls,
};

pub(crate) struct Inner {
    pub(crate) connect_string: String,
    pub(crate) root: String,
    pub(crate) clock_path: String,
    pub(crate) session_timeout: Duration,
    pub(crate) connection_timeout: Option<Duration>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) locked_by: String,
    /// Presented by every session this provider opens. Never printed.
    pub(crate) credentials: Vec<Credential>,
    /// Who the credentials make the provider, for messages (schemes and digest users only).
    pub(crate) identity: String,
    /// What nodes are created with (the builder's choice or the default), and as entries.
    pub(crate) node_acl: NodeAcl,
    pub(crate) acls: Vec<Acl>,
    /// TLS to every server (through the forwarder of [`tls`]), when asked for.
    pub(crate) tls: Option<tls::Tls>,
    /// The session, opened on first use and replaced once it expired or closed.
    pub(crate) client: Mutex<Option<Client>>,
    /// Per lock node seen live by a clock-node look: its mzxid and a monotonic instant before
    /// which it surely has not expired. Spares the clock write while it holds.
    pub(crate) live: std::sync::Mutex<HashMap<String, (i64, Instant)>>,
}

impl Inner {
    /// How persistent nodes (root, name nodes, clock node) are created: with the node ACL.
    pub(crate) fn persistent(&self) -> CreateOptions<'_> {
        CreateMode::Persistent.with_acls(Acls::new(&self.acls))
    }

    /// How lock nodes are created: ephemeral, with the node ACL.
    pub(crate) fn ephemeral(&self) -> CreateOptions<'_> {
        CreateMode::Ephemeral.with_acls(Acls::new(&self.acls))
    }

    /// The live session: opened on first use, reopened after it expired or was closed. While
    /// the client is disconnected (reconnecting on its own), calls fail at once with the
    /// retryable [`Error::Unavailable`] instead of queueing a lock request that would be sent
    /// after the caller gave up.
    pub(crate) async fn client(&self) -> Result<Client> {
        let mut slot = self.client.lock().await;
        if let Some(c) = slot.as_ref() {
            match c.state() {
                SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                    return Ok(c.clone());
                }
                SessionState::Disconnected => {
                    return Err(Error::unavailable(
                        BACKEND,
                        "disconnected from ZooKeeper (the client is reconnecting)",
                    ));
                }
                state => {
                    tracing::info!(?state, "the ZooKeeper session ended; opening a new one");
                    *slot = None;
                }
            }
        }
        let mut connector =
            Client::connector().with_session_timeout(self.session_timeout).with_fail_eagerly();
        if let Some(t) = self.connection_timeout {
            connector = connector.with_connection_timeout(t);
        }
        for c in &self.credentials {
            connector = connector.with_auth(c.scheme(), c.secret());
        }
        // With TLS, the client reaches the servers through the forwarder.
        let connect_string = match &self.tls {
            Some(tls) => {
                tls.clear_failures();
                tls.connect_string()?
            }
            None => self.connect_string.clone(),
        };
        let client = match connector.connect(&connect_string).await {
            Ok(c) => c,
            Err(e) => {
                use zookeeper_client::Error as Z;
                // A failed TLS connection says more than the client's "no available hosts".
                let unreached = matches!(e, Z::NoHosts | Z::Timeout | Z::ConnectionLoss);
                if let Some(failure) =
                    self.tls.as_ref().filter(|_| unreached).and_then(tls::Tls::failure)
                {
                    return Err(failure);
                }
                return Err(match e {
                    Z::NoHosts => Error::unavailable(
                        BACKEND,
                        HostsFailed::probe(e, &self.connect_string, self.tls.is_some()).await,
                    ),
                    e => self.refused(Op::Authenticate, e),
                });
            }
        };
        tracing::debug!(session = %client.session_id(), "ZooKeeper session opened");
        *slot = Some(client.clone());
        Ok(client)
    }

    /// Creates a node under the root (and the root when missing). Idempotent: a node that
    /// exists is fine even where this identity may not create it (the server checks CREATE on
    /// the parent before it looks whether the node exists).
    pub(crate) async fn ensure_node(&self, client: &Client, path: &str) -> Result<()> {
        use zookeeper_client::Error as Z;
        let created = match client.create(path, b"", &self.persistent()).await {
            Err(Z::NoNode) => {
                self.create_root(client).await?;
                client.create(path, b"", &self.persistent()).await
            }
            other => other,
        };
        match created {
            Ok(_) | Err(Z::NodeExists) => Ok(()),
            Err(Z::NoAuth) if client.check_stat(path).await.is_ok_and(|s| s.is_some()) => Ok(()),
            Err(e) => Err(self.refused(Op::Create(path), e)),
        }
    }

    /// Creates the root and its missing ancestors, with the node ACL.
    pub(crate) async fn create_root(&self, client: &Client) -> Result<()> {
        tracing::debug!(root = %self.root, "creating the root path");
        client
            .mkdir(&self.root, &self.persistent())
            .await
            .map_err(|e| self.refused(Op::CreatePath(&self.root), e))
    }
}
