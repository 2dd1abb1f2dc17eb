const NAME: &str = "n";

#[shedlock::lock(name = "a", at_most = "10 minutes")]
async fn job() {}

fn main() {
    let _ = NAME;
}
