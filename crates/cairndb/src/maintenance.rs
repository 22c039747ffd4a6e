//! Layer 6: maintenance — statistics, compaction, online backup, and the
//! permission to restore a raw dump.

use std::path::Path;
use std::sync::{Arc, Weak};

use crate::btree::walk::TreeStats;
use crate::db::Database;
use crate::error::{CoreError, Result};
use crate::integrity::check_commit;

/// Statistics of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TableStats {
    /// The table name.
    pub name: String,
    /// Its page counts, depth, entries and bytes.
    pub tree: TreeStats,
}

/// What [`Database::stats`] reports.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Stats {
    /// The latest commit.
    pub txn: u64,
    /// The page size.
    pub page_size: usize,
    /// The file's length in bytes (it grows in chunks ahead of use).
    pub file_bytes: u64,
    /// Pages the latest commit uses, free pages included.
    pub page_count: u64,
    /// Pages of the file header and the two commit slots, at the start of
    /// the file (FORMAT.md, "File layout").
    pub header_pages: u64,
    /// Leaf pages, all trees.
    pub leaf_pages: u64,
    /// Branch pages, all trees.
    pub branch_pages: u64,
    /// Pages of out-of-line values.
    pub overflow_pages: u64,
    /// Pages of the free-list chain.
    pub freelist_pages: u64,
    /// Free pages (reusable now or once released).
    pub free_pages: u64,
    /// Pages freed by recent commits that readers or durability still pin.
    pub pending_pages: u64,
    /// Pages of the commit log's extent (small durable commits append to
    /// it; see [`Builder::log_size`](crate::Builder::log_size)).
    pub log_pages: u64,
    /// Changes held in memory in the overlay, above the trees (see
    /// [`Builder::overlay_size`](crate::Builder::overlay_size)); not counted
    /// in the tables' statistics. As of the commit the statistics walked:
    /// when the latest commit is only staged in memory (a non-durable one
    /// that changed tree pages), [`Database::stats`](crate::Database::stats)
    /// first writes it out, which applies the overlay to the trees, and
    /// this is then 0.
    pub overlay_entries: u64,
    /// Memory the overlay holds, roughly, in bytes.
    pub overlay_bytes: u64,
    /// The catalog tree.
    pub catalog: TreeStats,
    /// Each table.
    pub tables: Vec<TableStats>,
    /// Bytes in use in tree pages divided by their capacity (0..=1).
    pub fill_factor: f64,
    /// The deepest table tree.
    pub max_depth: u32,
    /// Commits, device flushes and page-cache hits of this handle (also
    /// without the walk: [`Database::io_counters`]).
    pub io: IoCounters,
}

/// Totals since this handle opened ([`Database::io_counters`]): cheap to
/// read (a few relaxed atomics and the page cache's shard sizes), meant for
/// monitoring (`cairn serve`'s `/metrics`). Every field but `cached_pages`
/// only grows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct IoCounters {
    /// Commits made through this handle (write transactions that committed;
    /// the engine's own background spills are not counted).
    pub commits: u64,
    /// Device flushes of the database file (`fdatasync`). Under concurrent
    /// durable commits one flush covers several commits (group commit), so
    /// `syncs < commits`.
    pub syncs: u64,
    /// Page reads answered from the page cache.
    pub cache_hits: u64,
    /// Reads of the file for pages not in the cache (each page verified
    /// as it arrives); a forward scan's read-ahead brings several pages
    /// in one read, and a page read ahead counts as a hit when used.
    pub cache_misses: u64,
    /// Pages the page cache holds now (a gauge): pages read or written that
    /// a snapshot can still reach, and the staged pages of non-durable
    /// commits, up to the cache's bound (`Builder::cache_size`). Pages of
    /// trees no snapshot can reach any more are dropped as the writer
    /// frees them.
    pub cached_pages: u64,
    /// Pages open read transactions keep alive (a gauge) so that the keys
    /// and values they hand out borrow page bytes instead of copying them:
    /// each transaction pins the leaves it reads entries from, up to a
    /// quarter of the page cache (`Builder::cache_size`) and at most 64 MiB,
    /// and releases them when it ends; past that, entries share their page
    /// (a reference count each). Pinned pages may outlive their place in
    /// the page cache, so memory use can exceed the cache's bound by this
    /// much per open read transaction.
    pub pinned_pages: u64,
    /// Memory those pinned pages hold (a gauge): their bytes, search
    /// indexes and bookkeeping, and each transaction's lookup table of its
    /// pins (40 bytes a slot, at most half full, and the smaller tables it
    /// replaced: 160 to 320 bytes per pin, at least 2,560 bytes once a
    /// transaction pins anything). The pages are at most 64 MiB per open
    /// read transaction (and a quarter of the cache), the tables up to 320
    /// bytes per pinned page more.
    pub pinned_bytes: u64,
}

