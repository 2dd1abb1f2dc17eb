fn main() {
    let _ = shedlock::lock_spec!(name = "a", at_most = "5x");
}
