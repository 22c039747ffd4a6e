//! `cairn bench docs --backend etcd://…` (feature `etcd`): the document
//! rows on the cluster (`EtcdDatabase::collection`, the embedded engine's
//! document code through the storage seam) and on the embedded engine
//! (`Collection` on a temporary file) side by side, through one [`Docs`]
//! trait — one-document durable inserts, a 10-document `insert_many`, a
//! get by `_id`, a find on a secondary index, a count answered from the
//! index, an `update_one` by `_id`, a `$group` over the collection and a
//! `delete_one` by `_id`. Bounded counts (at most [`MAX_DOCS`] documents
//! loaded, [`ONE_DOC_INSERTS`] timed single writes), so a run takes
//! seconds at the default scale; the header (shared with the KV and event
//! rows) names the cluster's endpoints, members and fsync mode, and the
//! requests one insert sent (`EtcdDatabase::round_trips`).
//!
//! The run's collection (`bench-<run>`) is dropped from the prefix at the
//! end, whether the rows succeeded or not.

use std::io::Write;

use cairndb::document::{Collection, Document, IndexOptions};
use cairndb_etcd::{EtcdCollection, EtcdDatabase};
use serde_json::json;

use crate::args::DocArgs;
use crate::engine::Res;
use crate::etcd_costs::Probe;
use crate::etcd_rows::{fmt_us, header, row_json, time, write_json, Figures};

/// Documents loaded for the read rows by default (`--scale` sets it, up
/// to [`MAX_DOCS`]).
const DEFAULT_DOCS: usize = 1000;
/// The most documents a run loads, whatever `--scale` says: the cluster
/// takes them at a few hundred per second.
pub const MAX_DOCS: usize = 20_000;
/// Documents per loading `insert_many` (a document with its two index
/// entries and `_id` key is a few etcd operations of the 128 a `Txn`
/// allows).
const LOAD_BATCH: usize = 20;
/// One-document inserts, updates and deletes timed.
const ONE_DOC_INSERTS: usize = 100;
/// 10-document inserts timed.
const TEN_DOC_INSERTS: usize = 20;
/// Gets, index finds and counts timed.
const READS: usize = 50;
/// Aggregations timed (each reads the whole collection).
const AGGREGATIONS: usize = 3;
/// The values of the indexed `city` field: an index find returns about
/// 1/CITIES of the collection.
const CITIES: usize = 50;

/// The document calls of one engine.
trait Docs {
    fn insert(&self, doc: &Document) -> Res<()>;
    fn insert_many(&self, docs: &[Document]) -> Res<()>;
    fn create_index(&self, field: &str) -> Res<()>;
    fn get(&self, id: i64) -> Res<bool>;
    fn find_count(&self, filter: serde_json::Value) -> Res<usize>;
    fn count(&self, filter: serde_json::Value) -> Res<u64>;
    fn update_one(&self, filter: serde_json::Value, update: serde_json::Value) -> Res<u64>;
    fn aggregate_count(&self, pipeline: serde_json::Value) -> Res<usize>;
    fn delete_one(&self, filter: serde_json::Value) -> Res<u64>;
}

/// The file's `Collection` and the cluster's `EtcdCollection` have the
/// same methods.
macro_rules! docs_for {
    ($($coll:ty),*) => {$(
        impl Docs for $coll {
            fn insert(&self, doc: &Document) -> Res<()> {
                <$coll>::insert(self, doc)?;
                Ok(())
            }
            fn insert_many(&self, docs: &[Document]) -> Res<()> {
                <$coll>::insert_many(self, docs)?;
                Ok(())
            }
            fn create_index(&self, field: &str) -> Res<()> {
                <$coll>::create_index(self, &[(field, 1)], IndexOptions::default())?;
                Ok(())
            }
            fn get(&self, id: i64) -> Res<bool> {
                Ok(<$coll>::get(self, id)?.is_some())
            }
            fn find_count(&self, filter: serde_json::Value) -> Res<usize> {
                let mut n = 0;
                for doc in <$coll>::find(self, filter)? {
                    doc?;
                    n += 1;
                }
                Ok(n)
            }
            fn count(&self, filter: serde_json::Value) -> Res<u64> {
                Ok(<$coll>::count(self, filter)?)
            }
            fn update_one(
                &self,
                filter: serde_json::Value,
                update: serde_json::Value,
            ) -> Res<u64> {
                Ok(<$coll>::update_one(self, filter, update, Default::default())?.modified)
            }
            fn aggregate_count(&self, pipeline: serde_json::Value) -> Res<usize> {
                let mut n = 0;
                for doc in <$coll>::aggregate(self, pipeline)? {
                    doc?;
                    n += 1;
                }
                Ok(n)
            }
            fn delete_one(&self, filter: serde_json::Value) -> Res<u64> {
                Ok(<$coll>::delete_one(self, filter)?)
            }
        }
    )*};
}

docs_for!(Collection<'_, Document>, EtcdCollection<'_, Document>);

