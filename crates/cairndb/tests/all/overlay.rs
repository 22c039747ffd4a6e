//! Overlay suite. Property: small changes of `Durability::None` transactions
//! are held in memory beside the trees (the overlay) and behave exactly like
//! committed tree changes — reads, double-ended ranges and lengths in the
//! write transaction and in every snapshot equal a model; snapshots stay as
//! they were while later commits change or spill the overlay; overlay
//! commits write nothing to the file; a durable commit, `sync` and close keep
//! them; a crash loses them only as a whole suffix.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use cairndb::storage::sim::{OpKind, SimFile};
use cairndb::CoreError;
use cairndb::{Database, Durability, ReadableTable, TableDefinition};
use proptest::prelude::*;

const T: TableDefinition<u32, &[u8]> = TableDefinition::new("t");
const U: TableDefinition<u32, &[u8]> = TableDefinition::new("u");

type Model = BTreeMap<u32, Vec<u8>>;

fn sim_db(overlay: usize) -> (Arc<SimFile>, Database) {
    let f = Arc::new(SimFile::new());
    let db = Database::builder()
        .page_size(512)
        .cache_size(64 << 10)
        .overlay_size(overlay)
        .open_with_storage(Box::new(f.clone()), true, false)
        .unwrap();
    (f, db)
}

fn read<R: ReadableTable<u32, &'static [u8]>>(t: &R) -> Model {
    t.iter()
        .unwrap()
        .map(|e| {
            let (k, v) = e.unwrap();
            (k.value(), v.value().to_vec())
        })
        .collect()
}

fn snapshot(db: &Database, def: TableDefinition<u32, &[u8]>) -> Model {
    let r = db.begin_read().unwrap();
    let t = r.open_table(def).unwrap();
    let m = read(&t);
    assert_eq!(t.len(), m.len() as u64, "len of a snapshot");
    m
}

fn val(k: u32, round: u32) -> Vec<u8> {
    let n = 4 + ((k ^ round) % 40) as usize;
    (0..n)
        .map(|i| (k as u8) ^ (round as u8) ^ i as u8)
        .collect()
}

/// Non-durable commits of small values write nothing (no page, no slot),
/// are visible to new readers under new commit ids, and a clean close keeps
/// them.
#[test]
fn overlay_commits_write_nothing_and_close_keeps_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("o.cairn");
    let f = Arc::new(SimFile::new());
    let db = Database::builder()
        .page_size(512)
        .open_with_storage(Box::new(f.clone()), true, false)
        .unwrap();
    let w = db.begin_write().unwrap();
    w.open_table(T)
        .unwrap()
        .insert(0, b"base".as_slice())
        .unwrap();
    w.commit().unwrap();
    let writes = f.op_count(OpKind::Write);
    let mut model: Model = [(0, b"base".to_vec())].into();
    let mut last = db.latest_commit();
    for round in 1..=50u32 {
        let w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        {
            let mut t = w.open_table(T).unwrap();
            t.insert(round, val(round, round).as_slice()).unwrap();
            model.insert(round, val(round, round));
            if round % 5 == 0 {
                assert!(t.remove(round - 3).unwrap().is_some());
                model.remove(&(round - 3));
            }
        }
        let id = w.commit().unwrap();
        assert!(id > last, "commit ids grow");
        last = id;
        assert_eq!(db.latest_commit(), id);
        assert_eq!(db.begin_read().unwrap().txn_id(), id);
        assert_eq!(snapshot(&db, T), model);
    }
    assert_eq!(
        f.op_count(OpKind::Write),
        writes,
        "overlay commits wrote to the file"
    );
    // A clean close writes them (to a real file here: copy the image).
    db.close().unwrap();
    std::fs::write(&path, f.current_image()).unwrap();
    let db = Database::open(&path).unwrap();
    assert_eq!(snapshot(&db, T), model);
    assert!(db.check_integrity().unwrap().is_ok());
}

