//! Property: transactions on a cluster are serializable, checked on a
//! recorded history by a dependency-graph checker in the style of Adya's
//! isolation levels and Elle (Kingsbury and Alvaro, "Elle: inferring
//! isolation anomalies from experimental observations", 2020).
//!
//! Concurrent clients run random transactions of reads and writes on a
//! few registers. Every write writes a value no other write writes
//! (`<transaction>.<n>`: the transaction's id and the write's number in
//! it), so each read names the write it read from. After the run, each
//! register's version order is read back from etcd (the key at its mod
//! revision, then just before it, down to its creation), and the checker
//! - checks each transaction against itself (a read after its own write
//!   sees that write; two reads of a key it has not written agree);
//! - refuses a read of a value no committed transaction installed:
//!   written by an aborted transaction (G1a), an intermediate write (a
//!   transaction's earlier write of a key it wrote again, G1b), or written
//!   by nobody;
//! - checks the version order against the history: every committed
//!   transaction's last write of a key is a version, at the revision its
//!   commit reported; no aborted transaction's is; a transaction of unknown
//!   outcome installed all its writes or none;
//! - builds the graph of committed transactions with Adya's edges: ww (T
//!   installed a version, U the next one of the same key), wr (U read a
//!   version T installed), rw (T read a version, U installed the next one:
//!   an anti-dependency), and refuses a cycle, reported with its
//!   transactions and edge kinds and classified as Adya does: G0 (ww
//!   only), G1c (ww and wr), G-single (exactly one rw), G2 (more).
//!
//! The history is serializable iff the graph is acyclic and the checks
//! above pass. The unit tests hand the checker histories with each
//! anomaly (lost update, write skew, read skew, aborted and intermediate
//! reads, circular information flow) and a serial one; the cluster test
//! runs four clients.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::thread;
use std::time::{Duration, Instant};

use cairndb_etcd::{Error, EtcdUrl};
use etcd_client::{Client, GetOptions};

use crate::common::{cluster, connect, Rng};

/// A transaction's id; 0 is the initial state (every register absent).
type TxnId = u64;
type Key = u32;

/// One write's value: the transaction and the write's number in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
struct Written {
    txn: TxnId,
    n: u32,
}

impl Written {
    fn encode(self) -> Vec<u8> {
        format!("{}.{}", self.txn, self.n).into_bytes()
    }

    fn decode(bytes: &[u8]) -> Option<Written> {
        let text = std::str::from_utf8(bytes).ok()?;
        let (txn, n) = text.split_once('.')?;
        Some(Written {
            txn: txn.parse().ok()?,
            n: n.parse().ok()?,
        })
    }
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{}.{}", self.txn, self.n)
    }
}

/// What a read saw: absent, a value this history wrote, or bytes no
/// write of it could have written.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    Absent,
    Value(Written),
    Garbage(Vec<u8>),
}

impl Seen {
    fn of(bytes: Option<Vec<u8>>) -> Seen {
        match bytes {
            None => Seen::Absent,
            Some(b) => match Written::decode(&b) {
                Some(w) => Seen::Value(w),
                None => Seen::Garbage(b),
            },
        }
    }
}

impl fmt::Display for Seen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Seen::Absent => write!(f, "absent"),
            Seen::Value(w) => write!(f, "{w}"),
            Seen::Garbage(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
        }
    }
}

/// A micro-operation, in the order the transaction made it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mop {
    Read(Key, Seen),
    Write(Key, Written),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Committed at this revision (a read-only transaction: its snapshot's).
    Committed(i64),
    /// Refused (a conflict): nothing it wrote may be seen.
    Aborted,
    /// The commit's answer was lost: it took effect or it did not.
    Unknown,
}

#[derive(Debug, Clone)]
struct Txn {
    id: TxnId,
    ops: Vec<Mop>,
    outcome: Outcome,
}

impl Txn {
    /// The transaction's last write of each key it wrote: what it
    /// installs if it commits.
    fn installs(&self) -> BTreeMap<Key, Written> {
        let mut last = BTreeMap::new();
        for op in &self.ops {
            if let Mop::Write(k, w) = op {
                last.insert(*k, *w);
            }
        }
        last
    }
}

