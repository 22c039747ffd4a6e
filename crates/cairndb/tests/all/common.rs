//! Helpers shared by the suites: seeds, sizes, scratch databases.
#![allow(dead_code)]

/// The seed for a randomized suite: `SEED` from the environment, else a
/// fresh one. Printed so a failure can be replayed.
pub fn seed(suite: &str) -> u64 {
    let s = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{suite}: SEED={s}");
    s
}

/// The size of a randomized suite: `ITERS` from the environment, else `default`.
pub fn iters(default: u64) -> u64 {
    std::env::var("ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}