/// A crash loses the overlay's commits as a whole (the state is the last
/// written one); a durable commit keeps everything before it.
#[test]
fn crash_loses_only_the_non_durable_suffix() {
    let (f, db) = sim_db(32 << 20);
    let put = |d: Durability, keys: std::ops::Range<u32>, round: u32| {
        let w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        {
            let mut t = w.open_table(T).unwrap();
            for k in keys {
                t.insert(k, val(k, round).as_slice()).unwrap();
            }
        }
        // The mode the commit gets is the one at commit time.
        w.set_durability(d);
        w.commit().unwrap();
    };
    put(Durability::None, 0..20, 1);
    put(Durability::Immediate, 10..30, 2);
    let durable = snapshot(&db, T);
    put(Durability::None, 25..40, 3);
    put(Durability::None, 0..5, 4);
    assert_ne!(snapshot(&db, T), durable);
    let image = f.durable_image();
    drop(db);
    let db = Database::builder()
        .open_with_storage(Box::new(SimFile::from_image(image)), false, false)
        .unwrap();
    assert_eq!(snapshot(&db, T), durable);
    assert!(db.check_integrity().unwrap().is_ok());
}

/// A durable commit whose overlay changes cancel out (a key inserted and
/// removed again in it, so its spill changes no tree) still makes the
/// commits before it durable: here the non-durable commit that created the
/// table. (Found by the model suite, seed 1795602560189145267 case 89: the
/// commit published its empty deltas and returned without writing out or
/// flushing anything, and a power loss then lost the table.)
#[test]
fn a_durable_commit_that_cancels_out_keeps_earlier_commits() {
    for overlay in [2 << 10, 32 << 20] {
        let (f, db) = sim_db(overlay);
        let w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        w.open_table(U).unwrap();
        w.commit().unwrap();
        let w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        {
            let mut t = w.open_table(U).unwrap();
            t.insert(5, b"five".as_slice()).unwrap();
            assert!(t.pop_last().unwrap().is_some());
        }
        w.set_durability(Durability::Immediate);
        w.commit().unwrap();
        let image = f.durable_image();
        drop(db);
        let db = Database::builder()
            .open_with_storage(Box::new(SimFile::from_image(image)), false, false)
            .unwrap();
        let r = db.begin_read().unwrap();
        let t = r.open_table(U).unwrap_or_else(|e| {
            panic!(
                "overlay budget {overlay}: the table of a commit before a durable one is lost: {e}"
            )
        });
        assert_eq!(t.len(), 0);
        let _ = t;
        drop(r);
        assert!(db.check_integrity().unwrap().is_ok());
    }
}

/// A non-durable commit that wrote to the overlay of a table it created
/// and deleted again changed nothing the catalog records and cannot be
/// logged; a durable commit, `sync` and a reopen after it still succeed and
/// keep what came before it. (Found by the model test: it was published as
/// an overlay commit that neither the log nor a slot recorded, and the
/// empty durable commit after it failed with "commit 2 was never written
/// out".)
#[test]
fn a_commit_that_creates_and_deletes_a_table_is_made_durable_by_the_next() {
    for overlay in [2 << 10, 32 << 20] {
        let (f, db) = sim_db(overlay);
        let w = db.begin_write().unwrap();
        w.open_table(T)
            .unwrap()
            .insert(1, b"one".as_slice())
            .unwrap();
        w.commit().unwrap();
        let w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        w.open_table(U)
            .unwrap()
            .insert(9, b"xx".as_slice())
            .unwrap();
        assert!(w.delete_table(U.name()).unwrap());
        w.commit().unwrap();
        let w = db.begin_write().unwrap();
        w.commit()
            .unwrap_or_else(|e| panic!("overlay budget {overlay}: the durable commit failed: {e}"));
        db.sync().unwrap();
        let image = f.durable_image();
        drop(db);
        let db = Database::builder()
            .open_with_storage(Box::new(SimFile::from_image(image)), false, false)
            .unwrap();
        assert_eq!(snapshot(&db, T), Model::from([(1, b"one".to_vec())]));
        assert!(db.begin_read().unwrap().open_table(U).is_err());
        assert!(db.check_integrity().unwrap().is_ok());
    }
}

