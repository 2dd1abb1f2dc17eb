//! The rows of one lock table as a [`LeaseStore`]: [`SqlStore`], the one acquire / release /
//! extend / inspect / list / force-release flow of every dialect, run by core's
//! [`StoreProvider`].

use std::{time::Duration, time::SystemTime};

use async_trait::async_trait;
#[cfg(doc)]
use shedlock::store::StoreProvider;
use shedlock::{
    Capabilities, Error, ForceRelease, LockInfo, LockPage, Result,
    store::{self, Extension, Granted, LeaseStore, Request},
    support::unix_micros,
};

use crate::{
    ArgValues, Call, Dialect, ErrorContext, Inspected, Op, TableName, map_sqlx_error, token_u64,
};

/// The rows of one lock table: the [`LeaseStore`] every SQL provider runs through core's
/// [`StoreProvider`].
pub(crate) struct SqlStore<D> {
    pub(crate) dialect: D,
    pub(crate) table: String,
    /// The table as configured, for the `GRANT` of a permission error.
    pub(crate) table_name: TableName,
    pub(crate) ddl: String,
    pub(crate) max_name_len: usize,
    pub(crate) compat: bool,
}

impl<D: Dialect> SqlStore<D> {
    pub(crate) fn err(&self, call: Call, name: Option<&str>, e: sqlx::Error) -> Error {
        let grant = D::grant(call, &self.table_name);
        let ctx = ErrorContext {
            backend: D::BACKEND,
            table: &self.table,
            ddl: &self.ddl,
            name,
            compat: self.compat,
            call,
            grant: &grant,
        };
        map_sqlx_error(&ctx, e, D::classify)
    }

    /// The values of a statement on `name` outside an acquisition (record helpers).
    pub(crate) fn values<'a>(&self, settings: &'a store::Settings, name: &'a str) -> ArgValues<'a> {
        ArgValues {
            name,
            locked_by: settings.locked_by(),
            now: D::time(settings.client_now().map_or(0, unix_micros)),
            clock_micros: unix_micros(SystemTime::now()),
            ..Default::default()
        }
    }

    /// The values of a statement of `req`'s acquisition (its owner id and `locked_by`).
    fn owned_values<'a>(&self, req: &Request<'a>, fencing_token: i64) -> ArgValues<'a> {
        ArgValues {
            name: req.name(),
            locked_by: req.owner().locked_by(),
            acquisition_id: req.owner().id_i64(),
            fencing_token,
            now: D::time(req.client_now().map_or(0, unix_micros)),
            clock_micros: unix_micros(SystemTime::now()),
            ..Default::default()
        }
    }

    pub(crate) async fn execute(&self, op: Op, values: &ArgValues<'_>) -> Result<u64> {
        let call = match op {
            Op::Unlock => Call::Unlock,
            Op::Extend => Call::Extend,
            Op::Delete => Call::DeleteRecord,
            Op::Write => Call::WriteRecord,
            Op::ForceRelease => Call::ForceRelease,
        };
        self.dialect.execute(op, values).await.map_err(|e| self.err(call, Some(values.name), e))
    }

    /// The row of `name` as an operator sees it, read for `call`.
    async fn read(
        &self,
        call: Call,
        name: &str,
        settings: &store::Settings,
    ) -> Result<Option<Inspected>> {
        let values = self.values(settings, name);
        self.dialect.inspect(&values).await.map_err(|e| self.err(call, Some(name), e))
    }
}

/// One acquisition's fencing token, as stored (the owner id is the request's).
pub(crate) struct Held {
    token: i64,
}

#[async_trait]
impl<D: Dialect> LeaseStore for SqlStore<D> {
    type Held = Held;

    fn capabilities(&self, settings: &store::Settings) -> Capabilities {
        Capabilities::new()
            .with_extend(true)
            // ShedLock's table has no column for a token.
            .with_fencing(!self.compat)
            .with_owner_checked(true)
            .with_server_time(settings.time_source().is_server())
            .with_granularity(Duration::from_millis(1))
            .with_clock_step(D::CLOCK_STEP)
            .with_max_name_len(Some(self.max_name_len))
            .with_check(true)
            .with_inspect(true)
            .with_list(true)
            .with_force_release(true)
            .with_native_batch(D::NATIVE_BATCH)
    }

    fn rejects_nul(&self) -> bool {
        D::REJECT_NUL
    }

    /// Runs the dialect's [`probe`](Dialect::probe) on a name no lock can have (the empty
    /// name), through the same connection and error mapping as every lock call, one statement:
    /// the database answers, and the table has every configured column (a missing table is
    /// [`Error::Setup`] with its DDL; a table in the other mode says which mode it is in).
    /// PostgreSQL and MySQL run the acquire's upsert over zero rows, which the server refuses
    /// unless the user may SELECT, INSERT and UPDATE the table ([`Error::Setup`] naming the
    /// grant). Writes nothing.
    async fn check(&self, settings: &store::Settings) -> Result<()> {
        let values = self.values(settings, "");
        self.dialect.probe(&values).await.map_err(|e| self.err(Call::Check, None, e))
    }

    /// One acquire statement.
    async fn acquire(&self, req: &Request<'_>) -> Result<Option<Granted<Held>>> {
        let values =
            ArgValues { at_most: D::duration(req.lock_at_most_for()), ..self.owned_values(req, 0) };
        let token = self
            .dialect
            .acquire(&values)
            .await
            .map_err(|e| self.err(Call::TryLock, Some(req.name()), e))?;
        Ok(token.map(|token| {
            let granted = Granted::new(Held { token });
            if self.compat { granted } else { granted.with_fencing_token(token_u64(token)) }
        }))
    }