impl fmt::Display for Txn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "T{} (", self.id)?;
        match self.outcome {
            Outcome::Committed(r) => write!(f, "committed at revision {r}")?,
            Outcome::Aborted => write!(f, "aborted")?,
            Outcome::Unknown => write!(f, "outcome unknown")?,
        }
        write!(f, "):")?;
        for op in &self.ops {
            match op {
                Mop::Read(k, s) => write!(f, " r(r{k})={s}")?,
                Mop::Write(k, w) => write!(f, " w(r{k})={w}")?,
            }
        }
        Ok(())
    }
}

/// Each key's versions, oldest first, with the revision each was
/// installed at (after the initial absent state).
type Versions = BTreeMap<Key, Vec<(Written, i64)>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum EdgeKind {
    Ww,
    Wr,
    Rw,
}

impl fmt::Display for EdgeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EdgeKind::Ww => "ww",
            EdgeKind::Wr => "wr",
            EdgeKind::Rw => "rw",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Edge {
    from: TxnId,
    to: TxnId,
    kind: EdgeKind,
    key: Key,
}

/// What the checker found wrong, each with what shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Anomaly {
    /// A transaction disagrees with itself.
    Internal { txn: TxnId, detail: String },
    /// G1a: read a value written by a transaction that did not commit.
    AbortedRead {
        reader: TxnId,
        key: Key,
        value: Written,
    },
    /// G1b: read a write its transaction overwrote before committing.
    IntermediateRead {
        reader: TxnId,
        key: Key,
        value: Written,
    },
    /// Read a value no transaction of the history wrote.
    GarbageRead { reader: TxnId, key: Key, seen: Seen },
    /// The version order read back disagrees with the history.
    VersionOrder { key: Key, detail: String },
    /// A cycle of the dependency graph: G0, G1c, G-single or G2.
    Cycle {
        class: &'static str,
        edges: Vec<Edge>,
    },
}

impl Anomaly {
    fn name(&self) -> &'static str {
        match self {
            Anomaly::Internal { .. } => "internal",
            Anomaly::AbortedRead { .. } => "G1a",
            Anomaly::IntermediateRead { .. } => "G1b",
            Anomaly::GarbageRead { .. } => "garbage read",
            Anomaly::VersionOrder { .. } => "version order",
            Anomaly::Cycle { class, .. } => class,
        }
    }
}

impl fmt::Display for Anomaly {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Anomaly::Internal { txn, detail } => write!(f, "internal: T{txn} {detail}"),
            Anomaly::AbortedRead { reader, key, value } => write!(
                f,
                "G1a (aborted read): T{reader} read r{key}={value}, written by T{} which did not commit",
                value.txn
            ),
            Anomaly::IntermediateRead { reader, key, value } => write!(
                f,
                "G1b (intermediate read): T{reader} read r{key}={value}, which T{} overwrote before committing",
                value.txn
            ),
            Anomaly::GarbageRead { reader, key, seen } => {
                write!(f, "garbage read: T{reader} read r{key}={seen}, which no transaction wrote")
            }
            Anomaly::VersionOrder { key, detail } => write!(f, "version order of r{key}: {detail}"),
            Anomaly::Cycle { class, edges } => {
                write!(f, "{class} cycle: ")?;
                for e in edges {
                    write!(f, "T{} -{}(r{})-> ", e.from, e.kind, e.key)?;
                }
                match edges.first() {
                    Some(e) => write!(f, "T{}", e.from),
                    None => Ok(()),
                }
            }
        }
    }
}

/// The checker's verdict on a history: its anomalies (none: serializable),
/// with the transactions and graph for the report.
struct Verdict {
    anomalies: Vec<Anomaly>,
    committed: usize,
    edges: usize,
}

impl Verdict {
    /// A report of the anomalies, each cycle followed by its transactions.
    fn report(&self, txns: &[Txn]) -> String {
        let by_id: HashMap<TxnId, &Txn> = txns.iter().map(|t| (t.id, t)).collect();
        let mut out = String::new();
        for a in &self.anomalies {
            out.push_str(&format!("{a}\n"));
            if let Anomaly::Cycle { edges, .. } = a {
                for e in edges {
                    match by_id.get(&e.from) {
                        Some(t) => out.push_str(&format!("  {t}\n")),
                        None => out.push_str(&format!("  T{} (the initial state)\n", e.from)),
                    }
                }
            }
        }
        out
    }
}

