//! Suite D's entities (typed serde structs, as an application maps them) and
//! their seeded generators. Everything here runs before the timed regions.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::data::Rng;

/// Seed of the LiteDB-shaped entities.
pub const SEED_LITE: u64 = 0x000D_11E0_0B5E_ED00;
/// Seed of the tiedot documents, ids and queries (each phase and worker
/// derives its own stream from it).
pub const SEED_TIEDOT: u64 = 0x000D_71ED_07B5_EED0;

// ---------------------------------------------------------------------------
// The LiteDB write table (seed 000): a game save's entities

/// A 3-vector of `float`s (as a game engine stores them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Vec3 {
    pub x: f32,
    pub y: f32,
    pub z: f32,
}

/// A rotation quaternion.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quat {
    pub x: f32,
    pub y: f32,
    pub z: f32,
    pub w: f32,
}

/// Position, rotation and scale.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Transform {
    pub position: Vec3,
    pub rotation: Quat,
    pub scale: Vec3,
}

/// A property value: the map is heterogeneous (numbers and text).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prop {
    Int(i64),
    Float(f64),
    Text(String),
}

/// One saved entity: its save-slot key is the `_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entity {
    /// `save-<slot>/entity-<id>`.
    #[serde(rename = "_id")]
    pub key: String,
    pub id: u64,
    pub transform: Transform,
    /// health, mana, level, name.
    pub properties: BTreeMap<String, Prop>,
}

fn unit_f32(rng: &mut Rng) -> f32 {
    (rng.next_u64() >> 40) as f32 / (1u64 << 24) as f32
}

/// `n` entities of save slot `slot`; `generation` changes every value but
/// the keys (generation 0: the originals; 1: what an upsert over existing
/// ids writes).
pub fn entities(n: usize, slot: u32, generation: u64) -> Vec<Entity> {
    let mut rng = Rng::new(SEED_LITE ^ (u64::from(slot) << 32) ^ generation);
    (0..n as u64)
        .map(|id| {
            let mut v3 = |scale: f32| Vec3 {
                x: (unit_f32(&mut rng) - 0.5) * scale,
                y: (unit_f32(&mut rng) - 0.5) * scale,
                z: (unit_f32(&mut rng) - 0.5) * scale,
            };
            let position = v3(1000.0);
            let scale = v3(2.0);
            let rotation = Quat {
                x: unit_f32(&mut rng),
                y: unit_f32(&mut rng),
                z: unit_f32(&mut rng),
                w: unit_f32(&mut rng),
            };
            let mut properties = BTreeMap::new();
            properties.insert(
                "health".to_string(),
                Prop::Float(f64::from(unit_f32(&mut rng)) * 100.0 + 0.5),
            );
            properties.insert(
                "mana".to_string(),
                Prop::Float(f64::from(unit_f32(&mut rng)) * 50.0 + 0.25),
            );
            properties.insert(
                "level".to_string(),
                Prop::Int(1 + rng.below(60) as i64 + generation as i64),
            );
            properties.insert(
                "name".to_string(),
                Prop::Text(format!("Goblin #{id} (gen {generation})")),
            );
            Entity {
                key: format!("save-{slot:02}/entity-{id:06}"),
                id,
                transform: Transform {
                    position,
                    rotation,
                    scale,
                },
                properties,
            }
        })
        .collect()
}

// ---------------------------------------------------------------------------
// tiedot's benchmark document (seed 002, benchmark/benchmark.go)

/// `nested.nested`: a string, an int and a float, each indexed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inner {
    #[serde(rename = "str")]
    pub s: String,
    #[serde(rename = "int")]
    pub i: i64,
    #[serde(rename = "float")]
    pub f: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outer {
    pub nested: Inner,
}

/// `{nested:{nested:{str,int,float}}, strs:[2], ints:[2], floats:[2]}` with
/// a harness-assigned integer `_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TdDoc {
    #[serde(rename = "_id")]
    pub id: i64,
    pub nested: Outer,
    pub strs: Vec<String>,
    pub ints: Vec<i64>,
    pub floats: Vec<f64>,
}

/// tiedot's lookup query: `(eq(nested.nested.int, a) XOR eq(ints, b)) ∪
/// ints ∈ [r, r + 2]` (its `{"c": [...]}` is a symmetric difference, the
/// outer list a union, `int-from`/`int-to` a range of hash lookups).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup {
    pub a: i64,
    pub b: i64,
    pub r: i64,
}

fn unit_f64(rng: &mut Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// A float formatted as tiedot formats its string fields (`%.6f`).
fn float_text(rng: &mut Rng) -> String {
    format!("{:.6}", unit_f64(rng))
}

/// tiedot's `sampleDoc`: ints drawn below `n` (the benchmark size), floats
/// in [0, 1), strings the text of such floats.
pub fn td_doc(rng: &mut Rng, id: i64, n: usize) -> TdDoc {
    let n = n.max(1);
    let s = float_text(rng);
    let i = rng.below(n) as i64;
    let f = unit_f64(rng);
    let strs = vec![float_text(rng), float_text(rng)];
    let ints = vec![rng.below(n) as i64, rng.below(n) as i64];
    // tiedot draws these as float32.
    let floats = vec![
        f64::from(unit_f64(rng) as f32),
        f64::from(unit_f64(rng) as f32),
    ];
    TdDoc {
        id,
        nested: Outer {
            nested: Inner { s, i, f },
        },
        strs,
        ints,
        floats,
    }
}

/// tiedot's `sampleQuery`.
pub fn td_lookup(rng: &mut Rng, n: usize) -> Lookup {
    let n = n.max(1);
    let a = rng.below(n) as i64;
    let b = rng.below(n) as i64;
    let r = rng.below(n) as i64;
    Lookup { a, b, r }
}

impl Lookup {
    /// Whether `d` matches (the reference the engines' answers are checked
    /// against in the tests).
    #[cfg(test)]
    pub fn matches(&self, d: &TdDoc) -> bool {
        let x = d.nested.nested.i == self.a;
        let y = d.ints.contains(&self.b);
        (x != y) || d.ints.iter().any(|v| (self.r..=self.r + 2).contains(v))
    }
}

/// A seeded stream for one phase and worker.
pub fn stream(phase: u64, worker: usize) -> Rng {
    Rng::new(SEED_TIEDOT ^ phase.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ((worker as u64) << 48))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_deterministic() {
        assert_eq!(entities(5, 3, 0), entities(5, 3, 0));
        let (a, b) = (entities(5, 3, 0), entities(5, 3, 1));
        assert_eq!(a[2].key, b[2].key);
        assert_ne!(a[2], b[2]);
        let d1 = td_doc(&mut stream(1, 0), 7, 100);
        let d2 = td_doc(&mut stream(1, 0), 7, 100);
        assert_eq!(d1, d2);
        assert!(d1.ints.iter().all(|v| (0..100).contains(v)));
        assert_eq!(d1.nested.nested.s.len(), 8);
    }

    #[test]
    fn lookup_is_xor_then_union() {
        let mut d = td_doc(&mut stream(2, 0), 1, 1000);
        d.nested.nested.i = 5;
        d.ints = vec![9, 500];
        let q = |a, b, r| Lookup { a, b, r };
        assert!(q(5, 1, 900).matches(&d));
        assert!(q(6, 9, 900).matches(&d));
        assert!(!q(5, 9, 900).matches(&d), "in both: the XOR drops it");
        assert!(q(5, 9, 498).matches(&d), "the range adds it back");
        assert!(!q(6, 8, 501).matches(&d));
    }
}
