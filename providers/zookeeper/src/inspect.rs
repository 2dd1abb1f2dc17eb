//! What an operator reads and releases: `inspect`, `list` and `force_release`.

use shedlock::{Error, ForceRelease, LockInfo, LockPage, Result};
use zookeeper_client::MultiWriteError;

use crate::{BACKEND, auth::Op, keys::name_for, record::record, session::Inner};

#[cfg(doc)]
use shedlock::LockProvider;

/// How many lock nodes one read of [`LockProvider::list`] asks for at most (a multi-read of
/// escaped names of up to 3 KiB each stays far below the server's 1 MiB packet limit).
const LIST_BATCH: usize = 128;

/// How often a forced release reads again when the name changed between its read and its
/// delete.
const FORCE_RELEASE_ATTEMPTS: usize = 3;

impl Inner {
    /// [`LockProvider::inspect`] after the name check, without the time limit.
    pub(crate) async fn inspect(&self, name: &str) -> Result<Option<LockInfo>> {
        let client = self.client().await?;
        let p = self.paths(name);
        let snap = self.snapshot(&client, &[&p.lock], true).await?;
        let now = snap.leader_now()?;
        Ok(snap
            .nodes
            .into_iter()
            .next()
            .flatten()
            .map(|(data, stat)| record(name, &data, &stat, now)))
    }

    /// [`LockProvider::list`] after the prefix check, without the time limit: the root's
    /// children (one answer holding them all: ZooKeeper's API has no paging), decoded, filtered
    /// by the prefix, sorted; then their lock nodes, in batches, until the page and one more
    /// record are found (name nodes without a lock node hold no record).
    pub(crate) async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LockPage> {
        let client = self.client().await?;
        let children = match client.list_children(&self.root).await {
            Ok(c) => c,
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(e) => return Err(self.refused(Op::List(&self.root), e)),
        };
        let mut names: Vec<String> = children
            .iter()
            .filter_map(|key| name_for(key))
            .filter(|n| n.starts_with(prefix) && cursor.is_none_or(|c| n.as_str() > c))
            .collect();
        names.sort_unstable();
        let mut records = Vec::new();
        let mut rest = names.as_slice();
        while !rest.is_empty() && records.len() <= limit {
            let take = (limit + 1 - records.len()).min(LIST_BATCH).min(rest.len());
            let (batch, tail) = rest.split_at(take);
            rest = tail;
            let paths: Vec<String> = batch.iter().map(|n| self.paths(n).lock).collect();
            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
            let snap = self.snapshot(&client, &refs, true).await?;
            let now = snap.leader_now()?;
            for (name, node) in batch.iter().zip(snap.nodes) {
                if let Some((data, stat)) = node {
                    records.push(record(name, &data, &stat, now));
                }
            }
        }
        Ok(LockPage::from_overfetch(records, limit))
    }

    /// [`LockProvider::force_release`] after the name check, without the time limit: a read of
    /// the name and lock nodes (with the leader's now), then, if the lock node is still the
    /// acquisition seen (its `czxid`), one transaction: `check` the name node's version read
    /// (no acquisition since) and `delete` the lock node.
    pub(crate) async fn force_release(&self, seen: &LockInfo) -> Result<ForceRelease> {
        let client = self.client().await?;
        let p = self.paths(&seen.name);
        for _ in 0..FORCE_RELEASE_ATTEMPTS {
            let snap = self.snapshot(&client, &[&p.name, &p.lock], true).await?;
            let now = snap.leader_now()?;
            let mut nodes = snap.nodes.into_iter();
            let name_node = nodes.next().flatten();
            let Some((data, stat)) = nodes.next().flatten() else {
                return Ok(ForceRelease::Changed(None));
            };
            let info = record(&seen.name, &data, &stat, now);
            if info.acquisition != seen.acquisition {
                return Ok(ForceRelease::Changed(Some(info)));
            }
            let Some((_, name_stat)) = name_node else {
                return Err(Error::backend(
                    BACKEND,
                    format!("the lock node {} has no name node", p.lock),
                ));
            };
            let mut w = client.new_multi_writer();
            let built = (|| {
                w.add_check_version(&p.name, name_stat.version)?;
                w.add_delete(&p.lock, None)
            })();
            built.map_err(|e| self.map(e))?;
            use zookeeper_client::Error as Z;
            match w.commit().await {
                Ok(_) => return Ok(ForceRelease::Released(info)),
                // Released, or acquired again, in between: look again.
                Err(MultiWriteError::OperationFailed {
                    source: Z::NoNode | Z::BadVersion, ..
                }) => {}
                Err(e) => {
                    return Err(self.refused_multi(&[Op::Check(&p.name), Op::Delete(&p.lock)], e));
                }
            }
        }
        Err(Error::unavailable(
            BACKEND,
            "the lock changed under every attempt to release it; try again",
        ))
    }
}
