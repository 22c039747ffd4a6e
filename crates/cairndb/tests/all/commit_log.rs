//! Commit log (FORMAT.md, "Commit log"). Property: a durable commit of small
//! changes is a log commit — one write of adjacent pages and one flush, no
//! slot and no tree page written — and survives a crash (replayed at open,
//! counted in the recovery report); a write in flight at a crash is
//! discarded whole and reported; damage in a flushed log page is an error
//! naming the page when a later page shows it was durable, and is never
//! returned as data; the log fills, checkpoints and grows; non-durable
//! commits ride in it, so `sync` needs one log write; a read-only open
//! replays without writing; a clean close leaves no log; the log can be
//! turned off. Crash enumeration over log commits is in `crash.rs`.

use std::sync::Arc;

use cairndb::storage::sim::{Fault, OpFilter, OpKind, SimFile};
use cairndb::{
    Builder, CoreError, DamagedPart, Database, Durability, ReadableTable, TableDefinition,
};

const T: TableDefinition<u64, &[u8]> = TableDefinition::new("t");

fn builder(page_size: usize) -> Builder {
    let mut b = Database::builder();
    b.page_size(page_size);
    b
}

fn sim(page_size: usize) -> (Arc<SimFile>, Database) {
    let f = Arc::new(SimFile::new());
    let db = builder(page_size)
        .open_with_storage(Box::new(f.clone()), true, false)
        .unwrap();
    (f, db)
}

fn open_image(image: Vec<u8>) -> Result<Database, CoreError> {
    Database::builder().open_with_storage(Box::new(SimFile::from_image(image)), false, false)
}

fn val(k: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| (k as usize * 31 + i) as u8).collect()
}

/// Commits `ops` (key, value or `None` to remove) in one transaction.
fn commit(db: &Database, d: Durability, ops: &[(u64, Option<Vec<u8>>)]) {
    let w = db.begin_write().unwrap();
    w.set_durability(d);
    {
        let mut t = w.open_table(T).unwrap();
        for (k, v) in ops {
            match v {
                Some(v) => {
                    t.insert(k, v.as_slice()).unwrap();
                }
                None => {
                    t.remove(k).unwrap();
                }
            }
        }
    }
    w.commit().unwrap();
}

fn contents(db: &Database) -> Vec<(u64, Vec<u8>)> {
    let r = db.begin_read().unwrap();
    let t = r.open_table(T).unwrap();
    let all: Vec<(u64, Vec<u8>)> = t
        .iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.value(), v.value().to_vec())
        })
        .collect();
    assert_eq!(t.len(), all.len() as u64, "len agrees with the entries");
    all
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

/// The commit log the newest valid slot of `image` names: (first page,
/// pages, salt), read at FORMAT.md's offsets.
fn slot_log(image: &[u8], ps: usize) -> (u64, u64, u64) {
    let o = [ps, 2 * ps]
        .into_iter()
        .filter(|&o| &image[o..o + 8] == b"CAIRNSLT")
        .max_by_key(|&o| u64_at(image, o + 8))
        .unwrap();
    (
        u64_at(image, o + 64),
        u32::from_le_bytes(image[o + 72..o + 76].try_into().unwrap()) as u64,
        u64_at(image, o + 80),
    )
}

/// A table with some entries, then one durable small commit that starts
/// the log (a checkpoint: there was none). Returns the model.
fn start_log(db: &Database) -> Vec<(u64, Vec<u8>)> {
    commit(
        db,
        Durability::Immediate,
        &(0..20).map(|k| (k, Some(val(k, 10)))).collect::<Vec<_>>(),
    );
    commit(db, Durability::Immediate, &[(100, Some(val(100, 10)))]);
    contents(db)
}

#[test]
fn a_log_commit_is_one_write_and_one_flush_and_survives_a_crash() {
    let (f, db) = sim(4096);
    start_log(&db);
    let slots_before = f.current_image()[4096..3 * 4096].to_vec();
    let mut zero_fills = 0;
    for i in 0..20u64 {
        let (w, s) = (f.op_count(OpKind::Write), f.op_count(OpKind::Sync));
        commit(
            &db,
            Durability::Immediate,
            &[
                (i, Some(val(i, 30))),
                (200 + i, Some(val(i, 5))),
                (i + 1, None),
            ],
        );
        // One write — and, once, zeros written ahead where the log reaches
        // never-written file.
        let writes = f.op_count(OpKind::Write) - w;
        assert!(writes == 1 || writes == 2, "commit {i}: {writes} writes");
        zero_fills += writes - 1;
        assert_eq!(f.op_count(OpKind::Sync) - s, 1, "commit {i}: one flush");
    }
    assert!(zero_fills <= 1, "zeros go ahead of the log once");
    assert_eq!(
        &f.current_image()[4096..3 * 4096],
        slots_before.as_slice(),
        "log commits write no slot"
    );
    let want = contents(&db);
    // Power loss: only what was flushed.
    let image = f.durable_image();
    drop(db);
    let db = open_image(image).unwrap();
    assert_eq!(db.recovery_report().log_commits, 20);
    assert_eq!(db.recovery_report().log_incomplete, None);
    assert_eq!(contents(&db), want);
    assert!(db.check_integrity().unwrap().is_ok());
    // The recovered database takes new commits (the first checkpoints).
    commit(&db, Durability::Immediate, &[(999, Some(val(9, 9)))]);
    assert_eq!(contents(&db).len(), want.len() + 1);
}

