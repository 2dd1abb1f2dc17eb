const NAME: &str = "n";

#[shedlock::lock(name = "a", at_most = "0s")]
async fn job() {}

fn main() {
    let _ = NAME;
}
