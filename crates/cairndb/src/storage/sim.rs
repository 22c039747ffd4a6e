//! A simulated storage file for tests (see `docs/reliability.md`, "Design for
//! test").
//!
//! It keeps the *durable image* (what survives a power loss for certain), the
//! *current image* (what reads see), and the ordered list of writes since the
//! last sync. It can crash at the k-th operation, fail the k-th operation with
//! EIO / ENOSPC / EFBIG (once or sticky), make `sync_data` a lie, and build
//! crash images from the unsynced writes.

use std::io;
use std::sync::{Mutex, MutexGuard};

use super::StorageFile;

/// The error a fault injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// EIO: a generic device error.
    Eio,
    /// ENOSPC: the device is full.
    NoSpace,
    /// EFBIG: past the file-size limit.
    FileTooBig,
}

impl FaultKind {
    fn to_error(self) -> io::Error {
        match self {
            FaultKind::Eio => io::Error::from_raw_os_error(5),
            FaultKind::NoSpace => io::Error::from_raw_os_error(28),
            FaultKind::FileTooBig => io::Error::from_raw_os_error(27),
        }
    }
}

/// The kind of an operation, for counting and for targeting faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// `read_at`.
    Read,
    /// `write_at`.
    Write,
    /// `sync_data`.
    Sync,
    /// `set_len`.
    SetLen,
}

/// Which operations a fault plan counts and targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpFilter {
    /// Every operation.
    All,
    /// Writes, syncs and length changes (the operations that change state).
    Mutating,
}

impl OpFilter {
    fn matches(self, op: OpKind) -> bool {
        match self {
            OpFilter::All => true,
            OpFilter::Mutating => op != OpKind::Read,
        }
    }
}

/// A planned fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The process "dies" at the k-th matching operation (0-based): that
    /// operation does not happen and every later one fails.
    CrashAt(u64),
    /// The k-th matching operation fails with `kind`; if `sticky`, so does every
    /// later matching operation.
    FailAt {
        /// The 0-based index of the operation.
        op: u64,
        /// The error returned.
        kind: FaultKind,
        /// Whether later operations keep failing.
        sticky: bool,
    },
    /// Growing the file past `max_len` bytes fails with ENOSPC (writes and
    /// `set_len` that would end past it), as a full device does.
    NoSpaceAbove(u64),
}

#[derive(Debug, Clone)]
enum Pending {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

#[derive(Debug, Default)]
struct State {
    durable: Vec<u8>,
    current: Vec<u8>,
    unsynced: Vec<Pending>,
    counted_ops: u64,
    ops: [u64; 4],
    fault: Option<Fault>,
    filter: Option<OpFilter>,
    lying_sync: bool,
    crashed: bool,
    failing: bool,
}

/// A simulated file. Share it with `Arc<SimFile>` (which is a `StorageFile`)
/// so the test keeps a handle after the database is dropped.
#[derive(Debug, Default)]
pub struct SimFile {
    state: Mutex<State>,
}

/// One crash image: what the device could hold after a power loss.
#[derive(Debug, Clone)]
pub struct CrashImage {
    /// How the image was built (for failure messages).
    pub name: String,
    /// The file's bytes.
    pub bytes: Vec<u8>,
}

fn apply(image: &mut Vec<u8>, p: &Pending) {
    match p {
        Pending::Write { offset, data } => {
            let end = *offset as usize + data.len();
            if image.len() < end {
                image.resize(end, 0);
            }
            image[*offset as usize..end].copy_from_slice(data);
        }
        Pending::SetLen(len) => image.resize(*len as usize, 0),
    }
}

/// A small deterministic generator (splitmix64) so the simulator needs no
/// dependency and every image is reproducible from its seed.
#[derive(Debug, Clone)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

impl SimFile {
    /// An empty simulated file.
    pub fn new() -> Self {
        Self::default()
    }

