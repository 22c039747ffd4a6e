//! Corruption (suite 4, docs/reliability.md): every byte of both commit slots and of
//! the file header flipped, thousands of random bit flips across every page
//! kind, pages replaced by an older copy of themselves (stale), pages
//! swapped, files truncated.
//!
//! Each corrupted image is a real file. A child process (this test binary
//! re-run with an environment variable) judges a batch of images: it opens
//! each read-only from the file and read-write from a copy in memory, reads
//! every table, runs `check_integrity` and (read-write) commits a change, and
//! prints one outcome line per image. The outcome must be the original data
//! (intact), a typed corruption error naming its page and offset, or — for a
//! skipped commit slot, or a commit log that ends without its end marker — a
//! fallback that `recovery_report()` reports, showing the data of an earlier
//! commit. (The open base holds a commit log: its last commit is a log
//! commit, replayed at open.) Never other data (`silent_wrong`), never a
//! panic or a signal (`crashes`), never a stall (`hangs`): the parent reads
//! the child's lines with a watchdog, and after a crash or a hang it charges
//! the image in progress and restarts the child on the rest.
//!
//! `cairn check` runs on every image too: on a damaged one it must exit 2 and
//! name a page (`at page N (file offset M)`), on an intact one exit 0, and
//! never panic or hang.
//!
//! The report line counts images (`flips`) by outcome (`detected`,
//! `fallback`, `intact`), the failures that must stay 0, the `cairn check`
//! runs, the images of each family, and `per_kind=kind:images/damaged` by
//! the kind of page hit. `missed` counts damage to a meaningful byte (not
//! padding, a free page or a page past the commit) that read back intact;
//! it must be 0 too. `SEED` and `ITERS` (multiplies the 5,000 random flips) replay
//! a run.
//!
//! A stale *commit slot* is not among the cases: an older but valid commit
//! record in a slot is exactly what a lost slot write leaves, and opening
//! that older commit is the documented outcome (FORMAT.md, "Recovery").

use std::collections::BTreeMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use cairndb::storage::sim::{SimFile, SplitMix64};
use cairndb::{Builder, CoreError, Database, Durability, ReadableTable, TableDefinition};

const A: TableDefinition<u64, &[u8]> = TableDefinition::new("a");
const B: TableDefinition<&str, &[u8]> = TableDefinition::new("b");
const C: TableDefinition<&[u8], u64> = TableDefinition::new("c");
const D: TableDefinition<u64, u64> = TableDefinition::new("d");

const CHILD_ENV: &str = "CAIRN_CORRUPTION_CHILD";
const BASES_ENV: &str = "CAIRN_CORRUPTION_BASES";
/// Test of the harness itself: `index:panic|hang|abort,...` makes the child
/// misbehave on those images.
const INJECT_ENV: &str = "CAIRN_CORRUPTION_INJECT";
const TEST_NAME: &str = "corruption_detected_in_child_and_by_cairn_check";
/// Images per child process.
const BATCH: usize = 200;
/// No outcome line (or no `cairn check` exit) for this long is a hang.
const WATCHDOG: Duration = Duration::from_secs(10);
/// `cairn check` processes at a time.
const CHECK_WORKERS: usize = 2;

// ---------------------------------------------------------------------------
// Report helpers (as in crates/cairndb/tests/all/common.rs).

/// `SEED` from the environment, else a fresh one; printed for replay.
fn seed(suite: &str) -> u64 {
    let s = std::env::var("SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("{suite}: SEED={s}");
    s
}

/// The size of a randomized suite: `default` (the CI size) times `ITERS`
/// from the environment (a multiplier, default 1; nightly runs use more).
fn iters(default: u64) -> u64 {
    let factor: u64 = std::env::var("ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    default.saturating_mul(factor.max(1))
}

/// Prints the suite's report line and appends it to `CAIRN_REPORT_FILE`.
fn report(line: &str) {
    println!("{line}");
    if let Ok(path) = std::env::var("CAIRN_REPORT_FILE") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{line}");
        }
    }
}

// ---------------------------------------------------------------------------
// Base images.

/// Every table's entries as raw bytes.
type State = BTreeMap<(String, Vec<u8>), Vec<u8>>;

/// Reads every table, or the first error.
fn read_all(db: &Database) -> cairndb::Result<State, cairndb::CoreError> {
    let r = db.begin_read()?;
    let mut out = State::new();
    for name in r.list_tables()? {
        let t = r.open_untyped_table(&name)?;
        for e in t.iter()? {
            let (k, v) = e?;
            out.insert((name.clone(), k.value().to_vec()), v.value().to_vec());
        }
    }
    Ok(out)
}

/// What a page of a base image holds (for the per-kind counts and for
/// aiming flips at every kind).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Header,
    Slot,
    Catalog,
    Branch,
    Leaf,
    Overflow,
    FreeList,
    /// Written pages of the commit log (and its end marker).
    Log,
    /// Free pages, pages past the commit's page count, unused bytes.
    Unused,
}

const KINDS: [Kind; 9] = [
    Kind::Header,
    Kind::Slot,
    Kind::Catalog,
    Kind::Branch,
    Kind::Leaf,
    Kind::Overflow,
    Kind::FreeList,
    Kind::Log,
    Kind::Unused,
];

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Kind::Header => "header",
            Kind::Slot => "slot",
            Kind::Catalog => "catalog",
            Kind::Branch => "branch",
            Kind::Leaf => "leaf",
            Kind::Overflow => "overflow",
            Kind::FreeList => "freelist",
            Kind::Log => "log",
            Kind::Unused => "unused",
        };
        f.write_str(s)
    }
}

