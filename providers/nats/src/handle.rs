//! [`NatsHandle`], a held lock: unlock and extend, owner-checked by the sequence of its message.

use std::sync::Arc;

use shedlock::{Error, LockConfig, LockHandle, Result, store::Operation, support::duration_micros};
use tokio::time::Instant;

use crate::{inner::Inner, jetstream::Publish, request::run};

/// One held lock: the sequence of its current message (owner check) and of the acquiring one
/// (fencing token).
pub(crate) struct NatsHandle {
    pub(crate) inner: Arc<Inner>,
    pub(crate) subject: String,
    pub(crate) token: u64,
    pub(crate) rev: u64,
    /// When the answer of the acquire (or last extension) arrived: `lock_at_least_for` counts
    /// from here, which keeps the lock at least as long as asked.
    pub(crate) since: Instant,
    /// Client time only: `locked_at` of the current message.
    pub(crate) at_us: Option<i64>,
    /// Client time only: `lock_until` of the current message.
    pub(crate) until_us: Option<i64>,
}

#[async_trait::async_trait]
impl LockHandle for NatsHandle {
    async fn unlock(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        run(Operation::Unlock, config.name(), inner.settings.timeout(), async {
            let at_least = config.lock_at_least_for();
            // While lock_at_least_for lasts, republish (owner-checked) to hold the key until it
            // ends; after it, remove the message. A stale holder's republish fails the sequence
            // check and its purge finds a newer message: nothing changes either way.
            let keep = match self.at_us {
                // Client time: `lock_until` = the stored locked_at + lock_at_least_for.
                Some(at) => {
                    let until = at.saturating_add(duration_micros(at_least));
                    (until > inner.now_us().unwrap_or(i64::MAX)).then_some((at_least, Some(at)))
                }
                // Server time: a TTL of what remains, counted from the acquire's answer.
                None => at_least
                    .checked_sub(self.since.elapsed())
                    .filter(|d| !d.is_zero())
                    .map(|d| (d, None)),
            };
            match keep {
                Some((hold, at_us)) => {
                    let token = Some(self.token);
                    inner.publish("unlock", &self.subject, self.rev, hold, at_us, token).await?;
                }
                None => {
                    inner.purge_up_to("unlock", &self.subject, self.rev).await?;
                }
            }
            Ok(())
        })
        .await
    }

    async fn extend(&mut self, config: &LockConfig) -> Result<()> {
        let inner = &self.inner;
        let at_us = inner.now_us();
        // Client time: an expired lock is not revived, even if nobody took it since (the
        // sequence check alone would let it through); by the same clock that judges expiry.
        if let (Some(until), Some(now)) = (self.until_us, at_us)
            && until <= now
        {
            return Err(Error::LockLost { name: config.name().to_owned() });
        }
        run(Operation::Extend, config.name(), inner.settings.timeout(), async {
            match inner
                .publish(
                    "extend",
                    &self.subject,
                    self.rev,
                    config.lock_at_most_for(),
                    at_us,
                    Some(self.token),
                )
                .await?
            {
                Publish::Stored(seq) => {
                    self.rev = seq;
                    self.since = Instant::now();
                    self.at_us = at_us;
                    self.until_us = at_us
                        .map(|at| at.saturating_add(duration_micros(config.lock_at_most_for())));
                    Ok(())
                }
                Publish::WrongLast(_) => Err(Error::LockLost { name: config.name().to_owned() }),
            }
        })
        .await
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.token)
    }
}
