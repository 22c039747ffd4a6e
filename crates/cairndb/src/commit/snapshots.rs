//! The reader registry: the latest commit new readers take, the commits
//! live readers hold (the allocator never reuses a page they can reach),
//! and the table records readers of one commit share.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::overlay::Overlay;
use super::{lock, Shared};
use crate::catalog::TableRecord;
use crate::error::{CoreError, Result};
use crate::ids::TxnId;
use crate::pager::header::CommitRecord;

/// What new readers see and what live readers hold (under
/// `Shared::snapshots`).
pub(crate) struct Snapshots {
    /// The latest commit of the trees (what a new reader reads below the
    /// overlay, and what durability and write-outs are about).
    pub latest: CommitRecord,
    /// The newest commit id: `latest`'s, or a newer commit that changed
    /// only the overlay. The next write transaction takes the id after it.
    pub visible: TxnId,
    /// The newest commit a user's write transaction made: the id readers
    /// report and commit notifications wait for. Commits the engine makes
    /// by itself (overlay spills, write-outs of the latest commit) give the
    /// same data a new tree version and id, and leave this alone, so a
    /// reader never reports an id no user commit returned.
    pub shown: TxnId,
    /// The non-durable changes of commits up to `latest` that are not in
    /// its trees (`overlay.rs`).
    pub overlay: Arc<Overlay>,
    /// Snapshot txn id → number of live readers on it, for commits older
    /// than `latest` (the readers of `latest` are `latest_readers`).
    pub readers: BTreeMap<TxnId, usize>,
    /// Live readers of `latest` (most readers: counted without touching
    /// the map).
    pub latest_readers: usize,
    pub count: usize,
    /// Table records of `latest`'s catalog, shared by its readers.
    pub tables: Arc<TableCache>,
}

impl Snapshots {
    /// Publishes a commit of the trees (or a write-out or clean-close record
    /// of the latest one).
    pub(crate) fn set_latest(&mut self, rec: CommitRecord) {
        if rec.catalog != self.latest.catalog {
            self.tables = Arc::new(TableCache::default());
        }
        if rec.txn != self.latest.txn && self.latest_readers > 0 {
            *self.readers.entry(self.latest.txn).or_insert(0) += self.latest_readers;
            self.latest_readers = 0;
        }
        self.latest = rec;
        self.visible = self.visible.max(rec.txn);
    }

    /// The oldest commit a live reader holds.
    pub(crate) fn oldest_reader(&self) -> Option<TxnId> {
        self.readers
            .keys()
            .next()
            .copied()
            .or((self.latest_readers > 0).then_some(self.latest.txn))
    }

    /// The trees every live reader reads, as ranges `(t, t)`.
    pub(crate) fn reader_trees(&self) -> Vec<(TxnId, TxnId)> {
        let mut v: Vec<(TxnId, TxnId)> = self.readers.keys().map(|&t| (t, t)).collect();
        if self.latest_readers > 0 {
            v.push((self.latest.txn, self.latest.txn));
        }
        v
    }

    /// Registers a reader of `latest`.
    pub(crate) fn add_reader(&mut self) {
        self.latest_readers += 1;
        self.count += 1;
    }

    /// Unregisters a reader of commit `txn`.
    pub(crate) fn remove_reader(&mut self, txn: TxnId) {
        if txn == self.latest.txn && self.latest_readers > 0 {
            self.latest_readers -= 1;
        } else if let Some(n) = self.readers.get_mut(&txn) {
            *n -= 1;
            if *n == 0 {
                self.readers.remove(&txn);
            }
        }
        self.count = self.count.saturating_sub(1);
    }
}