struct Base {
    name: &'static str,
    ps: usize,
    /// The image every case starts from.
    img: Vec<u8>,
    /// The same file before the last commit (stale page copies).
    older: Vec<u8>,
    /// The data after each commit, oldest first; the last is `img`'s.
    states: Vec<State>,
    /// The kind of each page of `img`.
    kinds: Vec<Kind>,
    /// How many bytes at the start of each page mean something (32 of the
    /// header page, 128 of a slot page, the value's bytes of an overflow
    /// value's last page, 0 of an unused page); the rest is padding no
    /// reader looks at.
    used: Vec<usize>,
}

impl Base {
    fn latest(&self) -> &State {
        self.states.last().expect("at least one commit")
    }

    /// The kind of the byte at `at`: its page's, or unused for padding.
    fn kind_at(&self, at: usize) -> Kind {
        let page = at / self.ps;
        if at % self.ps < self.used[page] {
            self.kinds[page]
        } else {
            Kind::Unused
        }
    }

    fn fingerprint(&self) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        self.img.hash(&mut h);
        self.older.hash(&mut h);
        h.finish()
    }
}

/// Several tables (integer, string and long byte keys; one empty), trees
/// several levels deep (small pages), out-of-line values, freed pages and a
/// free list, built in memory the same way every time. `clean`: closed
/// cleanly (both slots name the same trees) or taken while open (the other
/// slot holds the previous commit, so a fallback shows older data).
fn build(name: &'static str, ps: usize, clean: bool) -> Base {
    let sim = Arc::new(SimFile::new());
    // Fixed commit-log salts: the child builds the same bases.
    let db = Builder::new()
        .page_size(ps)
        .fixed_log_salts(0xc0de)
        .open_with_storage(Box::new(sim.clone()), true, false)
        .expect("create base");
    let mut states = vec![read_all(&db).expect("read")];
    let mut older = Vec::new();
    for round in 0..5u64 {
        if round == 4 {
            older = sim.current_image();
        }
        let txn = db.begin_write().expect("begin");
        {
            let mut a = txn.open_table(A).expect("a");
            if round < 3 {
                for i in 0..300u64 {
                    a.insert(i, format!("value-{round}-{i}").as_bytes())
                        .expect("insert");
                }
                a.insert(10_000 + round, vec![round as u8; 3000].as_slice())
                    .expect("insert");
                a.insert(20_000, vec![0xa0 + round as u8; ps * 2 + 17].as_slice())
                    .expect("insert");
            }
            if round == 2 {
                a.remove_range(100..150).expect("remove_range");
            }
            if round == 4 {
                a.insert(5, b"last".as_slice()).expect("insert");
                a.remove(10_000).expect("remove");
            }
            let mut b = txn.open_table(B).expect("b");
            for i in 0..60u64 {
                b.insert(
                    format!("k{i}-{round}").as_str(),
                    vec![i as u8; 40].as_slice(),
                )
                .expect("insert");
            }
            if round == 3 {
                b.remove_range("k1".."k3").expect("remove_range");
            }
            let mut c = txn.open_table(C).expect("c");
            for i in 0..80u64 {
                let key = format!("{:0>60}", i * 7 + round);
                c.insert(key.as_bytes(), &(i * round)).expect("insert");
            }
            txn.open_table(D).expect("d");
        }
        txn.commit().expect("commit");
        states.push(read_all(&db).expect("read"));
    }
    let img = if clean {
        db.close().expect("close");
        sim.current_image()
    } else {
        let img = sim.current_image();
        drop(db);
        img
    };
    let (kinds, used) = page_kinds(&img, ps, states.last().expect("states"));
    Base {
        name,
        ps,
        img,
        older,
        states,
        kinds,
        used,
    }
}

