//! Criterion micro-benchmarks for the document codec (benchmark suite D,
//! "Mapper"): encode and decode of the three entity shapes of the LiteDB
//! mapper report — Simple, a value object built only through a validating
//! constructor, and Complex (nested, with a list of tags) — into a reused
//! buffer, straight between the struct and the bytes.
//!
//! The group `mapper/db` runs the entities through the database: 10,000
//! Complex entities stored with one `insert_many` (a fresh database per
//! iteration, `Durability::None`: the codec and the B-trees, not the
//! device flush), then all 10,000 read back by `_id` (`get`, decoded into
//! the struct).
//!
//! Run with `cargo bench -p cairndb --bench mapper`. Before the benchmarks
//! run, a counting global allocator checks that encoding into a reused
//! buffer allocates nothing (the process fails otherwise) and prints the
//! allocations and bytes each decode makes.

use std::alloc::{GlobalAlloc, Layout, System};
use std::fmt;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use cairndb::document::{codec, ObjectId, Value};
use cairndb::{Database, Durability};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

// ---------------------------------------------------------------------------
// Counting allocator

struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only adds relaxed counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and bytes allocated per call of `f`, over `n` calls.
fn count_allocs(n: usize, mut f: impl FnMut()) -> (f64, f64) {
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    for _ in 0..n {
        f();
    }
    let (a1, b1) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    ((a1 - a0) as f64 / n as f64, (b1 - b0) as f64 / n as f64)
}

// ---------------------------------------------------------------------------
// The entities (the same shapes as the library's unit-test fixtures)

/// Public fields: int, two strings, a timestamp, a bool, a double.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Simple {
    id: i32,
    name: String,
    email: String,
    created_at: i64,
    active: bool,
    score: f64,
}

/// A fixed-point decimal stored as its text; parsed and validated on read.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Decimal {
    units: i64,
    scale: u8,
}

impl Decimal {
    fn parse(s: &str) -> Result<Decimal, String> {
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let neg = int.starts_with('-');
        let digits = int.trim_start_matches('-');
        let ok = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
        if digits.is_empty() || !ok(digits) || !ok(frac) || frac.len() > 18 {
            return Err(format!("{s:?} is not a decimal"));
        }
        let mut units: i64 = 0;
        for b in digits.bytes().chain(frac.bytes()) {
            units = units
                .checked_mul(10)
                .and_then(|u| u.checked_add(i64::from(b - b'0')))
                .ok_or("decimal overflow")?;
        }
        Ok(Decimal {
            units: if neg { -units } else { units },
            scale: frac.len() as u8,
        })
    }
}

impl fmt::Display for Decimal {
    /// Digits into a stack buffer, one `write_str` (the `{}` machinery costs
    /// more than the rest of encoding the entity).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 44];
        let mut i = buf.len();
        let mut mag = self.units.unsigned_abs();
        let mut digits = 0;
        loop {
            if digits == usize::from(self.scale) && self.scale > 0 {
                i -= 1;
                buf[i] = b'.';
            }
            i -= 1;
            buf[i] = b'0' + (mag % 10) as u8;
            mag /= 10;
            digits += 1;
            if mag == 0 && digits > usize::from(self.scale) {
                break;
            }
        }
        if self.units < 0 {
            i -= 1;
            buf[i] = b'-';
        }
        f.write_str(std::str::from_utf8(&buf[i..]).map_err(|_| fmt::Error)?)
    }
}

impl Serialize for Decimal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Decimal;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a decimal string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Decimal, E> {
                Decimal::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// Value object: private fields, set only through `Order::new` (validating);
/// deserialization goes through the same constructor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "OrderFields")]
struct Order {
    id: i64,
    customer: String,
    amount: Decimal,
    currency: String,
    placed_at: i64,
}

#[derive(Deserialize)]
struct OrderFields {
    id: i64,
    customer: String,
    amount: Decimal,
    currency: String,
    placed_at: i64,
}

impl Order {
    fn new(
        id: i64,
        customer: String,
        amount: Decimal,
        currency: String,
        placed_at: i64,
    ) -> Result<Order, String> {
        if !customer.contains('@') {
            return Err("customer is not an email".into());
        }
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err("currency is not an ISO code".into());
        }
        if amount.units < 0 {
            return Err("negative amount".into());
        }
        Ok(Order {
            id,
            customer,
            amount,
            currency,
            placed_at,
        })
    }
}

