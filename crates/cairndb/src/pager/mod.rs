//! Layer 2: the pager — fixed-size pages, checksums, the page cache, free
//! space, the header and commit slots, and the device flush.
//!
//! Invariants:
//! - every page read from the storage file is verified against the checksum
//!   its parent holds (`xxh3_64(bytes, seed = page id)`) before anyone sees it;
//! - after a failed write, sync or resize the pager is poisoned and refuses
//!   every later write until the database is reopened;
//! - the pager never interprets tree pages (that is the B+tree's job); it
//!   knows only the header, the commit slots and the free-list pages.

pub mod alloc;
mod cache;
pub mod header;
pub mod log;
pub(crate) mod pins;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::{PageId, TxnId};
use crate::limits::PAGE_HEADER_BYTES;
use crate::storage::StorageFile;
use alloc::{words_from_bytes, Allocator};
use cache::{PageCache, ValueCache};
use header::{le_u16, le_u64, CommitRecord, FileHeader, PageRef, SLOT_BYTES};

/// Page kind byte: B+tree leaf.
pub const KIND_LEAF: u8 = 1;
/// Page kind byte: B+tree branch.
pub const KIND_BRANCH: u8 = 2;
/// Page kind byte: free-list chain page.
pub const KIND_FREELIST: u8 = 3;

/// Most bytes a forward scan reads from the file at once: the page it needs
/// and the adjacent pages it will need next (`Pager::read_pages`), 16 pages
/// of 4 KiB. Larger reads measured no better (see ARCHITECTURE.md).
pub const READ_AHEAD_BYTES: usize = 64 << 10;

thread_local! {
    /// Each thread's buffer for reads of the file (`Pager::read_pages`):
    /// pages are read into it and copied into their own allocation once
    /// verified, so no page buffer is zeroed first.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Bytes of a free-list page before its payload: header + next reference.
const FREELIST_PREFIX: usize = PAGE_HEADER_BYTES + 16;

/// A page to write: its id and contents.
pub type PageWrite = (PageId, Page);

/// An immutable, verified page, cheap to clone: its checksum, its bytes and
/// an in-memory search index (built by the layer that owns the page's
/// format, never written to the file).
///
/// The index is built lazily, by the first reader that searches the page
/// ([`Page::index_or_build`]): a scan walks a leaf by its entry offsets and
/// never needs one, so a page loaded by a scan (or read ahead for it) costs
/// a read, a checksum and a structure check, not an index build. The bytes
/// are the buffer the file was read into (no copy on load).
#[derive(Debug, Clone)]
pub struct Page(Arc<PageInner>);

#[derive(Debug)]
struct PageInner {
    checksum: u64,
    /// Set at most once, by the first search (or by the writer that made
    /// the page); readers racing to build it get the same bytes.
    index: std::sync::OnceLock<Box<[u8]>>,
    data: Box<[u8]>,
}

impl Page {
    /// A page holding a copy of `data` (exactly `page_size` bytes) whose
    /// checksum is `checksum`.
    pub fn new(data: &[u8], checksum: u64) -> Page {
        Page::from_box(data.into(), checksum)
    }

    /// A page owning `data` (no copy).
    pub fn from_box(data: Box<[u8]>, checksum: u64) -> Page {
        Page(Arc::new(PageInner {
            checksum,
            index: std::sync::OnceLock::new(),
            data,
        }))
    }

    /// The page's bytes.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.0.data
    }

    /// Bytes this page holds in memory (data, search index if built, and
    /// the bookkeeping around them).
    #[inline]
    pub fn footprint(&self) -> usize {
        std::mem::size_of::<PageInner>()
            + self.0.data.len()
            + self.0.index.get().map_or(0, |i| i.len())
    }

    /// The in-memory search index, if one was built (empty otherwise).
    #[cfg(test)]
    pub fn index(&self) -> &[u8] {
        self.0.index.get().map_or(&[], |i| i)
    }

    /// The search index, built by `build` from the page's bytes on the
    /// first call (by whichever thread gets there first; every caller gets
    /// the same bytes).
    #[inline]
    pub fn index_or_build(&self, build: fn(&[u8]) -> Vec<u8>) -> &[u8] {
        self.0
            .index
            .get_or_init(|| build(&self.0.data).into_boxed_slice())
    }

    /// Its checksum.
    #[inline]
    pub fn checksum(&self) -> u64 {
        self.0.checksum
    }
}

/// Removes `from .. to` from a set of disjoint ranges (start → end).
fn cut_ranges(u: &mut std::collections::BTreeMap<u64, u64>, from: u64, to: u64) {
    let before = u.range(..from).next_back().map(|(&s, &e)| (s, e));
    let inside: Vec<(u64, u64)> = u.range(from..to).map(|(&s, &e)| (s, e)).collect();
    for (s, e) in before.into_iter().chain(inside) {
        if e <= from || s >= to {
            continue;
        }
        u.remove(&s);
        if s < from {
            u.insert(s, from);
        }
        if e > to {
            u.insert(to, e);
        }
    }
}