/// Snapshots keep their view while later commits change the overlay, spill
/// it (budget, durable commit, `sync`, `stats`), and delete the table.
#[test]
fn snapshots_are_stable_across_spills() {
    let (_f, db) = sim_db(2 << 10);
    let mut model = Model::new();
    let mut held: Vec<(cairndb::ReadTransaction, Model)> = Vec::new();
    for round in 0..60u32 {
        let w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        {
            let mut t = w.open_table(T).unwrap();
            for i in 0..4 {
                let k = (round * 7 + i * 13) % 50;
                if (round + i) % 3 == 0 {
                    t.remove(k).unwrap();
                    model.remove(&k);
                } else {
                    t.insert(k, val(k, round).as_slice()).unwrap();
                    model.insert(k, val(k, round));
                }
            }
            assert_eq!(read(&t), model, "the write transaction's own view");
            assert_eq!(t.len(), model.len() as u64);
        }
        if round % 10 == 9 {
            w.set_durability(Durability::Immediate);
        }
        w.commit().unwrap();
        match round % 4 {
            0 => db.sync().unwrap(),
            1 => {
                db.stats().unwrap();
            }
            _ => {}
        }
        held.push((db.begin_read().unwrap(), model.clone()));
        for (r, m) in &held {
            let t = r.open_table(T).unwrap();
            assert_eq!(&read(&t), m, "snapshot {:?} changed", r.txn_id());
            assert_eq!(t.len(), m.len() as u64);
        }
        if held.len() > 6 {
            held.remove(round as usize % 6);
        }
    }
    // Deleting the table drops its overlay too; a table made again under
    // the name in the same transaction starts empty.
    let w = db.begin_write().unwrap();
    w.set_durability(Durability::None);
    assert!(w.delete_table("t").unwrap());
    {
        let mut t = w.open_table(T).unwrap();
        assert_eq!(t.len(), 0);
        assert!(t.get(3).unwrap().is_none());
        t.insert(1000, b"new".as_slice()).unwrap();
    }
    w.commit().unwrap();
    assert_eq!(snapshot(&db, T), [(1000, b"new".to_vec())].into());
    for (r, m) in &held {
        assert_eq!(&read(&r.open_table(T).unwrap()), m);
    }
    drop(held);
    assert!(db.check_integrity().unwrap().is_ok());
}

/// A write transaction that outlives the `Database` handle and commits
/// non-durably still has its changes kept by the clean close that follows.
#[test]
fn commit_after_the_handle_is_dropped_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("late.cairn");
    let db = Database::create(&path).unwrap();
    let w = db.begin_write().unwrap();
    drop(db);
    w.set_durability(Durability::None);
    w.open_table(T)
        .unwrap()
        .insert(7, b"late".as_slice())
        .unwrap();
    w.commit().unwrap();
    let db = Database::open(&path).unwrap();
    assert_eq!(snapshot(&db, T), [(7, b"late".to_vec())].into());
}

/// Dropping the handle while this thread holds the write transaction does
/// not wait for it (that would never end); the transaction, aborted or
/// committed afterwards, spills the overlay so the clean close keeps the
/// earlier non-durable commits.
#[test]
fn dropping_the_handle_under_an_open_write_transaction_does_not_hang() {
    for commit in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("drop.cairn");
        let (tx, rx) = std::sync::mpsc::channel();
        let p = path.clone();
        std::thread::spawn(move || {
            let db = Database::create(&p).unwrap();
            let w = db.begin_write().unwrap();
            w.set_durability(Durability::None);
            w.open_table(T)
                .unwrap()
                .insert(1, b"one".as_slice())
                .unwrap();
            w.commit().unwrap();
            let w = db.begin_write().unwrap();
            w.set_durability(Durability::None);
            w.open_table(T)
                .unwrap()
                .insert(2, b"two".as_slice())
                .unwrap();
            drop(db);
            if commit {
                w.commit().unwrap();
            } else {
                drop(w);
            }
            tx.send(()).unwrap();
        });
        rx.recv_timeout(std::time::Duration::from_secs(60))
            .expect("dropping the handle under an open write transaction hung");
        let db = Database::open(&path).unwrap();
        let mut want: Model = [(1, b"one".to_vec())].into();
        if commit {
            want.insert(2, b"two".to_vec());
        }
        assert_eq!(snapshot(&db, T), want);
    }
}