    /// The dialect's batch acquire ([`Dialect::acquire_many`]), its names sorted.
    async fn acquire_many(&self, reqs: &[Request<'_>]) -> Result<Vec<Option<Granted<Held>>>> {
        let mut order: Vec<usize> = (0..reqs.len()).collect();
        order.sort_by(|a, b| reqs[*a].name().cmp(reqs[*b].name()));
        // One `now` for the whole statement (client time: the first request's reading).
        let now = reqs.first().map_or(0, |r| D::time(r.client_now().map_or(0, unix_micros)));
        let batch: Vec<ArgValues<'_>> = order
            .iter()
            .map(|i| {
                let req = &reqs[*i];
                ArgValues {
                    at_most: D::duration(req.lock_at_most_for()),
                    now,
                    ..self.owned_values(req, 0)
                }
            })
            .collect();
        let tokens = self
            .dialect
            .acquire_many(&batch)
            .await
            .map_err(|e| self.err(Call::TryLock, None, e))?;
        if tokens.len() != reqs.len() {
            return Err(Error::Backend {
                backend: D::BACKEND,
                source: format!(
                    "a batch acquire of {} names answered {} rows",
                    reqs.len(),
                    tokens.len()
                )
                .into(),
            });
        }
        let mut out: Vec<Option<Granted<Held>>> = (0..reqs.len()).map(|_| None).collect();
        for (i, token) in order.into_iter().zip(tokens) {
            out[i] = token.map(|token| {
                let granted = Granted::new(Held { token });
                if self.compat { granted } else { granted.with_fencing_token(token_u64(token)) }
            });
        }
        Ok(out)
    }

    fn batch_limit(&self) -> usize {
        D::BATCH_LIMIT
    }

    async fn release(&self, req: &Request<'_>, held: &mut Held) -> Result<()> {
        let values = ArgValues {
            at_least: D::duration(req.lock_at_least_for()),
            ..self.owned_values(req, held.token)
        };
        if self.execute(Op::Unlock, &values).await? == 0 {
            tracing::debug!(
                lock = req.name(),
                "{} unlock by a stale holder changed nothing",
                D::BACKEND
            );
        }
        Ok(())
    }

    async fn extend(&self, req: &Request<'_>, held: &mut Held) -> Result<Extension> {
        let values = ArgValues {
            at_most: D::duration(req.lock_at_most_for()),
            ..self.owned_values(req, held.token)
        };
        let n = self.execute(Op::Extend, &values).await?;
        Ok(if n == 1 { Extension::Extended } else { Extension::Lost })
    }

    async fn inspect(&self, name: &str, settings: &store::Settings) -> Result<Option<LockInfo>> {
        let row = self.read(Call::Inspect, name, settings).await?;
        Ok(row.map(|i| self.info(i, settings)))
    }

    async fn list(
        &self,
        prefix: &str,
        cursor: Option<&str>,
        limit: usize,
        settings: &store::Settings,
    ) -> Result<LockPage> {
        // One row more than the page, to know whether another page follows.
        let values = ArgValues {
            prefix,
            after: cursor.unwrap_or(""),
            limit: i64::try_from(limit + 1).unwrap_or(i64::MAX),
            ..self.values(settings, prefix)
        };
        let rows = self.dialect.list(&values).await.map_err(|e| self.err(Call::List, None, e))?;
        let records: Vec<LockInfo> = rows.into_iter().map(|i| self.info(i, settings)).collect();
        Ok(LockPage::from_overfetch(records, limit))
    }

    /// Reads the row, and deletes it only if it is still the acquisition seen, in one
    /// conditional `DELETE` on the acquisition's own columns.
    async fn force_release(
        &self,
        seen: &LockInfo,
        settings: &store::Settings,
    ) -> Result<ForceRelease> {
        let name = seen.name.as_str();
        let read = self.values(settings, name);
        let row = self.read(Call::ForceRelease, name, settings).await?;
        let Some(row) = row else { return Ok(ForceRelease::Changed(None)) };
        let record = row.record.clone();
        let current = self.info(row, settings);
        if current.acquisition != seen.acquisition {
            return Ok(ForceRelease::Changed(Some(current)));
        }
        let values = ArgValues {
            locked_by: &record.locked_by,
            acquisition_id: record.acquisition_id,
            locked_at: self.seen_locked_at(&record),
            ..read
        };
        if self.execute(Op::ForceRelease, &values).await? == 1 {
            return Ok(ForceRelease::Released(current));
        }
        let now = self.read(Call::ForceRelease, name, settings).await?;
        Ok(ForceRelease::Changed(now.map(|i| self.info(i, settings))))
    }
}

impl<D: Dialect> SqlStore<D> {
    /// What an operator sees of a row: held or free by the database's clock (or in client time
    /// this instance's), and the acquisition that wrote it.
    fn info(&self, i: Inspected, settings: &store::Settings) -> LockInfo {
        let now = settings.client_now().map_or(i.db_micros, unix_micros);
        let r = i.record;
        let held = unix_micros(r.lock_until) > now;
        let token = if self.compat { None } else { Some(token_u64(r.fencing_token)) };
        LockInfo::new(r.name.clone(), self.acquisition(&r), held, settings.time_source())
            .with_locked_at(r.locked_at)
            .with_lock_until(r.lock_until)
            .with_fencing_token(token)
            .with_locked_by(r.locked_by)
    }
}
