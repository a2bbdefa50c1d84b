//! Explorer benchmarks (filled in with the explorer).
fn main() {}
