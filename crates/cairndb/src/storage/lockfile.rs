//! The lock file `NAME-lock` beside a database: who has the file open, the
//! one writer, and the snapshot each reader handle (in any process) reads,
//! so that the writer never reuses a page a reader elsewhere can reach.
//! Layout and protocol: FORMAT.md, "Sharing a file between processes".
//!
//! The table is a shared memory map of the file's first 4 KiB, read and
//! written with atomics. Liveness is kept by open-file-description byte
//! locks (`F_OFD_SETLK`) on bytes past the table: the kernel drops them
//! when the holder's descriptor closes or its process dies, so a slot whose
//! lock is free is dead whatever its bytes say.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{CoreError, Result};

/// Size of the mapped table.
pub(crate) const TABLE_BYTES: usize = 4096;
/// Reader slots in the table.
pub(crate) const READER_SLOTS: usize = 126;
const MAGIC: &[u8; 8] = b"CAIRNLCK";
const VERSION: u32 = 3;
const SLOT_BASE: usize = 64;
/// The slots-used word: one more than the highest slot claimed since the
/// table was built (FORMAT.md).
const SLOTS_USED: usize = 48;
const SLOT_BYTES: usize = 32;

/// Byte locks (FORMAT.md's table).
const LOCK_IN_USE: u64 = 4096;
const LOCK_WRITER: u64 = 4097;
const LOCK_INIT: u64 = 4098;
const LOCK_SLOT_BASE: u64 = 8192;

/// The path of `db`'s lock file.
pub(crate) fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-lock");
    PathBuf::from(name)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Shared,
    Exclusive,
    Unlock,
}

/// One byte lock on `file` at `at`: `Ok(true)` if taken (or released),
/// `Ok(false)` if another description holds a conflicting lock (only when
/// `wait` is false).
fn byte_lock(file: &File, at: u64, kind: Kind, wait: bool) -> io::Result<bool> {
    // SAFETY: `flock` is a plain C struct for which all-zero bytes are a
    // valid value; the fields that matter are set below.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = match kind {
        Kind::Shared => libc::F_RDLCK,
        Kind::Exclusive => libc::F_WRLCK,
        Kind::Unlock => libc::F_UNLCK,
    } as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = at as libc::off_t;
    fl.l_len = 1;
    let cmd = if wait { OFD_SETLKW } else { OFD_SETLK };
    loop {
        // SAFETY: `fcntl` with a lock command reads and writes only the
        // `flock` passed, which outlives the call; the descriptor is open
        // (borrowed from `file`).
        let r = unsafe { libc::fcntl(file.as_raw_fd(), cmd, &mut fl) };
        if r == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EAGAIN) | Some(libc::EACCES) if !wait => return Ok(false),
            _ => return Err(e),
        }
    }
}

/// Whether another open file description holds a lock on byte `at` that
/// an exclusive lock would conflict with.
fn byte_locked_elsewhere(file: &File, at: u64) -> io::Result<bool> {
    // SAFETY: as in `byte_lock`.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = libc::F_WRLCK as libc::c_short;
    fl.l_whence = libc::SEEK_SET as libc::c_short;
    fl.l_start = at as libc::off_t;
    fl.l_len = 1;
    // SAFETY: as in `byte_lock`.
    let r = unsafe { libc::fcntl(file.as_raw_fd(), OFD_GETLK, &mut fl) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fl.l_type != libc::F_UNLCK as libc::c_short)
}

// Open-file-description locks: per open file, so two handles in one
// process exclude each other as two processes do. (Linux only: the
// database opens no lock file elsewhere, see `db::lock_file`; the classic
// per-process locks below only keep this module compiling there.)
#[cfg(target_os = "linux")]
const OFD_SETLK: libc::c_int = libc::F_OFD_SETLK;
#[cfg(target_os = "linux")]
const OFD_SETLKW: libc::c_int = libc::F_OFD_SETLKW;
#[cfg(target_os = "linux")]
const OFD_GETLK: libc::c_int = libc::F_OFD_GETLK;
#[cfg(not(target_os = "linux"))]
const OFD_SETLK: libc::c_int = libc::F_SETLK;
#[cfg(not(target_os = "linux"))]
const OFD_SETLKW: libc::c_int = libc::F_SETLKW;
#[cfg(not(target_os = "linux"))]
const OFD_GETLK: libc::c_int = libc::F_GETLK;