/// The version order from the commit revisions the history reports:
/// each key's installed values ordered by their transactions' revisions.
/// A transaction of unknown outcome has no place in it (give the
/// versions read back from the cluster instead).
fn versions_from_revisions(txns: &[Txn]) -> Versions {
    let mut versions = Versions::new();
    for t in txns {
        if let Outcome::Committed(r) = t.outcome {
            for (k, w) in t.installs() {
                versions.entry(k).or_default().push((w, r));
            }
        }
    }
    for chain in versions.values_mut() {
        chain.sort_by_key(|(_, r)| *r);
    }
    versions
}

/// Checks a history against a version order (`versions_from_revisions`,
/// or the cluster's, read back).
fn check(txns: &[Txn], versions: &Versions) -> Verdict {
    let mut anomalies = Vec::new();
    let by_id: HashMap<TxnId, &Txn> = txns.iter().map(|t| (t.id, t)).collect();

    // Which transactions committed: those that say so, and those of
    // unknown outcome whose writes are versions.
    let installed: HashMap<Written, (Key, usize, i64)> = versions
        .iter()
        .flat_map(|(k, chain)| {
            chain
                .iter()
                .enumerate()
                .map(move |(i, (w, r))| (*w, (*k, i, *r)))
        })
        .collect();
    let mut committed: BTreeSet<TxnId> = BTreeSet::new();
    for t in txns {
        let installs = t.installs();
        let present = installs
            .values()
            .filter(|w| installed.contains_key(w))
            .count();
        match t.outcome {
            Outcome::Committed(r) => {
                committed.insert(t.id);
                for (k, w) in &installs {
                    match installed.get(w) {
                        None => anomalies.push(Anomaly::VersionOrder {
                            key: *k,
                            detail: format!("T{}'s write {w} committed but is no version", t.id),
                        }),
                        Some((_, _, at)) if *at != r => anomalies.push(Anomaly::VersionOrder {
                            key: *k,
                            detail: format!(
                                "{w} was installed at revision {at}, its commit reported {r}"
                            ),
                        }),
                        Some(_) => {}
                    }
                }
            }
            Outcome::Aborted => {
                for (k, w) in &installs {
                    if installed.contains_key(w) {
                        anomalies.push(Anomaly::VersionOrder {
                            key: *k,
                            detail: format!("{w} is a version, but T{} aborted", t.id),
                        });
                    }
                }
            }
            Outcome::Unknown if present == 0 => {}
            Outcome::Unknown => {
                committed.insert(t.id);
                if present != installs.len() {
                    anomalies.push(Anomaly::VersionOrder {
                        key: installs.keys().next().copied().unwrap_or(0),
                        detail: format!(
                            "T{} (outcome unknown) installed {present} of its {} writes",
                            t.id,
                            installs.len()
                        ),
                    });
                }
            }
        }
    }
    for (k, chain) in versions {
        for (w, _) in chain {
            let known = by_id.get(&w.txn).and_then(|t| t.installs().get(k).copied());
            if known != Some(*w) {
                anomalies.push(Anomaly::VersionOrder {
                    key: *k,
                    detail: format!("version {w} is not a last write of r{k} in the history"),
                });
            }
        }
        for pair in chain.windows(2) {
            if pair[0].1 >= pair[1].1 {
                anomalies.push(Anomaly::VersionOrder {
                    key: *k,
                    detail: format!(
                        "{} at revision {} precedes {} at revision {}",
                        pair[0].0, pair[0].1, pair[1].0, pair[1].1
                    ),
                });
            }
        }
    }

    // Reads: internal consistency, then what each external read read from.
    let mut edges: Vec<Edge> = Vec::new();
    for t in txns.iter().filter(|t| committed.contains(&t.id)) {
        let mut own: BTreeMap<Key, Written> = BTreeMap::new();
        let mut external: BTreeMap<Key, Seen> = BTreeMap::new();
        for op in &t.ops {
            match op {
                Mop::Write(k, w) => {
                    own.insert(*k, *w);
                }
                Mop::Read(k, seen) => {
                    if let Some(w) = own.get(k) {
                        if *seen != Seen::Value(*w) {
                            anomalies.push(Anomaly::Internal {
                                txn: t.id,
                                detail: format!("read r{k}={seen} after writing {w}"),
                            });
                        }
                        continue;
                    }
                    match external.get(k) {
                        Some(first) if first != seen => anomalies.push(Anomaly::Internal {
                            txn: t.id,
                            detail: format!("read r{k}={first}, then r{k}={seen}"),
                        }),
                        Some(_) => {}
                        None => {
                            external.insert(*k, seen.clone());
                        }
                    }
                }
            }
        }
        for (k, seen) in external {
            let chain = versions.get(&k).map(Vec::as_slice).unwrap_or(&[]);
            // The index of the next version after the one read.
            let next = match &seen {
                Seen::Absent => 0,
                Seen::Garbage(_) => {
                    anomalies.push(Anomaly::GarbageRead {
                        reader: t.id,
                        key: k,
                        seen,
                    });
                    continue;
                }
                Seen::Value(w) => match installed.get(w) {
                    Some((key, i, _)) if *key == k => {
                        if w.txn != t.id {
                            edges.push(Edge {
                                from: w.txn,
                                to: t.id,
                                kind: EdgeKind::Wr,
                                key: k,
                            });
                        }
                        i + 1
                    }
                    _ => {
                        let writer = by_id.get(&w.txn);
                        let wrote = writer.is_some_and(|x| x.ops.contains(&Mop::Write(k, *w)));
                        anomalies.push(match writer {
                            Some(x) if wrote && !committed.contains(&x.id) => {
                                Anomaly::AbortedRead {
                                    reader: t.id,
                                    key: k,
                                    value: *w,
                                }
                            }
                            Some(x) if wrote && x.installs().get(&k) != Some(w) => {
                                Anomaly::IntermediateRead {
                                    reader: t.id,
                                    key: k,
                                    value: *w,
                                }
                            }
                            _ => Anomaly::GarbageRead {
                                reader: t.id,
                                key: k,
                                seen,
                            },
                        });
                        continue;
                    }
                },
            };
            if let Some((w, _)) = chain.get(next) {
                if w.txn != t.id {
                    edges.push(Edge {
                        from: t.id,
                        to: w.txn,
                        kind: EdgeKind::Rw,
                        key: k,
                    });
                }
            }
        }
    }
    for (k, chain) in versions {
        for pair in chain.windows(2) {
            if pair[0].0.txn != pair[1].0.txn {
                edges.push(Edge {
                    from: pair[0].0.txn,
                    to: pair[1].0.txn,
                    kind: EdgeKind::Ww,
                    key: *k,
                });
            }
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        anomalies.push(cycle);
    }
    Verdict {
        anomalies,
        committed: committed.len(),
        edges: edges.len(),
    }
}

/// The first cycle of the graph by Adya's classes, most severe first: of
/// ww edges (G0); of ww and wr edges (G1c); with exactly one rw edge
/// (G-single); with any (G2). Each search starts from an edge of the class
/// and looks for the shortest way back (breadth first).
fn find_cycle(edges: &[Edge]) -> Option<Anomaly> {
    let mut out: HashMap<TxnId, Vec<Edge>> = HashMap::new();
    for e in edges {
        out.entry(e.from).or_default().push(*e);
    }
    let path_back = |first: &Edge, allowed: &dyn Fn(EdgeKind) -> bool| -> Option<Vec<Edge>> {
        let mut came_by: HashMap<TxnId, Edge> = HashMap::new();
        let mut queue = VecDeque::from([first.to]);
        while let Some(at) = queue.pop_front() {
            if at == first.from {
                let mut cycle = Vec::new();
                let mut node = at;
                while node != first.to {
                    let e = came_by[&node];
                    cycle.push(e);
                    node = e.from;
                }
                cycle.push(*first);
                cycle.reverse();
                return Some(cycle);
            }
            for e in out.get(&at).into_iter().flatten() {
                if allowed(e.kind) && e.to != first.to && !came_by.contains_key(&e.to) {
                    came_by.insert(e.to, *e);
                    queue.push_back(e.to);
                }
            }
        }
        None
    };
    let ww = |k: EdgeKind| k == EdgeKind::Ww;
    let ww_wr = |k: EdgeKind| k != EdgeKind::Rw;
    let any = |_: EdgeKind| true;
    // A class: its name, the kinds a cycle starts with, the kinds it goes back by.
    type Class<'f> = (
        &'static str,
        &'f dyn Fn(EdgeKind) -> bool,
        &'f dyn Fn(EdgeKind) -> bool,
    );
    let classes: [Class; 4] = [
        ("G0", &ww, &ww),
        ("G1c", &ww_wr, &ww_wr),
        ("G-single", &|k| k == EdgeKind::Rw, &ww_wr),
        ("G2", &|k| k == EdgeKind::Rw, &any),
    ];
    for (class, starts, allowed) in classes {
        for e in edges.iter().filter(|e| starts(e.kind)) {
            if let Some(cycle) = path_back(e, allowed) {
                return Some(Anomaly::Cycle {
                    class,
                    edges: cycle,
                });
            }
        }
    }
    None
}