fn bases() -> Vec<Base> {
    vec![build("clean512", 512, true), build("open1024", 1024, false)]
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes([b[at], b[at + 1]]) as usize
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Labels each page of a healthy image by following FORMAT.md from the
/// newest commit slot, with the number of meaningful bytes in it.
fn page_kinds(img: &[u8], ps: usize, latest: &State) -> (Vec<Kind>, Vec<usize>) {
    let pages = img.len() / ps;
    let mut kinds = vec![Kind::Unused; pages];
    kinds[0] = Kind::Header;
    kinds[1] = Kind::Slot;
    kinds[2] = Kind::Slot;
    let mut used = vec![0; pages];
    let slot = [ps, 2 * ps]
        .into_iter()
        .filter(|&o| &img[o..o + 8] == b"CAIRNSLT")
        .max_by_key(|&o| u64_at(img, o + 8))
        .expect("a valid slot");
    // Tree pages mean every byte (their checksum covers all of them);
    // `ends` collects where each overflow value ends.
    // An out-of-line value counts only if the latest state still holds its
    // key with a value of its length: a durable log commit may have removed
    // it above trees that still hold it (no reader looks at it then).
    fn tree(
        img: &[u8],
        ps: usize,
        kinds: &mut [Kind],
        ends: &mut Vec<usize>,
        page: usize,
        catalog: bool,
        latest: &State,
    ) {
        if page == 0 {
            return;
        }
        let p = &img[page * ps..(page + 1) * ps];
        let n = u16_at(p, 2);
        match p[0] {
            2 => {
                kinds[page] = if catalog { Kind::Catalog } else { Kind::Branch };
                for i in 0..=n {
                    tree(
                        img,
                        ps,
                        kinds,
                        ends,
                        u64_at(p, 16 + 16 * i) as usize,
                        catalog,
                        latest,
                    );
                }
            }
            1 => {
                kinds[page] = if catalog { Kind::Catalog } else { Kind::Leaf };
                for i in 0..n {
                    // Entry: key length (u16), value kind (u8), stored
                    // value length (u32), key, value.
                    let o = u16_at(p, 16 + 2 * i);
                    let (vkind, v) = (p[o + 2], o + 7 + u16_at(p, o));
                    if catalog {
                        tree(img, ps, kinds, ends, u64_at(p, v) as usize, false, latest);
                    } else if vkind == 1 {
                        let (start, len) = (u64_at(p, v) as usize, u64_at(p, v + 8) as usize);
                        let key = &p[o + 7..v];
                        if !latest
                            .iter()
                            .any(|((_, k), val)| k.as_slice() == key && val.len() == len)
                        {
                            continue;
                        }
                        let n = len.div_ceil(ps).max(1);
                        kinds[start..start + n].fill(Kind::Overflow);
                        ends.push(start * ps + len);
                    }
                }
            }
            k => panic!("page {page}: unexpected kind {k}"),
        }
    }
    let mut ends = Vec::new();
    tree(
        img,
        ps,
        &mut kinds,
        &mut ends,
        u64_at(img, slot + 24) as usize,
        true,
        latest,
    );
    let mut fl = u64_at(img, slot + 40) as usize;
    while fl != 0 {
        kinds[fl] = Kind::FreeList;
        fl = u64_at(img, fl * ps + 16) as usize;
    }
    // The commit log (FORMAT.md, "Commit log"): its written pages carry
    // kind 4, the slot's salt and their sequence, up to the end marker.
    let (log_start, log_pages, salt) = (
        u64_at(img, slot + 64) as usize,
        u32::from_le_bytes(img[slot + 72..slot + 76].try_into().expect("4 bytes")) as usize,
        u64_at(img, slot + 80),
    );
    for seq in 0..if log_start == 0 { 0 } else { log_pages } {
        let p = &img[(log_start + seq) * ps..(log_start + seq + 1) * ps];
        if p[0] != 4 || u64_at(p, 8) != salt || u64_at(p, 16) != seq as u64 {
            break;
        }
        kinds[log_start + seq] = Kind::Log;
        if p[1] & 2 != 0 {
            break;
        }
    }
    for (p, k) in kinds.iter().enumerate() {
        used[p] = match k {
            Kind::Header => 32,
            Kind::Slot => 128,
            Kind::Unused => 0,
            _ => ps,
        };
    }
    // An overflow value's last page is zero-padded past the value's end.
    for end in ends {
        if end % ps != 0 {
            used[end / ps] = end % ps;
        }
    }
    (kinds, used)
}

// ---------------------------------------------------------------------------
// Cases.

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    HeaderBytes,
    SlotBytes,
    RandomBits,
    Stale,
    Swap,
    Zeroed,
    Truncate,
}

#[derive(Debug, Clone)]
enum Mutation {
    Xor { at: usize, mask: u8 },
    Stale { page: usize },
    Swap { a: usize, b: usize },
    Zero { page: usize },
    Truncate { len: usize },
}

#[derive(Debug, Clone)]
struct Case {
    base: usize,
    family: Family,
    m: Mutation,
    /// The kind of the (first) page hit.
    kind: Kind,
}

impl Case {
    fn apply(&self, base: &Base) -> Vec<u8> {
        let ps = base.ps;
        let mut img = base.img.clone();
        match self.m {
            Mutation::Xor { at, mask } => img[at] ^= mask,
            Mutation::Stale { page } => img[page * ps..(page + 1) * ps]
                .copy_from_slice(&base.older[page * ps..(page + 1) * ps]),
            Mutation::Swap { a, b } => {
                let pa = img[a * ps..(a + 1) * ps].to_vec();
                img.copy_within(b * ps..(b + 1) * ps, a * ps);
                img[b * ps..(b + 1) * ps].copy_from_slice(&pa);
            }
            Mutation::Zero { page } => img[page * ps..(page + 1) * ps].fill(0),
            Mutation::Truncate { len } => img.truncate(len),
        }
        img
    }

    fn describe(&self, bases: &[Base]) -> String {
        format!(
            "{} {:?} {:?} ({})",
            bases[self.base].name, self.family, self.m, self.kind
        )
    }
}

