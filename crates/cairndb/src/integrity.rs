//! Whole-commit verification: every tree, every checksum, every out-of-line
//! value, the free list, and the accounting invariant that every page in the
//! file is exactly one of reachable, free, pending or in the commit log. Recovery runs it on a
//! commit that was not closed cleanly; `check_integrity` runs it on demand.

use crate::btree::walk::{TreeStats, Walk};
use crate::catalog::TableRecord;
use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::PageId;
use crate::pager::header::{CommitRecord, FIRST_DATA_PAGE};
use crate::pager::Pager;

/// The result of [`crate::Database::check_integrity`].
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct IntegrityReport {
    /// Every problem found, each naming its page and file offset. Empty means
    /// the file is consistent.
    pub problems: Vec<Corruption>,
    /// The commit that was checked.
    pub txn: u64,
    /// Pages the commit says the file has.
    pub page_count: u64,
    /// Per-table statistics, in name order.
    pub tables: Vec<(String, TreeStats)>,
    /// The catalog tree's statistics.
    pub catalog: TreeStats,
    /// Pages of the free-list chain.
    pub freelist_pages: u64,
    /// Free pages.
    pub free_pages: u64,
    /// Pages freed by recent commits, not yet reusable.
    pub pending_pages: u64,
    /// Pages of the commit log's extent.
    pub log_pages: u64,
}

impl IntegrityReport {
    /// Whether no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verifies commit `rec`. `Err` only for I/O failures; corruption is
/// reported in the report's `problems`.
pub(crate) fn check_commit(
    pager: &Pager,
    rec: &CommitRecord,
    verify_values: bool,
) -> Result<IntegrityReport> {
    let mut report = IntegrityReport {
        txn: rec.txn.0,
        page_count: rec.page_count,
        ..Default::default()
    };
    let file_pages = pager.file_len() / pager.page_size() as u64;
    if file_pages < rec.page_count {
        report.problems.push(Corruption {
            part: DamagedPart::FileLength,
            page: PageId(file_pages),
            offset: pager.offset(PageId(file_pages)),
            detail: format!(
                "the file has {file_pages} pages but commit {} needs {} (truncated)",
                rec.txn, rec.page_count
            ),
        });
        return Ok(report);
    }
    let mut walk = Walk::new(pager, rec.page_count);
    walk.verify_values = verify_values;
    let mut tables: Vec<(String, TableRecord)> = Vec::new();
    let page_size = pager.page_size();
    let catalog_root = rec.catalog.page;
    report.catalog = walk.tree(rec.catalog, &mut |w, k, v| {
        let bytes = match v {
            crate::btree::node::ValRef::Inline(b) => b,
            crate::btree::node::ValRef::Overflow { .. } => {
                w.problem(
                    DamagedPart::Catalog,
                    catalog_root,
                    "table record stored out of line".into(),
                );
                return;
            }
        };
        match TableRecord::decode_or_corrupt(bytes, k, catalog_root, page_size) {
            Ok(t) => tables.push((String::from_utf8_lossy(k).into_owned(), t)),
            Err(CoreError::Corruption(c)) => w.problems.push(c),
            Err(_) => {}
        }
    });
    for (name, t) in tables {
        let st = walk.tree(t.root, &mut |_, _, _| {});
        if st.entries != t.len {
            walk.problem(
                DamagedPart::Catalog,
                catalog_root,
                format!(
                    "table {name:?} records {} entries but its tree holds {}",
                    t.len, st.entries
                ),
            );
        }
        report.tables.push((name, st));
    }
    // The commit log's extent belongs to the commit too (its pages are
    // checked by recovery's replay, not here: they hold records, not trees).
    if !rec.log.is_none() {
        walk.mark(rec.log.start, rec.log.pages, DamagedPart::LogPage);
        report.log_pages = rec.log.pages;
    }
    match pager.read_freelist(rec.freelist, rec.page_count, u64::MAX) {
        Ok((chain, alloc)) => {
            report.freelist_pages = chain.len() as u64;
            for p in chain {
                walk.mark(p, 1, DamagedPart::FreeListPage);
            }
            for (s, l) in alloc.free_extents() {
                walk.mark(PageId(s), l, DamagedPart::FreeListPage);
            }
            for p in alloc.pending_iter() {
                walk.mark(p, 1, DamagedPart::FreeListPage);
            }
            report.free_pages = alloc.free_pages();
            report.pending_pages = alloc.pending_pages();
            // Accounting: every page is reachable, free or pending.
            let mut leaked = Vec::new();
            for p in FIRST_DATA_PAGE..rec.page_count {
                if !walk.is_seen(p) {
                    leaked.push(p);
                }
            }
            if let Some(first) = leaked.first() {
                walk.problem(
                    DamagedPart::FreeListPage,
                    PageId(*first),
                    format!(
                        "{} page(s) are neither reachable nor free (leaked), first {first}",
                        leaked.len()
                    ),
                );
            }
        }
        Err(CoreError::Corruption(c)) => walk.problems.push(c),
        Err(e) => return Err(e),
    }
    report.problems = walk.problems;
    Ok(report)
}