/// Large values go to the tree directly (spilling the table's overlay
/// first, so the overlay never hides a newer tree value), and tables in
/// one transaction mix both.
#[test]
fn large_values_and_appends_go_to_the_tree_in_order() {
    let (_f, db) = sim_db(32 << 20);
    let w = db.begin_write().unwrap();
    w.set_durability(Durability::None);
    {
        let mut t = w.open_table(T).unwrap();
        let mut u = w.open_table(U).unwrap();
        t.insert(1, b"small".as_slice()).unwrap();
        t.insert(1, vec![9u8; 5000].as_slice()).unwrap();
        u.insert(1, b"u".as_slice()).unwrap();
        t.insert(2, b"two".as_slice()).unwrap();
        t.append(10, b"ten".as_slice()).unwrap();
        assert!(matches!(
            t.append(3, b"x".as_slice()),
            Err(CoreError::AppendOutOfOrder)
        ));
        assert_eq!(
            t.get(1).unwrap().unwrap().value(),
            vec![9u8; 5000].as_slice()
        );
        assert_eq!(t.len(), 3);
    }
    w.commit().unwrap();
    let m = snapshot(&db, T);
    assert_eq!(m.len(), 3);
    assert_eq!(m[&1], vec![9u8; 5000]);
    assert_eq!(m[&2], b"two".to_vec());
    assert_eq!(snapshot(&db, U), [(1, b"u".to_vec())].into());
}

/// Loads `n` keys `0, 8, 16, …` into `T` in one durable commit (and creates
/// `U`): a tree for scattered changes to land in, keys between them new.
fn load_every_eighth(db: &Database, n: u32) -> Model {
    let mut model = Model::new();
    let w = db.begin_write().unwrap();
    {
        let mut t = w.open_table(T).unwrap();
        for k in 0..n {
            t.insert(k * 8, val(k, 0).as_slice()).unwrap();
            model.insert(k * 8, val(k, 0));
        }
        w.open_table(U).unwrap();
    }
    w.commit().unwrap();
    model
}

/// A scattered change of `T` (seeded by `rng`, keys below `span`): an
/// insert or overwrite, or — for a loaded key when `remove` — a removal.
fn scattered_change(
    t: &mut cairndb::Table<'_, u32, &'static [u8]>,
    model: &mut Model,
    rng: &mut u32,
    span: u32,
    round: u32,
    remove: bool,
) {
    *rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
    let k = (*rng >> 8) % span;
    if k.is_multiple_of(8) && remove {
        t.remove(k).unwrap();
        model.remove(&k);
    } else {
        t.insert(k, val(k, round).as_slice()).unwrap();
        model.insert(k, val(k, round));
    }
}

