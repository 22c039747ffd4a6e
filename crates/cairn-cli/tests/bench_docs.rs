//! End-to-end test of `cairn bench docs` (suite D): a quick run writes the
//! JSON with every row of both sub-suites and a well-formed SVG chart. No
//! timing is asserted, only that each figure is there and positive.

use std::process::{Command, Output};

fn cairn(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .output()
        .expect("run cairn")
}

#[test]
fn bench_docs_quick_writes_json_and_svg() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("docs.json");
    let charts = dir.path().join("charts");
    let work = dir.path().join("work");
    let r = cairn(&[
        "bench",
        "docs",
        "--quick",
        "--engines",
        "cairn",
        "--scale",
        "300",
        // Mode D is fsync-bound (seconds); the unit test `tiny_suite_d`
        // runs both modes.
        "--durability",
        "n",
        "--fsync-samples",
        "3",
        "--no-progress",
        "--dir",
        work.to_str().expect("utf-8 path"),
        "--json",
        json.to_str().expect("utf-8 path"),
        "--svg",
        charts.to_str().expect("utf-8 path"),
    ]);
    let stdout = String::from_utf8_lossy(&r.stdout);
    let stderr = String::from_utf8_lossy(&r.stderr);
    assert!(
        r.status.success(),
        "exit {:?}\n{stdout}\n{stderr}",
        r.status
    );
    for needle in [
        "## Suite D — LiteDB write table",
        "## Suite D — tiedot bench",
        "Upsert ÷ insert",
        "CairnDB ÷ tiedot",
        "| 100 entities: bulk upsert, half new (N)",
        "PoloDB",
    ] {
        assert!(stdout.contains(needle), "no {needle:?} in\n{stdout}");
    }
    assert!(!stdout.contains("stopped"), "{stdout}");

    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON");
    let rows = j["rows"].as_array().expect("rows");
    let value = |id: &str| {
        rows.iter()
            .find(|r| r["id"] == id && r["engine"] == "cairndb")
            .and_then(|r| {
                assert_eq!(r["suite"], "D", "{r}");
                r["value"].as_f64()
            })
    };
    let mut ids: Vec<String> = Vec::new();
    for op in [
        "ind-insert",
        "bulk-insert",
        "ind-upsert-new",
        "ind-upsert-existing",
        "bulk-upsert-new",
        "bulk-upsert-existing",
        "bulk-upsert-half",
    ] {
        for n in [10, 100] {
            ids.push(format!("D-lite-{op}/{n}/N"));
        }
    }
    for phase in ["insert", "update", "delete", "mixed"] {
        ids.push(format!("D-tiedot-{phase}/N"));
    }
    for id in ["D-tiedot-read", "D-tiedot-lookup", "D-tiedot-size"] {
        ids.push(id.to_string());
    }
    for id in &ids {
        let v = value(id);
        assert!(
            v.is_some_and(|v| v.is_finite() && v > 0.0),
            "row {id}: {v:?}"
        );
    }
    assert_eq!(rows.len(), ids.len(), "unexpected rows");
    // Durability is parsed from the ids.
    assert!(rows
        .iter()
        .any(|r| r["id"] == "D-tiedot-insert/N" && r["durability"] == "N"));
    assert!(!stdout.contains("(D) |"), "--durability n ran D rows");
    let ratios = j["upsert_ratios"].as_array().expect("upsert_ratios");
    assert_eq!(ratios.len(), 2, "{ratios:?}");
    assert!(ratios.iter().all(|r| r["bulk_upsert_new_over_bulk_insert"]
        .as_f64()
        .is_some_and(|v| v > 0.0)));
    let td = j["tiedot_ratios"].as_array().expect("tiedot_ratios");
    assert_eq!(td.len(), 6, "{td:?}");
    assert_eq!(j["counts"]["tiedot_docs"], 300);
    assert_eq!(j["polodb"]["ran"], false);
    assert!(j["machine"]["fsync_floor_us"]["p50"].is_number());

    let svg = std::fs::read_to_string(charts.join("suite-d.svg")).expect("suite-d.svg");
    let doc = roxmltree::Document::parse(&svg).expect("well-formed SVG");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let count = |name: &str| {
        root.descendants()
            .filter(|n| n.tag_name().name() == name)
            .count()
    };
    assert!(count("rect") > ids.len(), "{} rects", count("rect"));
    assert!(count("text") > ids.len(), "{} texts", count("text"));
    assert!(svg.contains("bulk upsert"), "labels missing");

    let r = cairn(&["bench", "docs", "--suite", "nope"]);
    assert_eq!(r.status.code(), Some(1), "bench docs --suite nope");
}
