//! scratch profiling driver (not committed)
use cairndb::{Database, Durability};
use serde::{Deserialize, Serialize};
use std::time::Instant;

#[derive(Serialize, Deserialize, Clone)]
struct Inner {
    #[serde(rename = "str")]
    s: String,
    #[serde(rename = "int")]
    i: i64,
    #[serde(rename = "float")]
    f: f64,
}
#[derive(Serialize, Deserialize, Clone)]
struct Outer {
    nested: Inner,
}
#[derive(Serialize, Deserialize, Clone)]
struct Doc {
    #[serde(rename = "_id")]
    id: i64,
    nested: Outer,
    strs: Vec<String>,
    ints: Vec<i64>,
    floats: Vec<f64>,
}

struct R(u64);
impl R {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E3779B97F4A7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58476D1CE4E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D049BB133111EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn f(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}
fn doc(r: &mut R, id: i64, n: u64) -> Doc {
    Doc {
        id,
        nested: Outer {
            nested: Inner {
                s: r.f().to_string(),
                i: r.below(n) as i64,
                f: r.f(),
            },
        },
        strs: vec![r.f().to_string(), r.f().to_string()],
        ints: vec![r.below(n) as i64, r.below(n) as i64],
        floats: vec![r.f() as f32 as f64, r.f() as f32 as f64],
    }
}
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = args.get(1).map(|s| s.parse().unwrap()).unwrap_or(30000);
    let phases = args.get(2).cloned().unwrap_or("iud".into());
    let dir = tempfile::tempdir().unwrap();
    let ov: usize = std::env::var("OV")
        .ok()
        .map(|s| s.parse().unwrap())
        .unwrap_or(64);
    let db = Database::builder()
        .overlay_size(ov << 20)
        .create(dir.path().join("x.cairn"))
        .unwrap();
    let c = db
        .collection::<Doc>("docs")
        .with_durability(Durability::None);
    for p in [
        "nested.nested.str",
        "nested.nested.int",
        "nested.nested.float",
        "strs",
        "ints",
        "floats",
    ] {
        c.create_index(&[(p, 1)], Default::default()).unwrap();
    }
    let mut r = R(7);
    let t = Instant::now();
    for id in 0..n as i64 {
        c.insert(&doc(&mut r, id, n)).unwrap();
    }
    eprintln!("insert {:.0}/s", n as f64 / t.elapsed().as_secs_f64());
    if phases.contains('u') {
        let t = Instant::now();
        for _ in 0..n {
            let id = r.below(n) as i64;
            c.replace(&doc(&mut r, id, n)).unwrap();
        }
        eprintln!("update {:.0}/s", n as f64 / t.elapsed().as_secs_f64());
    }
    if phases.contains('d') {
        let t = Instant::now();
        for _ in 0..n {
            let id = r.below(n) as i64;
            c.delete_id(id).unwrap();
        }
        eprintln!("delete {:.0}/s", n as f64 / t.elapsed().as_secs_f64());
    }
}
