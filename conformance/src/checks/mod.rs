//! The checks C01–C32, each a plain async function taking a [`Suite`] and returning a
//! [`Verdict`](crate::Verdict), so a provider's own tests can call single checks:
//!
//! ```no_run
//! # async fn demo(suite: &shedlock_conformance::Suite) {
//! use shedlock_conformance::{Outcome, checks};
//! let v = checks::c05_expires_after_at_most(suite).await;
//! assert_eq!(v.outcome, Outcome::Pass, "{}", v.detail);
//! # }
//! ```
//!
//! [`catalogue`] lists them by id, in order; the ids and meanings are those of the conformance
//! catalogue: the table "The checks" in the [crate documentation](crate#the-checks), also in
//! the kit's `README.md` (`conformance/README.md` in the repository), which says per check what
//! it proves and what it needs.
//!
//! One file per check, named by its id and name: `c05_expires_after_at_most.rs` holds
//! [`c05_expires_after_at_most`]. Helpers shared by several checks are in `common.rs` (and in
//! [`crate::tools`]); no check file imports another. The node protocol of C28 lives in the
//! crate's `node.rs` and is re-exported here ([`NodeSpec`], [`node_main_if_requested`], ...),
//! as is the soak mode ([`SOAK_CHECKS`], [`soak_check`]).

pub use crate::check::{Check, CheckFuture};
pub use crate::soak::{SOAK_CHECKS, soak_check};
use crate::suite::Suite;

mod common;

mod c01_lock_is_held;
mod c02_no_double_hold;
mod c03_names_independent;
mod c04_lock_unlock_lock;
mod c05_expires_after_at_most;
mod c06_relock_after_unlock;
mod c07_at_least_honoured;
mod c08_fuzz_counter;
mod c09_extend_keeps_lock;
mod c10_extend_expired_fails;
mod c11_extend_at_least;
mod c12_stale_unlock_noop;
mod c13_stale_extend_fails;
mod c14_leftover_records;
mod c15_race_one_winner;
mod c16_history_no_overlap;
mod c17_model_based;
mod c18_clock_skew;
mod c19_scheduler_once;
mod c20_fencing_monotonic;
mod c21_fenced_resource;
mod c22_keep_alive;
mod c23_executor;
mod c24_backend_unreachable;
mod c25_backend_restart;
mod c26_cancellation;
mod c27_hostile_names;
mod c28_process_skew;
mod c29_paused_holder;
mod c30_inspection;
mod c31_force_release;
mod c32_batch;

pub use crate::node::LIBFAKETIME_ENV;
pub use crate::node::{
    HolderLog, HolderReady, HolderWrite, NODE_ENV, NodeAcq, NodeCall, NodeLog, NodeSpec,
    PausedHolder, RUN_ID_ENV, monotonic_ns, node_main_if_requested,
};
pub use c01_lock_is_held::c01_lock_is_held;
pub use c02_no_double_hold::c02_no_double_hold;
pub use c03_names_independent::c03_names_independent;
pub use c04_lock_unlock_lock::c04_lock_unlock_lock;
pub use c05_expires_after_at_most::c05_expires_after_at_most;
pub use c06_relock_after_unlock::c06_relock_after_unlock;
pub use c07_at_least_honoured::c07_at_least_honoured;
pub use c08_fuzz_counter::c08_fuzz_counter;
pub use c09_extend_keeps_lock::c09_extend_keeps_lock;
pub use c10_extend_expired_fails::c10_extend_expired_fails;
pub use c11_extend_at_least::c11_extend_at_least;
pub use c12_stale_unlock_noop::c12_stale_unlock_noop;
pub use c13_stale_extend_fails::c13_stale_extend_fails;
pub use c14_leftover_records::c14_leftover_records;
pub use c15_race_one_winner::c15_race_one_winner;
pub use c16_history_no_overlap::c16_history_no_overlap;
pub use c17_model_based::c17_model_based;
pub use c18_clock_skew::c18_clock_skew;
pub use c19_scheduler_once::c19_scheduler_once;
pub use c20_fencing_monotonic::c20_fencing_monotonic;
pub use c21_fenced_resource::c21_fenced_resource;
pub use c22_keep_alive::c22_keep_alive;
pub use c23_executor::c23_executor;
pub use c24_backend_unreachable::c24_backend_unreachable;
pub use c25_backend_restart::c25_backend_restart;
pub use c26_cancellation::c26_cancellation;
pub use c27_hostile_names::c27_hostile_names;
pub use c28_process_skew::c28_process_skew;
pub use c29_paused_holder::c29_paused_holder;
pub use c30_inspection::c30_inspection;
pub use c31_force_release::c31_force_release;
pub use c32_batch::c32_batch;

macro_rules! check {
    ($id:literal, $name:literal, $f:path, $summary:literal) => {
        Check {
            id: $id,
            name: $name,
            summary: $summary,
            run: {
                fn run(s: &Suite) -> CheckFuture<'_> {
                    Box::pin($f(s))
                }
                run
            },
        }
    };
}

