//! `try_lock`: one conditional publish when the key is free, a direct get the first time a
//! holder is met, and the take-over of a free key.

use std::sync::Arc;

use shedlock::{
    Acquisition, Lock, LockConfig, Result,
    store::Operation,
    support::{check_lock_name, duration_micros},
};
use tokio::time::Instant;

use crate::{
    BACKEND, MAX_NAME_LEN, handle::NatsHandle, inner::Inner, jetstream::Publish, request::run,
};

impl Inner {
    pub(crate) async fn try_lock(self: &Arc<Self>, config: &LockConfig) -> Result<Option<Lock>> {
        check_lock_name(BACKEND, config.name(), Some(MAX_NAME_LEN), false)?;
        let subject = self.subject(config.name());
        let at_most = config.lock_at_most_for();
        let acquisition = Acquisition::begin(config); // the default clock step, as declared
        let at_us = self.now_us();
        let won = run(Operation::TryLock, config.name(), self.settings.timeout(), async {
            // Once per provider: the bucket exists and is fit for locks (one request, on the
            // first call only; a failure is not remembered, so the next call checks again).
            self.checked.get_or_try_init(|| self.check_bucket("try_lock")).await?;
            // One publish that only an empty subject accepts: a fresh key, one whose lock was
            // released (purged) or expired (the server removed it).
            let last_seq = match self.publish("try_lock", &subject, 0, at_most, at_us, None).await?
            {
                Publish::Stored(seq) => return Ok(Some(seq)),
                Publish::WrongLast(n) => n,
            };
            // The subject holds message `last_seq`. Known to be a live lock: held, and no
            // second round trip.
            if let Some(until) = self.known_lock(&subject, last_seq) {
                let expired = matches!((until, self.now_us()), (Some(u), Some(now)) if u <= now);
                if !expired {
                    return Ok(None);
                }
                // Client time: a lock seen before whose lock_until has passed. Take it over.
                return match self
                    .publish("try_lock", &subject, last_seq, at_most, at_us, None)
                    .await?
                {
                    Publish::Stored(seq) => Ok(Some(seq)),
                    Publish::WrongLast(_) => Ok(None),
                };
            }
            // Otherwise look at it: a live lock is held (and remembered); a tombstone left by
            // an operator (`nats kv del`), a server marker, or in client time an expired lock,
            // leaves the key free: take it over, owner-checked by its sequence.
            match self.last(&subject).await? {
                Some(m) if self.is_free(&m) => {
                    tracing::debug!(
                        subject,
                        seq = m.seq,
                        "taking a free lock key over its last message"
                    );
                    match self.publish("try_lock", &subject, m.seq, at_most, at_us, None).await? {
                        Publish::Stored(seq) => Ok(Some(seq)),
                        Publish::WrongLast(_) => Ok(None),
                    }
                }
                Some(m) => {
                    self.remember_lock(&subject, m.seq, m.lock_until_us);
                    Ok(None)
                }
                // Removed in between (expired or released): free again.
                None => match self.publish("try_lock", &subject, 0, at_most, at_us, None).await? {
                    Publish::Stored(seq) => Ok(Some(seq)),
                    Publish::WrongLast(_) => Ok(None),
                },
            }
        })
        .await?;
        let Some(seq) = won else { return Ok(None) };
        let handle = NatsHandle {
            inner: self.clone(),
            subject,
            token: seq,
            rev: seq,
            since: Instant::now(),
            at_us,
            until_us: at_us.map(|at| at.saturating_add(duration_micros(at_most))),
        };
        acquisition.grant(handle).await.map(Some)
    }
}
