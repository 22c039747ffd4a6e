//! The commit log (FORMAT.md, "Commit log"): records — what a loggable
//! transaction appends to the log, and replaying a log's records onto the
//! trees of the commit slot that names it, as overlay deltas.
//!
//! The pager frames records into pages (`pager/log.rs`); this module knows
//! what the bytes mean. A record is the transaction's id and its overlay
//! changes in the order they were made, so replaying it onto the state
//! before it yields exactly the state after it.
//!
//! Invariants: a transaction is loggable only while every change it made
//! went to the overlay (`OpLog::direct` is set by anything that writes a
//! tree); replay applies only whole writes (the pager's scan returns only
//! writes whose *end* page was read) and rejects any record that breaks the
//! layout with a typed `Corruption` (never a panic, never a partial apply).

use std::collections::BTreeMap;

use super::overlay::{Delta, Overlay};
use crate::btree::NodeSource;
use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::TxnId;
use crate::pager::header::{le_u16, le_u32, le_u64, CommitRecord};
use crate::pager::log::{encode_write, pages_for, LogRef};
use crate::pager::Pager;

const TAG_TABLE: u8 = 0x01;
const TAG_PUT: u8 = 0x02;
const TAG_REMOVE: u8 = 0x03;

/// Bytes of a record before its body: transaction id and body length.
const RECORD_HEADER_BYTES: usize = 12;

/// One write transaction's overlay changes in log form, built as they are
/// made.
#[derive(Debug, Default)]
pub(crate) struct OpLog {
    /// The record body (operations).
    body: Vec<u8>,
    /// The table the last operation named.
    table: String,
    /// A change went to a tree directly (or a table was created or
    /// deleted): the transaction cannot be logged.
    pub direct: bool,
}

impl OpLog {
    /// Records `key → value` (`None`: removed) in table `table`.
    pub(crate) fn put(&mut self, table: &str, key: &[u8], value: Option<&[u8]>) {
        if self.body.is_empty() || self.table != table {
            self.body.push(TAG_TABLE);
            self.body
                .extend_from_slice(&(table.len() as u16).to_le_bytes());
            self.body.extend_from_slice(table.as_bytes());
            table.clone_into(&mut self.table);
        }
        match value {
            Some(v) => {
                self.body.push(TAG_PUT);
                self.body
                    .extend_from_slice(&(key.len() as u16).to_le_bytes());
                self.body.extend_from_slice(&(v.len() as u32).to_le_bytes());
                self.body.extend_from_slice(key);
                self.body.extend_from_slice(v);
            }
            None => {
                self.body.push(TAG_REMOVE);
                self.body
                    .extend_from_slice(&(key.len() as u16).to_le_bytes());
                self.body.extend_from_slice(key);
            }
        }
    }

    /// Whether no change was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.body.is_empty()
    }

    /// Bytes the record of this transaction takes.
    pub(crate) fn record_len(&self) -> usize {
        RECORD_HEADER_BYTES + self.body.len()
    }

    /// Appends the record of commit `txn` to `out`.
    pub(crate) fn append_record(&self, txn: TxnId, out: &mut Vec<u8>) {
        out.extend_from_slice(&txn.0.to_le_bytes());
        out.extend_from_slice(&(self.body.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.body);
    }
}

/// One decoded operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogOp<'a> {
    Put(&'a [u8], &'a [u8]),
    Remove(&'a [u8]),
}

/// A decoded record: its commit and its operations with their tables.
pub(crate) type Record<'a> = (TxnId, Vec<(&'a str, LogOp<'a>)>);

/// Decodes the records of one write's payload; `Err` says what is wrong.
pub(crate) fn decode_records(payload: &[u8]) -> std::result::Result<Vec<Record<'_>>, String> {
    let mut out = Vec::new();
    let mut at = 0usize;
    let take = |at: &mut usize, n: usize| -> std::result::Result<&[u8], String> {
        let s = payload
            .get(*at..at.saturating_add(n))
            .ok_or_else(|| format!("record runs past the end of the write at byte {at}"))?;
        *at += n;
        Ok(s)
    };
    while at < payload.len() {
        let head = take(&mut at, RECORD_HEADER_BYTES)?;
        let txn = TxnId(le_u64(head, 0));
        let body_len = le_u32(head, 8) as usize;
        let body_end = at
            .checked_add(body_len)
            .filter(|&e| e <= payload.len())
            .ok_or_else(|| format!("record of commit {txn} is longer than its write"))?;
        let mut ops = Vec::new();
        let mut table: Option<&str> = None;
        while at < body_end {
            let tag = take(&mut at, 1)?[0];
            match tag {
                TAG_TABLE => {
                    let n = le_u16(take(&mut at, 2)?, 0) as usize;
                    let name = std::str::from_utf8(take(&mut at, n)?)
                        .map_err(|_| format!("table name in commit {txn} is not UTF-8"))?;
                    table = Some(name);
                }
                TAG_PUT | TAG_REMOVE => {
                    let t = table.ok_or_else(|| {
                        format!("commit {txn} changes a key before naming a table")
                    })?;
                    let k = le_u16(take(&mut at, 2)?, 0) as usize;
                    let op = if tag == TAG_PUT {
                        let v = le_u32(take(&mut at, 4)?, 0) as usize;
                        let key = take(&mut at, k)?;
                        LogOp::Put(key, take(&mut at, v)?)
                    } else {
                        LogOp::Remove(take(&mut at, k)?)
                    };
                    ops.push((t, op));
                }
                other => return Err(format!("unknown operation tag {other} in commit {txn}")),
            }
        }
        if at != body_end {
            return Err(format!("commit {txn}'s operations overrun its record"));
        }
        out.push((txn, ops));
    }
    Ok(out)
}