fn cases(bases: &[Base], rng: &mut SplitMix64, random_flips: u64) -> Vec<Case> {
    let mut out = Vec::new();
    for (bi, base) in bases.iter().enumerate() {
        let ps = base.ps;
        // Every byte of the header and of both commit slots: inverted, and
        // one random bit.
        for (family, page, bytes) in [
            (Family::HeaderBytes, 0, 32),
            (Family::SlotBytes, 1, 128),
            (Family::SlotBytes, 2, 128),
        ] {
            for i in 0..bytes {
                for mask in [0xff, 1 << rng.below(8)] {
                    out.push(Case {
                        base: bi,
                        family,
                        m: Mutation::Xor {
                            at: page * ps + i,
                            mask,
                        },
                        kind: base.kinds[page],
                    });
                }
            }
        }
        // Stale pages: every data page that the last commit changed, back to
        // its copy from before that commit.
        let pages = base.img.len() / ps;
        for p in 3..pages.min(base.older.len() / ps) {
            if base.img[p * ps..(p + 1) * ps] != base.older[p * ps..(p + 1) * ps] {
                out.push(Case {
                    base: bi,
                    family: Family::Stale,
                    m: Mutation::Stale { page: p },
                    kind: base.kinds[p],
                });
            }
        }
        // Swapped pages (any two that differ, header and slots included).
        let mut swaps = 0;
        while swaps < 200 {
            let (a, b) = (
                rng.below(pages as u64) as usize,
                rng.below(pages as u64) as usize,
            );
            if a == b || base.img[a * ps..(a + 1) * ps] == base.img[b * ps..(b + 1) * ps] {
                continue;
            }
            swaps += 1;
            out.push(Case {
                base: bi,
                family: Family::Swap,
                m: Mutation::Swap { a, b },
                kind: base.kinds[a].min(base.kinds[b]),
            });
        }
        // Zeroed pages (a lost or zero-filled sector): the header, both
        // slots, and one page of each other kind.
        for k in KINDS {
            if let Some(page) = (0..pages).find(|&p| base.kinds[p] == k && p != 1) {
                out.push(Case {
                    base: bi,
                    family: Family::Zeroed,
                    m: Mutation::Zero { page },
                    kind: k,
                });
            }
        }
        out.push(Case {
            base: bi,
            family: Family::Zeroed,
            m: Mutation::Zero { page: 1 },
            kind: Kind::Slot,
        });
        // Truncations: inside the header, the slots, the data, and just
        // short of (and at) the end of the last commit's pages.
        let len = base.img.len();
        let slot = if u64_at(&base.img, ps + 8) > u64_at(&base.img, 2 * ps + 8) {
            ps
        } else {
            2 * ps
        };
        let used = u64_at(&base.img, slot + 16) as usize * ps;
        let mut cuts = vec![
            1,
            4,
            8,
            10,
            31,
            32,
            100,
            ps - 1,
            ps,
            ps + 64,
            ps + 128,
            2 * ps,
            2 * ps + 100,
            3 * ps,
            3 * ps + 7,
            len / 3,
            len / 2,
            used - ps,
            used - 1,
            used,
            len - 1,
        ];
        cuts.sort_unstable();
        cuts.dedup();
        for cut in cuts.into_iter().filter(|&c| c > 0 && c < len) {
            out.push(Case {
                base: bi,
                family: Family::Truncate,
                m: Mutation::Truncate { len: cut },
                kind: base.kinds[cut / ps],
            });
        }
    }
    // Random bit flips: half anywhere in a file, half aimed at a page kind
    // chosen uniformly, so every kind gets many.
    for i in 0..random_flips {
        let bi = rng.below(bases.len() as u64) as usize;
        let base = &bases[bi];
        let ps = base.ps;
        let at = if i % 2 == 0 {
            rng.below(base.img.len() as u64) as usize
        } else {
            let kind = KINDS[rng.below(KINDS.len() as u64) as usize];
            let pages: Vec<usize> = (0..base.kinds.len())
                .filter(|&p| base.kinds[p] == kind)
                .collect();
            if pages.is_empty() {
                // This base has no page of that kind (a cleanly closed file
                // has no commit log): anywhere in it.
                rng.below(base.img.len() as u64) as usize
            } else {
                let page = pages[rng.below(pages.len() as u64) as usize];
                let span = match base.used[page] {
                    0 => ps,
                    n => n,
                };
                page * ps + rng.below(span as u64) as usize
            }
        };
        out.push(Case {
            base: bi,
            family: Family::RandomBits,
            m: Mutation::Xor {
                at,
                mask: 1 << rng.below(8),
            },
            kind: base.kind_at(at),
        });
    }
    out
}

// ---------------------------------------------------------------------------
// The child: judge images.

/// The outcome of one image, worst first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    SilentWrong(String),
    OtherError(String),
    /// A typed corruption error naming this page and offset.
    Detected {
        page: u64,
        offset: u64,
    },
    /// Recovery skipped a commit slot, said so, and showed the data of a
    /// commit that existed (`page`: the first skipped slot's named page).
    Fallback {
        page: u64,
    },
    Intact,
}

impl Outcome {
    fn line(&self) -> String {
        match self {
            Outcome::SilentWrong(s) => format!("silent_wrong {}", s.replace('\n', " ")),
            Outcome::OtherError(s) => format!("other_error {}", s.replace('\n', " ")),
            Outcome::Detected { page, offset } => format!("detected {page} {offset}"),
            Outcome::Fallback { page } => format!("fallback {page}"),
            Outcome::Intact => "intact".into(),
        }
    }

    fn parse(s: &str) -> Option<Outcome> {
        let (word, rest) = s.split_once(' ').unwrap_or((s, ""));
        let nums: Vec<u64> = rest.split(' ').filter_map(|n| n.parse().ok()).collect();
        Some(match word {
            "silent_wrong" => Outcome::SilentWrong(rest.into()),
            "other_error" => Outcome::OtherError(rest.into()),
            "detected" => Outcome::Detected {
                page: *nums.first()?,
                offset: *nums.get(1)?,
            },
            "fallback" => Outcome::Fallback {
                page: *nums.first()?,
            },
            "intact" => Outcome::Intact,
            _ => return None,
        })
    }
}

