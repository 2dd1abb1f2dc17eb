//! Tools the checks use, each usable on its own: the history recorder and overlap checker, the
//! fenced register, the TCP fault proxy, clock helpers, the model-based test and
//! the names a provider must keep apart (hash collisions, equivalent Unicode spellings).

#[macro_use]
pub(crate) mod calls;
pub mod clocks;
pub(crate) mod declared;
pub mod fenced;
pub mod history;
pub mod model;
pub mod names;
pub mod proxy;
pub(crate) mod signal;
pub(crate) mod stale;
pub(crate) mod stalling;
pub(crate) mod stats;
pub(crate) mod workload;
