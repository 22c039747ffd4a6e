//! The machine the benchmark ran on, and the fsync floor.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::engine::Res;

#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    pub cpu: String,
    pub cores: usize,
    pub ram_gib: f64,
    pub kernel: String,
    pub filesystem: String,
    pub mount: String,
    pub device: String,
}

pub fn machine(dir: &Path) -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == "model name").then(|| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let ram_kib: f64 = meminfo
        .lines()
        .find_map(|l| {
            let rest = l.strip_prefix("MemTotal:")?;
            rest.split_whitespace().next()?.parse().ok()
        })
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let (filesystem, mount, device) = mount_of(dir);
    Machine {
        cpu,
        cores,
        ram_gib: ram_kib / (1024.0 * 1024.0),
        kernel,
        filesystem,
        mount,
        device,
    }
}

/// The filesystem type, mount point and device holding `dir`, from the
/// longest matching mount point in /proc/mounts.
fn mount_of(dir: &Path) -> (String, String, String) {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mut best: Option<(usize, String, String, String)> = None;
    for l in mounts.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() < 3 {
            continue;
        }
        let mp = f[1].replace("\\040", " ");
        if dir.starts_with(&mp) && best.as_ref().is_none_or(|b| mp.len() >= b.0) {
            best = Some((mp.len(), f[2].to_string(), mp, f[0].to_string()));
        }
    }
    match best {
        Some((_, fs, mp, dev)) => (fs, mp, dev),
        None => ("unknown".into(), "?".into(), "?".into()),
    }
}

/// The fsync floor: p50/p99 of a 4 KiB overwrite + fdatasync, in µs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Floor {
    pub samples: usize,
    pub p50_us: f64,
    pub p99_us: f64,
}

pub fn fsync_floor(dir: &Path, samples: usize) -> Res<Floor> {
    let path = dir.join("fsync-floor.tmp");
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)?;
    const SLOTS: u64 = 64;
    let mut buf = vec![0u8; 4096];
    f.write_all_at(&vec![0u8; (4096 * SLOTS) as usize], 0)?;
    f.sync_all()?;
    let mut lat = Vec::with_capacity(samples);
    for i in 0..samples {
        buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
        let t = Instant::now();
        f.write_all_at(&buf, (i as u64 % SLOTS) * 4096)?;
        f.sync_data()?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    lat.sort_by(f64::total_cmp);
    Ok(Floor {
        samples,
        p50_us: percentile(&lat, 0.50),
        p99_us: percentile(&lat, 0.99),
    })
}

/// The `q` quantile of sorted samples (nearest rank).
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The rise of this process's resident memory while one engine runs: the
/// kernel's high-water mark (`VmHWM`), reset when the measure starts, minus
/// the resident size then. Freed memory of earlier engines is handed back
/// to the system first (`malloc_trim`), so an engine is not measured inside
/// what another left resident. Linux only (`None` elsewhere, or where the
/// mark cannot be reset).
pub struct PeakRss {
    start_kib: u64,
}

impl PeakRss {
    pub fn start() -> Option<PeakRss> {
        trim_heap();
        // Writing 5 to clear_refs resets the high-water mark to the current
        // resident size (Linux 4.0+).
        std::fs::write("/proc/self/clear_refs", b"5").ok()?;
        Some(PeakRss {
            start_kib: status_kib("VmRSS:")?,
        })
    }

    /// MiB the resident size rose to above its size at the start.
    pub fn rise_mib(&self) -> Option<f64> {
        let hwm = status_kib("VmHWM:")?;
        Some(hwm.saturating_sub(self.start_kib) as f64 / 1024.0)
    }
}

/// A `kB` field of /proc/self/status.
fn status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find_map(|l| l.strip_prefix(field))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim_heap() {
    extern "C" {
        fn malloc_trim(pad: usize) -> std::ffi::c_int;
    }
    // SAFETY: glibc's malloc_trim takes no pointer and may be called at any
    // time; it only returns free heap memory to the system.
    unsafe {
        malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim_heap() {}
