//! TTL indexes: an ordinary single-field index with `expire_after_seconds`,
//! whose documents are deleted once their date is that far in the past
//! (MongoDB: "TTL Indexes").
//!
//! A document expires by its date ([`Value::Date`]), or by the earliest
//! date of an array, as in MongoDB. A number also counts as a date, read
//! as milliseconds since the Unix epoch (an integer, or a float, which
//! index keys do not tell from an integer of the same value): files made
//! before the document layer had dates hold them so, and they keep
//! expiring (a CairnDB extension; MongoDB ignores numbers). In an array
//! holding both, the earliest of all counts. Any other value (a string,
//! null, a missing field) never expires.
//!
//! **Who deletes, and how much.** The library has no thread of its own:
//! every auto-committed write to a collection that has a TTL index deletes
//! up to [`EXPIRE_BATCH`] expired documents in the same transaction
//! (`Writer` notes such collections when it reads their metadata, so a
//! collection without one pays a `bool` test), [`Collection::delete_expired`]
//! deletes one batch on demand, and [`Collection::delete_all_expired`]
//! deletes all of them in transactions of one batch each. The timer is the
//! application's: `cairn serve` runs a sweep of every collection
//! [`Database::ttl_collections`] names every `--ttl-interval` seconds (60
//! by default, as MongoDB's TTL monitor), and `cairn expire` runs one now.
//! An application embedding the library calls `delete_all_expired` on a
//! timer of its own; without one, a collection nobody writes keeps its
//! expired documents.
//! A pass reads the index in key order from the smallest date up to the
//! cutoff, then from the smallest number up to it, so it finds the oldest
//! dates first and examines at most
//! `8 × batch` entries (so no pass is unbounded). Deletions are ordinary deletes: the
//! indexes and the change log follow.
//!
//! The clock is injected ([`Clock`]; [`Collection::with_clock`]) so tests
//! move time without sleeping.
//!
//! [`Collection::delete_expired`]: super::Collection::delete_expired
//! [`Collection::delete_all_expired`]: super::Collection::delete_all_expired
//! [`Database::ttl_collections`]: crate::Database::ttl_collections
//! [`Collection::with_clock`]: super::Collection::with_clock

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::codec;
use super::collection::{IndexInfo, Writer};
use super::error::{DocResult, DocumentError};
use super::keys::{self, SortOrder};
use super::path::{self, FieldPath, LookupMode};
use super::value::Value;
use crate::seam::{SeamRead, SeamTable, SeamWrite};
use crate::table::TableDefinition;

/// Expired documents one write deletes at most beside its own changes.
pub const EXPIRE_BATCH: usize = 64;

/// Index entries one pass examines per document it may delete.
const EXAMINE_PER_DOC: usize = 8;

/// The largest `expire_after_seconds` (MongoDB's: 2^31 − 1).
pub const MAX_EXPIRE_AFTER_SECONDS: u64 = i32::MAX as u64;

/// Where TTL indexes read the time.
pub trait Clock: Send + Sync {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        match SystemTime::now().duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            // A clock set before 1970: nothing is that old.
            Err(_) => 0,
        }
    }
}

/// A clock that moves only when told (tests and simulations).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock showing `now_ms` (milliseconds since the Unix epoch).
    pub fn new(now_ms: i64) -> Self {
        ManualClock(AtomicI64::new(now_ms))
    }

    /// Sets the time.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::Release);
    }

    /// Moves the time forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(ms))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::Acquire)
    }
}

/// Checks a TTL index's definition before it is created.
pub(crate) fn check_expire_after(coll: &str, field: &str, secs: u64) -> DocResult<()> {
    let bad = |reason: String| DocumentError::IndexError {
        collection: coll.to_string(),
        index: field.to_string(),
        reason,
    };
    FieldPath::parse(field)?;
    if field == "_id" {
        return Err(bad(
            "a TTL index cannot be on _id (MongoDB refuses it too)".into()
        ));
    }
    if secs > MAX_EXPIRE_AFTER_SECONDS {
        return Err(bad(format!(
            "expire_after_seconds must be at most {MAX_EXPIRE_AFTER_SECONDS}, not {secs}"
        )));
    }
    Ok(())
}

/// The time before which a date has expired under `idx`, if it is a TTL
/// index the writer knows how to scan (one ascending field).
fn cutoff(idx: &IndexInfo, now_ms: i64) -> Option<i64> {
    let secs = idx.expire_after_seconds?;
    if idx.fields.len() != 1 || idx.fields[0].1 != 1 {
        return None;
    }
    let ms = i64::try_from(secs.saturating_mul(1000)).unwrap_or(i64::MAX);
    Some(now_ms.saturating_sub(ms))
}

/// Whether the document `doc` has a date at `path` before `cutoff`.
fn expired(doc: &Value, path: &FieldPath, cutoff: i64) -> bool {
    path::lookup_value(doc, path.segments(), LookupMode::Index)
        .into_iter()
        .any(|v| match v {
            Value::Date(t) | Value::Int(t) => *t < cutoff,
            Value::Float(f) => *f < cutoff as f64,
            _ => false,
        })
}