/// Document `i`: an integer `_id`, two indexed fields and some payload
/// (about 200 bytes as JSON).
fn doc(i: usize) -> Document {
    let d = json!({
        "_id": i as i64,
        "city": format!("city-{:02}", i % CITIES),
        "age": (i * 7) % 90,
        "name": format!("person {i:06}"),
        "tags": ["a", "b", format!("t{}", i % 10)],
        "bio": format!("{:0120}", i),
    });
    Document::from_json(d).unwrap_or_default()
}

/// Fails unless `got` is what a row expects.
fn expect<T: PartialEq + std::fmt::Debug>(row: &str, got: T, want: T) -> Res<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{row}: got {got:?}, expected {want:?}").into())
    }
}

/// The rows on one engine, in order: each row's name, figures per
/// operation and the documents one operation moves.
fn rows(c: &dyn Docs, loaded: usize) -> Res<Vec<(String, Figures, f64)>> {
    c.create_index("city")?;
    c.create_index("age")?;
    let all: Vec<Document> = (0..loaded).map(doc).collect();
    for batch in all.chunks(LOAD_BATCH) {
        c.insert_many(batch)?;
    }
    let mut out = Vec::new();
    let base = loaded;
    let f = time(|i| c.insert(&doc(base + i)), ONE_DOC_INSERTS)?;
    out.push(("insert one document (durable, 2 indexes)".into(), f, 1.0));
    let base = base + ONE_DOC_INSERTS;
    let tens: Vec<Vec<Document>> = (0..TEN_DOC_INSERTS)
        .map(|t| (0..10).map(|j| doc(base + t * 10 + j)).collect())
        .collect();
    let f = time(|i| c.insert_many(&tens[i]), TEN_DOC_INSERTS)?;
    out.push(("insert_many, 10 documents (per call)".into(), f, 10.0));
    let total = base + 10 * TEN_DOC_INSERTS;
    let f = time(
        |i| {
            let id = ((i * 7919) % total) as i64;
            expect("get by _id", c.get(id)?, true)
        },
        READS,
    )?;
    out.push(("get by _id".into(), f, 1.0));
    let per_city = |city: usize| (0..total).filter(|i| i % CITIES == city).count();
    let f = time(
        |i| {
            let city = i % CITIES;
            let filter = json!({"city": format!("city-{city:02}")});
            expect(
                "find on the city index",
                c.find_count(filter)?,
                per_city(city),
            )
        },
        READS,
    )?;
    let found = total as f64 / CITIES as f64;
    out.push((
        format!("find on a secondary index, ~{found:.0} documents (per find)"),
        f,
        found,
    ));
    let f = time(
        |i| {
            let city = i % CITIES;
            let filter = json!({"city": format!("city-{city:02}")});
            expect(
                "count on the city index",
                c.count(filter)?,
                per_city(city) as u64,
            )
        },
        READS,
    )?;
    out.push(("count on a secondary index (per count)".into(), f, 1.0));
    let f = time(
        |i| {
            let filter = json!({"_id": ((i * 13) % total) as i64});
            let update = json!({"$inc": {"age": 1}, "$set": {"seen": true}});
            expect("update_one by _id", c.update_one(filter, update)?, 1)
        },
        ONE_DOC_INSERTS,
    )?;
    out.push(("update_one by _id (durable)".into(), f, 1.0));
    let f = time(
        |_| {
            let pipeline = json!([{"$group": {"_id": "$city", "n": {"$sum": 1}}}]);
            expect(
                "$group by city",
                c.aggregate_count(pipeline)?,
                CITIES.min(total),
            )
        },
        AGGREGATIONS,
    )?;
    out.push((
        format!("$group over the collection, {total} documents (per aggregation)"),
        f,
        total as f64,
    ));
    let f = time(
        |i| {
            let filter = json!({"_id": (total - 1 - i) as i64});
            expect("delete_one by _id", c.delete_one(filter)?, 1)
        },
        ONE_DOC_INSERTS,
    )?;
    out.push(("delete_one by _id (durable)".into(), f, 1.0));
    Ok(out)
}

/// How many documents a run loads: `--scale`, bounded, or the default.
fn loaded(args: &DocArgs) -> usize {
    args.common.scale.map_or(DEFAULT_DOCS, |s| s.min(MAX_DOCS))
}

