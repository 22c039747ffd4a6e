//! Workload data, generated before any timed region from fixed seeds
//! (suite D's documents in `data/docs.rs`).

pub mod docs;

/// Thunder's LCG (`s = s*6364136223846793005+1; r = s>>33`), used by T3/T5.
#[derive(Debug, Clone)]
pub struct Lcg(u64);

impl Lcg {
    pub fn new(seed: u64) -> Self {
        Lcg(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1);
        self.0 >> 33
    }
}

/// The seeded source of random bytes, keys and permutations: SplitMix64
/// (Steele, Lea and Flood, 2014), whose sequence the Go harness in
/// `bbolt/main.go` reproduces (the digest of the data checks it). Every
/// seed's sequence must stay as it is, or the workloads change.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A uniform index below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }
    pub fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let b = self.next_u64().to_le_bytes();
            let n = rest.len();
            rest.copy_from_slice(&b[..n]);
        }
    }
}

/// `n` byte strings of one width, stored flat (or one string repeated `n`
/// times when built with [`Flat::repeat`]).
#[derive(Debug, Clone, Default)]
pub struct Flat {
    buf: Vec<u8>,
    width: usize,
    n: usize,
}

impl Flat {
    pub fn with_capacity(width: usize, n: usize) -> Self {
        Flat {
            buf: Vec::with_capacity(width * n),
            width,
            n: 0,
        }
    }

    /// Strings made by `f(i)`, which must all have the same length.
    pub fn from_fn(n: usize, mut f: impl FnMut(usize) -> Vec<u8>) -> Self {
        let mut out = Flat::default();
        for i in 0..n {
            out.push(&f(i));
        }
        out
    }

    pub fn repeat(value: &[u8], n: usize) -> Self {
        Flat {
            buf: value.to_vec(),
            width: value.len(),
            n,
        }
    }

    pub fn random(rng: &mut Rng, width: usize, n: usize) -> Self {
        let mut buf = vec![0u8; width * n];
        rng.fill(&mut buf);
        Flat { buf, width, n }
    }

    pub fn push(&mut self, s: &[u8]) {
        if self.n == 0 && self.buf.is_empty() {
            self.width = s.len();
        }
        assert_eq!(s.len(), self.width, "Flat holds strings of one width");
        self.buf.extend_from_slice(s);
        self.n += 1;
    }

    pub fn len(&self) -> usize {
        self.n
    }

    #[inline]
    pub fn get(&self, i: usize) -> &[u8] {
        if self.buf.len() == self.width {
            &self.buf
        } else {
            &self.buf[i * self.width..(i + 1) * self.width]
        }
    }

    /// The strings at `idx`, in that order.
    pub fn pick(&self, idx: impl IntoIterator<Item = usize>) -> Flat {
        let mut out = Flat {
            buf: Vec::new(),
            width: self.width,
            n: 0,
        };
        for i in idx {
            out.buf.extend_from_slice(self.get(i));
            out.n += 1;
        }
        out
    }
}

/// A seeded random permutation of `0..n` (Fisher–Yates).
pub fn permutation(rng: &mut Rng, n: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i + 1);
        p.swap(i, j);
    }
    p
}

/// Reads a value so the optimizer cannot drop the read: its length, and one
/// byte per 4 KiB page (so memory-mapped engines fault their pages in).
#[inline]
pub fn touch(v: &[u8]) -> u64 {
    let mut acc = v.len() as u64;
    let mut i = 0;
    while i < v.len() {
        acc = acc.wrapping_add(v[i] as u64);
        i += 4096;
    }
    if let Some(&b) = v.last() {
        acc = acc.wrapping_add(b as u64);
    }
    acc
}

/// What a read workload saw: entries found and a checksum of touched bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Touch {
    pub found: u64,
    pub sum: u64,
}

impl Touch {
    #[inline]
    pub fn add(&mut self, k: &[u8], v: &[u8]) {
        self.found += 1;
        self.sum = self.sum.wrapping_add(touch(k)).wrapping_add(touch(v));
    }
    #[inline]
    pub fn add_value(&mut self, v: &[u8]) {
        self.found += 1;
        self.sum = self.sum.wrapping_add(touch(v));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lcg_matches_thunder() {
        let mut l = Lcg::new(12345);
        let s = 12345u64.wrapping_mul(6364136223846793005).wrapping_add(1);
        assert_eq!(l.next_u64(), s >> 33);
    }

    /// The sequence the workloads were generated from (and the Go harness
    /// reproduces): SplitMix64's published output for seed 1234567, and
    /// the first values for seed 0.
    #[test]
    fn rng_is_splitmix64() {
        let mut r = Rng::new(1234567);
        let got: Vec<u64> = (0..5).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                6457827717110365317,
                3203168211198807973,
                9817491932198370423,
                4593380528125082431,
                16408922859458223821
            ]
        );
        let mut r = Rng::new(0);
        let got: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                16294208416658607535,
                7960286522194355700,
                487617019471545679
            ]
        );
    }

    #[test]
    fn flat_and_permutation() {
        let f = Flat::from_fn(3, |i| format!("k{i}").into_bytes());
        assert_eq!(f.get(2), b"k2");
        let r = Flat::repeat(b"v", 5);
        assert_eq!(r.get(4), b"v");
        assert_eq!(r.len(), 5);
        let mut p = permutation(&mut Rng::new(1), 100);
        p.sort_unstable();
        assert_eq!(p, (0..100).collect::<Vec<_>>());
    }
}
