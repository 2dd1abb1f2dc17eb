//! Consistent reads of a few nodes, pipelined with a write of the clock node whose new `mtime`
//! is the leader's now: one round trip.

use shedlock::{Error, Result};
use tokio::time::Instant;
use zookeeper_client::{Client, MultiReadResult, Stat};

use crate::{BACKEND, auth::Op, keys::Paths, record::decode_hold, session::Inner};

/// The answer of [`Inner::snapshot`].
pub(crate) struct Snapshot {
    /// The leader's now, in ms since the epoch (`None`: not asked).
    pub(crate) now: Option<i64>,
    /// When the requests were sent: the leader stamped `now` after this instant.
    pub(crate) sent: Instant,
    /// Each node asked for, in order: its data and stat, `None` when missing.
    pub(crate) nodes: Vec<Option<(Vec<u8>, Stat)>>,
}

impl Snapshot {
    pub(crate) fn leader_now(&self) -> Result<i64> {
        self.now.ok_or_else(|| Error::backend(BACKEND, "a read without the leader's time"))
    }
}

pub(crate) struct Look {
    /// The leader's now, in ms since the epoch (`None`: not asked).
    pub(crate) now: Option<i64>,
    /// When the requests were sent: the leader stamped `now` after this instant.
    pub(crate) sent: Instant,
    pub(crate) name: Option<Stat>,
    pub(crate) lock: Option<(Option<i64>, Stat)>,
}

impl Inner {
    /// The leader's now (the clock node's new `mtime`), and the name and lock nodes as one
    /// consistent read, pipelined: both requests leave before either answer is awaited, so this
    /// costs one round trip.
    /// Without `clock`, only the read (`now` is then `None`).
    pub(crate) async fn look(&self, client: &Client, p: &Paths, clock: bool) -> Result<Look> {
        let snap = self.snapshot(client, &[&p.name, &p.lock], clock).await?;
        let mut nodes = snap.nodes.into_iter();
        let name = nodes.next().flatten().map(|(_, stat)| stat);
        let lock = nodes.next().flatten().map(|(data, stat)| (decode_hold(&data), stat));
        Ok(Look { now: snap.now, sent: snap.sent, name, lock })
    }

    /// The leader's now (with `clock`: the clock node's new `mtime`) and the nodes at `paths` as
    /// one consistent read (`None` for a missing node), pipelined: both requests leave before
    /// either answer is awaited, so this costs one round trip.
    pub(crate) async fn snapshot(
        &self,
        client: &Client,
        paths: &[&str],
        clock: bool,
    ) -> Result<Snapshot> {
        for _ in 0..2 {
            let sent = Instant::now();
            let clock = clock.then(|| client.set_data(&self.clock_path, b"", None));
            let mut reader = client.new_multi_reader();
            for path in paths {
                reader.add_get_data(path).map_err(|e| self.map(e))?;
            }
            let read = reader.commit();
            let (clock, read) = tokio::join!(
                async {
                    match clock {
                        Some(c) => Some(c.await),
                        None => None,
                    }
                },
                read
            );
            let now = match clock {
                None => None,
                Some(Ok(stat)) => Some(stat.mtime),
                Some(Err(zookeeper_client::Error::NoNode)) => {
                    self.ensure_node(client, &self.clock_path).await?;
                    continue;
                }
                Some(Err(e)) => return Err(self.refused(Op::SetData(&self.clock_path), e)),
            };
            let mut nodes = Vec::with_capacity(paths.len());
            for (i, answer) in read.map_err(|e| self.map(e))?.into_iter().enumerate() {
                nodes.push(match answer {
                    MultiReadResult::Data { data, stat } => Some((data, stat)),
                    MultiReadResult::Error { err: zookeeper_client::Error::NoNode } => None,
                    MultiReadResult::Error { err } => match paths.get(i) {
                        Some(path) => return Err(self.refused(Op::Read(path), err)),
                        None => return Err(self.map(err)),
                    },
                    other => {
                        return Err(Error::backend(
                            BACKEND,
                            format!("unexpected read answer {other:?}"),
                        ));
                    }
                });
            }
            if nodes.len() != paths.len() {
                return Err(Error::backend(
                    BACKEND,
                    format!("{} answers to a read of {} nodes", nodes.len(), paths.len()),
                ));
            }
            return Ok(Snapshot { now, sent, nodes });
        }
        Err(Error::backend(
            BACKEND,
            format!("the clock node {} keeps disappearing", self.clock_path),
        ))
    }
}
