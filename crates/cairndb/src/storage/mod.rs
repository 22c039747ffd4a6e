//! Layer 1: the storage file.
//!
//! Every byte CairnDB reads or writes goes through [`StorageFile`]. Production
//! uses [`FileStorage`] over `std::fs::File`; tests use `sim::SimFile` (feature
//! `testing`), which can crash, fail, lie about syncs and build crash images.
//! No other module touches `std::fs`.

#[cfg(any(test, feature = "testing"))]
pub mod sim;

pub(crate) mod lockfile;

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::error::{CoreError, Result};

/// Positional I/O on one file. Implementations must be usable from many
/// threads at once (`read_at` concurrently with `write_at` on other ranges).
pub trait StorageFile: Send + Sync + std::fmt::Debug {
    /// Reads exactly `buf.len()` bytes at `offset`; a read past the end is an
    /// `UnexpectedEof` error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Writes all of `buf` at `offset`, looping on short writes.
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write durable (fdatasync).
    fn sync_data(&self) -> io::Result<()>;
    /// Sets the file length, growing with zeros or truncating.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// The current file length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

impl<T: StorageFile + ?Sized> StorageFile for Arc<T> {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        (**self).read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        (**self).write_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        (**self).sync_data()
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        (**self).set_len(len)
    }
    fn len(&self) -> io::Result<u64> {
        (**self).len()
    }
}

/// How [`FileStorage::open`] treats the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read-write; create the file if it is missing.
    CreateOrOpen,
    /// Read-write; the file must exist.
    Open,
    /// Read-only; the file must exist. Takes a shared lock.
    ReadOnly,
}

/// The real storage file: a `std::fs::File` holding an advisory lock
/// (exclusive for read-write, shared for read-only) for as long as it is open.
#[derive(Debug)]
pub struct FileStorage {
    file: File,
    path: PathBuf,
}

/// Flushes the directory holding a newly created `path`, so the file's
/// directory entry survives a power loss (fdatasync on the file covers its
/// contents, not its name).
fn sync_parent_dir(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match File::open(parent) {
        Ok(dir) => dir
            .sync_all()
            .map_err(|e| CoreError::io("sync directory", e)),
        // Some platforms cannot open a directory as a file; nothing to flush.
        Err(_) => Ok(()),
    }
}

/// Creates the file at `path` (which does not exist) atomically: `init`
/// formats (and syncs) a temporary file beside it, which is then linked into
/// place and the directory flushed. A crash part-way leaves no file at
/// `path` (at most a stale temporary named `.<name>.creating-<pid>-<n>`),
/// never a half-written one. If another process creates `path` first, that
/// file is kept and this one discarded (`Ok`). Errors name `path`, not the
/// temporary.
pub fn create_new(path: &Path, init: impl FnOnce(FileStorage) -> Result<()>) -> Result<()> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cairn".into());
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = path.with_file_name(format!(".{name}.creating-{}-{n}", std::process::id()));
    let made = (|| -> Result<()> {
        init(FileStorage::open(&tmp, OpenMode::CreateOrOpen)?)?;
        match std::fs::hard_link(&tmp, path) {
            Ok(()) => {}
            // Someone else created it meanwhile: theirs is kept.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
            // A file system without hard links: rename instead.
            Err(_) if !path.exists() => {
                std::fs::rename(&tmp, path).map_err(|e| CoreError::io("rename", e))?
            }
            Err(_) => return Ok(()),
        }
        sync_parent_dir(path)
    })();
    let _ = std::fs::remove_file(&tmp);
    made.map_err(|e| match e {
        CoreError::NotFound { .. } => CoreError::NotFound {
            path: path.to_path_buf(),
        },
        e => e,
    })
}

/// Whether a file exists at `path`.
pub fn exists(path: &Path) -> bool {
    path.exists()
}

impl FileStorage {
    /// Opens (or creates) `path` and takes its lock without waiting.
    ///
    /// Returns [`CoreError::DatabaseLocked`] if another handle holds a conflicting
    /// lock, and [`CoreError::NotFound`] for a missing file in the non-creating modes.
    pub fn open(path: &Path, mode: OpenMode) -> Result<Self> {
        let mut options = OpenOptions::new();
        options.read(true);
        match mode {
            OpenMode::CreateOrOpen => {
                options.write(true).create(true);
            }
            OpenMode::Open => {
                options.write(true);
            }
            OpenMode::ReadOnly => {}
        }
        let existed = path.exists();
        let cannot = |source: io::Error| CoreError::CannotOpen {
            path: path.to_path_buf(),
            source,
        };
        let file = options.open(path).map_err(|e| {
            if e.kind() == io::ErrorKind::NotFound {
                CoreError::NotFound {
                    path: path.to_path_buf(),
                }
            } else {
                cannot(e)
            }
        })?;
        // A directory opens for reading on some systems, and fails only at
        // the first read: say so now.
        if file.metadata().map_err(cannot)?.is_dir() {
            return Err(cannot(io::Error::other("it is a directory, not a file")));
        }
        // A lock can be held for an instant by a copy of a descriptor that a
        // child process inherits between fork and exec (any thread of this
        // process spawning a command); such a holder is waited out for up to
        // ~500 ms before the file is reported locked.
        let mut attempts = 0;
        loop {
            // Shared in every mode on Linux: the one-writer rule is the lock
            // file's (`lockfile`); an exclusive holder is a build that
            // predates it. Elsewhere (no lock file) a writer holds it alone.
            let locked = if cfg!(target_os = "linux") || mode == OpenMode::ReadOnly {
                file.try_lock_shared()
            } else {
                file.try_lock()
            };
            match locked {
                Ok(()) => break,
                Err(TryLockError::WouldBlock) if attempts < 50 => {
                    attempts += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(TryLockError::WouldBlock) => {
                    return Err(CoreError::DatabaseLocked {
                        path: path.to_path_buf(),
                    })
                }
                Err(TryLockError::Error(e)) => return Err(CoreError::io("lock", e)),
            }
        }
        if !existed && mode == OpenMode::CreateOrOpen {
            sync_parent_dir(path)?;
        }
        Ok(FileStorage {
            file,
            path: path.to_path_buf(),
        })
    }

    /// The path this file was opened from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl StorageFile for FileStorage {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        // `write_all_at` loops on short writes (seen under a file-size rlimit)
        // and retries on EINTR.
        self.file.write_all_at(buf, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }
}
