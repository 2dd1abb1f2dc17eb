//! The client node processes of a scenario ([`Nodes`]), paused and resumed by the nemesis and
//! never left behind.

use std::process::Child;

use crate::tools::signal::signal_pid;

/// The client node processes; on drop (also on an early return) every one still running is
/// resumed and killed.
pub(super) struct Nodes {
    pub(super) children: Vec<Child>,
}

impl Nodes {
    pub(super) fn signal(&self, k: usize, stop: bool) -> Result<(), String> {
        let child = self.children.get(k).ok_or("no such node")?;
        signal_pid(child.id(), stop, false)
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        for c in &mut self.children {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = signal_pid(c.id(), false, false);
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