/// The checksum of a page: xxh3-64 seeded with the page id, so a page
/// written to the wrong place fails verification.
pub fn page_checksum(pid: PageId, data: &[u8]) -> u64 {
    xxh3_64_with_seed(data, pid.0)
}

/// The checksum of an out-of-line value, seeded with its first page.
pub fn value_checksum(start: PageId, data: &[u8]) -> u64 {
    xxh3_64_with_seed(data, start.0 ^ 0x0F0F_0F0F_0F0F_0F0F)
}

/// Page I/O for one open file.
#[derive(Debug)]
pub struct Pager {
    storage: Box<dyn StorageFile>,
    page_size: usize,
    cache: PageCache,
    /// Verified out-of-line values (a quarter of the cache size on top of it).
    values: ValueCache,
    /// Physical file length (the file grows in chunks ahead of `page_count`).
    file_len: AtomicU64,
    /// Byte ranges (start → end) of the file that were never written: grown
    /// by `set_len` and not written since, or past the recovered commit's
    /// pages at open. The first write to a block there makes the file system
    /// allocate it — a journal commit in the next flush — so the commit log
    /// writes zeros ahead of itself over such ranges (`is_unwritten`).
    unwritten: Mutex<std::collections::BTreeMap<u64, u64>>,
    poison: Mutex<Option<String>>,
    read_only: bool,
    /// The lock file whose commit counter a slot or log write bumps, so
    /// that readers in other processes notice it (FORMAT.md, "Sharing a
    /// file between processes").
    notify: std::sync::OnceLock<std::sync::Arc<crate::storage::lockfile::LockFile>>,
    /// Counters since the handle opened ([`crate::IoCounters`]).
    pub(crate) counters: Counters,
    /// Bytes of pages one read transaction may pin (`pins.rs`): a quarter
    /// of the page cache, at most [`pins::PIN_BUDGET`].
    pub(crate) pin_budget: usize,
}

/// What [`crate::Database::io_counters`] reports, counted here (relaxed
/// atomics: monotonic totals, read without synchronising with anything).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Commits made through this handle (engine-made spills not counted).
    pub commits: AtomicU64,
    /// Device flushes (`sync_data`) of the database file.
    pub syncs: AtomicU64,
    /// `read_page` answered from the page cache.
    pub cache_hits: AtomicU64,
    /// Page loads that read the file (one read each, with the pages it
    /// read ahead; those are counted as hits when loaded).
    pub cache_misses: AtomicU64,
    /// Pages read transactions keep alive for the slices they hand out
    /// (`pins.rs`; a gauge).
    pub pinned_pages: AtomicU64,
    /// Bytes of those pages and of the transactions' tables of them (a
    /// gauge).
    pub pinned_bytes: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

impl Pager {
    pub(crate) fn new(
        storage: Box<dyn StorageFile>,
        page_size: usize,
        cache_bytes: usize,
        read_only: bool,
    ) -> Result<Self> {
        let len = storage.len().map_err(|e| CoreError::io("len", e))?;
        Ok(Pager {
            storage,
            page_size,
            cache: PageCache::new(cache_bytes, page_size),
            values: ValueCache::new(cache_bytes / 4),
            pin_budget: (cache_bytes / 4).min(pins::PIN_BUDGET),
            file_len: AtomicU64::new(len),
            unwritten: Mutex::new(std::collections::BTreeMap::new()),
            poison: Mutex::new(None),
            read_only,
            notify: std::sync::OnceLock::new(),
            counters: Counters::default(),
        })
    }

    /// Bumps `lock`'s commit counter after every slot and log write.
    pub(crate) fn set_notify(&self, lock: std::sync::Arc<crate::storage::lockfile::LockFile>) {
        let _ = self.notify.set(lock);
    }

    fn notify_readers(&self) {
        if let Some(l) = self.notify.get() {
            l.bump();
        }
    }

    /// Drops every cached page that is not staged: a reader in another
    /// process than the writer's calls it when the newest commit slot moved
    /// (pages it cached before may have been reused since).
    pub(crate) fn clear_cache(&self) {
        self.cache.clear();
    }

    /// Rereads the file's length (a reader beside a writer in another
    /// process: the file grows under it).
    pub(crate) fn refresh_len(&self) -> Result<u64> {
        let len = self.storage.len().map_err(|e| CoreError::io("len", e))?;
        self.file_len.fetch_max(len, Ordering::AcqRel);
        Ok(self.file_len())
    }

