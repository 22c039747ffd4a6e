//! End-to-end tests of the document commands: import (insert and upsert,
//! batches, bad lines), export round-trip, collections, index
//! create/list/drop, find with sort/skip/limit/projection/explain, count,
//! update (one, many, upsert), delete, and typed errors with exit status 1.

mod common;
use common::{cairn, fails, ok};

const PEOPLE: &str = concat!(
    r#"{"_id":1,"name":"ada","age":36,"tags":["x","y"],"bin":{"$binary":"AAEC"}}"#,
    "\n",
    r#"{"_id":2,"name":"bob","age":25}"#,
    "\n",
    r#"{"_id":3,"name":"cy","age":41,"tags":["y"],"who":{"$oid":"65a1b2c3d4e5f60718293a4b"}}"#,
    "\n",
);

/// Dates and UUIDs in MongoDB Extended JSON v2: imported, exported in the
/// same form (field order kept; `$numberLong` outside 1970–9999), and
/// matched by a date range through an index.
#[test]
fn dates_and_uuids_import_export_and_find() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.cairn");
    let db = path.to_str().unwrap();
    // In `_id` order (numbers before BinData), the order export writes.
    let lines = concat!(
        r#"{"_id":2,"at":{"$date":{"$numberLong":"-86400000"}}}"#,
        "\n",
        r#"{"_id":3,"at":5}"#,
        "\n",
        r#"{"_id":{"$uuid":"12345678-9abc-def0-1234-56789abcdef0"},"at":{"$date":"2024-01-02T03:04:05.678Z"}}"#,
        "\n",
    );
    ok(&["import", db, "ev"], lines);
    assert_eq!(ok(&["export", db, "ev"], ""), lines);
    ok(&["index", "create", db, "ev", "at"], "");
    assert_eq!(
        ok(
            &[
                "find",
                db,
                "ev",
                r#"{"at":{"$lt":{"$date":"2000-01-01T00:00:00Z"}}}"#
            ],
            ""
        ),
        "{\"_id\":2,\"at\":{\"$date\":{\"$numberLong\":\"-86400000\"}}}\n"
    );
    // A date never equals a number.
    assert_eq!(ok(&["count", db, "ev", r#"{"at":{"$gte":0}}"#], ""), "1\n");
    // A malformed $date is a typed error naming the line.
    fails(
        &["import", db, "ev"],
        r#"{"_id":4,"at":{"$date":"2024-13-01T00:00:00Z"}}"#,
        "line 1",
    );
}

/// `$date` strings given to `cairn`: before 1970 and with offsets they
/// import as the instant they name and export in MongoDB's relaxed form; a
/// malformed one (an impossible day, no offset, a bad offset) is refused
/// naming the line and the string, in `import` and in a `find` filter.
#[test]
fn date_strings_import_and_filter() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.cairn");
    let db = path.to_str().unwrap();
    let lines = concat!(
        r#"{"_id":1,"at":{"$date":"1969-12-31T23:59:59.999Z"}}"#,
        "\n",
        r#"{"_id":2,"at":{"$date":"1969-12-31T23:30:00-01:00"}}"#,
        "\n",
        r#"{"_id":3,"at":{"$date":"2024-03-01T00:30:00+0100"}}"#,
        "\n",
    );
    ok(&["import", db, "d"], lines);
    assert_eq!(
        ok(&["export", db, "d"], ""),
        concat!(
            r#"{"_id":1,"at":{"$date":{"$numberLong":"-1"}}}"#,
            "\n",
            r#"{"_id":2,"at":{"$date":"1970-01-01T00:30:00.000Z"}}"#,
            "\n",
            r#"{"_id":3,"at":{"$date":"2024-02-29T23:30:00.000Z"}}"#,
            "\n",
        )
    );
    assert_eq!(
        ok(
            &[
                "count",
                db,
                "d",
                r#"{"at":{"$lt":{"$date":"1970-01-01T01:00:00+01:00"}}}"#
            ],
            ""
        ),
        "1\n"
    );
    for (i, bad) in [
        "2023-02-29T00:00:00Z",
        "2024-01-02T03:04:05",
        "2024-01-02T03:04:05+24:00",
    ]
    .into_iter()
    .enumerate()
    {
        let line = format!("{{\"_id\":9,\"at\":{{\"$date\":\"{bad}\"}}}}\n");
        fails(
            &["import", db, "d"],
            &format!("{{\"_id\":{}}}\n{line}", 10 + i),
            &format!(
                "line 2: not a document: invalid JSON for a document value: $date {bad:?} is \
                 not an ISO-8601"
            ),
        );
        let filter = format!("{{\"at\":{{\"$gte\":{{\"$date\":\"{bad}\"}}}}}}");
        fails(&["find", db, "d", &filter], "", &format!("$date {bad:?}"));
    }
}

#[test]
fn import_export_index_and_query() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.cairn");
    let db = path.to_str().unwrap();
    ok(&["import", db, "people", "--batch", "2"], PEOPLE);
    assert_eq!(ok(&["collections", db], ""), "people\t3\n");
    // Export round-trips, field order and special forms included.
    assert_eq!(ok(&["export", db, "people"], ""), PEOPLE);
    let copy = dir.path().join("copy.cairn");
    ok(
        &["import", copy.to_str().unwrap(), "people"],
        &ok(&["export", db, "people"], ""),
    );
    assert_eq!(
        ok(&["export", copy.to_str().unwrap(), "people"], ""),
        PEOPLE
    );
    // A duplicate _id fails the batch; --upsert replaces.
    fails(
        &["import", db, "people"],
        "{\"_id\":2,\"name\":\"x\"}\n",
        "duplicate key",
    );
    ok(
        &["import", db, "people", "--upsert"],
        "{\"_id\":2,\"name\":\"bob\",\"age\":26}\n",
    );
    fails(
        &["import", db, "people"],
        "{oops\n",
        "line 1: not valid JSON",
    );
    // An engine error names the document's line, not its batch's first, and
    // the lines before it are kept (import_stops_or_continues_at_bad_lines).
    fails(
        &["import", db, "scratch"],
        "{\"_id\":9}\n[1]\n",
        "line 2: a document must be a JSON object",
    );
    fails(
        &["import", db, "scratch"],
        "{\"_id\":10}\n{\"_id\":11}\n{\"_id\":12,\"$set\":{\"a\":1}}\n",
        "line 3: field name \"$set\"",
    );
    fails(
        &["import", db, "scratch"],
        "{\"_id\":13}\n{\"_id\":14,\"a\":{\"b.c\":1}}\n",
        "line 2: field name \"b.c\" (at a)",
    );
    fails(
        &["import", db, "scratch"],
        "{\"_id\":15}\n{\"_id\":1}\n{\"_id\":1}\n",
        "line 3: duplicate key",
    );
    assert_eq!(ok(&["count", db, "scratch"], ""), "6\n");
    assert_eq!(ok(&["count", db, "people"], ""), "3\n");
    // A misspelled collection is an error naming the ones there are, not an
    // empty answer; a limit of 0 is no limit (as in MongoDB).
    for cmd in [
        vec!["count", db, "peple"],
        vec!["find", db, "peple"],
        vec!["delete", db, "peple", "{}"],
        vec!["update", db, "peple", "{}", "{\"$set\":{\"a\":1}}"],
    ] {
        fails(
            &cmd,
            "",
            "no collection \"peple\"; the file holds: people, scratch",
        );
    }
    assert_eq!(
        ok(&["find", db, "people", "--limit", "0"], "")
            .lines()
            .count(),
        3
    );
    assert_eq!(
        ok(&["find", db, "people", "--limit", "2"], "")
            .lines()
            .count(),
        2
    );
    // Indexes.
    assert_eq!(
        ok(&["index", "create", db, "people", "age,name:-1"], ""),
        "index \"age_1_name_-1\" ready\n"
    );
    ok(&["index", "create", db, "people", "name", "--unique"], "");
    assert_eq!(
        ok(&["index", "list", db, "people"], ""),
        "age_1_name_-1\tage:1,name:-1\t\nname_1\tname:1\tunique\n"
    );
    fails(
        &["index", "create", db, "people", "tags", "--unique"],
        "",
        "duplicate key",
    );
    fails(
        &["index", "create", db, "people", "age:2"],
        "",
        "must be 1 or -1",
    );
    // Queries.
    let out = ok(
        &[
            "find",
            db,
            "people",
            r#"{"age":{"$gt":30}}"#,
            "--sort",
            r#"{"age":-1}"#,
            "--project",
            r#"{"name":1}"#,
        ],
        "",
    );
    assert_eq!(
        out,
        "{\"_id\":3,\"name\":\"cy\"}\n{\"_id\":1,\"name\":\"ada\"}\n"
    );
    let out = ok(
        &[
            "find",
            db,
            "people",
            "{}",
            "--sort",
            r#"{"age":1}"#,
            "--skip",
            "1",
            "--limit",
            "1",
        ],
        "",
    );
    assert!(out.starts_with("{\"_id\":1,"), "{out}");
    let explain: serde_json::Value = serde_json::from_str(&ok(
        &[
            "find",
            db,
            "people",
            r#"{"age":{"$gte":26,"$lte":36}}"#,
            "--explain",
        ],
        "",
    ))
    .unwrap();
    assert!(
        explain["plan"].as_str().unwrap().contains("index"),
        "{explain}"
    );
    assert_eq!(explain["returned"], 2);
    // As MongoDB's executionStats: keys and documents examined, and the
    // candidate plans with the chosen one marked.
    assert!(explain["keys_examined"].as_u64().is_some(), "{explain}");
    assert!(explain["docs_examined"].as_u64().is_some(), "{explain}");
    let cands = explain["candidates"].as_array().unwrap();
    assert!(cands.len() >= 2, "{explain}");
    let chosen: Vec<_> = cands.iter().filter(|c| c["chosen"] == true).collect();
    assert_eq!(chosen.len(), 1, "{explain}");
    assert_eq!(chosen[0]["plan"], explain["plan"], "{explain}");
    // --hint: an index name (bare) or a key pattern; one naming no index
    // is an error naming it.
    for hint in ["name_1", r#"{"age":1,"name":-1}"#] {
        let explain: serde_json::Value = serde_json::from_str(&ok(
            &[
                "find",
                db,
                "people",
                r#"{"age":{"$gte":26,"$lte":36}}"#,
                "--hint",
                hint,
                "--explain",
            ],
            "",
        ))
        .unwrap();
        let want = if hint == "name_1" {
            "name_1"
        } else {
            "age_1_name_-1"
        };
        assert!(
            explain["plan"].as_str().unwrap().contains(want),
            "{hint}: {explain}"
        );
        assert_eq!(explain["returned"], 2, "{hint}: {explain}");
    }
    fails(
        &["find", db, "people", "{}", "--hint", "nope_1"],
        "",
        "index \"nope_1\" on collection \"people\": the hint names no index",
    );
    assert_eq!(ok(&["count", db, "people", r#"{"tags":"y"}"#], ""), "2\n");
    // Writes by filter.
    assert_eq!(
        ok(
            &[
                "update",
                db,
                "people",
                r#"{"tags":"y"}"#,
                r#"{"$inc":{"age":1}}"#,
                "--many"
            ],
            ""
        ),
        "matched 2, modified 2\n"
    );
    assert!(ok(
        &[
            "update",
            db,
            "people",
            r#"{"name":"dee"}"#,
            r#"{"$set":{"age":9}}"#,
            "--upsert"
        ],
        ""
    )
    .starts_with("matched 0, upserted _id"));
    assert_eq!(
        ok(
            &["delete", db, "people", r#"{"age":{"$lt":30}}"#, "--many"],
            ""
        ),
        "deleted 2\n"
    );
    assert_eq!(ok(&["count", db, "people"], ""), "2\n");
    assert_eq!(ok(&["check", db], ""), "ok\n");
    // Index drop.
    ok(&["index", "drop", db, "people", "name_1"], "");
    fails(
        &["index", "drop", db, "people", "name_1"],
        "",
        "has no index",
    );
    // Typed errors: exit 1 with the reason.
    fails(
        &["find", db, "people", r#"{"age":{"$foo":1}}"#],
        "",
        "unknown operator \"$foo\"",
    );
    fails(
        &["find", db, "people", "{bad"],
        "",
        "the filter is not valid JSON",
    );
    fails(
        &["update", db, "people", "{}", r#"{"$inc":{"name":1}}"#],
        "",
        "$inc cannot apply",
    );
    fails(
        &["find", db, "people", "{}", "--sort", r#"{"age":2}"#],
        "",
        "must be 1 or -1",
    );
    fails(
        &["export", db, "nope"],
        "",
        "collection \"nope\" does not exist",
    );
    fails(&["import", db, "$sys"], "{}\n", "invalid collection name");
}

#[test]
fn aggregate_and_distinct() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.cairn");
    let db = path.to_str().unwrap();
    ok(&["import", db, "people"], PEOPLE);
    let out = ok(
        &[
            "aggregate",
            db,
            "people",
            r#"[{"$unwind": "$tags"}, {"$group": {"_id": "$tags", "n": {"$sum": 1}, "who": {"$push": "$name"}}}, {"$sort": {"n": -1}}]"#,
        ],
        "",
    );
    assert_eq!(
        out,
        concat!(
            r#"{"_id":"y","n":2,"who":["ada","cy"]}"#,
            "\n",
            r#"{"_id":"x","n":1,"who":["ada"]}"#,
            "\n"
        )
    );
    ok(&["index", "create", db, "people", "age"], "");
    let out = ok(
        &[
            "aggregate",
            db,
            "people",
            r#"[{"$match": {"age": {"$gt": 30}}}, {"$count": "n"}]"#,
            "--explain",
        ],
        "",
    );
    let e: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["pushed_down"], serde_json::json!(["$match"]));
    assert_eq!(e["in_memory"], serde_json::json!(["$count"]));
    assert!(
        e["query"]["plan"].as_str().unwrap().contains("age"),
        "{out}"
    );
    assert_eq!(e["returned"], 1);
    // Errors name the stage and the operator; exit status 1.
    fails(
        &[
            "aggregate",
            db,
            "people",
            r#"[{"$match": {}}, {"$bogus": 1}]"#,
        ],
        "",
        "pipeline stage 1 ($bogus): unknown pipeline stage",
    );
    fails(
        &[
            "aggregate",
            db,
            "people",
            r#"[{"$project": {"x": {"$add": ["$name", 1]}}}]"#,
        ],
        "",
        "pipeline stage 0 ($add)",
    );
    fails(&["aggregate", db, "people", "[{oops"], "", "not valid JSON");
    fails(
        &["aggregate", db, "peple", "[]"],
        "",
        "no collection \"peple\"",
    );
    // distinct: one JSON value a line, sorted; arrays unwrapped.
    assert_eq!(
        ok(&["distinct", db, "people", "tags"], ""),
        "\"x\"\n\"y\"\n"
    );
    assert_eq!(
        ok(
            &[
                "distinct",
                db,
                "people",
                "age",
                "--filter",
                r#"{"age": {"$lt": 40}}"#
            ],
            ""
        ),
        "25\n36\n"
    );
    fails(
        &["distinct", db, "people", "a..b"],
        "",
        "invalid field path",
    );
}

/// `cairn import` at a bad line (mongoimport's behaviour): by default it
/// stops there having committed every line before it (it used to drop the
/// whole batch), names the line and says how many documents were imported
/// and where to resume; with --continue-on-error (or --keep-going) it skips
/// each bad line, reports it with its number, and exits 1 at the end.
/// MongoDB refuses `$`-prefixed top-level field names (an update operator
/// is no document) and this engine refuses dotted ones: "Field Names",
/// https://www.mongodb.com/docs/manual/reference/limits/#naming-restrictions
#[test]
fn import_stops_or_continues_at_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("i.cairn");
    let db = path.to_str().unwrap();
    let bad_lines = [
        ("{oops", "not valid JSON"),
        ("[1]", "a document must be a JSON object, not array"),
        ("{\"$set\":{\"a\":1}}", "field name \"$set\""),
        ("{\"a.b\":1}", "field name \"a.b\""),
        ("{\"_id\":100}", "duplicate key"),
        ("{\"x\":{\"$oid\":\"zz\"}}", "is not 24 hex digits"),
    ];
    for (i, (bad, why)) in bad_lines.iter().enumerate() {
        let coll = format!("c{i}");
        // Line 3 is blank: line numbers count every line of the input.
        let input = format!("{{\"_id\":100}}\n{{\"_id\":101}}\n\n{bad}\n{{\"_id\":102}}\n");
        let o = cairn(&["import", db, &coll, "--batch", "100"], &input);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{bad}: {err}");
        assert!(err.contains("line 4: "), "{bad}: {err}");
        assert!(err.contains(why), "{bad}: {err}");
        assert!(
            err.contains(&format!(
                "2 documents imported into \"{coll}\", from every line before line 4"
            )),
            "{bad}: {err}"
        );
        assert!(err.contains("tail -n +4"), "{bad}: {err}");
        assert_eq!(ok(&["count", db, &coll], ""), "2\n", "{bad}");
        // Resuming from the fixed line imports the rest.
        ok(&["import", db, &coll], "{\"_id\":103}\n{\"_id\":102}\n");
        assert_eq!(ok(&["count", db, &coll], ""), "4\n", "{bad}");
    }
    // A bad line after a full batch: the batch before it and the lines of
    // its own batch before it are kept.
    let input: String = (0..7)
        .map(|i| format!("{{\"_id\":{i}}}\n"))
        .collect::<String>()
        + "{\"_id\":0}\n";
    fails(
        &["import", db, "b", "--batch", "3"],
        &input,
        "line 8: duplicate key",
    );
    assert_eq!(ok(&["count", db, "b"], ""), "7\n");

    // --continue-on-error: every good line imported, every bad one named.
    let input = concat!(
        "{\"_id\":1}\n",
        "{oops\n",
        "{\"_id\":2}\n",
        "{\"$set\":{\"a\":1}}\n",
        "{\"_id\":1}\n",
        "{\"_id\":3}\n",
    );
    for flag in ["--continue-on-error", "--keep-going"] {
        let coll = format!("k{flag}");
        let o = cairn(&["import", db, &coll, "--batch", "2", flag], input);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{err}");
        for want in [
            "line 2: not valid JSON",
            "line 4: field name \"$set\"",
            "line 5: duplicate key",
            "(skipped)",
            "imported 3 documents",
            "3 bad line(s) skipped (reported above): 2, 4, 5",
        ] {
            assert!(err.contains(want), "{want}: {err}");
        }
        assert_eq!(
            ok(&["export", db, &coll, "--no-indexes"], ""),
            "{\"_id\":1}\n{\"_id\":2}\n{\"_id\":3}\n"
        );
    }
    // Without bad lines it succeeds.
    ok(&["import", db, "k", "--continue-on-error"], "{\"_id\":1}\n");
    // Not a line's fault: a bad collection name fails before reading.
    fails(
        &["import", db, "$x", "--continue-on-error"],
        "{\"_id\":1}\n",
        "invalid collection name",
    );
}

/// An update that cannot apply to one of the matches names that document's
/// `_id`, and (one transaction) modifies none of them.
#[test]
fn update_errors_name_the_document() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("u.cairn");
    let db = path.to_str().unwrap();
    let docs = "{\"_id\":1,\"a\":1}\n{\"_id\":\"two\",\"a\":\"x\"}\n{\"_id\":3,\"a\":3}\n";
    ok(&["import", db, "c"], docs);
    fails(
        &["update", db, "c", "{}", r#"{"$inc":{"a":1}}"#, "--many"],
        "",
        "the update failed on the document with _id \"two\" (nothing was modified): $inc cannot apply",
    );
    let mut sorted: Vec<&str> = docs.lines().collect();
    sorted.sort();
    let mut now: Vec<String> = ok(&["export", db, "c", "--no-indexes"], "")
        .lines()
        .map(str::to_string)
        .collect();
    now.sort();
    assert_eq!(now, sorted, "nothing modified");
    fails(
        &["update", db, "c", r#"{"a":"x"}"#, r#"{"$inc":{"a":1}}"#],
        "",
        "document with _id \"two\"",
    );
    // A replacement that changes the _id.
    fails(
        &["update", db, "c", r#"{"_id":3}"#, r#"{"_id":4,"a":1}"#],
        "",
        "document with _id 3 (nothing was modified): the _id of a document cannot change",
    );
    // Not a document's fault: the message is the engine's.
    fails(
        &["update", db, "c", "{}", r#"{"$bogus":{"a":1}}"#, "--many"],
        "",
        "unknown operator",
    );
}

#[test]
fn text_index_and_text_search() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.cairn");
    let db = path.to_str().unwrap();
    ok(
        &["import", db, "posts"],
        concat!(
            r#"{"_id":1,"title":"Cold brew coffee","body":"overnight"}"#,
            "\n",
            r#"{"_id":2,"title":"Coffee shop","body":"decaf please"}"#,
            "\n",
            r#"{"_id":3,"title":"Green tea","body":"hot water"}"#,
            "\n",
        ),
    );
    // $text without a text index is refused (MongoDB's message).
    fails(
        &["find", db, "posts", r#"{"$text":{"$search":"coffee"}}"#],
        "",
        "text index required for $text query",
    );
    fails(
        &["index", "create", db, "posts", "title:text,n:1"],
        "",
        "only text fields",
    );
    ok(
        &[
            "index",
            "create",
            db,
            "posts",
            "title:text,body:text",
            "--weights",
            "title=10",
        ],
        "",
    );
    assert_eq!(
        ok(&["index", "list", db, "posts"], ""),
        "title_text_body_text\ttitle:text=10,body:text=1\tlanguage=english\n"
    );
    assert_eq!(
        ok(
            &[
                "find",
                db,
                "posts",
                r#"{"$text":{"$search":"coffees -decaf"}}"#
            ],
            ""
        ),
        "{\"_id\":1,\"title\":\"Cold brew coffee\",\"body\":\"overnight\"}\n"
    );
    // Export and import carry the text index.
    let copy = dir.path().join("copy.cairn");
    ok(
        &["import", copy.to_str().unwrap(), "posts"],
        &ok(&["export", db, "posts"], ""),
    );
    assert_eq!(
        ok(&["index", "list", copy.to_str().unwrap(), "posts"], ""),
        "title_text_body_text\ttitle:text=10,body:text=1\tlanguage=english\n"
    );
    assert_eq!(
        ok(
            &[
                "count",
                copy.to_str().unwrap(),
                "posts",
                r#"{"$text":{"$search":"tea"}}"#
            ],
            ""
        ),
        "1\n"
    );
}

/// `cairn index create` takes a MongoDB key pattern as well as
/// `path,path:-1`: the keys in the pattern's order (not sorted), each 1,
/// -1 or "text"; a bad order is an error naming its field.
#[test]
fn index_create_takes_a_key_pattern() {
    let dir = tempfile::tempdir().unwrap();
    let db_path = dir.path().join("k.cairn");
    let db = db_path.to_str().unwrap();
    ok(
        &["import", db, "items"],
        "{\"_id\":1,\"price\":3,\"item\":{\"name\":\"b\"},\"t\":\"red fox\"}\n",
    );
    assert_eq!(
        ok(
            &[
                "index",
                "create",
                db,
                "items",
                r#"{"price": 1, "item.name": -1}"#
            ],
            ""
        ),
        "index \"price_1_item.name_-1\" ready\n"
    );
    // Not alphabetical: the pattern's order.
    assert_eq!(
        ok(
            &[
                "index",
                "create",
                db,
                "items",
                r#"{"item.name": 1, "price": -1.0}"#
            ],
            ""
        ),
        "index \"item.name_1_price_-1\" ready\n"
    );
    ok(&["index", "create", db, "items", r#"{"t": "text"}"#], "");
    assert_eq!(
        ok(&["index", "list", db, "items"], ""),
        "price_1_item.name_-1\tprice:1,item.name:-1\t\n\
         item.name_1_price_-1\titem.name:1,price:-1\t\n\
         t_text\tt:text=1\tlanguage=english\n"
    );
    // The same index as the comma form names.
    assert_eq!(
        ok(&["index", "create", db, "items", "price,item.name:-1"], ""),
        "index \"price_1_item.name_-1\" ready\n"
    );
    for (spec, message) in [
        (
            r#"{"price": 1, "item.name": 2}"#,
            "field \"item.name\" of the key pattern: the order must be 1 or -1",
        ),
        (
            r#"{"price": "hashed"}"#,
            "field \"price\" of the key pattern",
        ),
        (r#"{"a": 1, "a": -1}"#, "is not a JSON object"),
        (r#"{"price": 1"#, "is not a JSON object"),
        ("{}", "names no field"),
        (
            "price,item.name:2",
            "field \"item.name\": the order \"2\" must be 1 or -1",
        ),
        (
            r#"{"t": "text", "price": 1}"#,
            "a text index has only text fields",
        ),
    ] {
        fails(&["index", "create", db, "items", spec], "", message);
    }
}

/// `cairn expire` (MongoDB manual, "TTL Indexes": documents whose date is
/// older than `expireAfterSeconds` are deleted): every expired document
/// now, of every collection with a TTL index or of the one named, more
/// than one transaction's batch of them, with a count per collection; a
/// collection that is missing or has no TTL index is refused (exit 1).
/// `index list` and `index drop` refuse a missing collection as `find`
/// does.
#[test]
fn expire_deletes_expired_documents_now() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.cairn");
    let db = path.to_str().unwrap();
    ok(&["put", db, "meta", "k", "v"], "");
    ok(
        &["index", "create", db, "s", "at", "--expire-after", "60"],
        "",
    );
    ok(
        &["index", "create", db, "t", "when", "--expire-after", "3600"],
        "",
    );
    let mut lines = String::new();
    for i in 0..700 {
        lines.push_str(&format!(
            "{{\"_id\":{i},\"at\":{{\"$date\":\"2001-01-01T00:00:00Z\"}}}}\n"
        ));
    }
    for i in 700..703 {
        lines.push_str(&format!(
            "{{\"_id\":{i},\"at\":{{\"$date\":\"2999-01-01T00:00:00Z\"}}}}\n"
        ));
    }
    ok(&["import", db, "s"], &lines);
    ok(
        &["import", db, "t"],
        concat!(
            r#"{"_id":1,"when":{"$date":"2001-01-01T00:00:00Z"}}"#,
            "\n",
            r#"{"_id":2,"when":[{"$date":"2999-01-01T00:00:00Z"},{"$date":"2001-01-01T00:00:00Z"}]}"#,
            "\n",
            r#"{"_id":3,"when":"2001-01-01"}"#,
            "\n",
        ),
    );
    ok(
        &["import", db, "plain"],
        r#"{"_id":1,"at":{"$date":"2001-01-01T00:00:00Z"}}"#,
    );
    assert_eq!(ok(&["count", db, "s"], ""), "703\n");
    assert_eq!(ok(&["expire", db], ""), "s\t700\nt\t2\n");
    assert_eq!(ok(&["count", db, "s"], ""), "3\n");
    assert_eq!(ok(&["count", db, "t"], ""), "1\n");
    assert_eq!(ok(&["count", db, "plain"], ""), "1\n");
    assert_eq!(ok(&["expire", db, "s"], ""), "s\t0\n");
    assert_eq!(ok(&["check", db], ""), "ok\n");
    fails(
        &["expire", db, "plain"],
        "",
        "collection \"plain\" has no TTL index",
    );
    fails(&["expire", db, "nope"], "", "no collection \"nope\"");
    fails(&["index", "list", db, "nope"], "", "no collection \"nope\"");
    fails(
        &["index", "drop", db, "nope", "at_1"],
        "",
        "no collection \"nope\"; the file holds: plain, s, t",
    );
    // The collections are still there, their indexes listed.
    assert!(ok(&["index", "list", db, "s"], "").contains("expire_after=60"));
}

/// `cairn check FILE` checks each collection's indexes against its
/// documents (as on an etcd prefix and in the shell's `.check`): an index
/// entry removed past the library is reported by collection and index.
#[test]
fn check_reports_a_damaged_index_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("x.cairn");
    let db = path.to_str().unwrap();
    ok(
        &["import", db, "people"],
        "{\"_id\":1,\"age\":30}\n{\"_id\":2,\"age\":40}\n{\"_id\":3,\"age\":50}\n",
    );
    ok(&["index", "create", db, "people", "age"], "");
    assert_eq!(ok(&["check", db], ""), "ok\n");
    {
        let d = cairndb::Database::open(&path).unwrap();
        let tables = cairndb::testing::all_tables(&d).unwrap();
        // The index's table: `$docs.<collection>.<index>`.
        let (name, (_, entries)) = tables
            .iter()
            .find(|(n, _)| n.starts_with("$docs.") && n.matches('.').count() == 2)
            .expect("an index table");
        assert_eq!(entries.len(), 3, "{name}");
        cairndb::testing::raw_put(&d, name, &entries[1].0, None).unwrap();
        d.close().unwrap();
    }
    let o = cairn(&["check", db], "");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("collection \"people\"") && out.contains("age_1"),
        "{out}"
    );
}
