//! Documents: a typed collection of serde structs, a secondary index, a
//! query with sort and limit, an update with operators, bulk upsert, and
//! `explain()`.
//!
//! Run with `cargo run -p cairndb --example documents`.

use cairndb::document::query::{FindOptions, UpdateOptions};
use cairndb::document::IndexOptions;
use cairndb::Database;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Any `Serialize + Deserialize` type is a document; `_id` is the key
/// (supplied here; leave it out of the struct to have one generated).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Player {
    #[serde(rename = "_id")]
    id: String,
    name: String,
    level: u32,
    tags: Vec<String>,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("docs.cairn"))?;
    let players = db.collection::<Player>("players");

    // A secondary index (built over existing documents in one transaction);
    // `tags` is an array, so the index is multikey.
    players.create_index(&[("level", 1)], IndexOptions::default())?;
    players.create_index(&[("tags", 1)], IndexOptions::default())?;

    // Bulk insert: one transaction.
    let all: Vec<Player> = (0..100)
        .map(|i| Player {
            id: format!("p{i:03}"),
            name: format!("player {i}"),
            level: i % 30,
            tags: vec![if i % 2 == 0 { "even" } else { "odd" }.to_string()],
        })
        .collect();
    players.insert_many(&all)?;

    // A query in the MongoDB-style filter language, sorted and limited.
    let top: Vec<Player> = players
        .find_with(
            json!({"level": {"$gte": 25}, "tags": "even"}),
            FindOptions::new().sort(json!({"level": -1}))?.limit(3),
        )?
        .collect::<Result<_, _>>()?;
    assert_eq!(top.len(), 3);
    assert!(top.iter().all(|p| p.level >= 25 && p.tags[0] == "even"));

    // How the planner ran it (index scans with bounds, intersections...).
    let plan = players.explain(json!({"level": {"$gte": 25}}), FindOptions::new())?;
    println!("plan: {:?}, {} entries read", plan.plan, plan.examined);

    // Update operators, applied atomically to every match.
    let r = players.update_many(
        json!({"level": 0}),
        json!({"$inc": {"level": 1}, "$addToSet": {"tags": "promoted"}}),
        UpdateOptions::default(),
    )?;
    println!("promoted {} players", r.modified);

    // Bulk upsert: existing ids are replaced, new ones inserted, in one
    // transaction; indexes follow.
    let mut changed = all[..10].to_vec();
    for p in &mut changed {
        p.level = 99;
    }
    players.upsert_many(&changed)?;
    assert_eq!(players.count(json!({"level": 99}))?, 10);
    assert_eq!(players.get("p000")?.map(|p| p.level), Some(99));
    Ok(())
}