/// The tables read transactions opened in one catalog (one commit's; a
/// catalog is never changed in place), so that opening a table in the next
/// snapshot of the same commit costs a map probe rather than a catalog
/// search, a record decode and a comparison of type names.
#[derive(Default)]
pub(crate) struct TableCache {
    /// (An ordered map: a database holds few tables, and comparing a short
    /// name costs less than hashing it.)
    map: Mutex<BTreeMap<String, CachedTable>>,
    /// Whole records, for write transactions that begin on this catalog
    /// and have not changed it (most small commits change only the
    /// overlay, so the catalog stays the same across many of them).
    records: Mutex<BTreeMap<Arc<str>, Arc<CachedRecord>>>,
    /// Names looked up and not found in this catalog (a layer asks for
    /// its optional tables on every write: the event store for its v1
    /// log; a miss is a catalog search each time otherwise).
    absent: Mutex<std::collections::BTreeSet<Box<str>>>,
}

/// A table record in the cache, with the Rust (key, value) types a write
/// transaction found matching its type names (set once: later transactions
/// on this catalog compare two ids instead of building and comparing the
/// names).
pub(crate) struct CachedRecord {
    pub rec: TableRecord,
    pub typed: std::sync::OnceLock<(std::any::TypeId, std::any::TypeId)>,
}

impl CachedRecord {
    pub(crate) fn new(rec: TableRecord) -> Arc<Self> {
        Arc::new(CachedRecord {
            rec,
            typed: std::sync::OnceLock::new(),
        })
    }
}

/// A table's root and length, and the Rust (key, value) types already
/// checked against its type names (`None`: opened untyped).
#[derive(Clone, Copy)]
pub(crate) struct CachedTable {
    pub root: crate::pager::header::PageRef,
    pub len: u64,
    pub checked: Option<(std::any::TypeId, std::any::TypeId)>,
}

impl TableCache {
    pub(crate) fn get(&self, name: &str) -> Option<CachedTable> {
        lock(&self.map).get(name).copied()
    }

    pub(crate) fn put(&self, name: &str, table: CachedTable) {
        let mut m = lock(&self.map);
        // Bounded: a catalog of many tables keeps the first ones opened.
        if m.len() < 1024 || m.contains_key(name) {
            m.insert(name.to_string(), table);
        }
    }

    /// Table `name`'s record in this catalog, if looked up before, with
    /// the name as a shared string (a write transaction keys its tables
    /// with it, allocating nothing).
    pub(crate) fn record(&self, name: &str) -> Option<(Arc<str>, Arc<CachedRecord>)> {
        lock(&self.records)
            .get_key_value(name)
            .map(|(k, r)| (k.clone(), r.clone()))
    }

    /// Whether table `name` was looked up in this catalog and not found.
    pub(crate) fn is_absent(&self, name: &str) -> bool {
        lock(&self.absent).contains(name)
    }

    /// Remembers that this catalog has no table `name` (bounded as `put`).
    pub(crate) fn put_absent(&self, name: &str) {
        let mut m = lock(&self.absent);
        if m.len() < 1024 {
            m.insert(name.into());
        }
    }

    /// Remembers table `name`'s record in this catalog (bounded as `put`).
    pub(crate) fn put_record(&self, name: &Arc<str>, rec: &Arc<CachedRecord>) {
        let mut m = lock(&self.records);
        if m.len() < 1024 && !m.contains_key(&**name) {
            m.insert(name.clone(), rec.clone());
        }
    }
}

/// What a new reader holds: the trees' commit it pins, the commit id it
/// shows, the overlay above the trees and the commit's table cache.
pub(crate) struct ReaderStart {
    pub record: CommitRecord,
    pub shown: TxnId,
    pub overlay: Arc<Overlay>,
    pub tables: Arc<TableCache>,
}

/// The longest a read-only handle beside a writer in another process waits
/// on the file's commit counter before it looks again anyway (the writer
/// wakes it at once through a futex on Linux; this bounds a missed wakeup,
/// and is the polling period where there is no futex).
const REMOTE_POLL: Duration = Duration::from_secs(1);