/// Deletes up to `max` expired documents of collection `coll` as of
/// `now_ms`, in the writer's transaction; returns how many.
pub(crate) fn expire<W: SeamWrite + SeamRead>(
    w: &mut Writer<'_, W>,
    coll: &str,
    now_ms: i64,
    max: usize,
) -> DocResult<u64> {
    let found = w.meta(coll, false)?;
    w.ttl_due = None;
    let Some(m) = found else {
        return Ok(0);
    };
    let data = m.data_table();
    let mut deleted: u64 = 0;
    for idx in &m.indexes {
        let left = max.saturating_sub(deleted as usize);
        if left == 0 {
            break;
        }
        let Some(cut) = cutoff(idx, now_ms) else {
            continue;
        };
        let path = FieldPath::parse(&idx.fields[0].0)?;
        let candidates = {
            let t = w.txn.open_table(TableDefinition::<&[u8], &[u8]>::internal(
                &m.index_table(idx),
            ))?;
            let mut out: Vec<Vec<u8>> = Vec::new();
            let mut seen = 0;
            let budget = left.saturating_mul(EXAMINE_PER_DOC);
            // Dates (MongoDB's TTL values), then numbers (dates of files
            // made before the date type; see the module docs).
            for (lo, hi) in [
                (Value::Date(i64::MIN), Value::Date(cut)),
                (Value::Int(i64::MIN), Value::Int(cut)),
            ] {
                let mut lo_k = Vec::new();
                keys::encode_component(&lo, SortOrder::Ascending, &mut lo_k)?;
                let mut hi_k = Vec::new();
                keys::encode_component(&hi, SortOrder::Ascending, &mut hi_k)?;
                // At most `budget` entries are examined: a backend that
                // reads ranges whole reads no more (`range_head`).
                let head = t.range_head(lo_k.as_slice()..hi_k.as_slice(), budget)?;
                for item in head {
                    if seen >= budget || out.len() >= left {
                        break;
                    }
                    seen += 1;
                    let (k, _) = item?;
                    let entry = k.value();
                    // Every entry in the range is a date or a number.
                    let (_, n) = keys::decode_component(entry, SortOrder::Ascending)?;
                    let idk = entry.get(n..).unwrap_or_default().to_vec();
                    if !out.contains(&idk) {
                        out.push(idk);
                    }
                }
            }
            out
        };
        for idk in candidates {
            let bytes = {
                let t = w
                    .txn
                    .open_table(TableDefinition::<&[u8], &[u8]>::internal(&data))?;
                let got = t.get(idk.as_slice())?.map(|g| g.value().to_vec());
                got
            };
            let Some(bytes) = bytes else { continue };
            if !expired(&codec::decode_value(&bytes)?, &path, cut) {
                continue;
            }
            if w.delete(coll, &m, &idk)?.is_some() {
                deleted += 1;
            }
        }
    }
    w.ttl_due = None;
    Ok(deleted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(1_000);
        assert_eq!(c.now_ms(), 1_000);
        c.advance(Duration::from_secs(2));
        assert_eq!(c.now_ms(), 3_000);
        c.set(5);
        assert_eq!(c.now_ms(), 5);
    }

    #[test]
    fn dates_and_numbers_expire_and_the_earliest_of_an_array_counts() {
        let p = FieldPath::parse("at").unwrap();
        let doc = |v: Value| Value::Object(super::super::Document::new().with("at", v));
        assert!(expired(&doc(Value::Int(5)), &p, 10));
        assert!(!expired(&doc(Value::Int(10)), &p, 10));
        assert!(expired(&doc(Value::Float(5.0)), &p, 10));
        assert!(!expired(&doc(Value::Float(10.5)), &p, 10));
        assert!(!expired(&doc(Value::String("1970".into())), &p, 10));
        assert!(expired(
            &doc(Value::Array(vec![Value::Int(50), Value::Int(5)])),
            &p,
            10
        ));
        assert!(!expired(&doc(Value::Null), &p, 10));
        // Dates, as MongoDB: before the cutoff, or the earliest of an array
        // (mixed with numbers, the earliest of all).
        assert!(expired(&doc(Value::Date(9)), &p, 10));
        assert!(!expired(&doc(Value::Date(10)), &p, 10));
        assert!(expired(&doc(Value::Date(-5)), &p, 10));
        assert!(expired(
            &doc(Value::Array(vec![Value::Date(50), Value::Date(5)])),
            &p,
            10
        ));
        assert!(expired(
            &doc(Value::Array(vec![Value::Date(50), Value::Int(5)])),
            &p,
            10
        ));
        assert!(!expired(
            &doc(Value::Array(vec![
                Value::Date(50),
                Value::String("x".into())
            ])),
            &p,
            10
        ));
    }
}