static CATALOGUE: [Check; 32] = [
    check!(
        "C01",
        "lock_is_held",
        c01_lock_is_held,
        "a held lock excludes another instance; after unlock it can be taken"
    ),
    check!(
        "C02",
        "no_double_hold",
        c02_no_double_hold,
        "one name cannot be held twice, from the same or another instance"
    ),
    check!(
        "C03",
        "names_independent",
        c03_names_independent,
        "two different names are independent"
    ),
    check!("C04", "lock_unlock_lock", c04_lock_unlock_lock, "lock, unlock, lock again in a row"),
    check!(
        "C05",
        "expires_after_at_most",
        c05_expires_after_at_most,
        "a held lock expires after lock_at_most_for"
    ),
    check!(
        "C06",
        "relock_after_unlock",
        c06_relock_after_unlock,
        "lock right after unlock, 10 times in a row"
    ),
    check!(
        "C07",
        "at_least_honoured",
        c07_at_least_honoured,
        "after an early unlock the lock stays held until lock_at_least_for, counted from the acquisition (a takeover's own)"
    ),
    check!(
        "C08",
        "fuzz_counter",
        c08_fuzz_counter,
        "non-atomic counters under the executor stay exact"
    ),
    check!(
        "C09",
        "extend_keeps_lock",
        c09_extend_keeps_lock,
        "extend keeps the lock past lock_at_most_for; extends chain"
    ),
    check!(
        "C10",
        "extend_expired_fails",
        c10_extend_expired_fails,
        "extending an expired lock fails and does not take it"
    ),
    check!(
        "C11",
        "extend_at_least",
        c11_extend_at_least,
        "lock_at_least_for given to extend is honoured on unlock"
    ),
    check!(
        "C12",
        "stale_unlock_noop",
        c12_stale_unlock_noop,
        "a stale holder's unlock leaves the new holder's lock (also in flight and in transit)"
    ),
    check!(
        "C13",
        "stale_extend_fails",
        c13_stale_extend_fails,
        "a stale holder's extend fails and does not extend the new lock (also in flight and in transit)"
    ),
    check!(
        "C14",
        "leftover_records",
        c14_leftover_records,
        "expired or externally deleted records never block locking"
    ),
    check!(
        "C15",
        "race_one_winner",
        c15_race_one_winner,
        "N instances racing for a fresh name: exactly one winner per round"
    ),
    check!(
        "C16",
        "history_no_overlap",
        c16_history_no_overlap,
        "recorded holder intervals of one name never overlap"
    ),
    check!(
        "C17",
        "model_based",
        c17_model_based,
        "random operation sequences agree with the reference model"
    ),
    check!(
        "C18",
        "clock_skew",
        c18_clock_skew,
        "skewed instance clocks: server time stays safe, client time bound measured"
    ),
    check!(
        "C19",
        "scheduler_once",
        c19_scheduler_once,
        "K schedulers: every fire time runs exactly once, with and without skew"
    ),
    check!(
        "C20",
        "fencing_monotonic",
        c20_fencing_monotonic,
        "fencing tokens strictly increase, across expiry, takeover and skewed instances"
    ),
    check!(
        "C21",
        "fenced_resource",
        c21_fenced_resource,
        "a fenced resource refuses a paused stale holder's writes, also across skewed clocks"
    ),
    check!(
        "C22",
        "keep_alive",
        c22_keep_alive,
        "keep-alive holds long tasks, frees dead holders, signals loss"
    ),
    check!(
        "C23",
        "executor",
        c23_executor,
        "executor skips, releases on return/error/panic/cancel, is reentrant"
    ),
    check!(
        "C24",
        "backend_unreachable",
        c24_backend_unreachable,
        "refused or cut connections give typed errors in bounded time"
    ),
    check!(
        "C25",
        "backend_restart",
        c25_backend_restart,
        "the provider recovers from a backend restart"
    ),
    check!(
        "C26",
        "cancellation",
        c26_cancellation,
        "dropped futures never leave a name locked past at_most or poison the provider"
    ),
    check!(
        "C27",
        "hostile_names",
        c27_hostile_names,
        "hostile and edge names work or give InvalidName, never collide (normalisation, hashes, bytes)"
    ),
    check!(
        "C28",
        "process_skew",
        c28_process_skew,
        "node processes with real clock offsets (libfaketime): server time stays safe"
    ),
    check!(
        "C29",
        "paused_holder",
        c29_paused_holder,
        "a holder frozen past its lease finds it ended on waking, its late writes fenced off"
    ),
    check!(
        "C30",
        "inspection",
        c30_inspection,
        "inspect and list tell the backend's truth by the provider's clock, page by page, and change nothing"
    ),
    check!(
        "C31",
        "force_release",
        c31_force_release,
        "a forced release frees exactly the acquisition seen, never a lock taken again"
    ),
    check!(
        "C32",
        "batch",
        c32_batch,
        "try_lock_many answers per name what try_lock would: in part, one winner per name, leases and tokens per name"
    ),
];

/// Every check, in catalogue order.
pub fn catalogue() -> &'static [Check] {
    &CATALOGUE
}

/// The check with id `id` (e.g. `"C05"`).
pub fn by_id(id: &str) -> Option<&'static Check> {
    CATALOGUE.iter().find(|c| c.id.eq_ignore_ascii_case(id))
}