/// What replaying a log gave: the overlay above the slot's trees, the last
/// commit replayed, and how many commits.
pub(crate) struct Replayed {
    pub overlay: Overlay,
    pub last: Option<TxnId>,
    pub commits: u64,
}

/// Replays the complete writes `writes` (first page sequence, payload) of
/// `log`, named by commit `rec`, onto `rec`'s trees: each table's changes
/// become its delta, exactly as the commits left them.
pub(crate) fn replay(
    pager: &Pager,
    rec: &CommitRecord,
    log: &LogRef,
    writes: &[(u64, Vec<u8>)],
) -> Result<Replayed> {
    let src = NodeSource {
        pager,
        dirty: None,
        pins: None,
    };
    let ps = pager.page_size();
    let mut deltas: BTreeMap<String, (crate::catalog::TableRecord, Delta)> = BTreeMap::new();
    let mem = std::sync::Arc::new(crate::commit::memtable::Memtable::default());
    let mut last = rec.txn;
    let mut commits = 0u64;
    for (first, payload) in writes {
        let page = log.page(*first);
        let bad = |detail: String| -> CoreError {
            Corruption {
                part: DamagedPart::LogPage,
                page,
                offset: page.0.saturating_mul(ps as u64),
                detail,
            }
            .into()
        };
        let records = decode_records(payload).map_err(|e| bad(format!("commit log: {e}")))?;
        for (txn, ops) in records {
            if txn <= last {
                return Err(bad(format!(
                    "commit log: commit {txn} follows commit {last} (ids must grow)"
                )));
            }
            if txn.0 > crate::pager::header::MAX_TXN {
                // Ids grow by one per commit: only damage gets here, and the
                // next transaction id must not overflow.
                return Err(bad(format!("commit log: commit id {txn} is out of range")));
            }
            last = txn;
            commits += 1;
            for (table, op) in ops {
                if !deltas.contains_key(table) {
                    let t = crate::catalog::lookup_table(src, rec.catalog, table, ps)?
                        .ok_or_else(|| {
                            bad(format!(
                                "commit log: commit {txn} changes table {table:?}, which the catalog does not have"
                            ))
                        })?;
                    deltas.insert(table.to_string(), (t, Delta::default()));
                }
                let Some((t, delta)) = deltas.get_mut(table) else {
                    continue;
                };
                let (key, value) = match op {
                    LogOp::Put(k, v) => (k, Some(v)),
                    LogOp::Remove(k) => (k, None),
                };
                let existed = match delta.get(key) {
                    Some(e) => e.is_some(),
                    None => src.find(t.root, key)?.is_some(),
                };
                if value.is_none() && !existed {
                    return Err(bad(format!(
                        "commit log: commit {txn} removes a key table {table:?} does not hold"
                    )));
                }
                delta.put(&mem, txn, key, value, existed);
            }
        }
    }
    let overlay = Overlay {
        tables: deltas
            .into_iter()
            .filter(|(_, (_, d))| !d.is_empty())
            .map(|(n, (_, d))| (std::sync::Arc::from(n), d))
            .collect(),
        mem,
    };
    Ok(Replayed {
        overlay,
        last: (commits > 0).then_some(last),
        commits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_truncations_are_errors() {
        let mut a = OpLog::default();
        a.put("t", b"k1", Some(b"v1"));
        a.put("t", b"k2", None);
        a.put("u", b"", Some(b""));
        a.put("t", b"k3", Some(&[7; 300]));
        let mut b = OpLog::default();
        b.put("$ev.log", &[0, 1], Some(b"x"));
        let mut payload = Vec::new();
        a.append_record(TxnId(5), &mut payload);
        b.append_record(TxnId(9), &mut payload);
        assert_eq!(payload.len(), a.record_len() + b.record_len());
        let recs = decode_records(&payload).unwrap();
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[0].0, TxnId(5));
        assert_eq!(
            recs[0].1,
            vec![
                ("t", LogOp::Put(b"k1", b"v1")),
                ("t", LogOp::Remove(b"k2")),
                ("u", LogOp::Put(b"", b"")),
                ("t", LogOp::Put(b"k3", &[7; 300])),
            ]
        );
        assert_eq!(
            recs[1],
            (TxnId(9), vec![("$ev.log", LogOp::Put(&[0, 1], b"x"))])
        );
        // Every truncation is an error or a shorter list of whole records,
        // never a panic.
        for cut in 0..payload.len() {
            if let Ok(r) = decode_records(&payload[..cut]) {
                assert!(r.len() < 2 && (r.is_empty() || cut == a.record_len()));
            }
        }
        // Bad tags and an operation before a table.
        let mut bad = Vec::new();
        bad.extend_from_slice(&1u64.to_le_bytes());
        bad.extend_from_slice(&3u32.to_le_bytes());
        bad.extend_from_slice(&[TAG_REMOVE, 0, 0]);
        assert!(decode_records(&bad).is_err());
        bad[12] = 0x7f;
        assert!(decode_records(&bad).is_err());
    }
}

/// The smallest commit log extent, in pages (also the first one's size).
pub(crate) const MIN_LOG_PAGES: u64 = 64;

/// Pages of never-written file the log zero-fills ahead of its writes.
const LOG_ZERO_AHEAD_PAGES: u64 = 256;
/// How far ahead a log write looks for never-written pages.
const LOG_ZERO_LOOK_PAGES: u64 = 16;

/// Non-durable commits' records are written (without a flush) once this
/// many bytes are buffered, which bounds the buffer.
pub(crate) const LOG_WRITE_BEHIND_BYTES: usize = 64 << 10;

/// The commit log the newest slot names, as its writer sees it.
#[derive(Debug)]
pub(crate) struct LogWriter {
    pub log: LogRef,
    /// Sequence of the next page to write.
    pub next: u64,
    /// Log pages `0 .. durable` are flushed.
    pub durable: u64,
    /// Records not written yet, in commit order.
    pub buf: Vec<u8>,
}

impl LogWriter {
    pub(crate) fn new(log: LogRef) -> Self {
        LogWriter {
            log,
            next: 0,
            durable: 0,
            buf: Vec::new(),
        }
    }

    /// Whether the buffer plus `extra` bytes fit in the rest of the extent
    /// (written as one write, followed by the end marker).
    pub(crate) fn fits(&self, extra: usize, page_size: usize) -> bool {
        self.next + pages_for(self.buf.len() + extra, page_size) < self.log.pages
    }

    /// Writes the buffered records as one write, with the end marker after
    /// it (no flush); the next write starts on the marker.
    ///
    /// Where the log reaches a part of the file that was never written (an
    /// extent at the end of a file grown by `set_len`), it first writes
    /// zeros over the next [`LOG_ZERO_AHEAD_PAGES`]: the file system then
    /// allocates those blocks in one go, instead of one journal commit in
    /// each of the next commits' flushes (measured here: a log commit's
    /// flush took ~180 µs into a hole against ~110 µs into written blocks).
    pub(crate) fn write(&mut self, pager: &Pager) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let ps = pager.page_size();
        let bytes = encode_write(&self.log, self.next, self.durable, &self.buf, ps);
        let after = self.next + (bytes.len() / ps) as u64;
        let extent_end = self.log.pages;
        // `after`: the page after the end marker this write ends with. The
        // next few pages are looked at (not only `after`), so zeros go out
        // before the log reaches a never-written page, about once per
        // LOG_ZERO_AHEAD_PAGES pages.
        let near = LOG_ZERO_LOOK_PAGES.min(extent_end.saturating_sub(after));
        if near > 0 && pager.is_unwritten(pager.offset(self.log.page(after)), near * ps as u64) {
            let from = after;
            let upto = (from + LOG_ZERO_AHEAD_PAGES).min(extent_end);
            let zeros = vec![0u8; (upto - from) as usize * ps];
            pager.write_log(self.log.page(from), &zeros)?;
        }
        pager.write_log(self.log.page(self.next), &bytes)?;
        self.next += (bytes.len() / ps) as u64 - 1;
        self.buf.clear();
        Ok(())
    }
}

/// A random, nonzero salt for a new commit log: the standard library's
/// randomly keyed hasher (keys from the operating system), over the commit
/// id and the time — or, for reproducible test files, derived from `fixed`
/// and the commit id.
pub(crate) fn new_salt(txn: TxnId, fixed: Option<u64>) -> u64 {
    use std::hash::BuildHasher;
    if let Some(seed) = fixed {
        let bytes = [seed.to_le_bytes(), txn.0.to_le_bytes()].concat();
        return xxhash_rust::xxh3::xxh3_64(&bytes) | 1;
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::collections::hash_map::RandomState::new().hash_one((txn.0, nanos)) | 1
}