/// Runs the rows on the embedded engine (a temporary file, durable
/// commits) and on the cluster of `url`, and prints one table.
pub fn run(args: &DocArgs, url: &str, w: &mut dyn Write) -> Res<()> {
    let n = loaded(args);
    let dir = tempfile::tempdir()?;
    let etcd = EtcdDatabase::connect(url)?;
    let costs_probe = Probe::start(&etcd)?;
    // The header comes first but holds what the rows cost the cluster:
    // the lines after it are kept until the rows are done.
    let out = w;
    let mut body = Vec::new();
    let w: &mut dyn Write = &mut body;
    let run = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    let name = format!("bench-{run}");
    let remote_coll = etcd.collection::<Document>(&name);
    // The requests of one insert into the collection with its indexes.
    let probe = etcd.collection::<Document>(&format!("{name}-probe"));
    let probed = (|| -> Res<u64> {
        probe.create_index(&[("city", 1)], IndexOptions::default())?;
        probe.create_index(&[("age", 1)], IndexOptions::default())?;
        probe.insert(&doc(0))?;
        let before = etcd.round_trips();
        probe.insert(&doc(1))?;
        Ok(etcd.round_trips() - before)
    })();
    let dropped = probe.drop();
    let requests = probed?;
    dropped?;
    writeln!(
        w,
        "etcd requests per one-document insert: {requests} (2 secondary indexes; \
         EtcdDatabase::round_trips)"
    )?;
    writeln!(
        w,
        "documents: {n} loaded ({}-byte JSON each, in insert_many batches of {LOAD_BATCH}), \
         indexes on city ({CITIES} values) and age; the run's collection {name} is dropped at \
         the end",
        doc(0).to_json_string().len()
    )?;
    writeln!(w)?;
    let file = cairndb::Database::create(dir.path().join("docs.cairn"))?;
    let local = rows(&file.collection::<Document>(&name), n)?;
    let remote = rows(&remote_coll, n);
    let dropped = remote_coll.drop();
    let remote = remote?;
    dropped?;
    writeln!(
        w,
        "| row | cairn median (p90) | etcd median (p90) | cairn docs/s | etcd docs/s | etcd / cairn |"
    )?;
    writeln!(w, "|---|---|---|---|---|---|")?;
    let mut json_rows = Vec::new();
    for ((row, c, docs), (_, e, _)) in local.iter().zip(&remote) {
        json_rows.push(row_json(row, c, e, *docs));
        writeln!(
            w,
            "| {row} | {} ({}) | {} ({}) | {:.0} | {:.0} | {:.1}× slower |",
            fmt_us(c.median_us),
            fmt_us(c.p90_us),
            fmt_us(e.median_us),
            fmt_us(e.p90_us),
            c.ops_per_s * docs,
            e.ops_per_s * docs,
            e.median_us / c.median_us.max(1e-9)
        )?;
    }
    let costs = costs_probe.finish();
    header(out, "docs", &etcd, dir.path(), &costs)?;
    out.write_all(&body)?;
    write_json(
        args.common.json.as_deref(),
        "docs",
        &etcd,
        &costs,
        json_rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{CommonArgs, DocSuiteSel};
    use cairndb_etcd::testing::cluster_or_skip;

    #[test]
    fn the_etcd_document_rows_run_beside_the_embedded_engine() {
        let Some(cluster) =
            cluster_or_skip("the_etcd_document_rows_run_beside_the_embedded_engine").unwrap()
        else {
            return;
        };
        let url = cluster.url("bench-docs");
        let args = DocArgs {
            common: CommonArgs {
                scale: Some(60),
                ..CommonArgs::default()
            },
            suite: DocSuiteSel::All,
            backend: Some(url.clone()),
        };
        let mut out = Vec::new();
        run(&args, &url, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        // The figures, for `--nocapture`.
        eprintln!("{text}");
        assert!(
            text.starts_with("# cairn bench docs --backend etcd"),
            "{text}"
        );
        assert!(text.contains("etcd members: 3 ("), "{text}");
        assert!(text.contains("etcd fsync: "), "{text}");
        // The cluster's costs head the report, above the lines kept
        // while the rows ran.
        let costs = text.find("etcd backend commit during the run").unwrap();
        assert!(
            costs < text.find("etcd requests per one-document insert").unwrap(),
            "{text}"
        );
        assert!(
            text.contains("etcd network: a get of a missing key"),
            "{text}"
        );
        assert!(!text.contains("not reported"), "{text}");
        for m in cluster.members() {
            let endpoint = format!("http://{}", m.client_address());
            assert!(text.contains(&endpoint), "{text}");
        }
        assert!(text.contains("documents: 60 loaded"), "{text}");
        let requests: u64 = text
            .split("etcd requests per one-document insert: ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("the requests of an insert: {text}"));
        assert!((1..100).contains(&requests), "{text}");
        let rows: Vec<Vec<&str>> = text
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| row"))
            .map(|l| l.trim_matches('|').split(" | ").collect())
            .collect();
        let names: Vec<&str> = rows.iter().map(|r| r[0].trim()).collect();
        assert_eq!(
            names,
            [
                "insert one document (durable, 2 indexes)",
                "insert_many, 10 documents (per call)",
                "get by _id",
                "find on a secondary index, ~7 documents (per find)",
                "count on a secondary index (per count)",
                "update_one by _id (durable)",
                "$group over the collection, 360 documents (per aggregation)",
                "delete_one by _id (durable)",
            ],
            "{text}"
        );
        for r in &rows {
            for rate in [r[3], r[4]] {
                let rate: f64 = rate.trim().parse().unwrap();
                assert!(rate > 0.0, "{}: {text}", r[0]);
            }
        }
        // The run dropped its collections from the prefix.
        let db = EtcdDatabase::connect(&url).unwrap();
        assert!(db.list_collections().unwrap().is_empty());
        // The scale is bounded whatever is asked.
        let mut big = args.clone();
        big.common.scale = Some(10_000_000);
        assert_eq!(loaded(&big), MAX_DOCS);
    }
}