/// A record larger than a page spans a write of several pages; a crash that
/// tears that write discards it whole (reported), keeping everything
/// acknowledged before it.
#[test]
fn an_incomplete_write_is_discarded_whole_and_reported() {
    let mut saw_incomplete = false;
    // Crash at each of the big commit's first operations (zeros written
    // ahead of the log, if any, then its write, then its flush).
    for crash_at in 0..3u64 {
        let (f, db) = sim(512);
        start_log(&db);
        commit(&db, Durability::Immediate, &[(1, Some(val(1, 40)))]);
        let acked = contents(&db);
        f.set_fault(Some(Fault::CrashAt(crash_at)), OpFilter::Mutating);
        let w = db.begin_write().unwrap();
        {
            let mut t = w.open_table(T).unwrap();
            for k in 0..8u64 {
                t.insert(300 + k, val(k, 200).as_slice()).unwrap();
            }
        }
        if w.commit().is_ok() {
            continue;
        }
        let mut whole = acked.clone();
        whole.extend((0..8u64).map(|k| (300 + k, val(k, 200))));
        whole.sort();
        for img in f.crash_images(7 + crash_at) {
            let db2 = open_image(img.bytes.clone()).unwrap();
            let got = contents(&db2);
            assert!(
                got == acked || got == whole,
                "crash at {crash_at}, {}: neither the acknowledged state nor it plus the whole commit",
                img.name
            );
            if let Some(c) = &db2.recovery_report().log_incomplete {
                assert_eq!(c.part, DamagedPart::LogPage);
                assert_eq!(got, acked, "{}: reported incomplete, yet applied", img.name);
                saw_incomplete = true;
            }
            assert!(db2.check_integrity().unwrap().is_ok());
        }
    }
    assert!(saw_incomplete, "some image tears the multi-page write");
}

/// Damage in a flushed log page that later pages show was durable makes
/// open fail with a typed error naming the page; damage in the last write
/// ends the log there. Never wrong data.
#[test]
fn damage_in_a_flushed_log_page_is_detected() {
    let ps = 512;
    let (f, db) = sim(ps);
    start_log(&db);
    let base = contents(&db);
    for i in 0..3u64 {
        commit(&db, Durability::Immediate, &[(500 + i, Some(val(i, 20)))]);
    }
    let image = f.durable_image();
    drop(db);
    let (start, _, _) = slot_log(&image, ps);
    // Page 0 or 1 of the log: page 2 (written after their flush) witnesses
    // they were durable.
    for seq in 0..2u64 {
        let mut bad = image.clone();
        bad[((start + seq) as usize) * ps + 40] ^= 0x20;
        match open_image(bad) {
            Err(CoreError::Corruption(c)) => {
                assert_eq!(c.part, DamagedPart::LogPage);
                assert_eq!(c.page.0, start + seq, "names the damaged page");
                assert_eq!(c.offset, (start + seq) * ps as u64);
            }
            other => panic!("log page {seq} damaged: {:?}", other.map(|_| ())),
        }
    }
    // The last write: the log ends before it (its commit is lost, as with a
    // damaged newest slot); the rest is intact and never wrong.
    let mut bad = image.clone();
    bad[((start + 2) as usize) * ps + 40] ^= 0x20;
    let db = open_image(bad).unwrap();
    let mut want = base.clone();
    want.extend((0..2u64).map(|i| (500 + i, val(i, 20))));
    assert_eq!(contents(&db), want);
    assert_eq!(db.recovery_report().log_commits, 2);
}