impl TryFrom<OrderFields> for Order {
    type Error = String;
    fn try_from(f: OrderFields) -> Result<Order, String> {
        Order::new(f.id, f.customer, f.amount, f.currency, f.placed_at)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Address {
    street: String,
    city: String,
    zip: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Tag {
    name: String,
    value: String,
}

/// An id, a title, an address of 3 strings, 1–4 tags of 2 strings, a
/// timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Complex {
    id: ObjectId,
    title: String,
    address: Address,
    tags: Vec<Tag>,
    created_at: i64,
}

/// The same document read with borrowed strings (zero-copy decoding).
#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct ComplexView<'a> {
    id: ObjectId,
    title: &'a str,
    #[serde(borrow)]
    address: AddressView<'a>,
    #[serde(borrow)]
    tags: Vec<TagView<'a>>,
    created_at: i64,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct AddressView<'a> {
    street: &'a str,
    city: &'a str,
    zip: &'a str,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct TagView<'a> {
    name: &'a str,
    value: &'a str,
}

fn simple() -> Simple {
    Simple {
        id: 42,
        name: "Ada Lovelace".into(),
        email: "ada@example.com".into(),
        created_at: 1_738_454_400_123,
        active: true,
        score: 97.5,
    }
}

fn order() -> Order {
    Order::new(
        7001,
        "grace@example.com".into(),
        Decimal {
            units: 199_995,
            scale: 2,
        },
        "EUR".into(),
        1_738_454_400_456,
    )
    .expect("valid order")
}

fn complex(tags: usize) -> Complex {
    Complex {
        id: ObjectId::new(),
        title: "Quarterly report".into(),
        address: Address {
            street: "12 Harbour Road".into(),
            city: "Lisbon".into(),
            zip: "1100-001".into(),
        },
        tags: (0..tags)
            .map(|i| Tag {
                name: format!("tag{i}"),
                value: format!("value{i}"),
            })
            .collect(),
        created_at: 1_738_454_400_789,
    }
}

// ---------------------------------------------------------------------------

type EncodeFn = Box<dyn Fn(&mut Vec<u8>)>;

/// Encoding into a reused buffer must not allocate; prints what each decode
/// allocates. Exits non-zero on an allocating encode.
fn check_allocations() {
    let cases: Vec<(&str, EncodeFn)> = vec![
        (
            "simple",
            Box::new({
                let v = simple();
                move |b: &mut Vec<u8>| codec::encode_into(&v, b).expect("encode")
            }),
        ),
        (
            "value_object",
            Box::new({
                let v = order();
                move |b: &mut Vec<u8>| codec::encode_into(&v, b).expect("encode")
            }),
        ),
        (
            "complex_4_tags",
            Box::new({
                let v = complex(4);
                move |b: &mut Vec<u8>| codec::encode_into(&v, b).expect("encode")
            }),
        ),
    ];
    let mut failed = false;
    for (name, enc) in &cases {
        let mut buf = Vec::with_capacity(4096);
        let (allocs, bytes) = count_allocs(10_000, || {
            buf.clear();
            enc(&mut buf);
            black_box(&buf);
        });
        eprintln!(
            "alloc check: encode {name}: {allocs} allocations, {bytes} bytes per call ({} bytes encoded)",
            buf.len()
        );
        failed |= allocs != 0.0;
    }
    let s = codec::to_vec(&simple()).expect("encode");
    let o = codec::to_vec(&order()).expect("encode");
    let c = codec::to_vec(&complex(4)).expect("encode");
    let report = |name: &str, (a, b): (f64, f64)| {
        eprintln!("alloc check: decode {name}: {a} allocations, {b} bytes per call");
    };
    report(
        "simple",
        count_allocs(1000, || {
            black_box(codec::from_slice::<Simple>(&s).expect("decode"));
        }),
    );
    report(
        "value_object",
        count_allocs(1000, || {
            black_box(codec::from_slice::<Order>(&o).expect("decode"));
        }),
    );
    report(
        "complex_4_tags",
        count_allocs(1000, || {
            black_box(codec::from_slice::<Complex>(&c).expect("decode"));
        }),
    );
    report(
        "complex_4_tags_borrowed",
        count_allocs(1000, || {
            black_box(codec::from_slice::<ComplexView<'_>>(&c).expect("decode"));
        }),
    );
    if failed {
        eprintln!("alloc check FAILED: encoding into a reused buffer allocated");
        std::process::exit(1);
    }
}

/// Nanoseconds per call of `f`: the fastest of 200 batches of 2,000 calls.
/// The minimum is robust to other processes sharing the CPU; criterion's
/// figures below are means.
fn min_batch_ns(mut f: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..200 {
        let t = Instant::now();
        for _ in 0..2000 {
            f();
        }
        best = best.min(t.elapsed().as_nanos() as f64 / 2000.0);
    }
    best
}

/// Prints the min-of-batches figure for every benchmark (see `min_batch_ns`).
fn quick_report() {
    let (s, o, c1, c4) = (simple(), order(), complex(1), complex(4));
    let mut buf = Vec::with_capacity(4096);
    let mut enc = |name: &str, f: &dyn Fn(&mut Vec<u8>)| {
        let ns = min_batch_ns(|| {
            buf.clear();
            f(&mut buf);
            black_box(&buf);
        });
        eprintln!("min-batch: encode {name}: {ns:.1} ns");
    };
    enc("simple", &|b| codec::encode_into(&s, b).expect("encode"));
    enc("value_object", &|b| {
        codec::encode_into(&o, b).expect("encode")
    });
    enc("complex_1_tag", &|b| {
        codec::encode_into(&c1, b).expect("encode")
    });
    enc("complex_4_tags", &|b| {
        codec::encode_into(&c4, b).expect("encode")
    });
    let (bs, bo, b1, b4) = (
        codec::to_vec(&s).expect("encode"),
        codec::to_vec(&o).expect("encode"),
        codec::to_vec(&c1).expect("encode"),
        codec::to_vec(&c4).expect("encode"),
    );
    let dec = |name: &str, f: &dyn Fn()| {
        eprintln!("min-batch: decode {name}: {:.1} ns", min_batch_ns(f));
    };
    dec("simple", &|| {
        black_box(codec::from_slice::<Simple>(&bs).expect("decode"));
    });
    dec("value_object", &|| {
        black_box(codec::from_slice::<Order>(&bo).expect("decode"));
    });
    dec("complex_1_tag", &|| {
        black_box(codec::from_slice::<Complex>(&b1).expect("decode"));
    });
    dec("complex_4_tags", &|| {
        black_box(codec::from_slice::<Complex>(&b4).expect("decode"));
    });
    dec("complex_4_tags_borrowed", &|| {
        black_box(codec::from_slice::<ComplexView<'_>>(&b4).expect("decode"));
    });
    dec("complex_4_tags_dynamic_value", &|| {
        black_box(codec::decode_value(&b4).expect("decode"));
    });
}

fn mapper(c: &mut Criterion) {
    check_allocations();
    quick_report();

    let simple = simple();
    let order = order();
    let complex1 = complex(1);
    let complex4 = complex(4);
    let mut buf = Vec::with_capacity(4096);

    let mut g = c.benchmark_group("mapper/encode");
    g.bench_function("simple", |b| {
        b.iter(|| {
            buf.clear();
            codec::encode_into(black_box(&simple), &mut buf).expect("encode");
            black_box(buf.len())
        })
    });
    g.bench_function("value_object", |b| {
        b.iter(|| {
            buf.clear();
            codec::encode_into(black_box(&order), &mut buf).expect("encode");
            black_box(buf.len())
        })
    });
    g.bench_function("complex_1_tag", |b| {
        b.iter(|| {
            buf.clear();
            codec::encode_into(black_box(&complex1), &mut buf).expect("encode");
            black_box(buf.len())
        })
    });
    g.bench_function("complex_4_tags", |b| {
        b.iter(|| {
            buf.clear();
            codec::encode_into(black_box(&complex4), &mut buf).expect("encode");
            black_box(buf.len())
        })
    });
    g.finish();

    let s = codec::to_vec(&simple).expect("encode");
    let o = codec::to_vec(&order).expect("encode");
    let c1 = codec::to_vec(&complex1).expect("encode");
    let c4 = codec::to_vec(&complex4).expect("encode");
    assert_eq!(codec::from_slice::<Simple>(&s).expect("decode"), simple);
    assert_eq!(codec::from_slice::<Order>(&o).expect("decode"), order);
    for (units, scale, text) in [
        (199_995, 2, "1999.95"),
        (5, 3, "0.005"),
        (-7, 0, "-7"),
        (0, 1, "0.0"),
    ] {
        assert_eq!(Decimal { units, scale }.to_string(), text);
    }
    assert_eq!(codec::from_slice::<Complex>(&c4).expect("decode"), complex4);

    let mut g = c.benchmark_group("mapper/decode");
    g.bench_function("simple", |b| {
        b.iter(|| codec::from_slice::<Simple>(black_box(&s)).expect("decode"))
    });
    g.bench_function("value_object", |b| {
        b.iter(|| codec::from_slice::<Order>(black_box(&o)).expect("decode"))
    });
    g.bench_function("complex_1_tag", |b| {
        b.iter(|| codec::from_slice::<Complex>(black_box(&c1)).expect("decode"))
    });
    g.bench_function("complex_4_tags", |b| {
        b.iter(|| codec::from_slice::<Complex>(black_box(&c4)).expect("decode"))
    });
    g.bench_function("complex_4_tags_borrowed", |b| {
        b.iter(|| codec::from_slice::<ComplexView<'_>>(black_box(&c4)).expect("decode"))
    });
    g.bench_function("complex_4_tags_dynamic_value", |b| {
        b.iter(|| codec::decode_value(black_box(&c4)).expect("decode"))
    });
    g.finish();
}

/// Entities in the `mapper/db` group.
const DB_ENTITIES: usize = 10_000;

/// `DB_ENTITIES` Complex entities (1–4 tags), each with its own id.
fn complex_entities() -> Vec<Complex> {
    (0..DB_ENTITIES)
        .map(|i| {
            let mut c = complex(1 + i % 4);
            c.title = format!("Report {i}");
            c
        })
        .collect()
}

/// A fresh database in a temporary directory (kept alive beside it).
fn fresh_db() -> (tempfile::TempDir, Database) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = Database::create(dir.path().join("mapper.cairn")).expect("create");
    (dir, db)
}

fn mapper_db(c: &mut Criterion) {
    let entities = complex_entities();
    let mut g = c.benchmark_group("mapper/db");
    g.sample_size(10);
    g.bench_function("complex_10k_insert_many", |b| {
        b.iter_batched(
            fresh_db,
            |(dir, db)| {
                let ids = db
                    .collection::<Complex>("complex")
                    .with_durability(Durability::None)
                    .insert_many(black_box(&entities))
                    .expect("insert_many");
                assert_eq!(ids.len(), DB_ENTITIES);
                (dir, db)
            },
            BatchSize::PerIteration,
        )
    });
    let (_dir, db) = fresh_db();
    let coll = db
        .collection::<Complex>("complex")
        .with_durability(Durability::None);
    let ids: Vec<Value> = coll.insert_many(&entities).expect("insert_many");
    g.bench_function("complex_10k_find_by_id", |b| {
        b.iter(|| {
            let mut tags = 0;
            for id in &ids {
                let e = coll.get(id.clone()).expect("get").expect("found");
                tags += e.tags.len();
            }
            black_box(tags)
        })
    });
    g.finish();
}

criterion_group!(benches, mapper, mapper_db);
criterion_main!(benches);
