//! Project automation for shedlock-rs.
fn main() {}