/// The first log takes 64 pages; when it fills, a durable commit
/// checkpoints (the overlay goes into the trees under a new slot) and the
/// next log is four times larger. Nothing is lost across it.
#[test]
fn a_full_log_checkpoints_and_grows() {
    let ps = 512;
    let (f, db) = sim(ps);
    start_log(&db);
    let (_, first, _) = slot_log(&f.current_image(), ps);
    assert_eq!(first, 64);
    for i in 0..100u64 {
        commit(&db, Durability::Immediate, &[(1000 + i, Some(val(i, 16)))]);
    }
    let (_, second, _) = slot_log(&f.current_image(), ps);
    assert_eq!(second, 256, "the log grew after filling");
    let want = contents(&db);
    let image = f.durable_image();
    drop(db);
    let db = open_image(image).unwrap();
    assert_eq!(contents(&db), want);
    assert!(db.check_integrity().unwrap().is_ok());
}

/// Non-durable commits append their records too, so `sync` is one log
/// write and one flush, and a crash after it keeps them all.
#[test]
fn sync_makes_nondurable_commits_durable_with_one_log_write() {
    let (f, db) = sim(4096);
    start_log(&db);
    for i in 0..30u64 {
        commit(
            &db,
            Durability::None,
            &[(i, Some(val(i, 50))), (i + 1, None)],
        );
    }
    let (w, s) = (f.op_count(OpKind::Write), f.op_count(OpKind::Sync));
    db.sync().unwrap();
    // One log write (and zeros ahead of it, where the log reaches
    // never-written file).
    assert!(f.op_count(OpKind::Write) - w <= 2, "one log write");
    assert_eq!(f.op_count(OpKind::Sync) - s, 1, "one flush");
    let want = contents(&db);
    let image = f.durable_image();
    drop(db);
    let db = open_image(image).unwrap();
    assert_eq!(contents(&db), want);
    assert_eq!(db.recovery_report().log_commits, 30);
}

/// A read-only open replays the log (readers see every durable commit) and
/// writes nothing; `cairn check`'s integrity walk passes on it.
#[test]
fn a_read_only_open_replays_without_writing() {
    let (f, db) = sim(4096);
    start_log(&db);
    for i in 0..5u64 {
        commit(
            &db,
            Durability::Immediate,
            &[(i, None), (700 + i, Some(val(i, 8)))],
        );
    }
    let want = contents(&db);
    let image = f.durable_image();
    drop(db);
    let file = Arc::new(SimFile::from_image(image));
    let writes = file.op_count(OpKind::Write);
    let db = Database::builder()
        .open_with_storage(Box::new(file.clone()), false, true)
        .unwrap();
    assert_eq!(contents(&db), want);
    assert_eq!(db.recovery_report().log_commits, 5);
    assert!(db.check_integrity().unwrap().is_ok());
    drop(db);
    assert_eq!(file.op_count(OpKind::Write), writes);
}

/// A backup copies the pages of a commit: commits a read-only open replayed
/// from the log are not in them, so a read-only handle holding some refuses
/// to back up instead of writing a copy without them; a read-write handle
/// applies them first and its copy holds every one.
#[test]
fn a_backup_refuses_replayed_commits_it_cannot_apply() {
    let (f, db) = sim(4096);
    start_log(&db);
    for i in 0..5u64 {
        commit(&db, Durability::Immediate, &[(900 + i, Some(val(i, 8)))]);
    }
    let want = contents(&db);
    let image = f.durable_image();
    drop(db);
    let ro = Database::builder()
        .open_with_storage(Box::new(SimFile::from_image(image.clone())), false, true)
        .unwrap();
    assert_eq!(ro.recovery_report().log_commits, 5);
    let out = SimFile::new();
    match ro.backup_to_storage(&out) {
        Err(CoreError::InvalidOption(m)) => assert!(m.contains("read-write"), "{m}"),
        other => panic!("a read-only backup without the replayed commits: {other:?}"),
    }
    drop(ro);
    let rw = open_image(image).unwrap();
    let out = Arc::new(SimFile::new());
    rw.backup_to_storage(&*out).unwrap();
    drop(rw);
    let copy = Database::builder()
        .open_with_storage(Box::new(out.clone()), false, true)
        .unwrap();
    assert_eq!(contents(&copy), want);
}

/// A clean close applies the log to the trees and names none; compaction
/// leaves none either, and the file shrinks past the freed extents.
#[test]
fn clean_close_and_compaction_leave_no_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let db = builder(4096).create(&path).unwrap();
    start_log(&db);
    for i in 0..10u64 {
        commit(&db, Durability::Immediate, &[(800 + i, Some(val(i, 8)))]);
    }
    let want = contents(&db);
    db.close().unwrap();
    let image = std::fs::read(&path).unwrap();
    assert_eq!(
        slot_log(&image, 4096),
        (0, 0, 0),
        "no log after a clean close"
    );
    let db = Database::open(&path).unwrap();
    assert!(db.recovery_report().clean);
    assert_eq!(contents(&db), want);
    for i in 0..10u64 {
        commit(&db, Durability::Immediate, &[(900 + i, Some(val(i, 8)))]);
    }
    let before = std::fs::read(&path).unwrap();
    assert_ne!(slot_log(&before, 4096).0, 0, "log commits use a log");
    db.compact().unwrap();
    let after = std::fs::read(&path).unwrap();
    assert_eq!(slot_log(&after, 4096), (0, 0, 0), "compaction names no log");
    assert!(
        after.len() < before.len(),
        "the file shrinks past the extents"
    );
    assert!(db.check_integrity().unwrap().is_ok());
    assert_eq!(contents(&db).len(), want.len() + 10);
}