/// A typed corruption must name a page and the offset of that page.
fn from_error(e: CoreError, ps: usize) -> Outcome {
    match e {
        CoreError::Corruption(c) if c.offset == c.page.0 * ps as u64 => Outcome::Detected {
            page: c.page.0,
            offset: c.offset,
        },
        e => Outcome::OtherError(format!("{e:?}")),
    }
}

/// Reads everything and checks integrity; read-write handles also commit a
/// change and read it back.
fn judge_db(
    opened: cairndb::Result<Database, cairndb::CoreError>,
    base: &Base,
    write: bool,
) -> Outcome {
    let ps = base.ps;
    let db = match opened {
        Ok(db) => db,
        Err(e) => return from_error(e, ps),
    };
    let rep = db.recovery_report().clone();
    if rep.fell_back.is_some() == rep.skipped.is_empty() {
        return Outcome::OtherError(format!("inconsistent recovery report {rep:?}"));
    }
    if let Some(c) = rep
        .skipped
        .iter()
        .find(|c| c.offset != c.page.0 * ps as u64)
    {
        return Outcome::OtherError(format!("skipped slot names no page: {c:?}"));
    }
    let data = match read_all(&db) {
        Ok(d) => d,
        Err(e) => return from_error(e, ps),
    };
    // A skipped slot, or a commit log that ended without its end marker:
    // either is reported, and may show an earlier commit's data.
    let reported = rep.skipped.first().or(rep.log_incomplete.as_ref());
    let verdict = match reported {
        None if &data == base.latest() => Outcome::Intact,
        Some(c) if base.states.contains(&data) => Outcome::Fallback { page: c.page.0 },
        _ => {
            return Outcome::SilentWrong(format!(
                "read returned data of no commit ({} entries, recovery {rep:?})",
                data.len()
            ))
        }
    };
    match db.check_integrity() {
        Ok(r) if r.is_ok() => {}
        Ok(r) => {
            return match r.problems.iter().find(|c| c.offset != c.page.0 * ps as u64) {
                Some(c) => Outcome::OtherError(format!("problem names no page: {c:?}")),
                None => Outcome::Detected {
                    page: r.problems[0].page.0,
                    offset: r.problems[0].offset,
                },
            }
        }
        Err(e) => return from_error(e, ps),
    }
    if write {
        let res = (|| -> cairndb::Result<(), cairndb::CoreError> {
            let txn = db.begin_write()?;
            txn.set_durability(Durability::None);
            {
                let mut a = txn.open_table(A)?;
                a.insert(u64::MAX, b"new".as_slice())?;
                a.remove(7)?;
            }
            txn.commit()?;
            Ok(())
        })();
        if let Err(e) = res {
            return from_error(e, ps);
        }
        let back = (|| -> cairndb::Result<bool, cairndb::CoreError> {
            let r = db.begin_read()?;
            let a = r.open_table(A)?;
            let new = a.get(u64::MAX)?.map(|g| g.value().to_vec());
            Ok(new.as_deref() == Some(b"new".as_slice()) && a.get(7)?.is_none())
        })();
        match back {
            Ok(true) => {}
            Ok(false) => return Outcome::SilentWrong("a committed change reads back wrong".into()),
            Err(e) => return from_error(e, ps),
        }
        match db.check_integrity() {
            Ok(r) if r.is_ok() => {}
            Ok(r) => {
                return Outcome::OtherError(format!(
                    "a commit on the recovered file broke integrity: {}",
                    r.problems[0]
                ))
            }
            Err(e) => return from_error(e, ps),
        }
    }
    verdict
}

/// Read-only from the file, and read-write on an in-memory copy.
fn judge(path: &Path, base: &Base) -> Outcome {
    let ro = judge_db(Database::open_read_only(path), base, false);
    let bytes = std::fs::read(path).expect("read image");
    let rw = judge_db(
        Builder::new().open_with_storage(Box::new(SimFile::from_image(bytes)), false, false),
        base,
        true,
    );
    ro.min(rw)
}

/// The child: judges the images listed in the file named by `CHILD_ENV`
/// (`index base path` per line), one outcome line each.
fn child(list: &str) {
    let bases = bases();
    let want = std::env::var(BASES_ENV).unwrap_or_default();
    let have: Vec<String> = bases.iter().map(|b| b.fingerprint().to_string()).collect();
    if want != have.join(",") {
        println!("BASES_DIFFER");
        std::process::exit(3);
    }
    let list = std::fs::read_to_string(list).expect("read list");
    for line in list.lines() {
        let mut f = line.splitn(3, ' ');
        let (idx, base, path) = (
            f.next().expect("index"),
            f.next().expect("base").parse::<usize>().expect("base"),
            f.next().expect("path"),
        );
        let inject = std::env::var(INJECT_ENV).unwrap_or_default();
        let what = inject
            .split(',')
            .find_map(|e| e.strip_prefix(&format!("{idx}:")));
        match what {
            Some("panic") => panic!("injected panic at image {idx}"),
            Some("abort") => std::process::abort(),
            Some("hang") => loop {
                std::thread::sleep(Duration::from_secs(1));
            },
            _ => {}
        }
        let o = judge(Path::new(path), &bases[base]);
        println!("OUT {idx} {}", o.line());
    }
}

// ---------------------------------------------------------------------------
// The parent: children under a watchdog, and `cairn check`.

#[derive(Debug, Clone, PartialEq, Eq)]
enum Judged {
    Done(Outcome),
    Crash(String),
    Hang,
}

