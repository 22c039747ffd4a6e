//! End-to-end runs of `cairn bench kv|events|docs` through the library: the
//! arguments parsed as the `cairn` tool parses them (its `bench` subcommand
//! embeds [`cairn_bench::BenchCmd`]), a quick run of each suite writing its
//! report, JSON and SVG charts. No timing is asserted, only that each figure
//! is there and positive and the charts are well-formed.

use std::path::Path;

use clap::Parser;

/// `cairn bench …` as the `cairn` tool parses it.
#[derive(Parser)]
#[command(name = "cairn")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    Bench(cairn_bench::BenchCmd),
}

/// Parses `cairn <args>` and runs the bench; the report, or why the
/// arguments or the run failed.
fn cairn(args: &[&str]) -> Result<String, String> {
    let cli = Cli::try_parse_from(std::iter::once("cairn").chain(args.iter().copied()))
        .map_err(|e| e.to_string())?;
    let Command::Bench(cmd) = cli.command;
    let mut out = Vec::new();
    cairn_bench::run_cmd(cmd, &mut out).map_err(|e| e.to_string())?;
    Ok(String::from_utf8(out).expect("UTF-8 report"))
}

fn p(path: &Path) -> &str {
    path.to_str().expect("UTF-8 temp path")
}

#[test]
fn bench_docs_quick_writes_json_and_svg() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("docs.json");
    let charts = dir.path().join("charts");
    let work = dir.path().join("work");
    let stdout = cairn(&[
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
        p(&work),
        "--json",
        p(&json),
        "--svg",
        p(&charts),
    ])
    .expect("bench docs");
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
    // The memory row: how far the resident set rose (a small run may not
    // raise it).
    for id in ["D-lite-peak-rss", "D-tiedot-peak-rss"] {
        let peak = value(id);
        assert!(
            peak.is_some_and(|v| v.is_finite() && v >= 0.0),
            "{id}: {peak:?}"
        );
        ids.push(id.into());
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

    assert!(cairn(&["bench", "docs", "--suite", "nope"]).is_err());
}

/// Parses an SVG file as XML and returns its number of `<text>` and
/// `<rect>` elements.
fn svg_elements(path: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(path).expect("read the SVG");
    let doc = roxmltree::Document::parse(&text).expect("the chart is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "svg", "{}", path.display());
    assert_eq!(
        root.tag_name().namespace(),
        Some("http://www.w3.org/2000/svg")
    );
    let count = |name: &str| {
        root.descendants()
            .filter(|n| n.tag_name().name() == name)
            .count()
    };
    (count("text"), count("rect"))
}

/// `cairn bench kv|events --svg DIR` writes one well-formed SVG chart per
/// suite; `cairn bench` keeps its older top-level flags.
#[test]
fn bench_writes_svg_charts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let charts = dir.path().join("charts");
    let json = dir.path().join("kv.json");
    let common = [
        "--quick",
        "--engines",
        "cairn",
        "--durability",
        "n",
        "--no-progress",
        "--fsync-samples",
        "3",
        "--svg",
        p(&charts),
    ];
    let mut kv = vec!["bench", "kv", "--suite", "t", "--values", "27"];
    kv.extend(common);
    kv.extend(["--json", p(&json)]);
    let stdout = cairn(&kv).expect("bench kv");
    assert!(
        stdout.contains("| T1 10K puts ascending, 1 txn, 27 B values (N)"),
        "{stdout}"
    );
    assert!(
        !stdout.contains("100 B"),
        "--values 27 ran 100-byte rows: {stdout}"
    );
    assert!(
        !stdout.contains("(D) |"),
        "--durability n ran D rows: {stdout}"
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON");
    assert!(j["machine"]["fsync_floor_us"]["p50"].is_number(), "{j}");
    assert!(j["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .any(|r| r["suite"] == "T" && r["engine"] == "cairndb" && r["durability"] == "N"));
    // Suite T ends with the storage seam's cost on CairnDB.
    assert!(
        stdout.contains("### The storage seam on CairnDB"),
        "{stdout}"
    );
    let seam = j["seam"].as_array().expect("seam rows");
    assert_eq!(seam.len(), 3, "{j}");
    assert!(
        seam.iter().all(|r| r["seam_over_direct"].is_number()),
        "{j}"
    );
    let mut ev = vec!["bench", "events", "--scale", "1000", "--tail-writers", "2"];
    ev.extend(common);
    let stdout = cairn(&ev).expect("bench events");
    assert!(stdout.contains("missed=0"), "{stdout}");
    assert!(stdout.contains("| E3 ReadEvents"), "{stdout}");
    for name in ["suite-t.svg", "suite-e.svg"] {
        let (texts, rects) = svg_elements(&charts.join(name));
        assert!(
            texts > 10 && rects > 5,
            "{name}: {texts} texts, {rects} rects"
        );
    }
    // The old shape: flags without a subcommand run `bench kv`.
    assert!(cairn(&["bench", "--suite", "nope"]).is_err());
    assert!(cairn(&["bench", "kv", "--values", "50"]).is_err());
}

/// `cairn bench serve`: one-second rows of both modes, driven by the
/// built-in generator (and by wrk when it is installed): every row is
/// there with requests, no error, and in mode D the server's commits
/// outnumber its flushes (commits grouped across connections).
#[test]
fn bench_serve_quick_runs_every_row() {
    let mut generators = vec!["builtin"];
    let wrk = std::process::Command::new("wrk")
        .arg("--version")
        .output()
        .is_ok();
    if wrk {
        generators.push("wrk");
    } else {
        eprintln!("wrk is not installed: bench serve ran with the built-in generator only");
    }
    for generator in generators {
        let dir = tempfile::tempdir().expect("tempdir");
        let json = dir.path().join("serve.json");
        let stdout = cairn(&[
            "bench",
            "serve",
            "--quick",
            "--seconds",
            "1",
            "--scale",
            "300",
            "--generator",
            generator,
            "--fsync-samples",
            "3",
            "--no-progress",
            "--dir",
            p(dir.path()),
            "--json",
            p(&json),
        ])
        .unwrap_or_else(|e| panic!("{generator}: {e}"));
        let want = if generator == "wrk" {
            "Load generator: wrk"
        } else {
            "Load generator: built-in"
        };
        assert!(stdout.contains(want), "{generator}: {stdout}");
        for row in [
            "| S1 | insert a small document | N |",
            "| S2 | get by id | N |",
            "| S3 | indexed equality query, limit 1 | N |",
            "| S1 | insert a small document | D |",
        ] {
            assert!(stdout.contains(row), "{generator}: no {row} in {stdout}");
        }
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON");
        let rows = v["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 4, "{v}");
        for r in rows {
            assert!(
                r["requests"].as_u64().is_some_and(|n| n > 0),
                "{generator}: {r}"
            );
            assert_eq!(r["errors"], 0, "{generator}: {r}");
            assert!(r["rps"].as_f64().is_some_and(|x| x > 0.0), "{r}");
            assert!(r["p99_ms"].as_f64() >= r["p50_ms"].as_f64(), "{r}");
            if r["mode"] == "D" {
                let (c, f) = (
                    r["commits"].as_u64().unwrap_or(0),
                    r["flushes"].as_u64().unwrap_or(0),
                );
                assert!(
                    f > 0 && c > f,
                    "{generator}: commits {c}, flushes {f}: not grouped? {r}"
                );
            } else if r["row"] == "S1" {
                assert!(
                    r["commits"].as_u64() >= r["requests"].as_u64().map(|n| n / 2),
                    "{r}"
                );
            }
        }
    }
}