/// With `log_size(0)` every durable commit writes its pages and a slot.
#[test]
fn the_log_can_be_turned_off() {
    let f = Arc::new(SimFile::new());
    let db = builder(4096)
        .log_size(0)
        .open_with_storage(Box::new(f.clone()), true, false)
        .unwrap();
    start_log(&db);
    let w = f.op_count(OpKind::Write);
    commit(&db, Durability::Immediate, &[(1, Some(val(1, 8)))]);
    assert!(f.op_count(OpKind::Write) - w >= 2, "pages and a slot");
    assert_eq!(slot_log(&f.current_image(), 4096), (0, 0, 0));
}

/// `check_integrity` verifies the flushed pages of the log the handle is
/// writing (the overlay above the trees is durable only through them).
#[test]
fn check_integrity_verifies_the_live_log() {
    let ps = 512;
    let (f, db) = sim(ps);
    start_log(&db);
    for i in 0..4u64 {
        commit(&db, Durability::Immediate, &[(600 + i, Some(val(i, 20)))]);
    }
    assert!(db.check_integrity().unwrap().is_ok());
    let (start, _, _) = slot_log(&f.current_image(), ps);
    f.flip_bit((start + 1) * ps as u64 + 50, 3);
    let r = db.check_integrity().unwrap();
    let c = r
        .problems
        .first()
        .expect("the damaged log page is reported");
    assert_eq!(c.part, DamagedPart::LogPage);
    assert_eq!(c.page.0, start + 1);
}

/// A statistics or integrity call between durable commits writes out a
/// staged commit (here, a non-durable commit that spilled the overlay into
/// the trees): the slot it writes starts a new log, so the next durable
/// commit is still one log write and one flush, not a checkpoint. A crash
/// before that flush keeps the last durable commit; one after keeps all.
#[test]
fn monitoring_calls_do_not_turn_log_commits_into_checkpoints() {
    let ps = 4096;
    let f = Arc::new(SimFile::new());
    let db = builder(ps)
        .overlay_size(2048)
        .background_spill(None)
        .open_with_storage(Box::new(f.clone()), true, false)
        .unwrap();
    start_log(&db);
    for round in 0..4u64 {
        // Over the 2 KiB overlay budget: the commit spills and stages.
        let base = 1000 + round * 100;
        commit(
            &db,
            Durability::None,
            &(base..base + 40)
                .map(|k| (k, Some(val(k, 50))))
                .collect::<Vec<_>>(),
        );
        let durable_before = {
            let image = f.durable_image();
            contents(&open_image(image).unwrap())
        };
        let stats = db.stats().unwrap();
        assert_eq!(stats.overlay_entries, 0, "the spill emptied the overlay");
        assert!(db.check_integrity().unwrap().is_ok());
        let (start, pages, _) = slot_log(&f.current_image(), ps);
        assert!(
            start > 0 && pages > 0,
            "round {round}: the write-out names a log"
        );
        // A crash now: the write-out is not flushed; the last durable
        // commit is what recovery opens, whole.
        let crashed = open_image(f.durable_image()).unwrap();
        assert_eq!(contents(&crashed), durable_before, "round {round}");
        drop(crashed);
        let (w, s) = (f.op_count(OpKind::Write), f.op_count(OpKind::Sync));
        commit(&db, Durability::Immediate, &[(round, Some(val(round, 9)))]);
        let writes = f.op_count(OpKind::Write) - w;
        assert!(
            writes == 1 || writes == 2,
            "round {round}: a log commit (one write, and zeros ahead), not a checkpoint: {writes} writes"
        );
        assert_eq!(f.op_count(OpKind::Sync) - s, 1, "round {round}: one flush");
    }
    let want = contents(&db);
    let image = f.durable_image();
    drop(db);
    let db = open_image(image).unwrap();
    assert_eq!(db.recovery_report().log_commits, 1);
    assert_eq!(contents(&db), want);
    assert!(db.check_integrity().unwrap().is_ok());
}
