const NAME: &str = "n";

#[shedlock::lock(at_most = "1m")]
async fn job() {}

fn main() {
    let _ = NAME;
}