/// The permission to restore a raw dump into a database that was empty when
/// it was given ([`Database::begin_restore`]): with it,
/// [`WriteTransaction::open_table_for_restore`] writes any table, the
/// document and event layers' own `$` tables included, byte for byte.
///
/// Those tables hold the layers' invariants (a document and its index
/// entries, dense event positions, stream versions); a restore keeps them
/// only if it writes exactly the entries of every table of one consistent
/// source, as `cairn dump` gives them. Nothing else should hold one.
///
/// [`WriteTransaction::open_table_for_restore`]: crate::WriteTransaction::open_table_for_restore
#[derive(Debug)]
pub struct Restore {
    db: Weak<crate::commit::Shared>,
}

impl Restore {
    /// Whether this permission was given by the database `shared` belongs to.
    pub(crate) fn is_for(&self, shared: &Arc<crate::commit::Shared>) -> bool {
        std::ptr::eq(self.db.as_ptr(), Arc::as_ptr(shared))
    }
}

/// What [`Database::compact`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct CompactReport {
    /// File size before, in bytes.
    pub before_bytes: u64,
    /// File size after, in bytes.
    pub after_bytes: u64,
}

impl Database {
    /// Commits, device flushes and page-cache hits and misses since this
    /// handle opened, without walking anything.
    pub fn io_counters(&self) -> IoCounters {
        use std::sync::atomic::Ordering::Relaxed;
        let c = &self.shared.pager.counters;
        IoCounters {
            commits: c.commits.load(Relaxed),
            syncs: c.syncs.load(Relaxed),
            cache_hits: c.cache_hits.load(Relaxed),
            cache_misses: c.cache_misses.load(Relaxed),
            cached_pages: self.shared.pager.cached_pages() as u64,
            pinned_pages: c.pinned_pages.load(Relaxed),
            pinned_bytes: c.pinned_bytes.load(Relaxed),
        }
    }

    /// Pages by kind, tree depths, fill factor, free pages and file size, from
    /// a walk of the latest commit (values out of line are not re-read). A
    /// latest commit staged in memory is written out first (with the overlay
    /// applied to the trees), so that the walk reads what the file holds.
    pub fn stats(&self) -> Result<Stats> {
        let read = crate::txn::spill::written_snapshot(&self.shared, false)?;
        let pager = &self.shared.pager;
        let r = check_commit(pager, &read.record, false)?;
        if let Some(p) = r.problems.first() {
            return Err(CoreError::Corruption(p.clone()));
        }
        let mut s = Stats {
            txn: r.txn,
            page_size: pager.page_size(),
            file_bytes: pager.file_len(),
            page_count: r.page_count,
            header_pages: crate::pager::header::FIRST_DATA_PAGE,
            leaf_pages: r.catalog.leaf_pages,
            branch_pages: r.catalog.branch_pages,
            overflow_pages: 0,
            freelist_pages: r.freelist_pages,
            free_pages: r.free_pages,
            pending_pages: 0,
            log_pages: r.log_pages,
            overlay_entries: read.overlay.entries() as u64,
            overlay_bytes: read.overlay.bytes() as u64,
            catalog: r.catalog,
            tables: Vec::new(),
            fill_factor: 0.0,
            max_depth: 0,
            io: self.io_counters(),
        };
        // The file records pending pages as free; split them using the
        // in-memory allocator as of the latest write transaction.
        if !self.shared.read_only {
            let (free, pending) = self.shared.page_counts();
            s.free_pages = free;
            s.pending_pages = pending;
        }
        let mut used = r.catalog.used_bytes;
        for (name, t) in r.tables {
            s.leaf_pages += t.leaf_pages;
            s.branch_pages += t.branch_pages;
            s.overflow_pages = s.overflow_pages.saturating_add(t.overflow_pages);
            s.max_depth = s.max_depth.max(t.depth);
            used += t.used_bytes;
            s.tables.push(TableStats { name, tree: t });
        }
        let tree_pages = s.leaf_pages + s.branch_pages;
        if tree_pages > 0 {
            s.fill_factor = used as f64 / (tree_pages * pager.page_size() as u64) as f64;
        }
        Ok(s)
    }

