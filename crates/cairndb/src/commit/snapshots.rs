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
    records: Mutex<BTreeMap<String, TableRecord>>,
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

    /// Table `name`'s record in this catalog, if looked up before.
    pub(crate) fn record(&self, name: &str) -> Option<TableRecord> {
        lock(&self.records).get(name).cloned()
    }

    /// Remembers table `name`'s record in this catalog (bounded as `put`).
    pub(crate) fn put_record(&self, name: &str, rec: &TableRecord) {
        let mut m = lock(&self.records);
        if m.len() < 1024 && !m.contains_key(name) {
            m.insert(name.to_string(), rec.clone());
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

impl Shared {
    /// Registers a reader of the latest commit (refused past `max_readers`).
    pub(crate) fn register_reader(&self) -> Result<ReaderStart> {
        let mut s = lock(&self.snapshots);
        if s.count >= self.max_readers {
            return Err(CoreError::TooManyReaders {
                max: self.max_readers,
            });
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
        lock(&self.snapshots).remove_reader(txn);
    }

    /// Live readers.
    pub(crate) fn live_readers(&self) -> usize {
        lock(&self.snapshots).count
    }

    /// Whether the overlay holds no change.
    pub(crate) fn overlay_is_empty(&self) -> bool {
        lock(&self.snapshots).overlay.is_empty()
    }

    /// The newest commit id (user commits and engine-made ones).
    pub(crate) fn visible(&self) -> TxnId {
        lock(&self.snapshots).visible
    }

    /// Waits until a user commit newer than `after` is published, or
    /// `timeout` passes; returns the newest user commit either way.
    pub(crate) fn wait_for_commit(&self, after: TxnId, timeout: Duration) -> TxnId {
        let deadline = Instant::now() + timeout;
        let mut s = lock(&self.snapshots);
        while s.shown <= after {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            s = self
                .commit_cv
                .wait_timeout(s, deadline - now)
                .map(|(g, _)| g)
                .unwrap_or_else(|e| e.into_inner().0);
        }
        s.shown
    }
}
