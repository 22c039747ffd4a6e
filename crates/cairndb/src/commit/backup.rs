//! Backups: a clean copy of one commit in a new file (FORMAT.md,
//! "Backup").

use std::path::Path;

use super::Shared;
use crate::error::{CoreError, DamagedPart, Result};
use crate::integrity::check_commit;
use crate::pager::header::{CommitRecord, FileHeader, FIRST_DATA_PAGE, HEADER_BYTES};
use crate::storage::{FileStorage, OpenMode, StorageFile};

/// Writes a clean copy of commit `rec` to a new file at `path`: the header,
/// slot 0, and every page the commit reaches, at the same offsets. Returns
/// the file, still open (a copy from a read-only handle then gets the
/// commits it replayed from the commit log, `maintenance.rs`).
pub(crate) fn backup(shared: &Shared, rec: &CommitRecord, path: &Path) -> Result<FileStorage> {
    let out = FileStorage::open(path, OpenMode::CreateOrOpen)?;
    if out.len().map_err(|e| CoreError::io("len", e))? != 0 {
        return Err(CoreError::InvalidOption(format!(
            "backup target {} already exists and is not empty",
            path.display()
        )));
    }
    backup_to_storage(shared, rec, &out)?;
    Ok(out)
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
    let ps = pager.page_size();
    let io = |op: &'static str| move |e| CoreError::io(op, e);
    let walk = reached(shared, rec)?;
    out.set_len(rec.page_count * ps as u64)
        .map_err(io("set_len"))?;
    let mut buf = vec![0u8; ps];
    for pid in FIRST_DATA_PAGE..rec.page_count {
        if walk.is_seen(pid) {
            pager.read_raw(pid * ps as u64, &mut buf)?;
            out.write_at(&buf, pid * ps as u64).map_err(io("write"))?;
        }
    }
    // The pages must be durable before a header makes the file a database.
    out.sync_data().map_err(io("sync"))?;
    out.write_at(&clean_header(ps, rec), 0)
        .map_err(io("write"))?;
    out.sync_data().map_err(io("sync"))?;
    Ok(())
}

/// Writes the same bytes as [`backup_to_storage`] would leave in its file,
/// in file order, to `out` (a stream: the header first, then every page,
/// zeros for the pages the commit does not reach). Nothing is flushed: the
/// reader of the stream decides where it lands. Returns the bytes written.
pub(crate) fn backup_to_writer(
    shared: &Shared,
    rec: &CommitRecord,
    out: &mut dyn std::io::Write,
) -> Result<u64> {
    let pager = &shared.pager;
    let ps = pager.page_size();
    let walk = reached(shared, rec)?;
    let io = |e| CoreError::io("write", e);
    out.write_all(&clean_header(ps, rec)).map_err(io)?;
    let mut buf = vec![0u8; ps];
    for pid in FIRST_DATA_PAGE..rec.page_count {
        if walk.is_seen(pid) {
            pager.read_raw(pid * ps as u64, &mut buf)?;
        } else {
            buf.fill(0);
        }
        out.write_all(&buf).map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(rec.page_count * ps as u64)
}

/// The pages commit `rec` reaches (checked first: a damaged commit is not
/// copied).
fn reached<'p>(shared: &'p Shared, rec: &CommitRecord) -> Result<crate::btree::walk::Walk<'p>> {
    let pager = &shared.pager;
    let report = check_commit(pager, rec, false)?;
    if let Some(p) = report.problems.first() {
        return Err(CoreError::Corruption(p.clone()));
    }
    let ps = pager.page_size();
    let mut walk = crate::btree::walk::Walk::new(pager, rec.page_count);
    walk.verify_values = false;
    let mark_tree = |w: &mut crate::btree::walk::Walk, root| {
        w.tree(root, &mut |_, _, _| {});
    };
    mark_tree(&mut walk, rec.catalog);
    // Table roots come from the catalog of this commit.
    let src = crate::btree::NodeSource {
        pager,
        dirty: None,
        pins: None,
    };
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
    Ok(walk)
}

/// The header page and both commit slots of a backup of `rec`, marked
/// cleanly closed. Both slots as in a new file: a zero slot is damage.
fn clean_header(ps: usize, rec: &CommitRecord) -> Vec<u8> {
    let mut header = vec![0u8; FIRST_DATA_PAGE as usize * ps];
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
    for slot in 0..2 {
        let at = (1 + slot) * ps;
        header[at..at + crate::pager::header::SLOT_BYTES].copy_from_slice(&clean.encode(slot));
    }
    header
}