impl Shared {
    /// Registers a reader of the latest commit (refused past `max_readers`).
    pub(crate) fn register_reader(&self) -> Result<ReaderStart> {
        let mut s = lock(&self.snapshots);
        if s.count >= self.max_readers {
            return Err(CoreError::TooManyReaders {
                max: self.max_readers,
            });
        }
        if let Some(sh) = &self.sharing {
            if let Some(slot) = sh.slot {
                self.refresh_from_file(&mut s, sh, slot, true)?;
            }
        }
        s.add_reader();
        Ok(ReaderStart {
            record: s.latest,
            shown: s.shown,
            overlay: s.overlay.clone(),
            tables: s.tables.clone(),
        })
    }

    /// Unregisters a reader of the trees' commit `txn`.
    pub(crate) fn unregister_reader(&self, txn: TxnId) {
        let mut s = lock(&self.snapshots);
        s.remove_reader(txn);
        if let Some(sh) = &self.sharing {
            if let Some(slot) = sh.slot {
                // The oldest snapshot still read (raising the mark is always
                // safe); none: the writer may reuse anything.
                let mark = if s.count == 0 {
                    0
                } else {
                    s.oldest_reader().unwrap_or(s.latest.txn).0.max(1)
                };
                sh.lock.set_snapshot(slot, mark);
            }
        }
    }

    /// A read-only handle beside a writer in another process: before a new
    /// reader, takes in what the writer wrote to the file since this handle
    /// last looked (FORMAT.md, "Sharing a file between processes",
    /// "Reading"): a newer slot (a checkpoint) replaces the trees, the
    /// page cache and the overlay; new log writes are replayed. A reader
    /// registers its snapshot in the lock file before it reads a page.
    /// `for_reader`: a reader is registered right after (else the handle's
    /// mark goes back to what its live readers hold).
    fn refresh_from_file(
        &self,
        s: &mut Snapshots,
        sh: &super::Sharing,
        slot: usize,
        for_reader: bool,
    ) -> Result<()> {
        use std::sync::atomic::Ordering as O;
        // While it looks, the handle may move to any newer trees: its
        // newest is "any" until it knows (stored before the counter is
        // loaded, as the oldest below; FORMAT.md, step 1).
        sh.lock.set_newest(slot, u64::MAX);
        if s.count == 0 {
            // Unregistered since the last reader ended: hold the latest
            // trees' id (a lower bound of any slot read from now on) before
            // looking, so nothing a slot read next reaches is reused under
            // this handle (FORMAT.md: the writer never releases a page the
            // newest written slot reaches, and scans the table only after
            // it bumped the counter for the slot that freed it).
            sh.lock.set_snapshot(slot, s.latest.txn.0.max(1));
        }
        std::sync::atomic::fence(O::SeqCst);
        let counter = sh.lock.counter();
        let writer = sh.lock.writer_alive()?;
        let unchanged = counter == sh.seen.load(O::SeqCst)
            && (writer || sh.looked_without_writer.load(O::SeqCst));
        if unchanged {
            // Nothing written since the last look (read after the mark was
            // stored: a slot written since would have bumped the counter
            // before the writer's next scan of the table, which then sees
            // the mark).
            if !for_reader && s.count == 0 {
                sh.lock.set_snapshot(slot, 0);
            }
            sh.lock.set_newest(slot, s.latest.txn.0);
            return Ok(());
        }
        // The slots first, then the file's length: the writer grows the
        // file for a slot's pages (and its log's extent) before it writes
        // the slot, so the length read after a slot covers every page the
        // slot reaches (read before, it could miss pages a slot written in
        // between reaches: a false "past the end of the file").
        let slots = self.pager.read_slots()?;
        self.pager.refresh_len()?;
        // A slot that fails its check beside a live writer is most likely
        // being written: the next look reads it again (the counter is not
        // marked seen), and this one never goes back to an older slot.
        let torn = slots.iter().any(|r| r.is_err());
        if !torn || !writer {
            sh.seen.store(counter, O::SeqCst);
            sh.looked_without_writer.store(!writer, O::SeqCst);
        }
        let newest = slots
            .into_iter()
            .filter_map(|r| r.ok())
            .max_by_key(|r| r.txn);
        let mut moved = false;
        if let Some(n) = newest.filter(|n| n.txn > s.latest.txn) {
            let rec = if writer {
                // Trusted beside a live writer (FORMAT.md, step 3).
                n
            } else {
                let limit = u64::MAX / self.pager.page_size() as u64;
                super::recovery::recover(&self.pager, limit, true, false, None)?.1
            };
            if rec.txn > s.latest.txn {
                // Pages cached from older trees may have been reused since.
                self.pager.clear_cache();
                s.set_latest(rec);
                moved = true;
            }
        }
        let rec = s.latest;
        if !rec.log.is_none() && !rec.clean {
            let mut report = super::recovery::RecoveryReport::opened(0, &rec);
            let r = super::recovery::replay_log(&self.pager, &rec, &mut report, writer)?;
            let last = r.last.unwrap_or(rec.txn);
            s.overlay = Arc::new(r.overlay);
            s.visible = s.visible.max(last);
            s.shown = s.shown.max(last);
        } else if moved {
            s.overlay = Arc::new(Overlay::default());
            s.visible = s.visible.max(rec.txn);
            s.shown = s.shown.max(rec.txn);
        }
        let mark = match s.oldest_reader() {
            Some(o) if for_reader => o.min(rec.txn).0,
            Some(o) => o.0,
            None if for_reader => rec.txn.0,
            None => 0,
        };
        sh.lock
            .set_snapshot(slot, if mark == 0 { 0 } else { mark.max(1) });
        // The newest trees any of its read transactions (and the one about
        // to begin) reads.
        sh.lock.set_newest(slot, rec.txn.0);
        self.commit_cv.notify_all();
        Ok(())
    }