/// A bulk commit (more changes than a transaction puts in the overlay)
/// keeps a table whose keys land scattered over its tree in the overlay,
/// across commits, while a table it appends to in order goes to its tree:
/// the scattered table's leaves are written once per spill, not copied by
/// every commit. Reads equal the model throughout (in the transaction past
/// the switch, a range removal included, and after each commit and a
/// reopen).
#[test]
fn bulk_commits_keep_scattered_keys_in_the_overlay_and_appends_in_the_tree() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bulk.cairn");
    let db = Database::builder()
        .page_size(512)
        // (Room to stage the commits' pages, and no background spill: only
        // the rule under test moves the overlay into the trees.)
        .cache_size(64 << 20)
        .overlay_size(32 << 20)
        .background_spill(None)
        .create(&path)
        .unwrap();
    let mut scattered = load_every_eighth(&db, 100_000);
    let mut appended: Model = Model::new();
    let mut rng = 0x9e37_79b9u32;
    let (commits, per_commit) = (5u32, 6_000u32);
    let mut removals = 0u64;
    for round in 1..=commits {
        let w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        {
            let mut t = w.open_table(T).unwrap();
            let mut u = w.open_table(U).unwrap();
            for i in 0..per_commit {
                let remove = i.is_multiple_of(3);
                scattered_change(&mut t, &mut scattered, &mut rng, 800_000, round, remove);
                let a = round * per_commit + i;
                u.insert(a, val(a, round).as_slice()).unwrap();
                appended.insert(a, val(a, round));
            }
            // In the transaction, past the switch: gets and a range read the
            // overlay over the tree as the model has it.
            for k in (0..800_000u32).step_by(997) {
                let got = t.get(k).unwrap().map(|v| v.value().to_vec());
                assert_eq!(got, scattered.get(&k).cloned(), "round {round}: get {k}");
            }
            let (lo, hi) = (round * 100_000, round * 100_000 + 2_000);
            let got: Vec<(u32, Vec<u8>)> = t
                .range(lo..hi)
                .unwrap()
                .map(|e| {
                    let (k, v) = e.unwrap();
                    (k.value(), v.value().to_vec())
                })
                .collect();
            let want: Vec<(u32, Vec<u8>)> = scattered
                .range(lo..hi)
                .map(|(k, v)| (*k, v.clone()))
                .collect();
            assert_eq!(got, want, "round {round}: range");
            // A range removed from the table the overlay holds.
            if round == 3 {
                let before = scattered.len();
                scattered.retain(|k, _| !(lo..lo + 500).contains(k));
                removals = (before - scattered.len()) as u64;
                assert_eq!(t.remove_range(lo..lo + 500).unwrap(), removals);
            }
        }
        w.commit().unwrap();
        // The scattered table's changes stay in the overlay (all but those
        // of the first commit made before its pattern showed: its share of
        // the transaction's first 4,096 overlay changes, applied at its
        // first direct change, and 256 direct ones); the appends do not
        // (their delta went to the tree at their first direct change).
        let held = cairndb::testing::overlay_entries(&db).unwrap();
        let scattered_changes = u64::from(round * per_commit) + removals;
        assert!(
            held >= scattered_changes - 4096 - 256 && held <= scattered_changes,
            "round {round}: {held} entries in the overlay, {scattered_changes} scattered changes made"
        );
        assert_eq!(snapshot(&db, T), scattered, "round {round}");
        assert_eq!(snapshot(&db, U), appended, "round {round}");
    }
    db.close().unwrap();
    let db = Database::open(&path).unwrap();
    assert_eq!(snapshot(&db, T), scattered);
    assert_eq!(snapshot(&db, U), appended);
    assert!(db.check_integrity().unwrap().is_ok());
}