    /// The page size in bytes.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The physical file length in bytes.
    pub fn file_len(&self) -> u64 {
        self.file_len.load(Ordering::Acquire)
    }

    /// The byte offset of a page (saturating: a damaged page id too large
    /// for any file yields `u64::MAX`, past the end of the file).
    pub fn offset(&self, pid: PageId) -> u64 {
        pid.0.saturating_mul(self.page_size as u64)
    }

    /// A verified out-of-line value kept in memory, if it matches.
    pub fn cached_value(&self, start: PageId, checksum: u64, len: u64) -> Option<Arc<[u8]>> {
        self.values.get(start.0, checksum, len)
    }

    /// Keeps a verified (or just written) out-of-line value in memory.
    pub fn cache_value(&self, start: PageId, checksum: u64, value: Arc<[u8]>) {
        self.values.insert(start.0, checksum, value);
    }

    /// Forgets the value whose pages were freed.
    pub fn forget_value(&self, start: PageId) {
        self.values.remove(start.0);
    }

    /// Fails with [`CoreError::Poisoned`] if an earlier write or sync failed, or
    /// [`CoreError::ReadOnly`] on a read-only handle.
    pub fn check_writable(&self) -> Result<()> {
        if self.read_only {
            return Err(CoreError::ReadOnly);
        }
        match &*self.poison.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(cause) => Err(CoreError::Poisoned {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Whether the handle is poisoned.
    pub fn is_poisoned(&self) -> bool {
        self.poison
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    fn poisoned(&self, op: &'static str, e: std::io::Error) -> CoreError {
        let mut p = self.poison.lock().unwrap_or_else(|e| e.into_inner());
        if p.is_none() {
            *p = Some(format!("{op} failed: {e}"));
        }
        CoreError::io(op, e)
    }

    fn corruption(&self, part: DamagedPart, pid: PageId, detail: String) -> CoreError {
        Corruption {
            part,
            page: pid,
            offset: self.offset(pid),
            detail,
        }
        .into()
    }

    /// Reads raw bytes (no verification).
    pub fn read_raw(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.storage
            .read_at(buf, offset)
            .map_err(|e| CoreError::io("read", e))
    }

    /// Reads a page from the file and verifies it against `expected`
    /// (bypassing the cache).
    pub fn read_verified_uncached(&self, r: PageRef, part: DamagedPart) -> Result<Page> {
        // A staged page (write-behind) is not in the file yet: its verified
        // copy in memory is the page.
        if let Some(p) = self.cache.get_staged(r.page.0) {
            if p.checksum() == r.checksum {
                return Ok(p);
            }
        }
        let data = self.read_file_page(r, part)?;
        Ok(Page::from_box(data, r.checksum))
    }

    /// Reads page `r` from the file and checks it against its checksum.
    fn read_file_page(&self, r: PageRef, part: DamagedPart) -> Result<Box<[u8]>> {
        let mut data = vec![0u8; self.page_size].into_boxed_slice();
        self.read_file_into(r, &mut data)?;
        self.check_page(r, part, |_| Ok(()), &data)?;
        Ok(data)
    }

    /// Reads page `r`'s bytes from the file into `data` (a page long),
    /// unverified; a page past the end of the file is `Corruption`.
    fn read_file_into(&self, r: PageRef, data: &mut [u8]) -> Result<()> {
        let past_end = || {
            self.corruption(
                DamagedPart::FileLength,
                r.page,
                "page lies past the end of the file (truncated file)".into(),
            )
        };
        // A damaged pointer can name any page id: check it against the file
        // before reading (the offset of a huge id is not a valid position).
        let offset = self.offset(r.page);
        if offset.saturating_add(self.page_size as u64) > self.file_len() {
            return Err(past_end());
        }
        match self.storage.read_at(data, offset) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => Err(past_end()),
            Err(e) => Err(CoreError::io("read", e)),
        }
    }

    /// Page `r` from the page cache, if it holds it with `r`'s checksum
    /// (counted as a hit).
    #[inline]
    pub fn cached_page(&self, r: PageRef) -> Option<Page> {
        let p = self.cache.get(r.page.0)?;
        if p.checksum() != r.checksum {
            return None;
        }
        Counters::bump(&self.counters.cache_hits);
        Some(p)
    }

    /// Returns a verified page, from the cache or the file. On a cache miss
    /// the page is also checked by `validate` (its layer's structure check).
    pub fn read_page(
        &self,
        r: PageRef,
        part: DamagedPart,
        validate: fn(&[u8]) -> std::result::Result<(), String>,
    ) -> Result<Page> {
        match self.cached_page(r) {
            Some(p) => Ok(p),
            None => self.read_pages(r, &[], part, validate),
        }
    }

    /// Reads page `r` from the file (a cache miss: [`Pager::cached_page`]
    /// did not have it), verifies, validates and caches it — and reads
    /// ahead: the pages of `ahead` that follow `r` in the file
    /// (`ahead[i]` at page `r + 1 + i`; the list is cut at the first that
    /// does not, that the cache holds, or that lies past the end of the
    /// file, and at [`READ_AHEAD_BYTES`]) come in the same read. Each of
    /// those is verified against its own checksum and validated as it
    /// arrives, exactly like `r`, and cached; one that fails is dropped
    /// without an error (it is not `r`, and its reader, if one reaches it,
    /// reads it again through [`Pager::read_page`] and gets the
    /// `Corruption` naming it). A forward scan passes the parent's next
    /// children: one read of the file per run of adjacent leaves instead
    /// of one per leaf.
    pub fn read_pages(
        &self,
        r: PageRef,
        ahead: &[PageRef],
        part: DamagedPart,
        validate: fn(&[u8]) -> std::result::Result<(), String>,
    ) -> Result<Page> {
        Counters::bump(&self.counters.cache_misses);
        let ps = self.page_size as u64;
        let max = (READ_AHEAD_BYTES / self.page_size).saturating_sub(1);
        let len = self.file_len();
        let mut run = 0usize;
        for (j, a) in ahead.iter().take(max).enumerate() {
            let follows = r.page.0.checked_add(1 + j as u64) == Some(a.page.0);
            if !follows
                || self.offset(a.page).saturating_add(ps) > len
                || self
                    .cache
                    .get(a.page.0)
                    .is_some_and(|p| p.checksum() == a.checksum)
            {
                break;
            }
            run += 1;
        }
        SCRATCH.with(|scratch| {
            // The thread's read buffer (zeroed once, when it grows); a
            // nested read on this thread (none today) gets its own.
            let mut own = Vec::new();
            let mut guard = scratch.try_borrow_mut();
            let buf = match &mut guard {
                Ok(b) => &mut **b,
                Err(_) => &mut own,
            };
            let want = (run + 1) * self.page_size;
            if buf.len() < want {
                buf.resize(want, 0);
            }
            // A read of the whole run; if it fails, `r` alone (whose
            // error, if any, is the one to report).
            if run > 0
                && self
                    .storage
                    .read_at(&mut buf[..want], self.offset(r.page))
                    .is_err()
            {
                run = 0;
            }
            if run == 0 {
                self.read_file_into(r, &mut buf[..self.page_size])?;
            }
            let mut first = None;
            for (j, bytes) in buf[..(run + 1) * self.page_size]
                .chunks_exact(self.page_size)
                .enumerate()
            {
                let pr = if j == 0 { r } else { ahead[j - 1] };
                match self.check_page(pr, part, validate, bytes) {
                    Ok(()) => {
                        let page = Page::new(bytes, pr.checksum);
                        self.cache.insert(pr.page.0, page.clone(), false);
                        if j == 0 {
                            first = Some(page);
                        }
                    }
                    Err(e) if j == 0 => return Err(e),
                    // A damaged page read ahead: not cached, reported to
                    // whoever loads it.
                    Err(_) => {}
                }
            }
            first.ok_or_else(|| CoreError::Internal("read ahead lost its first page".into()))
        })
    }

    /// Checks a page's bytes, just read from the file, against the checksum
    /// its parent holds and its layer's structure check.
    fn check_page(
        &self,
        r: PageRef,
        part: DamagedPart,
        validate: fn(&[u8]) -> std::result::Result<(), String>,
        data: &[u8],
    ) -> Result<()> {
        let sum = page_checksum(r.page, data);
        if sum != r.checksum {
            return Err(self.corruption(
                part,
                r.page,
                format!(
                    "checksum mismatch: parent expects {:016x}, page has {:016x} (bit flip, torn, stale or misplaced page)",
                    r.checksum, sum
                ),
            ));
        }
        validate(data).map_err(|detail| self.corruption(part, r.page, detail))
    }

    /// Writes pages (sorted by id, adjacent pages coalesced into one write)
    /// and puts them in the cache. Any failure poisons the pager.
    pub fn write_pages(&self, pages: &mut [PageWrite]) -> Result<()> {
        self.check_writable()?;
        pages.sort_unstable_by_key(|(p, _)| *p);
        let mut i = 0;
        let mut buf = Vec::new();
        while i < pages.len() {
            let mut j = i + 1;
            while j < pages.len() && pages[j].0 .0 == pages[j - 1].0 .0 + 1 && j - i < 256 {
                j += 1;
            }
            let off = self.offset(pages[i].0);
            let res = if j == i + 1 {
                self.storage.write_at(pages[i].1.data(), off)
            } else {
                buf.clear();
                for (_, p) in &pages[i..j] {
                    buf.extend_from_slice(p.data());
                }
                self.storage.write_at(&buf, off)
            };
            res.map_err(|e| self.poisoned("write", e))?;
            self.wrote(off, (j - i) * self.page_size);
            i = j;
        }
        for (pid, page) in pages.iter() {
            self.cache.insert(pid.0, page.clone(), true);
        }
        Ok(())
    }

    /// Stages pages of a commit that is not written yet (write-behind): they
    /// stay pinned in the cache, where readers find them, until
    /// [`Pager::write_pages`] writes them or [`Pager::discard_staged`] drops
    /// them.
    pub fn stage_pages(&self, pages: Vec<PageWrite>) {
        for (pid, page) in pages {
            self.cache.stage(pid.0, page);
        }
    }

    /// The staged page `pid`, if any.
    pub fn staged_page(&self, pid: PageId) -> Option<Page> {
        self.cache.get_staged(pid.0)
    }

    /// Drops a staged page that no snapshot reaches any more.
    pub fn discard_staged(&self, pid: PageId) {
        self.cache.discard(pid.0);
    }

    /// How many pages may be staged before a non-durable commit writes them
    /// out: a quarter of the cache (at least 64), so staged pages never
    /// crowd the cache. (A sixteenth was tried: random non-durable inserts
    /// into 1M keys ran at half the speed, and later random reads slowed
    /// too, for no measurable saving of file space.)
    pub fn stage_limit(&self) -> usize {
        (self.cache.capacity() / 4).max(64)
    }

    /// Writes raw bytes at a page offset (out-of-line values). Poisons on failure.
    pub fn write_raw(&self, pid: PageId, data: &[u8]) -> Result<()> {
        self.check_writable()?;
        // The pages were free: a staged tree page they held (freed since) must
        // not be written over the value later.
        for p in pid.0..pid.0 + (data.len() as u64).div_ceil(self.page_size as u64) {
            self.cache.discard(p);
        }
        self.storage
            .write_at(data, self.offset(pid))
            .map_err(|e| self.poisoned("write", e))?;
        self.wrote(self.offset(pid), data.len());
        Ok(())
    }

    /// Takes `offset .. offset + len` out of the never-written ranges.
    fn wrote(&self, offset: u64, len: usize) {
        let mut u = self.unwritten.lock().unwrap_or_else(|e| e.into_inner());
        if !u.is_empty() {
            cut_ranges(&mut u, offset, offset.saturating_add(len as u64));
        }
    }

    /// Marks `from .. to` as never written (the ranges stay disjoint).
    fn unwritten_range(&self, from: u64, to: u64) {
        if from < to {
            let mut u = self.unwritten.lock().unwrap_or_else(|e| e.into_inner());
            cut_ranges(&mut u, from, to);
            u.insert(from, to);
        }
    }

    /// Whether any byte of `offset .. offset + len` was never written.
    pub fn is_unwritten(&self, offset: u64, len: u64) -> bool {
        let end = offset.saturating_add(len);
        let u = self.unwritten.lock().unwrap_or_else(|e| e.into_inner());
        u.range(..end).next_back().is_some_and(|(_, &e)| e > offset)
    }

    /// At open: the file past the recovered commit's `page_count` pages was
    /// grown ahead of use and may never have been written.
    pub(crate) fn note_unused_tail(&self, page_count: u64) {
        self.unwritten_range(
            page_count.saturating_mul(self.page_size as u64),
            self.file_len(),
        );
    }

    /// Writes one write of the commit log (whole pages, from
    /// [`log::encode_write`]) at `first`. Poisons on failure.
    pub fn write_log(&self, first: PageId, pages: &[u8]) -> Result<()> {
        self.check_writable()?;
        self.storage
            .write_at(pages, self.offset(first))
            .map_err(|e| self.poisoned("write", e))?;
        self.wrote(self.offset(first), pages.len());
        self.notify_readers();
        Ok(())
    }

    /// Drops every cached or staged copy of pages `first .. first + n`:
    /// they were free and are now reused for something the cache does not
    /// hold (the commit log), so a staged tree page they held before must
    /// never be written over them.
    pub fn forget_pages(&self, first: PageId, n: u64) {
        for p in first.0..first.0 + n {
            self.cache.discard(p);
        }
    }

    /// Pages in the page cache now (staged ones included).
    pub fn cached_pages(&self) -> usize {
        self.cache.len()
    }

    /// Drops the cached copies of `pages`, which were just freed with no
    /// reader able to reach them: they would only take cache room until
    /// their ids are reused (the writer then caches the new contents).
    /// Staged copies stay (the write-out drops those of freed pages).
    pub fn forget_freed(&self, pages: &[PageId]) {
        for p in pages {
            self.cache.forget_unpinned(p.0);
        }
    }

    /// Rewrites the header as format version [`header::FORMAT_VERSION`] and
    /// flushes (a read-write open of an older file, before anything else is
    /// written). The 32 bytes sit in the file's first sector: the write
    /// lands whole or not at all, and either version opens.
    pub(crate) fn upgrade_header(&self) -> Result<()> {
        let h = FileHeader {
            version: header::FORMAT_VERSION,
            page_size: self.page_size as u32,
        };
        self.check_writable()?;
        self.storage
            .write_at(&h.encode(), 0)
            .map_err(|e| self.poisoned("write", e))?;
        self.sync()
    }

    /// Makes sure the file is at least `page_count` pages long, growing it in
    /// large chunks (half the current size, at least 64 pages, at most
    /// 256 MiB, never past `max_len`) so most commits do not change the file
    /// size and their fdatasync does not flush metadata.
    pub fn ensure_len(&self, page_count: u64, max_len: u64) -> Result<()> {
        let need = page_count * self.page_size as u64;
        let cur = self.file_len();
        if need <= cur {
            return Ok(());
        }
        let ps = self.page_size as u64;
        let chunk = (cur / 2).clamp(64 * ps, 256 << 20);
        // Never past the maximum file size (rounded down to whole pages);
        // `need` itself is within it (the allocator enforces the limit).
        let cap = (max_len / ps * ps).max(need);
        let target = (cur + chunk).div_ceil(ps) * ps;
        let target = target.min(cap).max(need);
        self.check_writable()?;
        // Growing by a whole chunk may fail where growing by just what this
        // commit needs still fits (a nearly full device, a file-size rlimit):
        // fall back to the exact size before giving up.
        let grown = match self.storage.set_len(target) {
            Err(_) if target > need => self.storage.set_len(need).map(|()| need),
            r => r.map(|()| target),
        };
        let len = grown.map_err(|e| self.poisoned("set_len", e))?;
        self.file_len.store(len, Ordering::Release);
        self.unwritten_range(cur, len);
        Ok(())
    }

    /// Shrinks the file to `page_count` pages (used by compaction, after the
    /// commit that no longer references the tail is durable).
    pub fn truncate(&self, page_count: u64) -> Result<()> {
        self.check_writable()?;
        let len = page_count * self.page_size as u64;
        self.storage
            .set_len(len)
            .map_err(|e| self.poisoned("set_len", e))?;
        self.file_len.store(len, Ordering::Release);
        self.sync()
    }

    /// fdatasync. Poisons on failure.
    pub fn sync(&self) -> Result<()> {
        self.check_writable()?;
        Counters::bump(&self.counters.syncs);
        self.storage
            .sync_data()
            .map_err(|e| self.poisoned("sync", e))
    }

    /// fdatasync without the writable check (recovery on a read-only handle
    /// never calls this; a read-write open calls it before trusting data).
    pub(crate) fn sync_for_recovery(&self) -> Result<()> {
        if self.read_only {
            return Ok(());
        }
        Counters::bump(&self.counters.syncs);
        self.storage
            .sync_data()
            .map_err(|e| self.poisoned("sync", e))
    }

    /// Writes a new file's header page and both commit slots (the same first
    /// record in each, so that a zero slot is always damage), then syncs.
    pub(crate) fn format(&self, rec: &CommitRecord, max_len: u64) -> Result<()> {
        let mut page0 = vec![0u8; self.page_size];
        let h = FileHeader {
            version: header::FORMAT_VERSION,
            page_size: self.page_size as u32,
        };
        page0[..header::HEADER_BYTES].copy_from_slice(&h.encode());
        let mut slots = vec![0u8; 2 * self.page_size];
        slots[..SLOT_BYTES].copy_from_slice(&rec.encode(0));
        slots[self.page_size..self.page_size + SLOT_BYTES].copy_from_slice(&rec.encode(1));
        self.ensure_len(header::FIRST_DATA_PAGE, max_len)?;
        self.storage
            .write_at(&slots, self.page_size as u64)
            .map_err(|e| self.poisoned("write", e))?;
        // The header goes last: a file with a valid header always has a slot.
        self.storage
            .write_at(&page0, 0)
            .map_err(|e| self.poisoned("write", e))?;
        self.sync()
    }

    /// Writes commit slot `slot` (0 or 1). Poisons on failure.
    pub fn write_slot(&self, slot: usize, rec: &CommitRecord) -> Result<()> {
        self.check_writable()?;
        self.storage
            .write_at(&rec.encode(slot), (1 + slot as u64) * self.page_size as u64)
            .map_err(|e| self.poisoned("write", e))?;
        self.notify_readers();
        Ok(())
    }

    /// Reads and decodes both commit slots.
    pub fn read_slots(&self) -> Result<[Result<CommitRecord, String>; 2]> {
        let mut out = [Err(String::new()), Err(String::new())];
        for (slot, o) in out.iter_mut().enumerate() {
            let mut b = [0u8; SLOT_BYTES];
            *o = match self
                .storage
                .read_at(&mut b, (1 + slot as u64) * self.page_size as u64)
            {
                Ok(()) => CommitRecord::decode(&b, slot, self.page_size as u32),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    Err("slot lies past the end of the file".into())
                }
                Err(e) => return Err(CoreError::io("read", e)),
            };
        }
        Ok(out)
    }

    /// Reads the free-list chain starting at `head`, returning the pages it
    /// occupies and the allocator it describes.
    pub fn read_freelist(
        &self,
        head: PageRef,
        page_count: u64,
        limit_pages: u64,
    ) -> Result<(Vec<PageId>, Allocator)> {
        let mut words = Vec::new();
        let mut pages = Vec::new();
        let mut cur = head;
        while !cur.page.is_none() {
            if pages.len() as u64 > page_count || cur.page.0 >= page_count {
                return Err(self.corruption(
                    DamagedPart::FreeListPage,
                    cur.page,
                    "free-list chain loops or leaves the file".into(),
                ));
            }
            let p = self.read_verified_uncached(cur, DamagedPart::FreeListPage)?;
            let d = p.data();
            let n = le_u16(d, 2) as usize;
            if d[0] != KIND_FREELIST || FREELIST_PREFIX + n * 8 > d.len() {
                return Err(self.corruption(
                    DamagedPart::FreeListPage,
                    cur.page,
                    format!("bad free-list page header (kind {}, {} words)", d[0], n),
                ));
            }
            words.extend(words_from_bytes(
                &d[FREELIST_PREFIX..FREELIST_PREFIX + n * 8],
            ));
            pages.push(cur.page);
            cur = PageRef {
                page: PageId(le_u64(d, 16)),
                checksum: le_u64(d, 24),
            };
        }
        let alloc = Allocator::parse(&words, page_count, limit_pages, head, self.page_size)?;
        Ok((pages, alloc))
    }

    /// Allocates the pages of a new free-list chain from `alloc` (so the
    /// chain's own pages are not in the list it stores), builds them, and
    /// returns the head reference and the pages to write.
    pub fn build_freelist(
        &self,
        alloc: &mut Allocator,
        txn: TxnId,
    ) -> Result<(PageRef, Vec<PageWrite>)> {
        let words_per_page = (self.page_size - FREELIST_PREFIX) / 8;
        let mut chain: Vec<PageId> = Vec::new();
        // Allocating a page adds at most one extent (two words: the page may
        // split a run of free and pending pages) while the new chain page
        // holds at least 60 words, so this loop terminates.
        // Serializing is linear in the free list, so allocate every page the
        // current size needs at once and re-check (usually one more round).
        let mut words = alloc.serialize();
        loop {
            let need = words.len().div_ceil(words_per_page);
            if chain.len() >= need {
                break;
            }
            while chain.len() < need {
                chain.push(alloc.alloc()?);
            }
            words = alloc.serialize();
        }
        let mut out = Vec::with_capacity(chain.len());
        let mut next = PageRef::NONE;
        for (i, pid) in chain.iter().enumerate().rev() {
            let lo = (i * words_per_page).min(words.len());
            let hi = ((i + 1) * words_per_page).min(words.len());
            let mut d = vec![0u8; self.page_size].into_boxed_slice();
            d[0] = KIND_FREELIST;
            d[2..4].copy_from_slice(&((hi - lo) as u16).to_le_bytes());
            d[8..16].copy_from_slice(&txn.0.to_le_bytes());
            d[16..24].copy_from_slice(&next.page.0.to_le_bytes());
            d[24..32].copy_from_slice(&next.checksum.to_le_bytes());
            for (k, w) in words[lo..hi].iter().enumerate() {
                let at = FREELIST_PREFIX + k * 8;
                d[at..at + 8].copy_from_slice(&w.to_le_bytes());
            }
            let checksum = page_checksum(*pid, &d);
            next = PageRef {
                page: *pid,
                checksum,
            };
            out.push((*pid, Page::new(&d, checksum)));
        }
        Ok((next, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `pages` pages of 512 bytes written to a simulated file (ids 3..):
    /// each filled with its id, then the cache emptied.
    fn pager_with_pages(pages: u64) -> (Arc<crate::storage::sim::SimFile>, Pager, Vec<PageRef>) {
        let f = Arc::new(crate::storage::sim::SimFile::new());
        let pager = Pager::new(Box::new(f.clone()), 512, 1 << 20, false).unwrap();
        pager.ensure_len(3 + pages, u64::MAX).unwrap();
        let mut writes = Vec::new();
        let mut refs = Vec::new();
        for pid in 3..3 + pages {
            let data = vec![pid as u8; 512];
            let checksum = page_checksum(PageId(pid), &data);
            refs.push(PageRef {
                page: PageId(pid),
                checksum,
            });
            writes.push((PageId(pid), Page::new(&data, checksum)));
        }
        pager.write_pages(&mut writes).unwrap();
        pager.clear_cache();
        (f, pager, refs)
    }

    /// A read-ahead caches the adjacent pages it read, each verified; a
    /// damaged one is left out and reported, by page, to whoever loads it.
    /// The run stops at a gap in the page ids and at a page already cached.
    #[test]
    fn read_ahead_verifies_each_page_and_leaves_damaged_ones_out() {
        let ok = |_: &[u8]| Ok(());
        let (f, pager, refs) = pager_with_pages(12);
        // Page 7 (refs[4]) damaged on disk.
        f.flip_bit(7 * 512 + 100, 2);
        let reads = f.op_count(crate::storage::sim::OpKind::Read);
        let p = pager
            .read_pages(refs[0], &refs[1..8], DamagedPart::TreePage, ok)
            .unwrap();
        assert_eq!(p.data(), &[3u8; 512][..]);
        assert!(p.index().is_empty(), "no search index built on load");
        assert_eq!(
            f.op_count(crate::storage::sim::OpKind::Read) - reads,
            1,
            "one read"
        );
        for r in &refs[..8] {
            let cached = pager.cached_page(*r);
            if r.page.0 == 7 {
                assert!(cached.is_none(), "the damaged page was cached");
                let e = pager.read_page(*r, DamagedPart::TreePage, ok).unwrap_err();
                assert!(
                    matches!(&e, CoreError::Corruption(c) if c.page.0 == 7 && c.offset == 7 * 512),
                    "{e}"
                );
            } else {
                assert_eq!(cached.map(|p| p.data()[0]), Some(r.page.0 as u8));
            }
        }
        // A gap in the ids ends the run; so does a page already cached.
        pager.clear_cache();
        let gap = [refs[1], refs[3]];
        pager
            .read_pages(refs[0], &gap, DamagedPart::TreePage, ok)
            .unwrap();
        assert!(pager.cached_page(refs[1]).is_some());
        assert!(pager.cached_page(refs[3]).is_none(), "read across a gap");
        pager.clear_cache();
        pager.read_page(refs[9], DamagedPart::TreePage, ok).unwrap();
        pager
            .read_pages(refs[8], &refs[9..], DamagedPart::TreePage, ok)
            .unwrap();
        assert!(
            pager.cached_page(refs[10]).is_none(),
            "read past a cached page"
        );
        // The page asked for itself damaged: its error, nothing cached.
        pager.clear_cache();
        let e = pager
            .read_pages(refs[4], &refs[5..], DamagedPart::TreePage, ok)
            .unwrap_err();
        assert!(
            matches!(&e, CoreError::Corruption(c) if c.page.0 == 7),
            "{e}"
        );
        assert!(pager.cached_page(refs[5]).is_none());
    }

    /// A page's search index is built on the first search only, once.
    #[test]
    fn the_search_index_is_built_on_first_use() {
        let page = Page::new(&[1; 512], 1);
        assert!(page.index().is_empty());
        let copy = page.clone();
        assert_eq!(page.index_or_build(|d| vec![d[0], 9]), &[1, 9]);
        assert_eq!(copy.index(), &[1, 9], "shared by every holder of the page");
        assert_eq!(copy.index_or_build(|_| vec![7]), &[1, 9], "built once");
    }

    /// The never-written ranges stay disjoint and exact under overlapping
    /// marks and cuts (checked against a bitmap).
    #[test]
    fn unwritten_ranges_match_a_bitmap() {
        let mut u = std::collections::BTreeMap::new();
        let mut bits = vec![false; 200];
        let mut x = 0x9e37_79b9_u64;
        for step in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let a = x % 200;
            let b = (a + 1 + (x >> 20) % 40).min(200);
            if step % 3 == 0 {
                cut_ranges(&mut u, a, b);
                u.insert(a, b);
                bits[a as usize..b as usize].fill(true);
            } else {
                cut_ranges(&mut u, a, b);
                bits[a as usize..b as usize].fill(false);
            }
            let mut got = vec![false; 200];
            let mut last_end = 0;
            for (&s, &e) in &u {
                assert!(s < e && s >= last_end, "ranges overlap or are empty: {u:?}");
                last_end = e;
                got[s as usize..e as usize].fill(true);
            }
            assert_eq!(got, bits, "after step {step}");
        }
    }
}
