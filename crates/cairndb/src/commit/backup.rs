//! Backups: a clean copy of one commit in a new file (FORMAT.md,
//! "Backup").

use std::path::Path;

use super::Shared;
use crate::error::{CoreError, DamagedPart, Result};
use crate::integrity::check_commit;
use crate::pager::header::{CommitRecord, FileHeader, FIRST_DATA_PAGE, HEADER_BYTES};
use crate::storage::{FileStorage, OpenMode, StorageFile};

/// Writes a clean copy of commit `rec` to a new file at `path`: the header,
/// slot 0, and every page the commit reaches, at the same offsets.
pub(crate) fn backup(shared: &Shared, rec: &CommitRecord, path: &Path) -> Result<()> {
    let out = FileStorage::open(path, OpenMode::CreateOrOpen)?;
    if out.len().map_err(|e| CoreError::io("len", e))? != 0 {
        return Err(CoreError::InvalidOption(format!(
            "backup target {} already exists and is not empty",
            path.display()
        )));
    }
    backup_to_storage(shared, rec, &out)
}

/// Writes the clean copy of commit `rec` into the empty storage `out`.
///
/// Order (the crash analysis is in FORMAT.md, "Backup"): every page first,
/// then a flush, then the header page and slot 0, then a second flush. A
/// crash before the second flush leaves a file without a valid header (not
/// a database), never a header that points at pages that were not written.
pub(crate) fn backup_to_storage(
    shared: &Shared,
    rec: &CommitRecord,
    out: &dyn crate::storage::StorageFile,
) -> Result<()> {
    let pager = &shared.pager;
    let report = check_commit(pager, rec, false)?;
    if let Some(p) = report.problems.first() {
        return Err(CoreError::Corruption(p.clone()));
    }
    let ps = pager.page_size();
    let io = |op: &'static str| move |e| CoreError::io(op, e);
    out.set_len(rec.page_count * ps as u64)
        .map_err(io("set_len"))?;
    let mut walk = crate::btree::walk::Walk::new(pager, rec.page_count);
    walk.verify_values = false;
    let mark_tree = |w: &mut crate::btree::walk::Walk, root| {
        w.tree(root, &mut |_, _, _| {});
    };
    mark_tree(&mut walk, rec.catalog);
    let read = |pid: u64, buf: &mut [u8]| pager.read_raw(pid * ps as u64, buf);
    // Table roots come from the catalog of this commit.
    let src = crate::btree::NodeSource { pager, dirty: None };
    let mut r = crate::btree::cursor::RawRange::new(
        src,
        rec.catalog,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
    )?;
    while let Some(item) = r.next() {
        let (k, v) = item?;
        let t = crate::catalog::TableRecord::decode_or_corrupt(
            v.as_slice(),
            k.as_slice(),
            rec.catalog.page,
            ps,
        )?;
        mark_tree(&mut walk, t.root);
    }
    let (chain, _) = pager.read_freelist(rec.freelist, rec.page_count, u64::MAX)?;
    for p in chain {
        walk.mark(p, 1, DamagedPart::FreeListPage);
    }
    let mut buf = vec![0u8; ps];
    for pid in FIRST_DATA_PAGE..rec.page_count {
        if walk.is_seen(pid) {
            read(pid, &mut buf)?;
            out.write_at(&buf, pid * ps as u64).map_err(io("write"))?;
        }
    }
    // The pages must be durable before a header makes the file a database.
    out.sync_data().map_err(io("sync"))?;
    let mut header = vec![0u8; 3 * ps];
    header[..HEADER_BYTES].copy_from_slice(
        &FileHeader {
            version: crate::pager::header::FORMAT_VERSION,
            page_size: ps as u32,
        }
        .encode(),
    );
    let clean = CommitRecord {
        clean: true,
        ..*rec
    };
    // Both slots, as in a new file: a zero slot is damage.
    for slot in 0..2 {
        let at = (1 + slot) * ps;
        header[at..at + crate::pager::header::SLOT_BYTES].copy_from_slice(&clean.encode(slot));
    }
    out.write_at(&header, 0).map_err(io("write"))?;
    out.sync_data().map_err(io("sync"))?;
    Ok(())
}
