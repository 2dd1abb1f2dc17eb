//! The native mode's condition expressions: every attribute behind a placeholder, each request
//! naming its own.

use crate::{
    ATTR_ACQUISITION_ID, ATTR_FENCING_TOKEN, ATTR_LOCK_UNTIL, ATTR_LOCKED_AT, ATTR_LOCKED_BY,
};

// The expressions, with every attribute behind a placeholder (no reserved-word surprises).
// DynamoDB refuses placeholders an expression does not use, so each request names its own.
pub(crate) const N_UNTIL: (&str, &str) = ("#u", ATTR_LOCK_UNTIL);
pub(crate) const N_AT: (&str, &str) = ("#a", ATTR_LOCKED_AT);
pub(crate) const N_BY: (&str, &str) = ("#b", ATTR_LOCKED_BY);
pub(crate) const N_ACQ: (&str, &str) = ("#q", ATTR_ACQUISITION_ID);
pub(crate) const N_FENCE: (&str, &str) = ("#f", ATTR_FENCING_TOKEN);

/// One conditional update: its expressions and the attribute names they use.
pub(crate) struct Expr {
    pub(crate) update: &'static str,
    pub(crate) condition: &'static str,
    pub(crate) names: &'static [(&'static str, &'static str)],
}

pub(crate) const ACQUIRE: Expr = Expr {
    update: "SET #u = :until, #a = :now, #b = :by, #q = :acq, #f = if_not_exists(#f, :seed) + :one",
    condition: "attribute_not_exists(#u) OR #u <= :now",
    names: &[N_UNTIL, N_AT, N_BY, N_ACQ, N_FENCE],
};
pub(crate) const EXTEND: Expr = Expr {
    update: "SET #u = :until, #a = :now",
    condition: "#q = :acq AND #u > :now",
    names: &[N_UNTIL, N_AT, N_ACQ],
};
/// Unlock within `lock_at_least_for`: keep the lease until it ends.
pub(crate) const KEEP: Expr =
    Expr { update: "SET #u = :until", condition: "#q = :acq", names: &[N_UNTIL, N_ACQ] };
/// [`check`](shedlock::store::LeaseStore::check)'s probe: an update whose condition never
/// holds, so that DynamoDB checks the permission and writes nothing.
pub(crate) const PROBE: Expr = Expr {
    update: "SET #q = :acq",
    condition: "attribute_exists(#q) AND attribute_not_exists(#q)",
    names: &[N_ACQ],
};

/// The item [`check`](shedlock::store::LeaseStore::check)'s probe addresses (and never writes,
/// whatever the table holds).
pub const CHECK_NAME: &str = ".shedlock-check";

/// Unlock after it: no lease, no owner.
pub(crate) const RELEASE: Expr =
    Expr { update: "REMOVE #u, #q", condition: "#q = :acq", names: &[N_UNTIL, N_ACQ] };