/// Runs children over `batch` (image indices, in order) until every image
/// has a verdict, restarting after a crash or a hang.
fn judge_in_children(
    batch: &[usize],
    cases: &[Case],
    dir: &Path,
    bases_env: &str,
    watchdog: Duration,
    inject: &str,
) -> Vec<Judged> {
    let exe = std::env::current_exe().expect("current exe");
    let mut out: BTreeMap<usize, Judged> = BTreeMap::new();
    let mut pending: Vec<usize> = batch.to_vec();
    while !pending.is_empty() {
        let list = dir.join("list");
        let text: String = pending
            .iter()
            .map(|&i| format!("{i} {} {}\n", cases[i].base, image_path(dir, i).display()))
            .collect();
        std::fs::write(&list, text).expect("write list");
        let mut child = Command::new(&exe)
            .args(["--exact", TEST_NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &list)
            .env(BASES_ENV, bases_env)
            .env(INJECT_ENV, inject)
            .env_remove("CAIRN_REPORT_FILE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut stderr = child.stderr.take().expect("stderr");
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = stderr.read_to_string(&mut s);
            s
        });
        let mut hung = false;
        loop {
            match rx.recv_timeout(watchdog) {
                Ok(line) => {
                    assert!(
                        !line.contains("BASES_DIFFER"),
                        "the child built other base images"
                    );
                    // The harness prints `test <name> ... ` before the
                    // test's own output, on the same line.
                    let Some(at) = line.find("OUT ") else {
                        continue;
                    };
                    let rest = &line[at + 4..];
                    let (idx, o) = rest.split_once(' ').expect("OUT line");
                    let idx: usize = idx.parse().expect("index");
                    assert_eq!(Some(&idx), pending.first(), "outcome out of order");
                    let o = Outcome::parse(o).unwrap_or_else(|| panic!("bad line {line}"));
                    out.insert(idx, Judged::Done(o));
                    pending.remove(0);
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    hung = true;
                    let _ = child.kill();
                    break;
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        let status = child.wait().expect("wait child");
        let _ = reader.join();
        let err = err_reader.join().unwrap_or_default();
        if let Some(&idx) = pending.first() {
            let verdict = if hung {
                Judged::Hang
            } else {
                // The panic message if there is one, else the last lines.
                let lines: Vec<&str> = err.lines().collect();
                let at = lines.iter().position(|l| l.contains("panicked at"));
                let shown = match at {
                    Some(i) => lines[i..lines.len().min(i + 2)].join(" "),
                    None => lines[lines.len().saturating_sub(3)..].join(" | "),
                };
                Judged::Crash(format!("{status}: {shown}"))
            };
            out.insert(idx, verdict);
            pending.remove(0);
        }
    }
    batch
        .iter()
        .map(|i| out.remove(i).expect("a verdict for every image"))
        .collect()
}

fn image_path(dir: &Path, idx: usize) -> PathBuf {
    dir.join(format!("img-{idx}.cairn"))
}

#[derive(Debug)]
struct CheckRun {
    /// Exit code; `None`: killed by a signal (or by the watchdog).
    code: Option<i32>,
    hang: bool,
    text: String,
}

impl CheckRun {
    fn crashed(&self) -> bool {
        !self.hang
            && (self.code.is_none() || self.code == Some(101) || self.text.contains("panicked"))
    }

    /// Whether the output names a page as `at page N (file offset N*ps)`.
    fn names_page(&self, ps: usize) -> bool {
        self.text.match_indices("at page ").any(|(i, m)| {
            let rest = &self.text[i + m.len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            let Ok(page) = digits.parse::<u64>() else {
                return false;
            };
            rest[digits.len()..]
                .strip_prefix(" (file offset ")
                .and_then(|r| r.split(')').next())
                .and_then(|o| o.parse::<u64>().ok())
                == Some(page * ps as u64)
        })
    }
}

/// `cairn check <file>` with a watchdog; output goes to a scratch file so a
/// long report never blocks on a pipe.
fn cairn_check(path: &Path, scratch: &Path) -> CheckRun {
    let out = std::fs::File::create(scratch).expect("scratch");
    let err = out.try_clone().expect("clone scratch");
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .arg("check")
        .arg(path)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .expect("spawn cairn");
    let start = Instant::now();
    let mut hang = false;
    let status = loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            break Some(s);
        }
        if start.elapsed() > WATCHDOG {
            hang = true;
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_micros(500));
    };
    CheckRun {
        code: status.and_then(|s| s.code()),
        hang,
        text: std::fs::read_to_string(scratch).unwrap_or_default(),
    }
}

/// `cairn check` on each image of `batch`, `CHECK_WORKERS` at a time.
fn check_batch(batch: &[usize], dir: &Path) -> Vec<CheckRun> {
    let next = AtomicUsize::new(0);
    let mut results: Vec<Option<CheckRun>> = (0..batch.len()).map(|_| None).collect();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..CHECK_WORKERS)
            .map(|w| {
                let next = &next;
                s.spawn(move || {
                    let scratch = dir.join(format!("check-out-{w}"));
                    let mut mine = Vec::new();
                    loop {
                        let j = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&idx) = batch.get(j) else { break };
                        mine.push((j, cairn_check(&image_path(dir, idx), &scratch)));
                    }
                    mine
                })
            })
            .collect();
        for w in workers {
            for (j, r) in w.join().expect("check worker") {
                results[j] = Some(r);
            }
        }
    });
    results
        .into_iter()
        .map(|r| r.expect("every image checked"))
        .collect()
}