// ---- hand-made histories ----

fn w(txn: TxnId, n: u32) -> Written {
    Written { txn, n }
}

fn r(k: Key, seen: Option<Written>) -> Mop {
    Mop::Read(k, seen.map_or(Seen::Absent, Seen::Value))
}

fn wr(k: Key, v: Written) -> Mop {
    Mop::Write(k, v)
}

fn txn(id: TxnId, outcome: Outcome, ops: Vec<Mop>) -> Txn {
    Txn { id, ops, outcome }
}

use Outcome::{Aborted, Committed};

/// The anomalies' names the checker finds in `txns`, ordered by the
/// commit revisions.
fn anomalies_of(txns: &[Txn]) -> Vec<&'static str> {
    let verdict = check(txns, &versions_from_revisions(txns));
    eprint!("{}", verdict.report(txns));
    verdict.anomalies.iter().map(Anomaly::name).collect()
}

#[test]
fn the_checker_accepts_a_serial_history() {
    let txns = [
        txn(
            1,
            Committed(10),
            vec![r(0, None), wr(0, w(1, 0)), wr(1, w(1, 1))],
        ),
        txn(2, Committed(11), vec![r(0, Some(w(1, 0))), wr(0, w(2, 0))]),
        // Read-only, at a snapshot between the two writers of r0.
        txn(
            3,
            Committed(10),
            vec![r(0, Some(w(1, 0))), r(1, Some(w(1, 1)))],
        ),
        txn(
            4,
            Committed(12),
            vec![
                r(1, Some(w(1, 1))),
                r(0, Some(w(2, 0))),
                wr(1, w(4, 0)),
                r(1, Some(w(4, 0))),
                wr(1, w(4, 1)),
            ],
        ),
        txn(5, Aborted, vec![r(0, Some(w(1, 0))), wr(0, w(5, 0))]),
    ];
    assert_eq!(anomalies_of(&txns), Vec::<&str>::new());
}

