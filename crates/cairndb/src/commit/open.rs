//! Opening a database file: the options the commit layer runs with, the
//! creation of a new file, and an open (header checks, recovery, the
//! commit log's replay) that yields the [`Shared`] state of a handle.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::log::MIN_LOG_PAGES;
use super::overlay::Overlay;
use super::recovery::{recover, replay_log, slot_page_size, RecoveryReport};
use super::snapshots::{Snapshots, TableCache};
use super::{Carry, IoState, Shared, Sharing, WriterState};
use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::{PageId, TxnId};
use crate::limits;
use crate::pager::header::{
    self, CommitRecord, FileHeader, HeaderError, PageRef, FIRST_DATA_PAGE, HEADER_BYTES,
};
use crate::pager::log::LogRef;
use crate::pager::Pager;
use crate::storage::lockfile::LockFile;
use crate::storage::StorageFile;

/// What a handle is opened with (the `Builder`'s settings the commit layer
/// uses).
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub page_size: usize,
    pub cache_bytes: usize,
    pub max_file_bytes: Option<u64>,
    pub max_readers: usize,
    pub overlay_bytes: usize,
    pub log_bytes: u64,
    pub fixed_log_salts: Option<u64>,
}

impl Options {
    /// Refuses settings no handle can run with.
    pub(crate) fn check(&self) -> Result<()> {
        if self.max_readers == 0 {
            return Err(CoreError::InvalidOption(
                "max_readers must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// A new file needs its header page and two slots within the limit.
pub(crate) fn check_initial_size(page_size: usize, max_file_bytes: u64) -> Result<()> {
    let need = FIRST_DATA_PAGE * page_size as u64;
    if max_file_bytes < need {
        return Err(CoreError::FileSizeLimit {
            requested: need,
            max: max_file_bytes,
        });
    }
    Ok(())
}

/// Formats the empty `storage` as a new database: header page and both
/// commit slots, synced.
pub(crate) fn format_new(opts: &Options, storage: Box<dyn StorageFile>) -> Result<()> {
    let max_file_bytes = opts.max_file_bytes.unwrap_or(u64::MAX);
    check_initial_size(opts.page_size, max_file_bytes)?;
    let pager = Pager::new(storage, opts.page_size, opts.cache_bytes, false)?;
    pager.format(&initial_record(opts.page_size), max_file_bytes)
}

/// The commit record a new file starts from (in both slots): no tables, an
/// empty free list.
pub(crate) fn initial_record(page_size: usize) -> CommitRecord {
    CommitRecord {
        txn: TxnId(1),
        page_count: FIRST_DATA_PAGE,
        catalog: PageRef::NONE,
        freelist: PageRef::NONE,
        clean: true,
        page_size: page_size as u32,
        log: LogRef::NONE,
    }
}

/// Opens a database on `storage` (formatting it first if it is empty and
/// `create`): checks the header, recovers the newest usable commit, replays
/// the commit log after it, and builds the handle's shared state.
pub(crate) fn open(
    opts: &Options,
    storage: Box<dyn StorageFile>,
    path: PathBuf,
    create: bool,
    read_only: bool,
    lock: Option<Arc<LockFile>>,
) -> Result<(Arc<Shared>, RecoveryReport)> {
    opts.check()?;
    // The one writer, in any process; a reader takes a slot in the reader
    // table and, until it knows which commit it reads, holds the lowest
    // snapshot there is, so no page is reused under it meanwhile.
    let sharing = match &lock {
        Some(l) if read_only => {
            let slot = l.claim_slot()?;
            l.set_snapshot(slot, 1);
            Some(Sharing::new(l.clone(), Some(slot)))
        }
        Some(l) => {
            l.lock_writer(&path)?;
            // Readers that last looked while an earlier writer lived must
            // look again before they trust their trees: this writer may
            // reuse pages (below) before its first slot or log write.
            l.bump();
            Some(Sharing::new(l.clone(), None))
        }
        None => None,
    };
    let oldest_remote = match &sharing {
        Some(sh) if !read_only => sh.lock.oldest_reader()?.map(TxnId),
        _ => None,
    };
    // A reader beside a live writer trusts the newest slot (the writer
    // wrote its pages first; the OS cache is shared).
    let trust = match &sharing {
        Some(sh) if read_only => sh.lock.writer_alive()?,
        _ => false,
    };
    let len = storage.len().map_err(|e| CoreError::io("len", e))?;
    let max_file_bytes = opts.max_file_bytes.unwrap_or(u64::MAX);
    let mut version = crate::pager::header::FORMAT_VERSION;
    let (page_size, fresh) = if len == 0 {
        if !create || read_only {
            return Err(CoreError::NotADatabase { path });
        }
        limits::check_page_size(opts.page_size)?;
        check_initial_size(opts.page_size, max_file_bytes)?;
        (opts.page_size, true)
    } else {
        let mut h = vec![0u8; (HEADER_BYTES as u64).min(len) as usize];
        storage
            .read_at(&mut h, 0)
            .map_err(|e| CoreError::io("read", e))?;
        if h.len() < HEADER_BYTES {
            // Shorter than the header: a truncated database if what is
            // there is the start of the magic bytes.
            if !header::looks_like_magic(&h) {
                return Err(CoreError::NotADatabase { path });
            }
            return Err(Corruption {
                part: DamagedPart::FileLength,
                page: PageId(0),
                offset: 0,
                detail: format!(
                    "the file is {len} bytes long, shorter than its {HEADER_BYTES}-byte header (truncated)"
                ),
            }
            .into());
        }
        match FileHeader::decode(&h) {
            Ok(h) => {
                version = h.version;
                (h.page_size as usize, false)
            }
            Err(HeaderError::BadMagic) => match slot_page_size(storage.as_ref(), len)? {
                // The header page is wrecked but the commit slots are
                // where a page size puts them: a damaged database.
                Some(ps) => {
                    return Err(Corruption {
                        part: DamagedPart::FileHeader,
                        page: PageId(0),
                        offset: 0,
                        detail: format!(
                            "the header's magic bytes are wrong, but commit slots for {ps}-byte pages are in place: the header page is damaged"
                        ),
                    }
                    .into())
                }
                None => return Err(CoreError::NotADatabase { path }),
            },
            Err(HeaderError::NewerVersion(found)) => {
                return Err(CoreError::UnsupportedVersion {
                    path,
                    found,
                    supported: crate::pager::header::FORMAT_VERSION,
                })
            }
            Err(HeaderError::Damaged(detail)) => {
                return Err(Corruption {
                    part: DamagedPart::FileHeader,
                    page: PageId(0),
                    offset: 0,
                    detail,
                }
                .into())
            }
        }
    };
    let pager = Pager::new(storage, page_size, opts.cache_bytes, read_only)?;
    let limit_pages = max_file_bytes / page_size as u64;
    if fresh {
        pager.format(&initial_record(page_size), max_file_bytes)?;
    }
    let (slot, rec, mut report, alloc, freelist_pages) =
        recover(&pager, limit_pages, read_only, trust, oldest_remote)?;
    if trust {
        // The file's length after the slot was read: it covers every page
        // the slot reaches (the writer grows the file before it writes a
        // slot), which the length read before might not.
        pager.refresh_len()?;
    }
    if let Some(sh) = &sharing {
        match sh.slot {
            // No read transaction yet: the handle holds nothing (the first
            // one marks the trees it reads before it looks at the file).
            Some(s) => sh.lock.set_snapshot(s, 0),
            None => pager.set_notify(sh.lock.clone()),
        }
    }
    pager.note_unused_tail(rec.page_count);
    // The commit log after the opened slot's trees (a clean slot's log is
    // empty: a clean close applies every commit to the trees first).
    let replayed = if rec.log.is_none() || rec.clean {
        None
    } else {
        Some(replay_log(&pager, &rec, &mut report, trust)?)
    };
    if version < crate::pager::header::FORMAT_VERSION && !read_only {
        // Before this build writes a slot that may name a commit log, the
        // file must no longer open in a build that knows none.
        pager.upgrade_header()?;
        version = crate::pager::header::FORMAT_VERSION;
    }
    let (overlay, visible) = match replayed {
        Some(r) => (r.overlay, r.last.unwrap_or(rec.txn)),
        None => (Overlay::default(), rec.txn),
    };
    let log_max_pages = (opts.log_bytes / page_size as u64).min(u32::MAX as u64);
    let shared = Shared {
        pager,
        path,
        read_only,
        format_version: version,
        max_readers: opts.max_readers,
        max_file_bytes,
        overlay_bytes: opts.overlay_bytes,
        log_max_pages,
        fixed_log_salts: opts.fixed_log_salts,
        started: Instant::now(),
        last_write_nanos: std::sync::atomic::AtomicU64::new(0),
        background_stop: Mutex::new(false),
        background_cv: Condvar::new(),
        handle_open: AtomicBool::new(true),
        snapshots: Mutex::new(Snapshots {
            latest: rec,
            visible,
            shown: visible,
            overlay: Arc::new(overlay),
            readers: BTreeMap::new(),
            latest_readers: 0,
            count: 0,
            tables: Arc::new(TableCache::default()),
        }),
        commit_cv: Condvar::new(),
        writer: Mutex::new(WriterState {
            active: false,
            sleepers: 0,
            counts: (alloc.free_pages(), alloc.pending_pages()),
            alloc: Some(alloc),
            carry: Carry {
                freelist_pages,
                // The recovered log is not continued: the next durable
                // commit checkpoints (and frees its extent).
                log_extent: rec.log,
                log_ok: false,
                log_next_pages: rec
                    .log
                    .pages
                    .clamp(MIN_LOG_PAGES.min(log_max_pages), log_max_pages),
                ..Default::default()
            },
        }),
        writer_cv: Condvar::new(),
        writer_busy: std::sync::atomic::AtomicBool::new(false),
        writer_spinners: std::sync::atomic::AtomicU32::new(0),
        io: Mutex::new(IoState {
            durable_txn: rec.txn,
            durable_slot: slot,
            slot_written_txn: rec.txn,
            unslotted: None,
            flushing: false,
            flush_target: None,
            log: None,
            logged_txn: visible,
            log_durable_txn: visible,
        }),
        io_cv: Condvar::new(),
        sharing,
        layer_memo: Mutex::new(Vec::new()),
    };
    Ok((Arc::new(shared), report))
}