    /// A simulated file whose durable and current images are `bytes`.
    pub fn from_image(bytes: Vec<u8>) -> Self {
        SimFile {
            state: Mutex::new(State {
                durable: bytes.clone(),
                current: bytes,
                ..State::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding this lock can only come from a test assertion;
        // recover the state rather than propagate the poison.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Installs a fault plan; operations are counted from now on, and only
    /// those matching `filter`.
    pub fn set_fault(&self, fault: Option<Fault>, filter: OpFilter) {
        let mut s = self.lock();
        s.fault = fault;
        s.filter = Some(filter);
        s.counted_ops = 0;
        s.failing = false;
    }

    /// Makes `sync_data` succeed without making anything durable.
    pub fn set_lying_sync(&self, lying: bool) {
        self.lock().lying_sync = lying;
    }

    /// The number of operations counted since the last `set_fault`.
    pub fn counted_ops(&self) -> u64 {
        self.lock().counted_ops
    }

    /// Operations of each kind since creation.
    pub fn op_count(&self, kind: OpKind) -> u64 {
        self.lock().ops[kind as usize]
    }

    /// Whether a planned crash has happened.
    pub fn crashed(&self) -> bool {
        self.lock().crashed
    }

    /// The image reads currently see (what a process crash leaves behind,
    /// since the OS page cache survives it).
    pub fn current_image(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// The image as of the last real sync.
    pub fn durable_image(&self) -> Vec<u8> {
        self.lock().durable.clone()
    }

    /// The number of writes and length changes since the last sync.
    pub fn unsynced_count(&self) -> usize {
        self.lock().unsynced.len()
    }

    /// Every kind of crash image the unsynced writes allow: none applied, all
    /// applied, random subsets, the last write torn at 512 B and 4 KiB, a
    /// garbage sector, a later write applied without an earlier one, and the
    /// file grown without its writes.
    pub fn crash_images(&self, seed: u64) -> Vec<CrashImage> {
        let s = self.lock();
        let mut rng = SplitMix64(seed);
        let mut out = Vec::new();
        let build = |keep: &dyn Fn(usize, &Pending) -> Option<Pending>| {
            let mut img = s.durable.clone();
            for (i, p) in s.unsynced.iter().enumerate() {
                if let Some(p) = keep(i, p) {
                    apply(&mut img, &p);
                }
            }
            img
        };
        out.push(CrashImage {
            name: "drop-unsynced".into(),
            bytes: s.durable.clone(),
        });
        if s.unsynced.is_empty() {
            return out;
        }
        out.push(CrashImage {
            name: "all-unsynced".into(),
            bytes: s.current.clone(),
        });
        for k in 0..3 {
            let mask: Vec<bool> = s.unsynced.iter().map(|_| rng.below(2) == 0).collect();
            out.push(CrashImage {
                name: format!("random-subset-{k}"),
                bytes: build(&|i, p| mask[i].then(|| p.clone())),
            });
        }
        let last = s.unsynced.len() - 1;
        for tear in [512usize, 4096] {
            out.push(CrashImage {
                name: format!("torn-last-{tear}"),
                bytes: build(&|i, p| match p {
                    Pending::Write { offset, data } if i == last && data.len() > tear => {
                        Some(Pending::Write {
                            offset: *offset,
                            data: data[..tear].to_vec(),
                        })
                    }
                    _ => Some(p.clone()),
                }),
            });
        }
        let garbage: Vec<u8> = (0..512).map(|_| rng.next_u64() as u8).collect();
        out.push(CrashImage {
            name: "garbage-sector".into(),
            bytes: build(&|i, p| match p {
                Pending::Write { offset, data } if i == last => {
                    let mut d = data.clone();
                    let n = d.len().min(512);
                    d[..n].copy_from_slice(&garbage[..n]);
                    Some(Pending::Write {
                        offset: *offset,
                        data: d,
                    })
                }
                _ => Some(p.clone()),
            }),
        });
        if s.unsynced.len() >= 2 {
            let skip = rng.below(last as u64) as usize;
            out.push(CrashImage {
                name: format!("reordered-skip-{skip}"),
                bytes: build(&|i, p| (i != skip).then(|| p.clone())),
            });
        }
        out.push(CrashImage {
            name: "grown-unwritten".into(),
            bytes: build(&|_, p| matches!(p, Pending::SetLen(_)).then(|| p.clone())),
        });
        out
    }

    /// Flips one bit of the current and durable images (for corruption tests).
    pub fn flip_bit(&self, offset: u64, bit: u8) {
        let mut s = self.lock();
        let i = offset as usize;
        if i < s.current.len() {
            s.current[i] ^= 1 << (bit % 8);
        }
        if i < s.durable.len() {
            s.durable[i] ^= 1 << (bit % 8);
        }
    }

    /// Begins an operation: counts it and decides whether it fails.
    fn begin(&self, s: &mut State, op: OpKind) -> io::Result<()> {
        s.ops[op as usize] += 1;
        if s.crashed {
            return Err(io::Error::other("simulated crash: the process is gone"));
        }
        let Some(filter) = s.filter else {
            return Ok(());
        };
        if !filter.matches(op) {
            return Ok(());
        }
        let n = s.counted_ops;
        s.counted_ops += 1;
        match s.fault {
            Some(Fault::CrashAt(k)) if n >= k => {
                s.crashed = true;
                Err(io::Error::other("simulated crash: the process is gone"))
            }
            Some(Fault::FailAt {
                op: k,
                kind,
                sticky,
            }) => {
                if n == k || (sticky && n > k) || (sticky && s.failing) {
                    s.failing = true;
                    Err(kind.to_error())
                } else {
                    Ok(())
                }
            }
            _ => Ok(()),
        }
    }
}

impl StorageFile for SimFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut s = self.lock();
        self.begin(&mut s, OpKind::Read)?;
        let start = offset as usize;
        let end = start
            .checked_add(buf.len())
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        if end > s.current.len() {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        buf.copy_from_slice(&s.current[start..end]);
        Ok(())
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let mut s = self.lock();
        self.begin(&mut s, OpKind::Write)?;
        if let Some(Fault::NoSpaceAbove(max)) = s.fault {
            if offset + buf.len() as u64 > max.max(s.current.len() as u64) {
                return Err(FaultKind::NoSpace.to_error());
            }
        }
        let p = Pending::Write {
            offset,
            data: buf.to_vec(),
        };
        apply(&mut s.current, &p);
        s.unsynced.push(p);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.lock();
        self.begin(&mut s, OpKind::Sync)?;
        if !s.lying_sync {
            let pending = std::mem::take(&mut s.unsynced);
            for p in &pending {
                apply(&mut s.durable, p);
            }
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.lock();
        self.begin(&mut s, OpKind::SetLen)?;
        if let Some(Fault::NoSpaceAbove(max)) = s.fault {
            if len > max.max(s.current.len() as u64) {
                return Err(FaultKind::NoSpace.to_error());
            }
        }
        let p = Pending::SetLen(len);
        apply(&mut s.current, &p);
        s.unsynced.push(p);
        Ok(())
    }

    fn len(&self) -> io::Result<u64> {
        let s = self.lock();
        if s.crashed {
            return Err(io::Error::other("simulated crash: the process is gone"));
        }
        Ok(s.current.len() as u64)
    }
}