#[test]
fn the_checker_refuses_a_lost_update() {
    // Both read r0 absent and wrote it: T2 overwrote T1's write unseen.
    let txns = [
        txn(1, Committed(10), vec![r(0, None), wr(0, w(1, 0))]),
        txn(2, Committed(11), vec![r(0, None), wr(0, w(2, 0))]),
    ];
    assert_eq!(anomalies_of(&txns), ["G-single"]);
}

#[test]
fn the_checker_refuses_write_skew() {
    // Each read both registers absent and wrote the one the other did not.
    let txns = [
        txn(
            1,
            Committed(10),
            vec![r(0, None), r(1, None), wr(0, w(1, 0))],
        ),
        txn(
            2,
            Committed(11),
            vec![r(0, None), r(1, None), wr(1, w(2, 0))],
        ),
    ];
    assert_eq!(anomalies_of(&txns), ["G2"]);
}

#[test]
fn the_checker_refuses_read_skew() {
    // T3 read r0 before T2 and r1 after it.
    let txns = [
        txn(1, Committed(10), vec![wr(0, w(1, 0)), wr(1, w(1, 1))]),
        txn(2, Committed(11), vec![wr(0, w(2, 0)), wr(1, w(2, 1))]),
        txn(
            3,
            Committed(11),
            vec![r(0, Some(w(1, 0))), r(1, Some(w(2, 1)))],
        ),
    ];
    assert_eq!(anomalies_of(&txns), ["G-single"]);
}

