//! Entry points for the fuzz targets in `fuzz/` and their regression tests
//! (suite 6, "fuzz the format", in `docs/reliability.md`). Not part of the
//! stable API.
//!
//! Each entry point takes arbitrary bytes and must never panic and never
//! hang. It returns `Err` when the engine broke a property it promises even
//! for a hostile file: a decoder that does not round-trip, or a file that
//! passed [`crate::Database::check_integrity`] and then returned data that
//! differs from a model of it. The fuzz targets turn an `Err` into a crash.
//!
//! Every page is checksummed by its parent, so random bytes stop at the first
//! checksum. [`fix_checksums`] recomputes every checksum it can reach (file
//! header, commit slots, tree pages, out-of-line values, table roots in the
//! catalog, the free-list chain, commit-log pages), so the targets also feed the structure
//! decoders behind the checksums: each input runs as given and, where that
//! changes anything, with its checksums repaired.

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, OnceLock};

use crate::btree::node::{self, PageView, ValRef, OVERFLOW_REF, VKIND_OVERFLOW};
use crate::catalog::TableRecord;
use crate::db::{Builder, Database, Durability};
use crate::error::CoreError;
use crate::ids::PageId;
use crate::pager::alloc::{words_from_bytes, Allocator};
use crate::pager::header::{
    le_u16, le_u32, le_u64, CommitRecord, FileHeader, PageRef, FIRST_DATA_PAGE, HEADER_BYTES,
    MAGIC, SLOT_BYTES, SLOT_MAGIC,
};
use crate::pager::{page_checksum, value_checksum, KIND_FREELIST};
use crate::storage::sim::SimFile;
use crate::table::ReadableTable;
use crate::txn::WriteTransaction;

/// `Ok` when the engine kept its promises for this input; `Err` names the
/// broken property (a fuzz target turns it into a crash).
pub type Verdict = std::result::Result<(), String>;

/// Every table's entries: (table name, key) → value.
type State = BTreeMap<(String, Vec<u8>), Vec<u8>>;

/// The page cache of every database the entry points open: small, so
/// eviction paths run too.
const CACHE_BYTES: usize = 64 << 10;

/// The names of the fuzz targets, which are also the corpus directories.
pub const TARGETS: [&str; 3] = ["open_bytes", "page_decoders", "mutated_file_ops"];

/// Runs the entry point for `target` (one of [`TARGETS`]).
pub fn run_target(target: &str, data: &[u8]) -> Verdict {
    match target {
        "open_bytes" => open_bytes(data),
        "page_decoders" => decode_pages(data),
        "mutated_file_ops" => mutated_file_ops(data),
        other => Err(format!("unknown fuzz target {other:?}")),
    }
}

// ---------------------------------------------------------------------------
// Target 1: arbitrary bytes as a database file.

/// Opens `data` as a database file image (read-only and read-write), lists
/// the tables, reads everything forwards and backwards, looks every key up,
/// runs `check_integrity` and `stats`, and on the read-write handle commits
/// one small change. A file that passes `check_integrity` must read
/// consistently, accept the change and still pass afterwards.
pub fn open_bytes(data: &[u8]) -> Verdict {
    exercise_image(data.to_vec())?;
    let mut fixed = data.to_vec();
    if fix_checksums(&mut fixed) {
        exercise_image(fixed)?;
    }
    Ok(())
}

fn open_image(img: Vec<u8>, read_only: bool) -> crate::error::Result<(Arc<SimFile>, Database)> {
    let sim = Arc::new(SimFile::from_image(img));
    let db = Builder::new().cache_size(CACHE_BYTES).open_with_storage(
        Box::new(sim.clone()),
        false,
        read_only,
    )?;
    Ok((sim, db))
}

fn integrity_ok(db: &Database) -> bool {
    integrity(db).is_ok()
}

/// `check_integrity`, with its first problem as the error.
fn integrity(db: &Database) -> Verdict {
    match db.check_integrity() {
        Ok(r) => match r.problems.first() {
            None => Ok(()),
            Some(p) => Err(format!("{} problem(s), first: {p}", r.problems.len())),
        },
        Err(e) => Err(e.to_string()),
    }
}

fn exercise_image(img: Vec<u8>) -> Verdict {
    for read_only in [true, false] {
        let Ok((_sim, db)) = open_image(img.clone(), read_only) else {
            continue;
        };
        let valid = integrity_ok(&db);
        let _ = db.stats();
        let read = read_consistently(&db);
        if valid {
            read.map_err(|e| format!("a file that passes check_integrity does not read: {e}"))?;
        }
        if read_only {
            continue;
        }
        // One small change on the read-write handle.
        let res = (|| -> crate::error::Result<()> {
            let txn = db.begin_write()?;
            txn.set_durability(Durability::None);
            txn.open_untyped_table("fuzz")?
                .insert(b"key".as_slice(), b"value".as_slice())?;
            txn.commit()?;
            Ok(())
        })();
        if valid {
            res.map_err(|e| format!("a valid file refused a commit: {e}"))?;
            integrity(&db).map_err(|e| {
                format!("check_integrity fails after a commit to a valid file: {e}")
            })?;
            let r = db.begin_read().map_err(|e| e.to_string())?;
            let t = r.open_untyped_table("fuzz").map_err(|e| e.to_string())?;
            let v = t.get(b"key".as_slice()).map_err(|e| e.to_string())?;
            if v.as_ref().map(|g| g.value()) != Some(b"value".as_slice()) {
                return Err("the committed key reads back wrong".into());
            }
        }
    }
    Ok(())
}

