//! The document planner's queries of issue 18 on a generated collection of
//! orders: for each query, the plan `explain` reports, the index keys and
//! documents it examined, the results, and the median time of five runs.
//!
//! ```sh
//! cargo run -j1 --profile test -p cairndb --example planner_queries -- 500000
//! cargo run -j1 --release -p cairndb --example planner_queries -- 200000 crossover
//! ```
//!
//! `crossover` times, instead, a range on `total` covering a growing share
//! of the orders read through the `total` index (hinted) and by a
//! collection scan (`$natural`): where the index stops paying is the
//! planner's `SCAN_FRACTION_PERCENT` (a query reading whole documents;
//! a covered query reads no document and keeps the index).
//!
//! The orders are generated from a fixed seed (the same collection every
//! run): `total` 0..3,199, `status` one of four, `created` a timestamp
//! growing with `_id`, `customer.address.city` (missing in 1 % of the
//! orders), 1 to 3 `items` with `sku` and `qty`. Indexes: `total`,
//! `{status: 1, created: -1}`, `customer.address.city`, `items.sku`.

use std::time::Instant;

use cairndb::document::query::FindOptions;
use cairndb::document::{Document, IndexOptions, Value};
use cairndb::{Database, Durability};
use serde_json::json;

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const STATUSES: [&str; 4] = ["paid", "shipped", "new", "cancelled"];
const CREATED_BASE: i64 = 1_700_000_000;