/// Crash images taken after each of a chain of bulk non-durable commits —
/// a scattered table held in the overlay across them, a table appended to
/// in order written to its tree and staged (its values written out of line
/// at once), write-outs by statistics calls between — each open to the
/// state after some acknowledged commit
/// (a lost suffix, never a commit without an earlier one's overlay
/// changes), and pass the integrity check; `sync` keeps the last.
#[test]
fn crash_images_of_bulk_commits_with_scattered_keys_are_prefixes() {
    let f = Arc::new(SimFile::new());
    let db = Database::builder()
        .page_size(512)
        // (Room to stage every commit's pages: the statistics calls below
        // write them out.)
        .cache_size(32 << 20)
        .overlay_size(32 << 20)
        .background_spill(None)
        .open_with_storage(Box::new(f.clone()), true, false)
        .unwrap();
    let mut t_model = load_every_eighth(&db, 40_000);
    let mut u_model = Model::new();
    let mut states = vec![(t_model.clone(), u_model.clone())];
    let mut rng = 0x2545_f491u32;
    let mut images = 0;
    for round in 1..=9u32 {
        let w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        {
            let mut t = w.open_table(T).unwrap();
            let mut u = w.open_table(U).unwrap();
            for i in 0..4_800u32 {
                let remove = i.is_multiple_of(4);
                scattered_change(&mut t, &mut t_model, &mut rng, 320_000, round, remove);
                if i.is_multiple_of(8) {
                    // (Values out of line: four pages each.)
                    let a = round * 1_000 + i / 8;
                    u.insert(a, vec![round as u8; 2_000].as_slice()).unwrap();
                    u_model.insert(a, vec![round as u8; 2_000]);
                }
            }
        }
        w.commit().unwrap();
        let held = cairndb::testing::overlay_entries(&db).unwrap();
        // (After a write-out the overlay starts empty, and the scattered
        // table's pattern shows again within the first commit.)
        if round % 4 != 1 {
            assert!(
                held > 4_096,
                "round {round}: the scattered table left the overlay"
            );
        }
        if round % 4 == 0 {
            // Writes the staged commits out under a slot: the overlay's
            // entries of every earlier commit go into the trees first.
            db.stats().unwrap();
            assert_eq!(cairndb::testing::overlay_entries(&db).unwrap(), 0);
        }
        states.push((t_model.clone(), u_model.clone()));
        for img in f.crash_images(u64::from(round)) {
            images += 1;
            let Ok(d) = Database::builder().open_with_storage(
                Box::new(SimFile::from_image(img.bytes)),
                false,
                false,
            ) else {
                panic!("round {round}: image {} does not open", img.name);
            };
            let got = (snapshot(&d, T), snapshot(&d, U));
            assert!(
                states.contains(&got),
                "round {round}: image {} is no acknowledged state ({} and {} entries)",
                img.name,
                got.0.len(),
                got.1.len()
            );
            assert!(d.check_integrity().unwrap().is_ok(), "image {}", img.name);
        }
    }
    assert!(images > 6, "the commits wrote nothing to crash in");
    db.sync().unwrap();
    let d = Database::builder()
        .open_with_storage(
            Box::new(SimFile::from_image(f.durable_image())),
            false,
            false,
        )
        .unwrap();
    assert_eq!((snapshot(&d, T), snapshot(&d, U)), (t_model, u_model));
}

#[derive(Debug, Clone)]
enum Step {
    Put(u32, u8),
    Del(u32),
    /// Commit non-durably (`false`) or durably, and begin a new transaction.
    Commit(bool),
    /// Read a range in the open transaction and in a fresh snapshot, taking
    /// from the front when the bit of the pattern is 0, else the back.
    Range(Option<u32>, Option<u32>, bool, u32),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..80u32, any::<u8>()).prop_map(|(k, v)| Step::Put(k, v)),
        3 => (0..80u32).prop_map(Step::Del),
        1 => any::<bool>().prop_map(Step::Commit),
        3 => (
            proptest::option::of(0..80u32),
            proptest::option::of(0..80u32),
            any::<bool>(),
            any::<u32>()
        )
            .prop_map(|(a, b, ex, pat)| Step::Range(a, b, ex, pat)),
    ]
}

fn bounds(a: Option<u32>, b: Option<u32>, ex: bool) -> (Bound<u32>, Bound<u32>) {
    (
        a.map_or(Bound::Unbounded, Bound::Included),
        b.map_or(Bound::Unbounded, |b| {
            if ex {
                Bound::Excluded(b)
            } else {
                Bound::Included(b)
            }
        }),
    )
}