#[derive(Default)]
struct Tally {
    images: u64,
    detected: u64,
    fallback: u64,
    intact: u64,
    silent_wrong: u64,
    other_errors: u64,
    crashes: u64,
    hangs: u64,
    check_runs: u64,
    check_not_exit2: u64,
    check_unnamed_page: u64,
    check_false_alarm: u64,
    check_crashes: u64,
    check_hangs: u64,
    /// Images damaged in a meaningful byte that read back intact.
    missed: u64,
    families: BTreeMap<Family, u64>,
    kinds: BTreeMap<Kind, (u64, u64)>,
    failures: Vec<String>,
}

impl Tally {
    fn fail(&mut self, what: String) {
        if self.failures.len() < 30 {
            self.failures.push(what);
        }
    }
}

#[test]
fn corruption_detected_in_child_and_by_cairn_check() {
    if let Ok(list) = std::env::var(CHILD_ENV) {
        child(&list);
        return;
    }
    let started = Instant::now();
    let seed = seed("bitflip");
    let mut rng = SplitMix64(seed);
    let bases = bases();
    let bases_env: Vec<String> = bases.iter().map(|b| b.fingerprint().to_string()).collect();
    let bases_env = bases_env.join(",");
    let cases = cases(&bases, &mut rng, iters(5000));
    for k in KINDS {
        assert!(
            bases.iter().any(|b| b.kinds.contains(&k)),
            "no base has a {k} page"
        );
    }
    for b in &bases {
        eprintln!(
            "base {}: {} bytes, {} pages of {}",
            b.name,
            b.img.len(),
            b.kinds.len(),
            b.ps
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut t = Tally::default();
    let all: Vec<usize> = (0..cases.len()).collect();
    for batch in all.chunks(BATCH) {
        for &i in batch {
            let c = &cases[i];
            std::fs::write(image_path(dir.path(), i), c.apply(&bases[c.base]))
                .expect("write image");
        }
        let (judged, checks) = std::thread::scope(|s| {
            let checker = s.spawn(|| check_batch(batch, dir.path()));
            let judged = judge_in_children(batch, &cases, dir.path(), &bases_env, WATCHDOG, "");
            (judged, checker.join().expect("checker"))
        });
        for ((&i, j), chk) in batch.iter().zip(judged).zip(checks) {
            let c = &cases[i];
            let ps = bases[c.base].ps;
            let what = c.describe(&bases);
            t.images += 1;
            *t.families.entry(c.family).or_default() += 1;
            let damaged = match &j {
                Judged::Done(Outcome::Intact) => {
                    t.intact += 1;
                    if c.kind != Kind::Unused {
                        t.missed += 1;
                        t.fail(format!(
                            "damage to a meaningful byte went unnoticed: {what}"
                        ));
                    }
                    false
                }
                Judged::Done(Outcome::Detected { .. }) => {
                    t.detected += 1;
                    true
                }
                Judged::Done(Outcome::Fallback { .. }) => {
                    t.fallback += 1;
                    true
                }
                Judged::Done(Outcome::SilentWrong(s)) => {
                    t.silent_wrong += 1;
                    t.fail(format!("silent wrong data: {what}: {s}"));
                    true
                }
                Judged::Done(Outcome::OtherError(s)) => {
                    t.other_errors += 1;
                    t.fail(format!("not a typed corruption error: {what}: {s}"));
                    true
                }
                Judged::Crash(s) => {
                    t.crashes += 1;
                    t.fail(format!("child crashed: {what}: {s}"));
                    true
                }
                Judged::Hang => {
                    t.hangs += 1;
                    t.fail(format!("child hung: {what}"));
                    true
                }
            };
            let k = t.kinds.entry(c.kind).or_default();
            k.0 += 1;
            k.1 += u64::from(damaged);
            t.check_runs += 1;
            if chk.hang {
                t.check_hangs += 1;
                t.fail(format!("cairn check hung: {what}"));
            } else if chk.crashed() {
                t.check_crashes += 1;
                t.fail(format!(
                    "cairn check crashed: {what}: {:?} {}",
                    chk.code, chk.text
                ));
            } else if damaged {
                if chk.code != Some(2) {
                    t.check_not_exit2 += 1;
                    t.fail(format!(
                        "cairn check exit {:?}: {what}: {}",
                        chk.code, chk.text
                    ));
                } else if !chk.names_page(ps) {
                    t.check_unnamed_page += 1;
                    t.fail(format!("cairn check names no page: {what}: {}", chk.text));
                }
            } else if chk.code != Some(0) {
                t.check_false_alarm += 1;
                t.fail(format!(
                    "cairn check exit {:?} on an image the engine reads intact: {what}: {}",
                    chk.code, chk.text
                ));
            }
        }
        for &i in batch {
            let _ = std::fs::remove_file(image_path(dir.path(), i));
        }
    }
    for f in &t.failures {
        eprintln!("{f}");
    }
    let fam = |f: Family| t.families.get(&f).copied().unwrap_or(0);
    let kinds: Vec<String> = t
        .kinds
        .iter()
        .map(|(k, (n, d))| format!("{k}:{n}/{d}"))
        .collect();
    report(&format!(
        "bitflip: flips={} detected={} fallback={} intact={} missed={} silent_wrong={} crashes={} hangs={} \
         other_errors={} check_runs={} check_not_exit2={} check_unnamed_page={} check_false_alarm={} \
         check_crashes={} check_hangs={} header_bytes={} slot_bytes={} random_bits={} stale={} swaps={} \
         zeroed={} truncations={} per_kind={} secs={} seed={seed}",
        t.images,
        t.detected,
        t.fallback,
        t.intact,
        t.missed,
        t.silent_wrong,
        t.crashes,
        t.hangs,
        t.other_errors,
        t.check_runs,
        t.check_not_exit2,
        t.check_unnamed_page,
        t.check_false_alarm,
        t.check_crashes,
        t.check_hangs,
        fam(Family::HeaderBytes),
        fam(Family::SlotBytes),
        fam(Family::RandomBits),
        fam(Family::Stale),
        fam(Family::Swap),
        fam(Family::Zeroed),
        fam(Family::Truncate),
        kinds.join(","),
        started.elapsed().as_secs(),
    ));
    assert_eq!(
        (
            t.missed,
            t.silent_wrong,
            t.crashes,
            t.hangs,
            t.other_errors,
            t.check_not_exit2,
            t.check_unnamed_page,
            t.check_false_alarm,
            t.check_crashes,
            t.check_hangs
        ),
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        "missed, silent_wrong, crashes, hangs, other_errors, check_not_exit2, check_unnamed_page, \
         check_false_alarm, check_crashes, check_hangs"
    );
    assert_eq!(t.images, t.check_runs);
}

/// The harness itself: a child that panics, aborts or stalls on an image is
/// charged a crash or a hang for exactly that image, and the rest of the
/// batch is still judged.
#[test]
fn watchdog_charges_crashes_and_hangs_to_the_image_in_progress() {
    let bases = bases();
    let bases_env: Vec<String> = bases.iter().map(|b| b.fingerprint().to_string()).collect();
    let base = &bases[0];
    // Even images intact, odd ones with a flipped leaf byte; the child
    // panics on 1, stalls on 2 and aborts on 4.
    let leaf = base
        .kinds
        .iter()
        .position(|&k| k == Kind::Leaf)
        .expect("a leaf");
    let cases: Vec<Case> = (0..6)
        .map(|i| Case {
            base: 0,
            family: Family::RandomBits,
            m: Mutation::Xor {
                at: leaf * base.ps + 40,
                mask: if i % 2 == 0 { 0 } else { 4 },
            },
            kind: Kind::Leaf,
        })
        .collect();
    let dir = tempfile::tempdir().expect("tempdir");
    for (i, c) in cases.iter().enumerate() {
        std::fs::write(image_path(dir.path(), i), c.apply(base)).expect("write image");
    }
    let judged = judge_in_children(
        &[0, 1, 2, 3, 4, 5],
        &cases,
        dir.path(),
        &bases_env.join(","),
        Duration::from_secs(2),
        "1:panic,2:hang,4:abort",
    );
    assert!(
        matches!(
            judged.as_slice(),
            [
                Judged::Done(Outcome::Intact),
                Judged::Crash(_),
                Judged::Hang,
                Judged::Done(Outcome::Detected { .. }),
                Judged::Crash(_),
                Judged::Done(Outcome::Detected { .. }),
            ]
        ),
        "{judged:?}"
    );
}

/// Regression: an all-zero commit slot used to count as "never written", so
/// zeroing the slot of the newest commit (a lost or zero-filled sector)
/// opened the previous commit with nothing reported: a durable commit lost
/// silently. A new file now has both slots written, and a zero slot is a
/// reported, skipped slot.
#[test]
fn zeroed_newest_slot_is_a_reported_fallback() {
    let ps = 512;
    let sim = Arc::new(SimFile::new());
    let db = Builder::new()
        .page_size(ps)
        .open_with_storage(Box::new(sim.clone()), true, false)
        .expect("create");
    let fresh = sim.current_image();
    for slot in 1..=2 {
        assert_eq!(&fresh[slot * ps..slot * ps + 8], b"CAIRNSLT", "slot {slot}");
    }
    for v in [1u64, 2] {
        let txn = db.begin_write().expect("begin");
        txn.open_table(D).expect("d").insert(v, &v).expect("insert");
        txn.commit().expect("commit");
    }
    let mut img = sim.current_image();
    drop(db);
    let newest = (1..=2)
        .max_by_key(|&s| u64_at(&img, s * ps + 8))
        .expect("a slot");
    img[newest * ps..(newest + 1) * ps].fill(0);
    let db = Builder::new()
        .open_with_storage(Box::new(SimFile::from_image(img)), false, true)
        .expect("open from the other slot");
    let rep = db.recovery_report();
    assert!(rep.fell_back.is_some(), "{rep:?}");
    assert_eq!(rep.skipped.len(), 1, "{rep:?}");
    assert_eq!(rep.skipped[0].page.0, newest as u64, "{rep:?}");
    assert_eq!(rep.skipped[0].offset, (newest * ps) as u64, "{rep:?}");
    let r = db.begin_read().expect("read");
    let d = r.open_table(D).expect("d");
    assert_eq!(d.get(1).expect("get").map(|g| g.value()), Some(1));
    assert_eq!(d.get(2).expect("get").map(|g| g.value()), None);
}

#[test]
fn names_page_wants_page_and_its_offset() {
    let run = |text: &str| CheckRun {
        code: Some(2),
        hang: false,
        text: text.into(),
    };
    assert!(run("corruption in TreePage at page 7 (file offset 3584): x").names_page(512));
    assert!(!run("corruption in TreePage at page 7 (file offset 3585): x").names_page(512));
    assert!(!run("cairn: something is wrong").names_page(512));
}
