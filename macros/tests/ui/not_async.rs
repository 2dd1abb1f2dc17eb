#[shedlock::lock(name = "a", at_most = "1m")]
fn job() {}

fn main() {}