/// Reads every table forwards, backwards and key by key; an `Err` is either
/// an engine error (fine for a damaged file) or, prefixed with
/// "inconsistent", reads that disagree with each other.
fn read_consistently(db: &Database) -> std::result::Result<State, String> {
    let r = db.begin_read().map_err(|e| e.to_string())?;
    let mut state = State::new();
    for name in r.list_tables().map_err(|e| e.to_string())? {
        let t = match r.open_untyped_table(&name) {
            Ok(t) => t,
            // A name stored in the catalog that is not a valid table name
            // (only a hand-made file has one) cannot be opened: a typed error.
            Err(CoreError::InvalidTableName { .. } | CoreError::TableNotFound(_)) => continue,
            Err(e) => return Err(e.to_string()),
        };
        let mut fwd = Vec::new();
        for e in t.iter().map_err(|e| e.to_string())? {
            let (k, v) = e.map_err(|e| e.to_string())?;
            fwd.push((k.value().to_vec(), v.value().to_vec()));
        }
        let mut bwd = Vec::new();
        for e in t.iter().map_err(|e| e.to_string())?.rev() {
            let (k, v) = e.map_err(|e| e.to_string())?;
            bwd.push((k.value().to_vec(), v.value().to_vec()));
        }
        bwd.reverse();
        if fwd != bwd {
            return Err(format!(
                "inconsistent: table {name:?} reads differently backwards"
            ));
        }
        if fwd.len() as u64 != t.len() {
            return Err(format!(
                "inconsistent: table {name:?} has {} entries but len() says {}",
                fwd.len(),
                t.len()
            ));
        }
        for (k, v) in fwd {
            let got = t.get(k.as_slice()).map_err(|e| e.to_string())?;
            if got.as_ref().map(|g| g.value()) != Some(v.as_slice()) {
                return Err(format!(
                    "inconsistent: table {name:?}: get disagrees with the scan"
                ));
            }
            state.insert((name.clone(), k), v);
        }
    }
    Ok(state)
}

// ---------------------------------------------------------------------------
// Target 2: each page decoder on arbitrary bytes.

/// Runs every decoder of on-disk bytes on `data`: the file header, a commit
/// slot, a B+tree page (leaf or branch: validation, every accessor, decoding
/// to a node and serializing it back), a free-list page, a catalog record,
/// and a commit-log page (its checksum repaired, so the checks and the
/// record decoder behind it run) whose records must encode back to the same
/// bytes. The first byte picks the page size (`512 << (b % 7)`) and the
/// slot index (bit 7); the rest is the page. Whatever decodes must encode
/// back to something that decodes to the same value.
pub fn decode_pages(data: &[u8]) -> Verdict {
    let Some((&sel, rest)) = data.split_first() else {
        return Ok(());
    };
    let page_size = 512usize << (sel % 7);
    let slot = usize::from(sel >> 7);
    // File header.
    if let Ok(h) = FileHeader::decode(rest) {
        if FileHeader::decode(&h.encode()) != Ok(h) {
            return Err(format!("file header {h:?} does not round-trip"));
        }
    }
    // Commit slot.
    if let Ok(r) = CommitRecord::decode(rest, slot, page_size as u32) {
        if CommitRecord::decode(&r.encode(slot), slot, page_size as u32) != Ok(r) {
            return Err(format!("commit record {r:?} does not round-trip"));
        }
    }
    // Catalog record (a table record is an inline value of the catalog).
    if let Ok(t) = TableRecord::decode(rest) {
        if TableRecord::decode(&t.encode()).as_ref() != Ok(&t) {
            return Err(format!("table record {t:?} does not round-trip"));
        }
    }
    // Tree pages: as given (any length) and as one page.
    let mut page = rest.to_vec();
    page.resize(page_size, 0);
    tree_page(rest, rest.len())?;
    tree_page(&page, page_size)?;
    freelist_page(&page, page_size)?;
    log_page(&mut page)?;
    Ok(())
}

/// A commit-log page: the salt and sequence it claims, its checksum made to
/// match (so the other checks run), then its payload as commit records.
fn log_page(page: &mut [u8]) -> Verdict {
    use crate::commit::log::{decode_records, LogOp, OpLog};
    use crate::pager::log::{decode_page, LogRef};
    let ps = page.len();
    let log = LogRef {
        start: PageId(FIRST_DATA_PAGE),
        pages: u64::MAX / 2,
        salt: le_u64(page, 8),
    };
    let seq = le_u64(page, 16).min(u64::MAX / 4);
    let sum = xxhash_rust::xxh3::xxh3_64_with_seed(&page[..ps - 8], log.page(seq).0 ^ log.salt);
    page[ps - 8..].copy_from_slice(&sum.to_le_bytes());
    let Ok(view) = decode_page(page, &log, seq) else {
        return Ok(());
    };
    let Ok(records) = decode_records(view.payload) else {
        return Ok(());
    };
    let mut again = Vec::new();
    for (txn, ops) in &records {
        let mut log = OpLog::default();
        for (table, op) in ops {
            match op {
                LogOp::Put(k, v) => log.put(table, k, Some(v)),
                LogOp::Remove(k) => log.put(table, k, None),
            }
        }
        log.append_record(*txn, &mut again);
    }
    // Re-encoding may drop a table operation that named the table already
    // current, or one followed by no change: compare what they decode to.
    match decode_records(&again) {
        Ok(r) if r == records => Ok(()),
        other => Err(format!(
            "commit-log records {records:?} re-encode to {:?}",
            other.map(|r| r.len())
        )),
    }
}

