//! The shape of a check: [`Check`], one catalogue entry, and the [`CheckFuture`] it runs. The
//! catalogue itself is in `checks/mod.rs`; this type sits below it so that the soak runner and
//! the suite's runner can take a `&Check` without importing the checks.

use std::{future::Future, pin::Pin};

use crate::{outcome::Verdict, suite::Suite};

/// The future a check returns.
pub type CheckFuture<'a> = Pin<Box<dyn Future<Output = Verdict> + Send + 'a>>;

/// One catalogue entry.
#[derive(Clone, Copy)]
pub struct Check {
    /// The stable id, e.g. `C05`.
    pub id: &'static str,
    /// The name, e.g. `expires_after_at_most`; the harness test is `C05_expires_after_at_most`.
    pub name: &'static str,
    /// What the check proves, in one line.
    pub summary: &'static str,
    /// Runs the check.
    pub run: for<'a> fn(&'a Suite) -> CheckFuture<'a>,
}

impl Check {
    /// `C05_expires_after_at_most`.
    pub fn test_name(&self) -> String {
        format!("{}_{}", self.id, self.name)
    }
}

impl std::fmt::Debug for Check {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Check").field("id", &self.id).field("name", &self.name).finish()
    }
}