#[test]
fn the_checker_refuses_an_aborted_read() {
    let txns = [
        txn(1, Aborted, vec![wr(0, w(1, 0))]),
        txn(2, Committed(10), vec![r(0, Some(w(1, 0)))]),
    ];
    assert_eq!(anomalies_of(&txns), ["G1a"]);
}

#[test]
fn the_checker_refuses_an_intermediate_read() {
    let txns = [
        txn(1, Committed(10), vec![wr(0, w(1, 0)), wr(0, w(1, 1))]),
        txn(2, Committed(11), vec![r(0, Some(w(1, 0)))]),
    ];
    assert_eq!(anomalies_of(&txns), ["G1b"]);
}

#[test]
fn the_checker_refuses_circular_information_flow_and_garbage() {
    // Each read the other's write: G1c.
    let txns = [
        txn(1, Committed(10), vec![wr(0, w(1, 0)), r(1, Some(w(2, 0)))]),
        txn(2, Committed(11), vec![wr(1, w(2, 0)), r(0, Some(w(1, 0)))]),
    ];
    assert_eq!(anomalies_of(&txns), ["G1c"]);
    let garbage = [txn(
        1,
        Committed(10),
        vec![
            Mop::Read(0, Seen::Garbage(b"x".to_vec())),
            r(1, Some(w(7, 0))),
        ],
    )];
    assert_eq!(anomalies_of(&garbage), ["garbage read", "garbage read"]);
    let inconsistent = [txn(
        1,
        Committed(10),
        vec![wr(0, w(1, 0)), r(0, None), r(1, None), r(1, Some(w(1, 9)))],
    )];
    assert_eq!(anomalies_of(&inconsistent), ["internal", "internal"]);
}

#[test]
fn the_checker_refuses_a_version_order_that_contradicts_the_history() {
    // The cluster's order of r0 puts an aborted write in and leaves a
    // committed one out.
    let txns = [
        txn(1, Committed(10), vec![wr(0, w(1, 0))]),
        txn(2, Aborted, vec![wr(0, w(2, 0))]),
    ];
    let versions = Versions::from([(0, vec![(w(2, 0), 10)])]);
    let verdict = check(&txns, &versions);
    eprint!("{}", verdict.report(&txns));
    let names: Vec<_> = verdict.anomalies.iter().map(Anomaly::name).collect();
    assert_eq!(names, ["version order", "version order"]);
}

// ---- the cluster ----

const CLIENTS: u64 = 4;
const REGISTERS: Key = 8;
const TXNS_PER_CLIENT: u64 = 40;
const RUN_FOR: Duration = Duration::from_secs(20);
const TABLE: &str = "reg";

fn register(k: Key) -> String {
    format!("r{k}")
}