    /// Rewrites the database so live pages sit at the front of the file, then
    /// truncates the free tail: the file shrinks. Neighbouring tree pages
    /// whose entries fit in one page are merged first, so a table thinned
    /// by deletes takes about the pages its entries need. Needs that no read
    /// transaction is alive ([`CoreError::ReadersActive`]); waits for the writer.
    pub fn compact(&self) -> Result<CompactReport> {
        let before_bytes = self.shared.pager.file_len();
        let readers = self.live_readers() + self.shared.remote_readers();
        if readers > 0 {
            return Err(CoreError::ReadersActive(readers));
        }
        // Each pass copies every page that sits above the number of pages in
        // use into the lowest free pages; two durable commits release the old
        // copies; the loop stops when a pass frees nothing more at the tail.
        // A large value may need a pass that moves it up (no free run below is
        // long enough) before the next pass can move it down; so run at least
        // three passes and stop once a pass no longer shrinks the file.
        let mut best = u64::MAX;
        for pass in 0..8 {
            let txn = self.begin_write()?;
            // The first pass also repacks trees thinned by deletes.
            txn.relocate_all(pass == 0)?;
            txn.commit()?;
            // A second, empty-but-durable commit makes the pages freed by
            // the first reusable and lets the tail be trimmed.
            let txn = self.begin_write()?;
            txn.touch_freelist()?;
            txn.commit()?;
            let count = self.shared.latest().page_count;
            if count < best {
                best = count;
            } else if pass >= 2 {
                break;
            }
        }
        crate::txn::spill::truncate_to_latest(&self.shared)?;
        Ok(CompactReport {
            before_bytes,
            after_bytes: self.shared.pager.file_len(),
        })
    }

    /// Begins restoring a raw dump: [`CoreError::NotEmpty`] unless the
    /// database holds no table. The [`Restore`] it returns lets write
    /// transactions of this database open any table, internal ones
    /// included, with [`WriteTransaction::open_table_for_restore`]; it stays
    /// valid across the restore's commits.
    ///
    /// [`WriteTransaction::open_table_for_restore`]: crate::WriteTransaction::open_table_for_restore
    pub fn begin_restore(&self) -> Result<Restore> {
        let tables = self.begin_read()?.list_tables()?;
        if let Some(first) = tables.first() {
            return Err(CoreError::NotEmpty {
                tables: tables.len(),
                first: first.clone(),
            });
        }
        Ok(Restore {
            db: Arc::downgrade(&self.shared),
        })
    }

    /// Writes a consistent copy of the latest commit to `path` (which must not
    /// exist) from a read snapshot, while writers continue. The copy is a
    /// valid database closed cleanly.
    ///
    /// From a read-only handle — beside a writer in another process, or
    /// after a crash — the snapshot is the trees of the newest commit slot
    /// plus the commits after it that the handle replayed from the commit
    /// log (FORMAT.md, "Sharing a file between processes", "Reading"): every
    /// commit the writer had written to the file when the snapshot began
    /// (a durable commit is there before it is acknowledged). The slot's
    /// pages are copied, then those commits are applied to the copy in one
    /// write transaction of its own and the copy is closed cleanly (FORMAT.md,
    /// "Backup"). If that fails, `path` holds a database without them:
    /// remove it.
    pub fn backup_to(&self, path: impl AsRef<Path>) -> Result<()> {
        let read = crate::txn::spill::written_snapshot(&self.shared, true)?;
        let out = crate::commit::backup::backup(&self.shared, &read.record, path.as_ref())?;
        if read.overlay.entries() == 0 {
            return Ok(());
        }
        let copy = crate::db::Builder::new().open_with_storage(Box::new(out), false, false)?;
        apply_overlay(&read, &copy)?;
        copy.close()
    }

