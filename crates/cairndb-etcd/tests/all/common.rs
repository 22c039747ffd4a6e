//! Shared test support: a cluster per test (one at a time), a seeded RNG.

use std::ops::Deref;
use std::sync::{Mutex, MutexGuard};

use cairndb_etcd::testing::{cluster_or_skip_with, Cluster};
use cairndb_etcd::EtcdDatabase;

static ONE_CLUSTER_AT_A_TIME: Mutex<()> = Mutex::new(());

/// A running cluster, held alone (fields drop in order: the cluster, then the lock).
pub struct Held {
    pub cluster: Cluster,
    _guard: MutexGuard<'static, ()>,
}

impl Deref for Held {
    type Target = Cluster;
    fn deref(&self) -> &Cluster {
        &self.cluster
    }
}

/// A fresh 3-member cluster, or `None` (with a message) when etcd is not
/// installed and not required.
pub fn cluster(test: &str) -> Option<Held> {
    cluster_with(test, 3, &[])
}

/// A fresh cluster of `size` members started with the etcd flags
/// `member_args`, or `None` as [`cluster`].
pub fn cluster_with(test: &str, size: usize, member_args: &[&str]) -> Option<Held> {
    let guard = ONE_CLUSTER_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let cluster = cluster_or_skip_with(test, size, member_args).expect("start an etcd cluster")?;
    Some(Held {
        cluster,
        _guard: guard,
    })
}

pub fn connect(url: &str) -> EtcdDatabase {
    EtcdDatabase::connect(url).unwrap_or_else(|e| panic!("connect {url}: {e}"))
}

/// xorshift64*, seeded from `SEED` or the clock; the seed is printed.
pub struct Rng(u64);

impl Rng {
    pub fn new(test: &str) -> Rng {
        let seed = std::env::var("SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("{test}: SEED={seed}");
        Rng::with_seed(seed)
    }

    pub fn with_seed(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
