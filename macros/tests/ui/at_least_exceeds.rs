const NAME: &str = "n";

#[shedlock::lock(name = "a", at_most = "1m", at_least = "2m")]
async fn job() {}

fn main() {
    let _ = NAME;
}