    /// Like [`Database::backup_to`], into an empty [`StorageFile`] of the
    /// caller's (an in-memory file, a simulated file in tests). The copy is
    /// flushed (`sync_data`) before this returns.
    ///
    /// [`StorageFile`]: crate::storage::StorageFile
    pub fn backup_to_storage(&self, out: &dyn crate::storage::StorageFile) -> Result<()> {
        let read = crate::txn::spill::written_snapshot(&self.shared, true)?;
        refuse_unapplied(&read)?;
        if !out.is_empty().map_err(|e| CoreError::io("len", e))? {
            return Err(CoreError::InvalidOption(
                "backup target storage is not empty".into(),
            ));
        }
        crate::commit::backup::backup_to_storage(&self.shared, &read.record, out)
    }

    /// Like [`Database::backup_to`], as a stream: the bytes of the backup
    /// file, in order, to `out` (a socket, a pipe, a compressor), with no
    /// copy held in memory beyond one page. Writers continue meanwhile; the
    /// copy is of the latest commit when this starts. Nothing is flushed:
    /// durability is up to whoever stores the stream. Returns the bytes
    /// written (the backup file's length). An error from `out` ends it (a
    /// storage error, `op` "write"); what was written is then not a
    /// database.
    pub fn backup_to_writer(&self, out: &mut dyn std::io::Write) -> Result<u64> {
        let read = crate::txn::spill::written_snapshot(&self.shared, true)?;
        refuse_unapplied(&read)?;
        crate::commit::backup::backup_to_writer(&self.shared, &read.record, out)
    }
}

/// A backup copies the trees of a snapshot: changes above them in the
/// overlay (commits a read-only handle replayed from the commit log) would
/// be lost. [`Database::backup_to`] applies them to its copy; the copies
/// into a storage or a stream refuse them.
fn refuse_unapplied(read: &crate::txn::ReadTransaction) -> Result<()> {
    if read.overlay.entries() > 0 {
        return Err(CoreError::InvalidOption(
            "this read-only handle holds commits replayed from the commit log that are not \
             in the trees yet; back up to a file (`backup_to`), which applies them, or from \
             a read-write handle"
                .into(),
        ));
    }
    Ok(())
}

/// Applies the overlay of snapshot `read` (the commits above its trees) to
/// `copy`, a fresh copy of those trees, in one durable write transaction.
/// Logged commits only put and remove entries of existing tables (a table
/// created or deleted is never logged), so every table of the overlay is
/// in the copy, and each delta's newest entry per key (a removal only of a
/// key the trees hold) is the snapshot's state of that key.
fn apply_overlay(read: &crate::txn::ReadTransaction, copy: &Database) -> Result<()> {
    let txn = copy.begin_write()?;
    for (name, delta) in &read.overlay.tables {
        if copy_table_missing(&txn, name)? {
            return Err(CoreError::Internal(format!(
                "backup: table {name:?} has commits in the commit log but is not in the \
                 commit slot's trees"
            )));
        }
        let mut t = txn.checkout_untyped(name, None)?;
        for (k, v) in delta.entries() {
            match v {
                Some(v) => {
                    t.insert(k, v)?;
                }
                None => {
                    t.remove(k)?;
                }
            }
        }
    }
    txn.set_durability(crate::commit::Durability::Immediate);
    txn.commit()?;
    Ok(())
}

fn copy_table_missing(txn: &crate::txn::WriteTransaction, name: &str) -> Result<bool> {
    Ok(txn.table_types(name)?.is_none())
}