/// One client's transactions: a quarter read-only snapshots, the rest
/// write transactions of one to four reads and writes.
fn client(url: &str, c: u64, seed: u64, deadline: Instant) -> Vec<Txn> {
    let db = connect(url);
    let mut rng = Rng::with_seed(seed ^ (c + 1).wrapping_mul(0x9E37_79B9));
    let mut txns = Vec::new();
    for i in 0..TXNS_PER_CLIENT {
        if Instant::now() > deadline {
            break;
        }
        let id = (c + 1) * 10_000 + i;
        let n_ops = 1 + rng.below(4);
        if rng.below(4) == 0 {
            let rx = db.begin_read().unwrap();
            let t = rx.open_table(TABLE).unwrap();
            let ops = (0..n_ops)
                .map(|_| {
                    let k = rng.below(u64::from(REGISTERS)) as Key;
                    Mop::Read(k, Seen::of(t.get(register(k).as_bytes()).unwrap()))
                })
                .collect();
            txns.push(Txn {
                id,
                ops,
                outcome: Outcome::Committed(rx.revision().0),
            });
            continue;
        }
        let tx = db.begin_write().unwrap();
        let t = tx.open_table(TABLE).unwrap();
        let mut ops = Vec::new();
        let mut writes = 0;
        for _ in 0..n_ops {
            let k = rng.below(u64::from(REGISTERS)) as Key;
            let key = register(k);
            if rng.below(2) == 0 {
                ops.push(Mop::Read(k, Seen::of(t.get(key.as_bytes()).unwrap())));
            } else {
                let v = Written { txn: id, n: writes };
                writes += 1;
                t.insert(key.as_bytes(), &v.encode()).unwrap();
                ops.push(Mop::Write(k, v));
            }
        }
        let outcome = match tx.commit() {
            Ok(revision) => Outcome::Committed(revision.0),
            Err(Error::Conflict { .. }) => Outcome::Aborted,
            Err(Error::CommitIndeterminate { .. }) => Outcome::Unknown,
            Err(e) => panic!("client {c}, transaction {id}: {e}"),
        };
        txns.push(Txn { id, ops, outcome });
    }
    txns
}

/// Each register's versions as the cluster holds them: the key now, then
/// at the revision before each version's, down to its creation.
fn read_back_versions(url: &str) -> Versions {
    let parsed = EtcdUrl::parse(url).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let client = rt
        .block_on(Client::connect(&parsed.endpoints, None))
        .unwrap();
    let mut versions = Versions::new();
    for k in 0..REGISTERS {
        // FORMAT.md, "etcd key layout": `<prefix>/t/<table> 0x00 <key>`.
        let mut key = format!("{}/t/{TABLE}", parsed.prefix).into_bytes();
        key.push(0);
        key.extend_from_slice(register(k).as_bytes());
        let mut chain = Vec::new();
        let mut options = GetOptions::new();
        loop {
            let mut kv = client.kv_client();
            let resp = rt.block_on(kv.get(key.clone(), Some(options))).unwrap();
            let Some(found) = resp.kvs().first() else {
                break;
            };
            let value = Written::decode(found.value()).unwrap_or_else(|| {
                panic!(
                    "r{k} at revision {}: {:?}",
                    found.mod_revision(),
                    found.value()
                )
            });
            chain.push((value, found.mod_revision()));
            options = GetOptions::new().with_revision(found.mod_revision() - 1);
        }
        chain.reverse();
        versions.insert(k, chain);
    }
    versions
}

#[test]
fn concurrent_transactions_are_serializable() {
    let Some(c) = cluster("concurrent_transactions_are_serializable") else {
        return;
    };
    let url = c.url("serial");
    let db = connect(&url);
    let tx = db.begin_write().unwrap();
    tx.open_table(TABLE).unwrap();
    tx.commit().unwrap();
    let seed = Rng::new("concurrent_transactions_are_serializable").next();
    let started = Instant::now();
    let deadline = started + RUN_FOR;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let url = url.clone();
            thread::spawn(move || client(&url, c, seed, deadline))
        })
        .collect();
    let mut txns = Vec::new();
    for h in clients {
        txns.extend(h.join().unwrap());
    }
    let took = started.elapsed();
    let versions = read_back_versions(&url);
    let verdict = check(&txns, &versions);
    let count = |o: fn(&Outcome) -> bool| txns.iter().filter(|t| o(&t.outcome)).count();
    eprintln!(
        "{} transactions in {took:?}: {} committed ({} by the version order), {} aborted, {} unknown; {} versions, {} edges",
        txns.len(),
        count(|o| matches!(o, Outcome::Committed(_))),
        verdict.committed,
        count(|o| *o == Outcome::Aborted),
        count(|o| *o == Outcome::Unknown),
        versions.values().map(Vec::len).sum::<usize>(),
        verdict.edges,
    );
    assert!(
        verdict.anomalies.is_empty(),
        "the history is not serializable:\n{}",
        verdict.report(&txns)
    );
    assert!(
        count(|o| matches!(o, Outcome::Committed(_))) >= txns.len() / 4,
        "too few commits to check anything"
    );
}