/// Reads `range` alternating ends by `pat`; returns the keys in the order
/// a front-to-back reading gives.
fn read_ends<R: ReadableTable<u32, &'static [u8]>>(
    t: &R,
    r: (Bound<u32>, Bound<u32>),
    pat: u32,
) -> Vec<(u32, Vec<u8>)> {
    let mut it = t.range::<u32>(r).unwrap();
    let (mut front, mut back) = (Vec::new(), Vec::new());
    for i in 0.. {
        let e = if pat.rotate_left(i) & 1 == 0 {
            it.next()
        } else {
            it.next_back()
        };
        let Some(e) = e else { break };
        let (k, v) = e.unwrap();
        let e = (k.value(), v.value().to_vec());
        if pat.rotate_left(i) & 1 == 0 {
            front.push(e);
        } else {
            back.push(e);
        }
    }
    // Both ends are exhausted now.
    assert!(it.next().is_none() && it.next_back().is_none());
    back.reverse();
    front.extend(back);
    front
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Double-ended ranges over tree + overlay (both ends read in a random
    /// interleaving, random bounds) equal the model, in the write
    /// transaction and in snapshots, with a budget that makes commits spill.
    #[test]
    fn ranges_over_tree_and_overlay_match_a_model(steps in proptest::collection::vec(step(), 1..120)) {
        let (_f, db) = sim_db(1 << 10);
        // A tree underneath: keys 0..80 step 3, durable.
        let mut committed = Model::new();
        {
            let w = db.begin_write().unwrap();
            let mut t = w.open_table(T).unwrap();
            for k in (0..80).step_by(3) {
                t.insert(k, val(k, 0).as_slice()).unwrap();
                committed.insert(k, val(k, 0));
            }
            drop(t);
            w.commit().unwrap();
        }
        let mut working = committed.clone();
        let mut w = db.begin_write().unwrap();
        w.set_durability(Durability::None);
        for s in steps {
            match s {
                Step::Put(k, v) => {
                    let value = vec![v; 1 + (v as usize % 30)];
                    let old = w.open_table(T).unwrap().insert(k, value.as_slice()).unwrap().map(|g| g.value().to_vec());
                    prop_assert_eq!(old, working.insert(k, value));
                }
                Step::Del(k) => {
                    let old = w.open_table(T).unwrap().remove(k).unwrap().map(|g| g.value().to_vec());
                    prop_assert_eq!(old, working.remove(&k));
                }
                Step::Commit(durable) => {
                    if durable {
                        w.set_durability(Durability::Immediate);
                    }
                    w.commit().unwrap();
                    committed = working.clone();
                    w = db.begin_write().unwrap();
                    w.set_durability(Durability::None);
                }
                Step::Range(a, b, ex, pat) => {
                    let r = bounds(a, b, ex);
                    let want = |m: &Model| -> Vec<(u32, Vec<u8>)> {
                        if matches!(r, (Bound::Included(a), Bound::Included(b)) if a > b)
                            || matches!(r, (Bound::Included(a), Bound::Excluded(b)) if a >= b)
                        {
                            return Vec::new();
                        }
                        m.range(r).map(|(k, v)| (*k, v.clone())).collect()
                    };
                    let got = read_ends(&w.open_table(T).unwrap(), r, pat);
                    prop_assert_eq!(got, want(&working));
                    let t = w.open_table(T).unwrap();
                    prop_assert_eq!(t.len(), working.len() as u64);
                    drop(t);
                    let snap = db.begin_read().unwrap();
                    let st = snap.open_table(T).unwrap();
                    let got = read_ends(&st, r, pat);
                    prop_assert_eq!(got, want(&committed));
                    for k in 0..80 {
                        let got = st.get(k).unwrap().map(|g| g.value().to_vec());
                        prop_assert_eq!(got.as_ref(), committed.get(&k), "snapshot get {}", k);
                    }
                }
            }
        }
        drop(w);
        prop_assert_eq!(snapshot(&db, T), committed);
        prop_assert!(db.check_integrity().unwrap().is_ok());
    }
}

/// A non-durable commit whose staged pages pass the stage limit is written
/// out with a slot; an earlier commit still in the overlay must be in the
/// trees that slot names, or a crash keeps the later commit and loses the
/// earlier one (not a suffix). Failed before the write-out spilled first:
/// the crash image held the 6,000 entries but not the earlier "early".
#[test]
fn stage_limit_write_out_keeps_earlier_overlay_commits() {
    let (f, db) = sim_db(32 << 20);
    let w = db.begin_write().unwrap();
    w.set_durability(Durability::None);
    w.open_table(U)
        .unwrap()
        .insert(7, b"early".as_slice())
        .unwrap();
    w.commit().unwrap();
    // Past the overlay's per-transaction change count, so the rest writes
    // the tree directly and stages far more than a quarter of the cache.
    let writes_before = f.op_count(OpKind::Write);
    let w = db.begin_write().unwrap();
    w.set_durability(Durability::None);
    {
        let mut t = w.open_table(T).unwrap();
        for k in 0..6000u32 {
            t.insert(k, val(k, 1).as_slice()).unwrap();
        }
    }
    w.commit().unwrap();
    assert!(
        f.op_count(OpKind::Write) > writes_before,
        "the commit was written out"
    );
    // Every write reached the file, no flush: a process crash.
    let image = f.current_image();
    drop(db);
    let db = Database::builder()
        .open_with_storage(Box::new(SimFile::from_image(image)), false, false)
        .unwrap();
    let t = snapshot(&db, T);
    assert_eq!(t.len(), 6000, "the written-out commit survives");
    assert_eq!(
        snapshot(&db, U).get(&7).map(Vec::as_slice),
        Some(b"early".as_slice()),
        "the commit before it survives too"
    );
}

/// When writes pause, the background spill applies the overlay to the
/// trees, in memory (no I/O); reads see the same data. Turned off, the
/// overlay stays.
#[test]
fn a_pause_in_writing_spills_the_overlay_in_the_background() {
    for on in [true, false] {
        let f = Arc::new(SimFile::new());
        let db = Database::builder()
            .page_size(512)
            .background_spill(on.then(|| std::time::Duration::from_millis(20)))
            .open_with_storage(Box::new(f.clone()), true, false)
            .unwrap();
        let mut model = Model::new();
        // The table is created by a durable commit (written out: statistics
        // then read the trees without applying the overlay).
        let w = db.begin_write().unwrap();
        w.open_table(T).unwrap();
        w.commit().unwrap();
        for round in 0..20u32 {
            let w = db.begin_write().unwrap();
            w.set_durability(Durability::None);
            {
                let mut t = w.open_table(T).unwrap();
                for k in 0..10 {
                    let k = round * 7 + k;
                    t.insert(k, val(k, round).as_slice()).unwrap();
                    model.insert(k, val(k, round));
                }
            }
            w.commit().unwrap();
        }
        assert!(db.stats().unwrap().overlay_entries > 0);
        let writes = f.op_count(OpKind::Write);
        let before = db.latest_commit();
        let wait = if on { 5000 } else { 300 };
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(wait);
        // Statistics write a staged commit out (I/O), so the spill's own
        // I/O is counted before each look.
        let spilled = loop {
            assert_eq!(f.op_count(OpKind::Write), writes, "the spill does no I/O");
            if db.stats().unwrap().overlay_entries == 0 {
                break true;
            }
            if std::time::Instant::now() >= deadline {
                break false;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        assert_eq!(spilled, on, "background spill on: {on}");
        // The spill is a commit the engine made by itself, and so is the
        // write-out that statistics made of it: readers and notifications
        // still show the last commit a user made (the id its commit()
        // returned), never an id no commit returned.
        assert_eq!(db.latest_commit(), before);
        assert_eq!(db.begin_read().unwrap().txn_id(), before);
        assert_eq!(snapshot(&db, T), model);
        // The spilled commits are kept by a clean close as before.
        db.close().unwrap();
    }
}

/// A write transaction remembers (in the catalog's record cache) which Rust
/// types matched a table's type names, so later transactions on the same
/// catalog skip building the names: another type on that table must still
/// be refused, in a transaction that follows a matching one on the same
/// catalog (overlay-only commits leave the catalog as it was).
#[test]
fn a_remembered_type_check_still_refuses_other_types() {
    const T: TableDefinition<u64, u64> = TableDefinition::new("typed");
    const AS_STR: TableDefinition<&str, u64> = TableDefinition::new("typed");
    let dir = tempfile::tempdir().unwrap();
    let db = Database::create(dir.path().join("types.cairn")).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(T).unwrap().insert(1, &1).unwrap();
    txn.commit().unwrap();
    for round in 0..3u64 {
        let txn = db.begin_write().unwrap();
        txn.set_durability(Durability::None);
        txn.open_table(T).unwrap().insert(round, &round).unwrap();
        txn.commit().unwrap();
        let txn = db.begin_write().unwrap();
        let opened = txn.open_table(AS_STR).map(|_| ());
        match opened {
            Err(CoreError::TableTypeMismatch(m)) => assert_eq!(m.name, "typed"),
            Err(e) => panic!("round {round}: {e}"),
            Ok(()) => panic!("round {round}: opened a u64-keyed table with &str keys"),
        }
    }
}