    /// Read transactions of other handles on this file (in any process)
    /// that hold a snapshot.
    pub(crate) fn remote_readers(&self) -> usize {
        self.sharing.as_ref().map_or(0, |sh| sh.lock.live_readers())
    }

    /// Live readers.
    pub(crate) fn live_readers(&self) -> usize {
        lock(&self.snapshots).count
    }

    /// Whether the overlay holds no change.
    pub(crate) fn overlay_is_empty(&self) -> bool {
        lock(&self.snapshots).overlay.is_empty()
    }

    /// Waits until a user commit newer than `after` is published, or
    /// `timeout` passes; returns the newest user commit either way.
    pub(crate) fn wait_for_commit(&self, after: TxnId, timeout: Duration) -> TxnId {
        let deadline = Instant::now() + timeout;
        let mut s = lock(&self.snapshots);
        // A reader beside a writer in another process waits on the file's
        // commit counter (the writer's commits notify only its own
        // process's condition variable): a futex the writer wakes after
        // every write, with `REMOTE_POLL` as the fallback bound of a wait.
        let remote = self
            .sharing
            .as_ref()
            .and_then(|sh| sh.slot.map(|slot| (sh, slot)));
        loop {
            // Loaded before the look: a write after it wakes the wait below
            // at once (the counter is no longer `seen`).
            let seen = remote.map(|(sh, _)| sh.lock.counter());
            if let Some((sh, slot)) = remote {
                // A failed look is retried at the next wakeup; the caller
                // sees no new commit meanwhile.
                let _ = self.refresh_from_file(&mut s, sh, slot, false);
            }
            if s.shown > after {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match (remote, seen) {
                (Some((sh, _)), Some(seen)) => {
                    drop(s);
                    sh.lock.wait_change(seen, (deadline - now).min(REMOTE_POLL));
                    s = lock(&self.snapshots);
                }
                _ => {
                    s = self
                        .commit_cv
                        .wait_timeout(s, deadline - now)
                        .map(|(g, _)| g)
                        .unwrap_or_else(|e| e.into_inner().0);
                }
            }
        }
        s.shown
    }
}