fn order(rng: &mut Rng, i: i64) -> Document {
    let mut address = json!({"street": format!("{} Main St", rng.below(999))});
    if rng.below(100) != 0 {
        address["city"] = json!(format!("city-{}", rng.below(50)));
    }
    let items: Vec<serde_json::Value> = (0..1 + rng.below(3))
        .map(|_| json!({"sku": format!("SKU-{}", rng.below(1000)), "qty": 1 + rng.below(5)}))
        .collect();
    let j = json!({
        "_id": i,
        "total": rng.below(3200),
        "status": STATUSES[rng.below(4) as usize],
        "created": CREATED_BASE + i * 60,
        "customer": {"name": format!("customer-{}", rng.below(20_000)), "address": address},
        "items": items,
    });
    match Value::from_json(j) {
        Ok(Value::Object(d)) => d,
        _ => Document::new(),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: i64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(500_000);
    let dir = std::env::temp_dir().join(format!("cairn-planner-queries-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("orders.cairn");
    let crossover = std::env::args().nth(2).as_deref() == Some("crossover");
    let result = run(&path, n, crossover);
    std::fs::remove_dir_all(&dir)?;
    result
}

fn run(path: &std::path::Path, n: i64, crossover: bool) -> Result<(), Box<dyn std::error::Error>> {
    let db = Database::create(path)?;
    let c = db
        .collection::<Document>("orders")
        .with_durability(Durability::None);
    c.create_index(&[("total", 1)], IndexOptions::default())?;
    c.create_index(&[("status", 1), ("created", -1)], IndexOptions::default())?;
    c.create_index(&[("customer.address.city", 1)], IndexOptions::default())?;
    c.create_index(&[("items.sku", 1)], IndexOptions::default())?;
    let t = Instant::now();
    let mut rng = Rng(18);
    let mut i = 0;
    while i < n {
        let batch: Vec<Document> = (i..(i + 10_000).min(n))
            .map(|k| order(&mut rng, k))
            .collect();
        c.insert_many(&batch)?;
        i += 10_000;
    }
    println!("{n} orders loaded in {:.1} s", t.elapsed().as_secs_f64());
    if crossover {
        return crossover_table(&c);
    }
    let recent = CREATED_BASE + (n - n / 70) * 60;
    let queries: Vec<(&str, serde_json::Value, FindOptions)> = vec![
        (
            "range on total",
            json!({"total": {"$gt": 1000, "$lte": 1010}}),
            FindOptions::new(),
        ),
        (
            "status + created range",
            json!({"status": "shipped", "created": {"$gte": recent}}),
            FindOptions::new(),
        ),
        (
            "status, sort created desc, limit 10",
            json!({"status": "paid"}),
            FindOptions::new().sort(json!({"created": -1}))?.limit(10),
        ),
        (
            "_id range",
            json!({"_id": {"$gte": n / 2, "$lt": n / 2 + 1000}}),
            FindOptions::new(),
        ),
        (
            "city null",
            json!({"customer.address.city": null}),
            FindOptions::new(),
        ),
        (
            "$elemMatch on items",
            json!({"items": {"$elemMatch": {"sku": "SKU-123", "qty": {"$gte": 4}}}}),
            FindOptions::new(),
        ),
        // Covered (answered from the index alone) against the same bounds
        // reading the documents (a projection the index does not cover).
        (
            "range on total, projection {status, total}",
            json!({"total": {"$gt": 1000, "$lte": 1100}}),
            FindOptions::new().projection(json!({"status": 1, "total": 1, "_id": 0}))?,
        ),
        (
            "range on total, projection {total} (covered)",
            json!({"total": {"$gt": 1000, "$lte": 1100}}),
            FindOptions::new().projection(json!({"total": 1, "_id": 0}))?,
        ),
        (
            "status + created, projection {status, created} (covered)",
            json!({"status": "shipped", "created": {"$gte": recent}}),
            FindOptions::new().projection(json!({"status": 1, "created": 1}))?,
        ),
        (
            "total != null, projection {total} (covered)",
            json!({"total": {"$ne": null}}),
            FindOptions::new().projection(json!({"total": 1, "_id": 0}))?,
        ),
        (
            "$or of two indexes, limit 10",
            json!({"$or": [{"total": {"$lt": 20}}, {"customer.address.city": "city-7"}]}),
            FindOptions::new().limit(10),
        ),
        (
            "status $in, sort created desc, limit 10",
            json!({"status": {"$in": ["paid", "new"]}}),
            FindOptions::new().sort(json!({"created": -1}))?.limit(10),
        ),
        (
            "city $in with an anchored regex",
            json!({"customer.address.city": {"$in": [{"$regex": "^city-4"}, "city-7"]}}),
            FindOptions::new(),
        ),
    ];
    println!("| query | plan | keys examined | docs examined | returned | median ms |");
    println!("|---|---|---:|---:|---:|---:|");
    for (name, q, opts) in queries {
        let e = c.explain(q.clone(), opts.clone())?;
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            let got = c.find_with(q.clone(), opts.clone())?.count();
            times.push(t.elapsed().as_secs_f64() * 1000.0);
            if got as u64 != e.returned {
                return Err(format!("{name}: {got} results, explain said {}", e.returned).into());
            }
        }
        times.sort_by(f64::total_cmp);
        println!(
            "| {name} `{q}` | {} | {} | {} | {} | {:.1} |",
            e.plan, e.keys_examined, e.docs_examined, e.returned, times[2]
        );
    }
    Ok(())
}

/// The median time of three runs of `q` with `opts`, in ms, and its
/// results.
fn median_ms(
    c: &cairndb::document::Collection<'_, Document>,
    q: &serde_json::Value,
    opts: &FindOptions,
) -> Result<(f64, usize), Box<dyn std::error::Error>> {
    let mut times = Vec::new();
    let mut got = 0;
    for _ in 0..3 {
        let t = Instant::now();
        got = c.find_with(q.clone(), opts.clone())?.count();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[1], got))
}

/// A range on `total` over a growing share of the orders: through the
/// index and by a collection scan, and what the planner chooses.
fn crossover_table(
    c: &cairndb::document::Collection<'_, Document>,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("| share | results | index ms | scan ms | planner's plan |");
    println!("|---:|---:|---:|---:|---|");
    for pct in [5u64, 10, 15, 20, 25, 30, 40, 50, 70, 100] {
        let q = json!({"total": {"$lt": 3200 * pct / 100}});
        let by_index = FindOptions::new().hint(json!({"total": 1}))?;
        let by_scan = FindOptions::new().hint(json!({"$natural": 1}))?;
        let (ix, got) = median_ms(c, &q, &by_index)?;
        let (scan, _) = median_ms(c, &q, &by_scan)?;
        c.clear_plan_cache()?;
        let e = c.explain(q.clone(), FindOptions::new())?;
        println!("| {pct} % | {got} | {ix:.0} | {scan:.0} | {} |", e.plan);
    }
    Ok(())
}
