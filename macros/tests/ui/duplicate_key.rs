const NAME: &str = "n";

#[shedlock::lock(name = "a", name = "b")]
async fn job() {}

fn main() {
    let _ = NAME;
}