fn tree_page(d: &[u8], page_size: usize) -> Verdict {
    if node::validate(d).is_err() {
        return Ok(());
    }
    let v = PageView(d);
    let n = v.count();
    let mut probes: Vec<Vec<u8>> = vec![Vec::new(), vec![0xff; 8]];
    if v.is_leaf() {
        for i in 0..n {
            let k = v.leaf_key(i);
            probes.push(k.to_vec());
            let _ = v.leaf_val(i);
        }
        for p in &probes {
            let _ = v.leaf_search(p);
        }
    } else {
        for i in 0..n {
            probes.push(v.branch_key(i).to_vec());
        }
        for i in 0..=n {
            let _ = v.child(i);
        }
        for p in &probes {
            if v.child_index(p) > n {
                return Err(format!("branch child index past its {n} keys"));
            }
        }
    }
    // The in-memory search index: built without panicking from any page
    // that validates, and on a page whose keys ascend it answers every
    // probe as the plain binary search does.
    let index = crate::btree::search::build(d);
    let key_at = |i: usize| {
        if v.is_leaf() {
            v.leaf_key(i)
        } else {
            v.branch_key(i)
        }
    };
    let ascending = (1..n).all(|i| key_at(i - 1) < key_at(i));
    if let Some(ix) = crate::btree::search::Index::parse(&index) {
        for p in &probes {
            let got = ix.search(p, key_at);
            let want = if v.is_leaf() {
                v.leaf_search(p)
            } else {
                match v.child_index(p) {
                    0 => Err(0),
                    c => match key_at(c - 1) == p.as_slice() {
                        true => Ok(c - 1),
                        false => Err(c),
                    },
                }
            };
            if ascending && got != want {
                return Err(format!(
                    "indexed search of {p:?} gives {got:?}, plain search {want:?}"
                ));
            }
        }
    } else if n > 0 {
        return Err("no search index for a page with keys".into());
    }
    // A page that validates decodes to a node that fits the page again.
    let node = v.to_node();
    if node.bytes() > page_size {
        return Err(format!(
            "a validated page decodes to a node of {} bytes, more than its {page_size}",
            node.bytes()
        ));
    }
    let again = node.serialize(page_size, 7);
    node::validate(&again).map_err(|e| format!("a re-serialized page fails validation: {e}"))?;
    if !same_node(&node, &PageView(&again).to_node()) {
        return Err("a tree page does not round-trip through its node".into());
    }
    Ok(())
}

fn same_node(a: &node::Node, b: &node::Node) -> bool {
    match (a, b) {
        (node::Node::Leaf(a), node::Node::Leaf(b)) => {
            let same_val = |x: node::ValRef<'_>, y: node::ValRef<'_>| match (x, y) {
                (node::ValRef::Inline(x), node::ValRef::Inline(y)) => x == y,
                (
                    node::ValRef::Overflow {
                        start: s1,
                        len: l1,
                        checksum: c1,
                    },
                    node::ValRef::Overflow {
                        start: s2,
                        len: l2,
                        checksum: c2,
                    },
                ) => s1 == s2 && l1 == l2 && c1 == c2,
                _ => false,
            };
            a.len() == b.len()
                && a.bytes == b.bytes
                && (0..a.len()).all(|i| a.key(i) == b.key(i) && same_val(a.val(i), b.val(i)))
        }
        (node::Node::Branch(a), node::Node::Branch(b)) => {
            a.nkeys() == b.nkeys()
                && (0..a.nkeys()).all(|i| a.key(i) == b.key(i))
                && a.children == b.children
                && a.bytes == b.bytes
        }
        _ => false,
    }
}

/// The free-list page decoder (the same checks as `Pager::read_freelist`),
/// then the word stream parser.
fn freelist_page(d: &[u8], page_size: usize) -> Verdict {
    let n = usize::from(le_u16(d, 2));
    const PREFIX: usize = 32;
    if d.first() != Some(&KIND_FREELIST) || PREFIX + n * 8 > d.len() {
        return Ok(());
    }
    let words: Vec<u64> = words_from_bytes(d.get(PREFIX..PREFIX + n * 8).unwrap_or(&[])).collect();
    // The reserved header word stands in for the commit's page count.
    let page_count = u64::from(le_u32(d, 4)).max(FIRST_DATA_PAGE);
    let at = PageRef {
        page: PageId(FIRST_DATA_PAGE),
        checksum: 0,
    };
    let Ok(a) = Allocator::parse(&words, page_count, u64::MAX, at, page_size) else {
        return Ok(());
    };
    // What parses, serializes to a stream that parses to the same pages.
    let mut all = a.clone();
    all.release_all_but(None);
    let b = Allocator::parse(&all.serialize(), page_count, u64::MAX, at, page_size)
        .map_err(|e| format!("a re-serialized free list fails to parse: {e}"))?;
    if b.free_pages() != a.free_pages() + a.pending_pages() {
        return Err(format!(
            "free list does not round-trip: {} free + {} pending became {} free",
            a.free_pages(),
            a.pending_pages(),
            b.free_pages()
        ));
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Target 3: a valid file, mutated, then an operation script.

/// A small, valid database image built in-process (deterministic), with its
/// contents.
struct BaseImage {
    bytes: Vec<u8>,
}

/// The valid images the third target mutates (and the corpus starts from):
/// several page sizes, tables with deep trees, out-of-line values, a free
/// list, closed cleanly or not.
fn base_images() -> &'static [BaseImage] {
    static IMAGES: OnceLock<Vec<BaseImage>> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let mut out = Vec::new();
        for (page_size, rounds, entries, clean) in [
            (512, 3, 60, true),
            (512, 3, 60, false),
            (1024, 2, 120, true),
            (4096, 1, 30, true),
            (512, 0, 0, true),
        ] {
            // Building can only fail on a bug the other suites catch; a
            // missing image just narrows the fuzzing.
            if let Ok(bytes) = build_image(page_size, rounds, entries, clean) {
                out.push(BaseImage { bytes });
            }
        }
        out
    })
}