/// Whether `path` names the open `file` (same device and inode).
fn same_file(path: &Path, file: &File) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(path), file.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// An open lock file: the shared table and this handle's locks.
pub(crate) struct LockFile {
    file: File,
    map: memmap2::MmapRaw,
    path: PathBuf,
    /// This handle holds the writer lock.
    writer: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for LockFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockFile")
            .field("path", &self.path)
            .finish()
    }
}

impl LockFile {
    /// Opens (creating it if needed) the lock file of the database at `db`,
    /// and marks it in use by this handle;
    /// the first handle of all rebuilds its table.
    pub(crate) fn open(db: &Path) -> Result<LockFile> {
        let path = lock_path(db);
        let named = path.clone();
        let cannot = move |source: io::Error| CoreError::CannotOpen {
            path: named.clone(),
            source,
        };
        // The last handle to close removes the file (under the init lock);
        // one that opened it just before must not use the removed file:
        // once it holds the init lock, the path must still name it.
        let mut attempts = 0;
        let file = loop {
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&path)
                .map_err(&cannot)?;
            byte_lock(&file, LOCK_INIT, Kind::Exclusive, true).map_err(&cannot)?;
            if same_file(&path, &file) {
                break file;
            }
            attempts += 1;
            if attempts > 100 {
                return Err(cannot(io::Error::other(
                    "the lock file keeps being replaced while it is opened",
                )));
            }
        };
        let fresh = byte_lock(&file, LOCK_IN_USE, Kind::Exclusive, false).map_err(&cannot)?;
        if fresh {
            // Nobody else has it open: whatever it holds is stale.
            file.set_len(0).map_err(&cannot)?;
            file.set_len(TABLE_BYTES as u64).map_err(&cannot)?;
        } else if file.metadata().map_err(&cannot)?.len() < TABLE_BYTES as u64 {
            let _ = byte_lock(&file, LOCK_INIT, Kind::Unlock, false);
            return Err(cannot(io::Error::other(
                "the lock file is in use by another handle but shorter than its table (it was truncated or replaced while the database was open)",
            )));
        }
        let map = memmap2::MmapOptions::new()
            .len(TABLE_BYTES)
            .map_raw(&file)
            .map_err(&cannot)?;
        let lf = LockFile {
            file,
            map,
            path,
            writer: std::sync::atomic::AtomicBool::new(false),
        };
        if fresh {
            let head = lf.bytes_mut(0, 24);
            head[..8].copy_from_slice(MAGIC);
            head[8..12].copy_from_slice(&VERSION.to_le_bytes());
            head[16..20].copy_from_slice(&(READER_SLOTS as u32).to_le_bytes());
            byte_lock(&lf.file, LOCK_IN_USE, Kind::Shared, true).map_err(&cannot)?;
        } else {
            let checked = lf.check_header();
            if checked.is_ok() {
                byte_lock(&lf.file, LOCK_IN_USE, Kind::Shared, true).map_err(&cannot)?;
            }
            if let Err(e) = checked {
                let _ = byte_lock(&lf.file, LOCK_INIT, Kind::Unlock, false);
                return Err(e);
            }
        }
        byte_lock(&lf.file, LOCK_INIT, Kind::Unlock, false).map_err(&cannot)?;
        Ok(lf)
    }

    fn check_header(&self) -> Result<()> {
        let head = self.bytes(0, 24);
        let bad = |why: String| CoreError::CannotOpen {
            path: self.path.clone(),
            source: io::Error::other(why),
        };
        if &head[..8] != MAGIC {
            return Err(bad(
                "not a CairnDB lock file (wrong magic), and another handle has it open".into(),
            ));
        }
        let version = u32::from_le_bytes([head[8], head[9], head[10], head[11]]);
        if version != VERSION {
            return Err(bad(format!(
                "lock file version {version}, this build knows {VERSION}: a newer build has the database open"
            )));
        }
        let slots = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
        if slots as usize != READER_SLOTS {
            return Err(bad(format!(
                "the lock file has {slots} reader slots, this build expects {READER_SLOTS}"
            )));
        }
        Ok(())
    }

    fn bytes(&self, at: usize, len: usize) -> &[u8] {
        assert!(at + len <= TABLE_BYTES);
        // SAFETY: the map is `TABLE_BYTES` long and lives as long as `self`;
        // these header bytes are written only while the init lock excludes
        // every other handle from reading them.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(at), len) }
    }

    #[allow(clippy::mut_from_ref)]
    fn bytes_mut(&self, at: usize, len: usize) -> &mut [u8] {
        assert!(at + len <= TABLE_BYTES);
        // SAFETY: as in `bytes`; called only by the handle that rebuilds
        // the table, under the init lock and before anyone else reads it.
        unsafe { std::slice::from_raw_parts_mut(self.map.as_mut_ptr().add(at), len) }
    }

    /// The 8-byte word at `at` (a multiple of 8) as an atomic.
    fn word(&self, at: usize) -> &AtomicU64 {
        assert!(at.is_multiple_of(8) && at + 8 <= TABLE_BYTES);
        // SAFETY: the map is page-aligned and `at` a multiple of 8, so the
        // word is aligned; it lives as long as `self`; every process
        // accesses these words only atomically.
        unsafe { &*(self.map.as_ptr().add(at) as *const AtomicU64) }
    }

    fn slot_word(&self, slot: usize, field: usize) -> &AtomicU64 {
        self.word(SLOT_BASE + slot * SLOT_BYTES + field * 8)
    }

    /// Takes the one writer lock: `DatabaseLocked` if another handle, in
    /// any process, holds it.
    pub(crate) fn lock_writer(&self, db: &Path) -> Result<()> {
        let got = byte_lock(&self.file, LOCK_WRITER, Kind::Exclusive, false)
            .map_err(|e| CoreError::io("lock the writer lock", e))?;
        if !got {
            return Err(CoreError::DatabaseLocked {
                path: db.to_path_buf(),
            });
        }
        self.writer.store(true, Ordering::SeqCst);
        self.word(32)
            .store(std::process::id() as u64, Ordering::SeqCst);
        Ok(())
    }

    /// Whether some handle (in any process, this one included) holds the
    /// writer lock.
    pub(crate) fn writer_alive(&self) -> Result<bool> {
        // Our own description's lock is not reported by GETLK: ask as
        // someone who would take it.
        byte_locked_elsewhere(&self.file, LOCK_WRITER)
            .map_err(|e| CoreError::io("test the writer lock", e))
    }

    /// Claims a free reader slot for this handle.
    pub(crate) fn claim_slot(&self) -> Result<usize> {
        for i in 0..READER_SLOTS {
            let got = byte_lock(
                &self.file,
                LOCK_SLOT_BASE + i as u64,
                Kind::Exclusive,
                false,
            )
            .map_err(|e| CoreError::io("lock a reader slot", e))?;
            if got {
                self.slot_word(i, 0).store(0, Ordering::SeqCst);
                self.slot_word(i, 3).store(u64::MAX, Ordering::SeqCst);
                self.slot_word(i, 1)
                    .store(std::process::id() as u64, Ordering::SeqCst);
                // Before the slot can hold a snapshot: a writer that read
                // the word earlier misses the slot as it would miss a
                // snapshot stored after its look (FORMAT.md).
                self.word(SLOTS_USED)
                    .fetch_max(i as u64 + 1, Ordering::SeqCst);
                return Ok(i);
            }
        }
        Err(CoreError::TooManyReaders { max: READER_SLOTS })
    }

    /// How many slots a scan reads: those below the slots-used word (a
    /// damaged word past the table reads as the whole table).
    fn slots_used(&self) -> usize {
        let used = self.word(SLOTS_USED).load(Ordering::SeqCst);
        usize::try_from(used).map_or(READER_SLOTS, |u| u.min(READER_SLOTS))
    }

    /// Gives a claimed slot back.
    pub(crate) fn release_slot(&self, slot: usize) {
        self.slot_word(slot, 0).store(0, Ordering::SeqCst);
        let _ = byte_lock(
            &self.file,
            LOCK_SLOT_BASE + slot as u64,
            Kind::Unlock,
            false,
        );
    }

    /// Records in `slot` the oldest trees its handle's read transactions
    /// read (0: none).
    pub(crate) fn set_snapshot(&self, slot: usize, txn: u64) {
        self.slot_word(slot, 0).store(txn, Ordering::SeqCst);
    }

    /// Records in `slot` the newest trees its handle's read transactions
    /// read (`u64::MAX`: any, while it looks at the file).
    pub(crate) fn set_newest(&self, slot: usize, txn: u64) {
        self.slot_word(slot, 3).store(txn, Ordering::SeqCst);
    }

    /// The trees every live reader slot (of other handles) reads, as
    /// inclusive ranges (oldest, newest); dead slots are skipped as in
    /// `oldest_reader`.
    pub(crate) fn reader_ranges(&self) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for i in 0..self.slots_used() {
            let lo = self.slot_word(i, 0).load(Ordering::SeqCst);
            if lo == 0 {
                continue;
            }
            let hi = self.slot_word(i, 3).load(Ordering::SeqCst);
            let live = byte_locked_elsewhere(&self.file, LOCK_SLOT_BASE + i as u64)
                .map_err(|e| CoreError::io("test a reader slot", e))?;
            if live {
                // A newest below the oldest is a torn or stale pair: any.
                out.push((lo, if hi < lo { u64::MAX } else { hi }));
            }
        }
        Ok(out)
    }

    /// The oldest snapshot any live reader slot holds (other handles'
    /// slots; a slot whose lock is free is dead, is skipped and cleared).
    pub(crate) fn oldest_reader(&self) -> Result<Option<u64>> {
        let mut oldest: Option<u64> = None;
        for i in 0..self.slots_used() {
            let snap = self.slot_word(i, 0).load(Ordering::SeqCst);
            if snap == 0 || oldest.is_some_and(|o| o <= snap) {
                continue;
            }
            let live = byte_locked_elsewhere(&self.file, LOCK_SLOT_BASE + i as u64)
                .map_err(|e| CoreError::io("test a reader slot", e))?;
            // A slot whose lock is free is dead (its owner is gone): skipped,
            // not cleared — a process claiming it meanwhile clears it itself,
            // and clearing here could erase that new owner's mark.
            if live {
                oldest = Some(snap);
            }
        }
        Ok(oldest)
    }

    /// How many live reader slots (of other handles) hold a snapshot.
    pub(crate) fn live_readers(&self) -> usize {
        (0..self.slots_used())
            .filter(|&i| {
                self.slot_word(i, 0).load(Ordering::SeqCst) != 0
                    && byte_locked_elsewhere(&self.file, LOCK_SLOT_BASE + i as u64).unwrap_or(true)
            })
            .count()
    }

    /// The commit counter.
    pub(crate) fn counter(&self) -> u64 {
        self.word(24).load(Ordering::SeqCst)
    }

    /// Bumps the commit counter (after a commit reached the file) and wakes
    /// the handles waiting on it, if any.
    pub(crate) fn bump(&self) {
        self.word(24).fetch_add(1, Ordering::SeqCst);
        // Dekker with `wait_change`: a waiter counts itself before the
        // kernel compares the counter, the writer bumps before it reads
        // the count (both sequentially consistent): either the waiter sees
        // the new counter or the writer sees the waiter.
        if self.word(40).load(Ordering::SeqCst) > 0 {
            futex::wake(self.counter_low());
        }
    }

    /// The counter's low 32 bits (the futex word: a futex is 32 bits).
    fn counter_low(&self) -> *const u32 {
        let at = if cfg!(target_endian = "little") {
            24
        } else {
            28
        };
        // SAFETY: inside the map (checked by `word(24)`'s bounds), 4-aligned.
        unsafe { self.map.as_ptr().add(at).cast::<u32>() }
    }

    /// Waits until the commit counter differs from `seen` (a value this
    /// handle loaded), or `timeout` passes: a futex on the counter on Linux
    /// (woken by the writer's `bump`, in any process), a sleep elsewhere.
    /// May return early (spurious wakeups): callers look and wait again.
    pub(crate) fn wait_change(&self, seen: u64, timeout: Duration) {
        let waiters = self.word(40);
        waiters.fetch_add(1, Ordering::SeqCst);
        if self.counter() == seen {
            futex::wait(self.counter_low(), seen as u32, timeout);
        }
        waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waiting on a word of the shared map, across processes.
mod futex {
    use std::time::Duration;

    /// Sleeps while `*word == expected`, at most `timeout`.
    #[cfg(target_os = "linux")]
    pub(super) fn wait(word: *const u32, expected: u32, timeout: Duration) {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: `word` points into a live shared mapping, 4-aligned; the
        // kernel only reads it. Not FUTEX_PRIVATE: waiters and wakers are
        // in different processes. Any result (woken, EAGAIN, ETIMEDOUT,
        // EINTR) just returns: the caller looks again.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word,
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    /// Wakes every waiter on `word`.
    #[cfg(target_os = "linux")]
    pub(super) fn wake(word: *const u32) {
        // SAFETY: as in `wait`.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word,
                libc::FUTEX_WAKE,
                i32::MAX,
                std::ptr::null::<libc::timespec>(),
                std::ptr::null::<u32>(),
                0u32,
            );
        }
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn wait(_word: *const u32, _expected: u32, timeout: Duration) {
        std::thread::sleep(timeout.min(Duration::from_millis(20)));
    }

    #[cfg(not(target_os = "linux"))]
    pub(super) fn wake(_word: *const u32) {}
}

impl Drop for LockFile {
    /// The last handle of all removes the file (nothing in it is needed
    /// once nobody has the database open), so no `NAME-lock` is left
    /// beside a closed database. Closing the descriptor drops every lock.
    fn drop(&mut self) {
        if self.writer.load(Ordering::SeqCst) {
            // The writer leaves: no writer's pid now.
            self.word(32).store(0, Ordering::SeqCst);
        }
        if byte_lock(&self.file, LOCK_INIT, Kind::Exclusive, true).unwrap_or(false)
            && byte_lock(&self.file, LOCK_IN_USE, Kind::Exclusive, false).unwrap_or(false)
            && same_file(&self.path, &self.file)
        {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db(dir: &tempfile::TempDir) -> PathBuf {
        dir.path().join("x.cairn")
    }

    #[test]
    fn one_writer_across_handles() {
        let dir = tempfile::tempdir().unwrap();
        let a = LockFile::open(&db(&dir)).unwrap();
        let b = LockFile::open(&db(&dir)).unwrap();
        a.lock_writer(&db(&dir)).unwrap();
        assert!(matches!(
            b.lock_writer(&db(&dir)),
            Err(CoreError::DatabaseLocked { .. })
        ));
        assert!(b.writer_alive().unwrap());
        drop(a);
        assert!(!b.writer_alive().unwrap(), "a closed handle's lock is gone");
        b.lock_writer(&db(&dir)).unwrap();
    }

    #[test]
    fn readers_hold_the_oldest_snapshot_until_they_go() {
        let dir = tempfile::tempdir().unwrap();
        let w = LockFile::open(&db(&dir)).unwrap();
        let r1 = LockFile::open(&db(&dir)).unwrap();
        let r2 = LockFile::open(&db(&dir)).unwrap();
        let s1 = r1.claim_slot().unwrap();
        let s2 = r2.claim_slot().unwrap();
        assert_ne!(s1, s2, "two handles never share a slot");
        assert_eq!(w.oldest_reader().unwrap(), None);
        r1.set_snapshot(s1, 7);
        r2.set_snapshot(s2, 5);
        assert_eq!(w.oldest_reader().unwrap(), Some(5));
        r2.set_snapshot(s2, 0);
        assert_eq!(w.oldest_reader().unwrap(), Some(7));
        // A handle that goes away without releasing (a killed process):
        // its slot is dead, skipped and cleared.
        drop(r1);
        assert_eq!(w.oldest_reader().unwrap(), None);
        let r3 = LockFile::open(&db(&dir)).unwrap();
        assert_eq!(r3.claim_slot().unwrap(), s1, "the dead slot is free again");
    }

    #[test]
    fn scans_read_every_slot_ever_claimed_and_only_those() {
        let dir = tempfile::tempdir().unwrap();
        let w = LockFile::open(&db(&dir)).unwrap();
        assert_eq!(w.slots_used(), 0, "a fresh table has no slot to scan");
        assert_eq!(w.reader_ranges().unwrap(), vec![]);
        let rs: Vec<LockFile> = (0..6).map(|_| LockFile::open(&db(&dir)).unwrap()).collect();
        let slots: Vec<usize> = rs.iter().map(|r| r.claim_slot().unwrap()).collect();
        assert_eq!(slots, (0..6).collect::<Vec<_>>());
        // The reader in the highest slot claimed is seen by every scan.
        rs[5].set_snapshot(slots[5], 9);
        rs[5].set_newest(slots[5], 11);
        assert_eq!(w.oldest_reader().unwrap(), Some(9));
        assert_eq!(w.reader_ranges().unwrap(), vec![(9, 11)]);
        assert_eq!(w.live_readers(), 1);
        // Releasing lower slots never hides a higher one.
        for (r, &i) in rs.iter().zip(&slots).take(5) {
            r.release_slot(i);
        }
        assert_eq!(w.slots_used(), 6);
        assert_eq!(w.oldest_reader().unwrap(), Some(9));
        // A slot claimed again below the mark, and one past it.
        let again = LockFile::open(&db(&dir)).unwrap();
        let i = again.claim_slot().unwrap();
        assert_eq!(i, 0);
        again.set_snapshot(i, 4);
        assert_eq!(w.oldest_reader().unwrap(), Some(4));
        let more: Vec<LockFile> = (0..6).map(|_| LockFile::open(&db(&dir)).unwrap()).collect();
        let got: Vec<usize> = more.iter().map(|r| r.claim_slot().unwrap()).collect();
        assert_eq!(got, vec![1, 2, 3, 4, 6, 7]);
        more[5].set_snapshot(7, 2);
        assert_eq!(w.slots_used(), 8);
        assert_eq!(w.oldest_reader().unwrap(), Some(2));
    }

    #[test]
    fn the_first_opener_rebuilds_a_stale_table_and_later_ones_check_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(lock_path(&db(&dir)), b"garbage").unwrap();
        let a = LockFile::open(&db(&dir)).unwrap();
        a.bump();
        assert_eq!(a.counter(), 1);
        // Damage while in use is reported, not papered over.
        a.bytes_mut(0, 1)[0] = b'X';
        let err = LockFile::open(&db(&dir)).unwrap_err();
        assert!(err.to_string().contains("magic"), "{err}");
        drop(a);
        assert!(
            !lock_path(&db(&dir)).exists(),
            "the last handle to close removes the lock file"
        );
        // Nobody has it open now: a new first opener starts afresh.
        let b = LockFile::open(&db(&dir)).unwrap();
        assert_eq!(b.counter(), 0);
        let c = LockFile::open(&db(&dir)).unwrap();
        drop(b);
        assert!(lock_path(&db(&dir)).exists(), "c still has it open");
        drop(c);
        assert!(!lock_path(&db(&dir)).exists());
    }

    #[test]
    fn a_full_table_is_too_many_readers() {
        let dir = tempfile::tempdir().unwrap();
        let handles: Vec<LockFile> = (0..READER_SLOTS)
            .map(|_| LockFile::open(&db(&dir)).unwrap())
            .collect();
        for h in &handles {
            h.claim_slot().unwrap();
        }
        let more = LockFile::open(&db(&dir)).unwrap();
        assert!(matches!(
            more.claim_slot(),
            Err(CoreError::TooManyReaders { .. })
        ));
    }
}
