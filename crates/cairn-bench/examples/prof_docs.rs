//! Profiling aid: bulk insert vs bulk upsert of LiteDB-shaped entities.
use cairndb::document::IndexOptions;
use cairndb::{Database, Durability};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Serialize, Deserialize, Clone)]
struct Transform {
    position: [f32; 3],
    rotation: [f32; 4],
    scale: [f32; 3],
}

#[derive(Serialize, Deserialize, Clone)]
struct Entity {
    #[serde(rename = "_id")]
    id: String,
    transform: Transform,
    properties: BTreeMap<String, serde_json::Value>,
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let mk = |i: usize| Entity {
        id: format!("slot-{i:05}"),
        transform: Transform {
            position: [i as f32, 2.0, 3.0],
            rotation: [0.0, 0.0, 0.0, 1.0],
            scale: [1.0; 3],
        },
        properties: [("health", 100), ("mana", 50), ("level", 3)]
            .into_iter()
            .map(|(k, v)| (k.to_string(), serde_json::json!(v)))
            .chain([("name".to_string(), serde_json::json!(format!("unit {i}")))])
            .collect(),
    };
    let docs: Vec<Entity> = (0..n).map(mk).collect();
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::create(dir.path().join("p.cairn")).unwrap();
        let c = db
            .collection::<Entity>("e")
            .with_durability(Durability::None);
        c.create_index(&[("properties.level", 1)], IndexOptions::default())
            .unwrap();
        let t = Instant::now();
        c.insert_many(&docs).unwrap();
        let ins = t.elapsed();
        let c2 = db
            .collection::<Entity>("u")
            .with_durability(Durability::None);
        c2.create_index(&[("properties.level", 1)], IndexOptions::default())
            .unwrap();
        let t = Instant::now();
        c2.upsert_many(&docs).unwrap();
        let ups_new = t.elapsed();
        let t = Instant::now();
        c2.upsert_many(&docs).unwrap();
        let ups_old = t.elapsed();
        println!(
            "round {round}: n={n} insert_many {:?}  upsert_many new {:?} ({:.2}x)  existing {:?} ({:.2}x)",
            ins,
            ups_new,
            ups_new.as_secs_f64() / ins.as_secs_f64(),
            ups_old,
            ups_old.as_secs_f64() / ins.as_secs_f64()
        );
    }
}