fn build_image(
    page_size: usize,
    rounds: u64,
    entries: u64,
    clean: bool,
) -> crate::error::Result<Vec<u8>> {
    let sim = Arc::new(SimFile::new());
    let db = Builder::new()
        .page_size(page_size)
        .fixed_log_salts(0xf022)
        .open_with_storage(Box::new(sim.clone()), true, false)?;
    for round in 0..rounds {
        let txn = db.begin_write()?;
        {
            let mut a = txn.open_untyped_table("a")?;
            for i in 0..entries {
                let k = i.to_be_bytes();
                a.insert(k.as_slice(), format!("value-{round}-{i}").as_bytes())?;
            }
            let big = vec![round as u8 + 1; page_size * 3 / 2 + 100];
            a.insert(b"\xffbig".as_slice(), big.as_slice())?;
            let mut b = txn.open_untyped_table("b")?;
            for i in 0..entries / 4 {
                b.insert(format!("k{i}").as_bytes(), vec![i as u8; 20].as_slice())?;
            }
            if round + 1 == rounds && entries > 10 {
                let lo = 5u64.to_be_bytes();
                let hi = (entries / 2).to_be_bytes();
                a.remove_range::<&[u8]>(lo.as_slice()..hi.as_slice())?;
            }
        }
        txn.commit()?;
    }
    if clean {
        drop(db);
        return Ok(trim(sim.current_image()));
    }
    // Not closed cleanly: one more non-durable commit, then the image as a
    // crash right after it would leave it (every write arrived).
    let txn = db.begin_write()?;
    txn.set_durability(Durability::None);
    txn.open_untyped_table("b")?
        .insert(b"late".as_slice(), b"commit".as_slice())?;
    txn.commit()?;
    let img = sim.current_image();
    drop(db);
    Ok(trim(img))
}

/// Cuts the file's growth chunk off an image: only pages `0..page_count` of
/// the newest commit matter, and a small image fuzzes faster.
fn trim(mut img: Vec<u8>) -> Vec<u8> {
    let Ok(h) = FileHeader::decode(&img) else {
        return img;
    };
    let ps = h.page_size as usize;
    let pages = (0..2)
        .filter_map(|slot| {
            let at = (1 + slot) * ps;
            CommitRecord::decode(img.get(at..at + SLOT_BYTES)?, slot, h.page_size).ok()
        })
        .map(|r| r.page_count)
        .max()
        .unwrap_or(FIRST_DATA_PAGE);
    img.truncate(
        usize::try_from(pages)
            .unwrap_or(usize::MAX)
            .saturating_mul(ps),
    );
    img
}

/// A little reader for the fuzzer's bytes: exhausted input reads as zeros.
struct Input<'a> {
    data: &'a [u8],
    at: usize,
}

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.byte(), self.byte()])
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
    fn done(&self) -> bool {
        self.at >= self.data.len()
    }
}

const TABLES: [&str; 3] = ["a", "b", "c"];

/// Takes one of the valid base images, applies the input's byte patches
/// (optionally repairing checksums afterwards), opens it and runs the
/// input's operation script: put, delete, delete range, get, range scans
/// both ways, commit (durable or not), abort, reopen after a clean close or
/// a crash, integrity checks, table deletion, pops, drains, compaction and
/// tables with long names.
///
/// Layout: byte 0 picks the image (low bits) and whether to repair
/// checksums (bit 7); byte 1 is the number of patches (mod 17), each an
/// offset (u16 LE, modulo the image length) and a byte to XOR there; the rest
/// is the script (see `run_op`).
///
/// While the opened file is valid (it passed `check_integrity` and read
/// consistently), every operation must succeed and agree with a `BTreeMap`
/// model, and the file must stay valid. Otherwise operations may fail with
/// typed errors, but never panic or hang.
pub fn mutated_file_ops(data: &[u8]) -> Verdict {
    let images = base_images();
    if images.is_empty() {
        return Err("no base image could be built".into());
    }
    let mut input = Input { data, at: 0 };
    let head = input.byte();
    let mut img = images[usize::from(head & 0x7f) % images.len()]
        .bytes
        .clone();
    let patches = input.byte() % 17;
    let mut patched = false;
    for _ in 0..patches {
        let off = usize::from(input.u16()) % img.len().max(1);
        let x = input.byte();
        if let Some(b) = img.get_mut(off) {
            *b ^= x;
            patched |= x != 0;
        }
    }
    if head & 0x80 != 0 {
        fix_checksums(&mut img);
    }
    let mut run = Run::open(img, patched)?;
    let mut n = 0;
    while !input.done() && n < 64 {
        run.op(&mut input)?;
        n += 1;
    }
    run.finish()
}

/// The state of one script run.
struct Run {
    sim: Arc<SimFile>,
    db: Option<Database>,
    txn: Option<WriteTransaction>,
    /// `Some` while the file is known valid: the committed state.
    committed: Option<State>,
    /// Committed states since the last durable commit, oldest first, before
    /// `committed`: a crash may lose a suffix of non-durable commits (staged
    /// ones are not in the file at all), so recovery may show any of them.
    since_durable: Vec<State>,
    /// The state inside the open write transaction.
    pending: State,
    counter: u64,
}

impl Run {
    fn open(img: Vec<u8>, patched: bool) -> std::result::Result<Run, String> {
        let mut run = Run {
            sim: Arc::new(SimFile::from_image(Vec::new())),
            db: None,
            txn: None,
            committed: None,
            since_durable: Vec::new(),
            pending: State::new(),
            counter: 0,
        };
        match open_image(img, false) {
            Ok((sim, db)) => {
                run.sim = sim;
                run.committed = if integrity_ok(&db) {
                    read_consistently(&db).ok()
                } else {
                    None
                };
                if run.committed.is_none() && !patched {
                    return Err("an unmodified base image is not valid".into());
                }
                run.db = Some(db);
            }
            Err(e) if !patched => return Err(format!("an unmodified base image fails: {e}")),
            Err(_) => {}
        }
        run.pending = run.committed.clone().unwrap_or_default();
        Ok(run)
    }

    fn trusted(&self) -> bool {
        self.committed.is_some()
    }

    /// An operation failed: fine for a damaged file, a bug for a valid one.
    fn failed(&mut self, what: &str, e: &dyn std::fmt::Display) -> Verdict {
        if self.trusted() {
            return Err(format!("{what} failed on a valid file: {e}"));
        }
        Ok(())
    }

