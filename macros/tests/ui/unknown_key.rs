const NAME: &str = "n";

#[shedlock::lock(name = "a", at_mots = "1m")]
async fn job() {}

fn main() {
    let _ = NAME;
}