    /// The result of a read: must match the model while the file is valid.
    fn expect<T: PartialEq + std::fmt::Debug>(
        &mut self,
        what: &str,
        got: crate::error::Result<T>,
        want: T,
    ) -> Verdict {
        match got {
            Ok(g) if self.trusted() && g != want => Err(format!(
                "{what}: the engine returned {g:?}, the model has {want:?}"
            )),
            Ok(_) => Ok(()),
            Err(e) => self.failed(what, &e),
        }
    }

    fn ensure_txn(&mut self) -> Option<&WriteTransaction> {
        if self.txn.is_none() {
            let db = self.db.as_ref()?;
            match db.begin_write() {
                Ok(t) => {
                    self.pending = self.committed.clone().unwrap_or_default();
                    self.txn = Some(t);
                }
                Err(_) => return None,
            }
        }
        self.txn.as_ref()
    }

    /// Runs a write-transaction change; on error the transaction is
    /// aborted (it is broken) and the model rolls back.
    fn change(
        &mut self,
        what: &str,
        f: impl FnOnce(&WriteTransaction) -> crate::error::Result<()>,
    ) -> Verdict {
        let Some(txn) = self.ensure_txn() else {
            if self.trusted() && self.db.is_some() {
                return Err(format!("{what}: a valid file refused a write transaction"));
            }
            return Ok(());
        };
        if let Err(e) = f(txn) {
            self.txn = None;
            self.pending = self.committed.clone().unwrap_or_default();
            return self.failed(what, &e);
        }
        Ok(())
    }

    fn key(&mut self, input: &mut Input) -> Vec<u8> {
        let len = usize::from(input.byte() % 24);
        input.bytes(len)
    }

    fn value(&mut self, input: &mut Input) -> Vec<u8> {
        let sel = input.byte();
        let len = if sel < 200 {
            usize::from(sel % 64)
        } else {
            usize::from(sel - 200) * 97
        };
        self.counter += 1;
        let c = self.counter;
        (0..len).map(|i| (c as usize * 31 + i) as u8).collect()
    }

    fn model_range(&self, table: &str, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> Vec<Kv> {
        self.pending
            .iter()
            .filter(|((t, k), _)| t == table && (as_ref(lo), as_ref(hi)).contains(&k.as_slice()))
            .map(|((_, k), v)| (k.clone(), v.clone()))
            .collect()
    }

    /// One operation; the opcode is the next byte modulo 16.
    fn op(&mut self, input: &mut Input) -> Verdict {
        let code = input.byte() % 16;
        let table = TABLES[usize::from(input.byte()) % TABLES.len()];
        match code {
            // put
            0 | 1 => {
                let k = self.key(input);
                let v = self.value(input);
                self.change("put", |t| {
                    t.open_untyped_table(table)?
                        .insert(k.as_slice(), v.as_slice())
                        .map(|_| ())
                })?;
                if self.txn.is_some() {
                    self.pending.insert((table.to_string(), k), v);
                }
            }
            // delete
            2 => {
                let k = self.key(input);
                let want = self.pending.get(&(table.to_string(), k.clone())).cloned();
                let mut got = None;
                self.change("delete", |t| {
                    got = t
                        .open_untyped_table(table)?
                        .remove(k.as_slice())?
                        .map(|g| g.value().to_vec());
                    Ok(())
                })?;
                if self.txn.is_some() {
                    self.pending.remove(&(table.to_string(), k));
                    if self.trusted() && got != want {
                        return Err(format!("delete returned {got:?}, the model has {want:?}"));
                    }
                }
            }
            // delete a range
            3 => {
                let (lo, hi) = (self.bound(input), self.bound(input));
                let want = self.model_range(table, &lo, &hi);
                let mut got = 0;
                self.change("delete range", |t| {
                    got = t
                        .open_untyped_table(table)?
                        .remove_range::<&[u8]>((as_ref(&lo), as_ref(&hi)))?;
                    Ok(())
                })?;
                if self.txn.is_some() {
                    for (k, _) in &want {
                        self.pending.remove(&(table.to_string(), k.clone()));
                    }
                    if self.trusted() && got != want.len() as u64 {
                        return Err(format!(
                            "delete range removed {got}, the model {}",
                            want.len()
                        ));
                    }
                }
            }
            // get
            4 => {
                let k = self.key(input);
                let want = self.pending.get(&(table.to_string(), k.clone())).cloned();
                let got = self.read(|r| match r {
                    Reader::Write(t) => match t.open_untyped_table(table) {
                        Ok(t) => Ok(t.get(k.as_slice())?.map(|g| g.value().to_vec())),
                        Err(e) => Err(e),
                    },
                    Reader::Read(db) => {
                        let r = db.begin_read()?;
                        match r.open_untyped_table(table) {
                            Ok(t) => Ok(t.get(k.as_slice())?.map(|g| g.value().to_vec())),
                            Err(CoreError::TableNotFound(_)) => Ok(None),
                            Err(e) => Err(e),
                        }
                    }
                });
                if let Some(got) = got {
                    self.expect("get", got, want)?;
                }
            }
            // range scan, forwards or backwards
            5 => {
                let (lo, hi) = (self.bound(input), self.bound(input));
                let back = input.byte() & 1 == 1;
                let mut want = self.model_range(table, &lo, &hi);
                if back {
                    want.reverse();
                }
                let got = self.read(|r| scan(r, table, &lo, &hi, back));
                if let Some(got) = got {
                    self.expect("range", got, want)?;
                }
            }
            // commit
            6 | 7 => {
                let durable = input.byte() & 1 == 1;
                if let Some(txn) = self.txn.take() {
                    if !durable {
                        txn.set_durability(Durability::None);
                    }
                    match txn.commit() {
                        Ok(_) => {
                            if self.trusted() {
                                let before = self.committed.replace(self.pending.clone());
                                if durable {
                                    self.since_durable.clear();
                                } else {
                                    self.since_durable.extend(before);
                                }
                            }
                        }
                        Err(e) => {
                            self.pending = self.committed.clone().unwrap_or_default();
                            self.failed("commit", &e)?;
                        }
                    }
                }
            }
            // abort
            8 => {
                self.txn = None;
                self.pending = self.committed.clone().unwrap_or_default();
            }
            // reopen after a clean close, or after a crash that kept every write
            9 => {
                let crash = input.byte() & 1 == 1;
                self.reopen(crash)?;
            }
            // integrity
            10 => {
                if self.txn.is_none() {
                    if let Some(db) = &self.db {
                        if self.trusted() {
                            integrity(db).map_err(|e| {
                                format!("a valid file fails check_integrity after changes: {e}")
                            })?;
                        }
                    }
                }
            }
            // delete a table
            11 => {
                self.change("delete table", |t| t.delete_table(table).map(|_| ()))?;
                if self.txn.is_some() {
                    self.pending.retain(|(t, _), _| t != table);
                }
            }
            // pop first / last
            12 => {
                let last = input.byte() & 1 == 1;
                let in_table = self.model_range(table, &Bound::Unbounded, &Bound::Unbounded);
                let want = if last {
                    in_table.last().cloned()
                } else {
                    in_table.first().cloned()
                };
                let mut got = None;
                self.change("pop", |t| {
                    let mut tb = t.open_untyped_table(table)?;
                    let e = if last {
                        tb.pop_last()?
                    } else {
                        tb.pop_first()?
                    };
                    got = e.map(|(k, v)| (k.value().to_vec(), v.value().to_vec()));
                    Ok(())
                })?;
                if self.txn.is_some() {
                    if let Some((k, _)) = &want {
                        self.pending.remove(&(table.to_string(), k.clone()));
                    }
                    if self.trusted() && got != want {
                        return Err(format!("pop returned {got:?}, the model has {want:?}"));
                    }
                }
            }
            // drain a range
            13 => {
                let (lo, hi) = (self.bound(input), self.bound(input));
                let want = self.model_range(table, &lo, &hi);
                let mut got = Vec::new();
                self.change("drain", |t| {
                    got = t
                        .open_untyped_table(table)?
                        .drain::<&[u8]>((as_ref(&lo), as_ref(&hi)))?
                        .into_iter()
                        .map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                        .collect();
                    Ok(())
                })?;
                if self.txn.is_some() {
                    for (k, _) in &want {
                        self.pending.remove(&(table.to_string(), k.clone()));
                    }
                    if self.trusted() && got != want {
                        return Err("drain disagrees with the model".into());
                    }
                }
            }
            // a table with a long name (up to the 255-byte limit) and types
            14 => {
                // The name fixes the type names, so reopening it never mismatches.
                let len = usize::from(input.byte()).max(4);
                let types = input.byte();
                let mut name = format!("L{types:03}");
                while name.len() < len {
                    name.push((b'a' + (name.len() % 26) as u8) as char);
                }
                let ty = "t".repeat(usize::from(types));
                let k = self.key(input);
                let v = self.value(input);
                // Too long for the page size is a documented, typed refusal
                // (`limits::check_table_record_len`) that leaves the
                // transaction usable.
                let mut refused = false;
                self.change("long table name", |t| {
                    match t.open_untyped_table_with_types(&name, &ty, &ty) {
                        Ok(mut tb) => tb.insert(k.as_slice(), v.as_slice()).map(|_| ()),
                        Err(CoreError::InvalidTableName { .. }) => {
                            refused = true;
                            Ok(())
                        }
                        Err(e) => Err(e),
                    }
                })?;
                if self.txn.is_some() && !refused {
                    self.pending.insert((name, k), v);
                }
            }
            // compaction (ends the write transaction first: it commits itself)
            _ => {
                self.txn = None;
                self.pending = self.committed.clone().unwrap_or_default();
                if let Some(db) = &self.db {
                    match db.compact() {
                        // Compaction ends with durable commits.
                        Ok(_) => self.since_durable.clear(),
                        Err(e) => self.failed("compact", &e)?,
                    }
                }
            }
        }
        Ok(())
    }

    fn bound(&mut self, input: &mut Input) -> Bound<Vec<u8>> {
        match input.byte() % 3 {
            0 => Bound::Unbounded,
            1 => Bound::Included(self.key(input)),
            _ => Bound::Excluded(self.key(input)),
        }
    }

    /// Runs a read in the open write transaction (which sees its own
    /// changes) or, without one, in a new read transaction.
    fn read<T>(
        &self,
        f: impl FnOnce(Reader<'_>) -> crate::error::Result<T>,
    ) -> Option<crate::error::Result<T>> {
        match (&self.txn, &self.db) {
            (Some(t), _) => Some(f(Reader::Write(t))),
            (None, Some(db)) => Some(f(Reader::Read(db))),
            (None, None) => None,
        }
    }

    fn reopen(&mut self, crash: bool) -> Verdict {
        // An open write transaction is lost either way.
        self.txn = None;
        self.pending = self.committed.clone().unwrap_or_default();
        let Some(db) = self.db.take() else {
            return Ok(());
        };
        let img = if crash {
            let img = self.sim.current_image();
            drop(db);
            img
        } else {
            match db.close() {
                Ok(()) => {}
                Err(e) => self.failed("close", &e)?,
            }
            self.sim.current_image()
        };
        match open_image(img, false) {
            Ok((sim, db)) => {
                self.sim = sim;
                let lost_allowed = std::mem::take(&mut self.since_durable);
                if let Some(want) = self.committed.clone() {
                    match read_consistently(&db) {
                        Ok(got) if got == want => {}
                        // A crash lost a suffix of non-durable commits.
                        Ok(got) if crash && lost_allowed.contains(&got) => {
                            self.committed = Some(got.clone());
                            self.pending = got;
                        }
                        Ok(_) => {
                            return Err("after reopening, the data differs from the model".into())
                        }
                        Err(e) => return Err(format!("after reopening, a valid file fails: {e}")),
                    }
                }
                self.db = Some(db);
            }
            Err(e) => self.failed("reopen", &e)?,
        }
        Ok(())
    }

    fn finish(mut self) -> Verdict {
        if let Some(txn) = self.txn.take() {
            txn.set_durability(Durability::None);
            match txn.commit() {
                Ok(_) => {
                    if self.trusted() {
                        self.committed = Some(self.pending.clone());
                    }
                }
                Err(e) => self.failed("commit", &e)?,
            }
        }
        if let (Some(db), Some(want)) = (&self.db, &self.committed) {
            integrity(db)
                .map_err(|e| format!("a valid file fails check_integrity after the script: {e}"))?;
            match read_consistently(db) {
                Ok(got) if &got == want => {}
                Ok(_) => return Err("after the script, the data differs from the model".into()),
                Err(e) => return Err(format!("after the script, a valid file fails: {e}")),
            }
        }
        Ok(())
    }
}

type Kv = (Vec<u8>, Vec<u8>);

enum Reader<'a> {
    Write(&'a WriteTransaction),
    Read(&'a Database),
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

fn collect_range(
    it: crate::table::Range<'_, &'static [u8], &'static [u8]>,
    back: bool,
) -> crate::error::Result<Vec<Kv>> {
    let items: Box<dyn Iterator<Item = _>> = if back {
        Box::new(it.rev())
    } else {
        Box::new(it)
    };
    items
        .map(|e| e.map(|(k, v)| (k.value().to_vec(), v.value().to_vec())))
        .collect()
}

fn scan(
    r: Reader<'_>,
    table: &str,
    lo: &Bound<Vec<u8>>,
    hi: &Bound<Vec<u8>>,
    back: bool,
) -> crate::error::Result<Vec<Kv>> {
    let bounds = (as_ref(lo), as_ref(hi));
    match r {
        Reader::Write(t) => {
            let tb = t.open_untyped_table(table)?;
            let out = collect_range(tb.range::<&[u8]>(bounds)?, back);
            out
        }
        Reader::Read(db) => {
            let r = db.begin_read()?;
            match r.open_untyped_table(table) {
                Ok(tb) => collect_range(tb.range::<&[u8]>(bounds)?, back),
                Err(CoreError::TableNotFound(_)) => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Checksum repair.

/// Recomputes, in place, every checksum of `img` that can be reached from
/// its header and commit slots: tree pages bottom-up (children before their
/// parents, table trees before the catalog records that name their roots),
/// out-of-line values, the free-list chain, both slots and the header.
/// Anything unreachable or undecodable is left as it is. Returns whether the
/// image changed.
pub fn fix_checksums(img: &mut [u8]) -> bool {
    let before = img.to_vec();
    fix_checksums_inner(img);
    before.as_slice() != &*img
}

fn fix_checksums_inner(img: &mut [u8]) {
    if img.len() < HEADER_BYTES || img[0..8] != MAGIC {
        return;
    }
    let sum = xxhash_rust::xxh3::xxh3_64_with_seed(&img[0..24], 0);
    img[24..32].copy_from_slice(&sum.to_le_bytes());
    let Ok(h) = FileHeader::decode(img) else {
        return;
    };
    let ps = h.page_size as usize;
    let mut fixer = Fixer {
        ps,
        memo: HashMap::new(),
    };
    for slot in 0..2usize {
        let at = (1 + slot) * ps;
        let Some(s) = img.get(at..at + SLOT_BYTES) else {
            continue;
        };
        if s[0..8] != SLOT_MAGIC {
            continue;
        }
        let catalog = PageId(le_u64(s, 24));
        let freelist = PageId(le_u64(s, 40));
        let log = (PageId(le_u64(s, 64)), le_u32(s, 72) as u64, le_u64(s, 80));
        if let Some(c) = fixer.tree(img, catalog, true, 0) {
            img[at + 32..at + 40].copy_from_slice(&c.to_le_bytes());
        }
        if let Some(c) = fixer.freelist(img, freelist) {
            img[at + 48..at + 56].copy_from_slice(&c.to_le_bytes());
        }
        fixer.log(img, log.0, log.1, log.2);
        let sum = xxhash_rust::xxh3::xxh3_64_with_seed(&img[at..at + 120], slot as u64);
        img[at + 120..at + 128].copy_from_slice(&sum.to_le_bytes());
    }
}

struct Fixer {
    ps: usize,
    /// Page id → checksum after repair (each page is repaired once).
    memo: HashMap<u64, Option<u64>>,
}

impl Fixer {
    /// Recomputes the checksum of every page of a commit log's extent that
    /// claims to be a log page (kind 4), seeded as FORMAT.md says.
    fn log(&mut self, img: &mut [u8], start: PageId, pages: u64, salt: u64) {
        if start.is_none() {
            return;
        }
        for seq in 0..pages.min(1 << 16) {
            let pid = PageId(start.0.saturating_add(seq));
            let Some(r) = self.range(img, pid) else {
                return;
            };
            if img[r.start] != crate::pager::log::KIND_LOG {
                continue;
            }
            let end = r.end - 8;
            let sum = xxhash_rust::xxh3::xxh3_64_with_seed(&img[r.start..end], pid.0 ^ salt);
            img[end..r.end].copy_from_slice(&sum.to_le_bytes());
        }
    }

    fn range(&self, img: &[u8], pid: PageId) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(pid.0).ok()?.checked_mul(self.ps)?;
        let end = start.checked_add(self.ps)?;
        (pid.0 >= FIRST_DATA_PAGE && end <= img.len()).then_some(start..end)
    }

    /// Repairs the tree at `pid`; returns the page's checksum, or `None`
    /// where it cannot be reached.
    fn tree(&mut self, img: &mut [u8], pid: PageId, catalog: bool, depth: u32) -> Option<u64> {
        let r = self.range(img, pid)?;
        if let Some(c) = self.memo.get(&pid.0) {
            return *c;
        }
        // Mark in progress: a cycle back to this page keeps its checksum.
        self.memo.insert(pid.0, None);
        if depth < 70 && node::validate(&img[r.clone()]).is_ok() {
            let page = img[r.clone()].to_vec();
            let v = PageView(&page);
            let n = v.count();
            if v.is_leaf() {
                for i in 0..n {
                    let o = r.start + usize::from(le_u16(&page, node::H + 2 * i));
                    let klen = usize::from(le_u16(&page, o - r.start));
                    let at = o + node::ENTRY_HEADER + klen;
                    match v.leaf_val(i).0 {
                        ValRef::Overflow { start, len, .. } => {
                            if page.get(o - r.start + 2) == Some(&VKIND_OVERFLOW) {
                                if let Some(c) = self.value(img, start, len) {
                                    img[at + 16..at + OVERFLOW_REF]
                                        .copy_from_slice(&c.to_le_bytes());
                                }
                            }
                        }
                        ValRef::Inline(b) if catalog => {
                            if let Ok(t) = TableRecord::decode(b) {
                                if let Some(c) = self.tree(img, t.root.page, false, 0) {
                                    img[at + 8..at + 16].copy_from_slice(&c.to_le_bytes());
                                }
                            }
                        }
                        ValRef::Inline(_) => {}
                    }
                }
            } else {
                for i in 0..=n {
                    let child = v.child(i).page;
                    if let Some(c) = self.tree(img, child, catalog, depth + 1) {
                        let at = r.start + node::H + 16 * i + 8;
                        img[at..at + 8].copy_from_slice(&c.to_le_bytes());
                    }
                }
            }
        }
        let c = page_checksum(pid, &img[r]);
        self.memo.insert(pid.0, Some(c));
        Some(c)
    }

    fn value(&self, img: &[u8], start: PageId, len: u64) -> Option<u64> {
        let s = usize::try_from(start.0).ok()?.checked_mul(self.ps)?;
        let e = s.checked_add(usize::try_from(len).ok()?)?;
        Some(value_checksum(start, img.get(s..e)?))
    }

    /// Repairs the free-list chain from `head`, last page first.
    fn freelist(&mut self, img: &mut [u8], head: PageId) -> Option<u64> {
        let mut chain = Vec::new();
        let mut cur = head;
        while let Some(r) = self.range(img, cur) {
            if chain.contains(&cur) || img[r.start] != KIND_FREELIST {
                break;
            }
            chain.push(cur);
            cur = PageId(le_u64(&img[r], 16));
        }
        let mut next: Option<u64> = None;
        for pid in chain.iter().rev() {
            let r = self.range(img, *pid)?;
            if let Some(c) = next {
                img[r.start + 24..r.start + 32].copy_from_slice(&c.to_le_bytes());
            }
            next = Some(page_checksum(*pid, &img[r]));
        }
        next
    }
}

// ---------------------------------------------------------------------------
// The seed corpus.

/// The seed corpus: (target, file name, bytes), deterministic. The
/// `fuzz_regressions` test writes it to `fuzz/corpus/<target>/` when asked.
pub fn seed_corpus() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    let images = base_images();
    for (i, img) in images.iter().enumerate() {
        let b = &img.bytes;
        out.push(("open_bytes", format!("image-{i}"), b.clone()));
        let ps = FileHeader::decode(b)
            .map(|h| h.page_size as usize)
            .unwrap_or(512);
        for (name, cut) in [("half", b.len() / 2), ("short", b.len().saturating_sub(1))] {
            if i < 2 {
                out.push(("open_bytes", format!("image-{i}-{name}"), b[..cut].to_vec()));
            }
        }
        if i == 0 {
            out.push((
                "open_bytes",
                "header-only".into(),
                b[..HEADER_BYTES].to_vec(),
            ));
            out.push(("open_bytes", "three-pages".into(), b[..3 * ps].to_vec()));
        }
        // Every page of the first and the 4 KiB image, behind its page-size selector.
        if i == 0 || i == 3 {
            let sel = (ps / 512).trailing_zeros() as u8;
            for (p, page) in b.chunks(ps).enumerate().take(16) {
                let mut d = vec![sel | if p == 2 { 0x80 } else { 0 }];
                d.extend_from_slice(page);
                out.push(("page_decoders", format!("image-{i}-page-{p}"), d));
            }
        }
    }
    // Scripts: (image, patches, ops). Opcodes as in `Run::op`.
    let scripts: [(&str, Vec<u8>); 6] = [
        (
            "puts-commit",
            vec![
                0, 0, 0, 0, 3, b'x', b'y', b'z', 10, 6, 0, 1, 4, 0, 3, b'x', b'y', b'z', 5, 0, 0,
                0, 0, 10, 0,
            ],
        ),
        (
            "big-values-reopen",
            vec![
                1, 0, 1, 1, 2, 1, 2, 230, 0, 1, 1, 9, 250, 7, 0, 1, 9, 0, 1, 10, 0,
            ],
        ),
        (
            "delete-range-drain",
            vec![
                2, 0, 3, 0, 1, 0, 0, 7, 0, 1, 13, 1, 0, 0, 6, 0, 0, 10, 0, 15, 0,
            ],
        ),
        (
            "tables-pop-compact",
            vec![3, 0, 11, 1, 12, 0, 0, 12, 0, 1, 6, 0, 1, 15, 0, 10, 0],
        ),
        (
            "long-name",
            vec![
                4, 0, 14, 0, 200, 40, 2, 1, 2, 5, 14, 0, 255, 200, 1, 7, 240, 6, 0, 1, 10, 0,
            ],
        ),
        (
            "patched-fixed",
            vec![
                0x80, 2, 0x30, 0x06, 0x01, 0x00, 0x07, 0x40, 4, 0, 2, b'k', b'1', 5, 0, 0, 0, 1, 0,
                0, 6, 0, 0,
            ],
        ),
    ];
    for (name, s) in scripts {
        out.push(("mutated_file_ops", name.to_string(), s));
    }
    out
}
