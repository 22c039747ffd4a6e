//! `cairn shell` driven by scripts on standard input and `-c`: every
//! statement and dot-command, output modes, transactions, and errors (exit
//! status, the caret under the column, typed error messages, `--keep-going`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// Runs `cairn` with `input` on standard input and `env` set.
fn cairn_env(args: &[&str], input: &str, env: &[(&str, &str)]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cairn"))
        .args(args)
        .env_remove("COLUMNS")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A shell that stops early (an error) may not read all of it.
    let _ = child.stdin.take().unwrap().write_all(input.as_bytes());
    child.wait_with_output().unwrap()
}

fn cairn(args: &[&str], input: &str) -> Output {
    cairn_env(args, input, &[])
}

fn run(db: &Path, args: &[&str], script: &str) -> Output {
    let mut all = vec!["shell", db.to_str().unwrap()];
    all.extend_from_slice(args);
    cairn(&all, script)
}

/// Runs a script that must succeed; returns its standard output.
fn ok(db: &Path, script: &str) -> String {
    let o = run(db, &[], script);
    assert!(
        o.status.success(),
        "script failed: {}\n--- stdout\n{}",
        String::from_utf8_lossy(&o.stderr),
        String::from_utf8_lossy(&o.stdout)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Runs a script that must fail with `code`; returns (stdout, stderr).
fn fails(db: &Path, args: &[&str], script: &str, code: i32) -> (String, String) {
    let o = run(db, args, script);
    let (out, err) = (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    );
    assert_eq!(o.status.code(), Some(code), "stdout {out}\nstderr {err}");
    assert!(!err.contains("panicked"), "{err}");
    (out, err)
}

const PEOPLE: &str = "db.people.insertMany([
  {_id: 1, name: 'ada', age: 36, address: {city: 'London'}, tags: ['x', 'y']},
  {_id: 2, name: \"bob\", age: 25,},
  {_id: 3, name: 'cy', age: 41, tags: ['y'],},
])
";

/// A temporary directory and the path of a new file `d.cairn` in it.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("d.cairn");
    (dir, db)
}

/// [`scratch`], the file holding the collection `PEOPLE` inserts.
fn with_people() -> (tempfile::TempDir, PathBuf) {
    let (dir, db) = scratch();
    ok(&db, PEOPLE);
    (dir, db)
}

fn lines(s: &str) -> Vec<&str> {
    s.lines().collect()
}

#[test]
fn collection_methods() {
    let (_dir, db) = scratch();
    let out = ok(
        &db,
        &format!(
            "{PEOPLE}
db.people.find({{age: {{$gt: 30}}}}).sort({{age: -1}})
db.people.find({{}}, {{name: 1, _id: 0}}).sort({{name: 1}}).skip(1).limit(1)
db.people.find({{tags: 'y'}}).count()
db.people.countDocuments()
db.people.count({{age: {{$lt: 30}}}})
db.people.findOne({{name: 'bob'}})
db.people.findOne({{name: 'nobody'}})
db.getCollectionNames()
db.people.insertOne({{_id: 4, name: 'dee', who: ObjectId('65a1b2c3d4e5f60718293a4b')}})
db.people.findOne({{_id: 4}})
"
        ),
    );
    assert_eq!(
        lines(&out),
        [
            "inserted 3 documents",
            r#"{"_id":3,"name":"cy","age":41,"tags":["y"]}"#,
            r#"{"_id":1,"name":"ada","age":36,"address":{"city":"London"},"tags":["x","y"]}"#,
            r#"{"name":"bob"}"#,
            "2",
            "3",
            "1",
            r#"{"_id":2,"name":"bob","age":25}"#,
            "null",
            r#"["people"]"#,
            "inserted 1 document, _id 4",
            r#"{"_id":4,"name":"dee","who":{"$oid":"65a1b2c3d4e5f60718293a4b"}}"#,
        ]
    );

    // Indexes and explain.
    let out = ok(
        &db,
        "db.people.find({age: {$gt: 30}}).explain()
db.people.createIndex({age: 1})
db.people.createIndex({name: 1}, {unique: true, name: 'by_name'})
db.people.getIndexes()
db.people.find({age: {$gt: 30}}).explain()
db.people.dropIndex('by_name')
db.people.getIndexes()
",
    );
    let l = lines(&out);
    assert!(l[0].contains("\"plan\":\"full scan"), "{out}");
    assert_eq!(l[1], "index \"age_1\" ready");
    assert_eq!(l[2], "index \"by_name\" ready");
    assert_eq!(
        l[3],
        r#"{"name":"age_1","key":{"age":1},"unique":false,"sparse":false}"#
    );
    assert_eq!(
        l[4],
        r#"{"name":"by_name","key":{"name":1},"unique":true,"sparse":false}"#
    );
    assert!(l[5].contains("\"plan\":\"index scan age_1"), "{out}");
    assert!(l[5].contains("\"returned\":2"), "{out}");
    assert_eq!(l[6], "index \"by_name\" dropped");
    assert_eq!(l.len(), 8, "{out}");

    // Updates, replace, deletes, drop.
    let out = ok(
        &db,
        "db.people.updateOne({_id: 2}, {$set: {age: 26}})
db.people.updateMany({age: {$gt: 30}}, {$inc: {age: 1}})
db.people.updateOne({_id: 9}, {$set: {name: 'zed'}}, {upsert: true})
db.people.replaceOne({_id: 3}, {name: 'cy2'})
db.people.find({_id: {$in: [2, 3, 9]}})
db.people.find({age: {$gte: 37}}, {age: 1})
db.people.deleteOne({age: {$exists: false}})
db.people.deleteMany({age: {$gt: 0}})
db.people.find()
db.people.drop()
db.people.drop()
show collections
",
    );
    assert_eq!(
        lines(&out),
        [
            "matched 1, modified 1",
            "matched 2, modified 2",
            "matched 0, upserted _id 9",
            "matched 1, modified 1",
            r#"{"_id":2,"name":"bob","age":26}"#,
            r#"{"_id":3,"name":"cy2"}"#,
            r#"{"_id":9,"name":"zed"}"#,
            r#"{"_id":1,"age":37}"#,
            "deleted 1",
            "deleted 2",
            r#"{"_id":4,"name":"dee","who":{"$oid":"65a1b2c3d4e5f60718293a4b"}}"#,
            r#"{"_id":9,"name":"zed"}"#,
            "dropped collection \"people\"",
            "no collection \"people\" to drop",
        ]
    );
}

/// The methods a mongosh user reaches for beyond CRUD: `.hint()`,
/// `findOneAndUpdate/Replace/Delete` (sort, projection, upsert,
/// returnDocument), `renameCollection`, text and TTL indexes, with their
/// errors.
#[test]
fn find_and_modify_hint_rename_text_and_ttl_indexes() {
    let (_dir, db) = with_people();
    let out = ok(
        &db,
        "db.people.createIndex({age: 1})
db.people.find({age: {$gt: 30}}).hint({$natural: 1}).explain()
db.people.find({age: {$gt: 30}}, {_id: 1}).hint('age_1').sort({age: 1})
db.people.findOneAndUpdate({age: {$gt: 30}}, {$inc: {age: 1}}, {sort: {age: -1}, projection: {age: 1}})
db.people.findOneAndUpdate({_id: 3}, {$set: {seen: true}}, {returnDocument: 'after'})
db.people.findOneAndUpdate({_id: 7}, {$set: {name: 'new'}}, {upsert: true, returnDocument: 'after'})
db.people.findOneAndReplace({_id: 7}, {name: 'newer'}, {returnDocument: 'before', projection: {name: 1, _id: 0}})
db.people.findOneAndDelete({}, {sort: {_id: -1}})
db.people.findOneAndDelete({_id: 42})
db.people.renameCollection('folks')
show collections
db.folks.createIndex({name: 'text'}, {weights: {name: 5}})
db.folks.find({$text: {$search: 'ada'}}, {_id: 1})
db.folks.createIndex({seen_at: 1}, {expireAfterSeconds: 3600})
db.folks.getIndexes()
",
    );
    let l = lines(&out);
    assert_eq!(l[0], "index \"age_1\" ready", "{out}");
    assert!(l[1].contains("\"plan\":\"full scan"), "{out}");
    assert_eq!(&l[2..4], [r#"{"_id":1}"#, r#"{"_id":3}"#], "{out}");
    assert_eq!(l[4], r#"{"_id":3,"age":41}"#, "before, projected: {out}");
    assert_eq!(
        l[5], r#"{"_id":3,"name":"cy","age":42,"tags":["y"],"seen":true}"#,
        "{out}"
    );
    assert_eq!(l[6], r#"{"_id":7,"name":"new"}"#, "{out}");
    assert_eq!(l[7], r#"{"name":"new"}"#, "{out}");
    assert_eq!(l[8], r#"{"_id":7,"name":"newer"}"#, "{out}");
    assert_eq!(l[9], "null", "{out}");
    assert_eq!(l[10], "renamed collection \"people\" to \"folks\"", "{out}");
    assert_eq!(l[11], "folks", "{out}");
    assert_eq!(l[12], "index \"name_text\" ready", "{out}");
    assert_eq!(l[13], r#"{"_id":1}"#, "{out}");
    assert_eq!(l[14], "index \"seen_at_1\" ready", "{out}");
    assert!(out.contains("\"name\":\"name_text\""), "{out}");
    // Errors name what is wrong.
    for (script, want) in [
        (
            "db.folks.findOneAndUpdate({}, {name: 'x'})",
            "the update must use operators",
        ),
        (
            "db.folks.findOneAndReplace({}, {$set: {a: 1}})",
            "the replacement must be a plain document",
        ),
        (
            "db.folks.findOneAndUpdate({}, {$set: {a: 1}}, {returnDocument: 'later'})",
            "returnDocument must be",
        ),
        ("db.folks.find().hint(3)", "hint() takes an index name"),
        ("db.folks.find().hint('nope')", "nope"),
        ("db.folks.renameCollection(5)", "takes the new name"),
        (
            "db.folks.createIndex({a: 1, b: 1}, {expireAfterSeconds: 5})",
            "one ascending field",
        ),
        ("db.folks.createIndex({a: 'text', b: 1})", "all \"text\""),
    ] {
        let (_, err) = fails(&db, &[], script, 1);
        assert!(err.contains(want), "{script}: {err}");
    }
}

#[test]
fn aggregate_and_distinct() {
    let (_dir, db) = scratch();
    let out = ok(
        &db,
        &format!(
            "{PEOPLE}
db.people.aggregate([{{$match: {{age: {{$gt: 30}}}}}}, {{$project: {{_id: 0, n: {{$toUpper: '$name'}}}}}}])
db.people.aggregate([{{$group: {{_id: null, avg: {{$avg: '$age'}}}}}}])
db.people.distinct('tags')
db.people.distinct('name', {{age: {{$lt: 40}}}})
.begin
db.people.insertOne({{_id: 5, name: 'eve', age: 50, tags: ['z']}})
db.people.aggregate([{{$match: {{age: {{$gte: 41}}}}}}, {{$count: 'n'}}])
db.people.distinct('tags')
.rollback
db.people.aggregate([{{$sortByCount: '$tags'}}], {{explain: true}})
"
        ),
    );
    let l = lines(&out);
    assert_eq!(
        l[..7],
        [
            "inserted 3 documents",
            r#"{"n":"ADA"}"#,
            r#"{"n":"CY"}"#,
            r#"{"_id":null,"avg":34.0}"#,
            r#"["x","y"]"#,
            r#"["ada","bob"]"#,
            "transaction open",
        ],
        "{out}"
    );
    assert!(l.contains(&r#"{"n":2}"#), "{out}");
    assert!(l.contains(&r#"["x","y","z"]"#), "{out}");
    let explain = l.last().unwrap();
    assert!(explain.contains(r#""in_memory":["$sortByCount"]"#), "{out}");
    // A bad stage is a typed error naming it.
    let (_, err) = fails(&db, &[], "db.people.aggregate([{$nope: 1}])\n", 1);
    assert!(err.contains("pipeline stage 0 ($nope)"), "{err}");
    let (_, err) = fails(&db, &[], "db.people.aggregate({$match: {}})\n", 1);
    assert!(
        err.contains("aggregate() takes an array of stages"),
        "{err}"
    );
}

#[test]
fn tables_and_streams() {
    let (_dir, db) = scratch();
    let out = ok(
        &db,
        "put kv a 1
put kv 'b key' \"two\\nlines\"
put kv c 3;
put other x y
get kv a
get kv 'b key'
scan kv
scan kv b
del kv a
scan kv
show tables
.tables
append order-1 Created {total: 5, items: ['x']}
append order-1 Paid
append order-2 Created
read order-1
read order-1 1
read order-1 0 1
tail order-1 1
show streams
.streams
",
    );
    let l = lines(&out);
    assert_eq!(&l[..4], ["ok"; 4]);
    assert_eq!(l[4], "1");
    assert_eq!(&l[5..7], ["two", "lines"]);
    assert_eq!(
        &l[7..10],
        [
            r#"{"key":"a","value":"1"}"#,
            r#"{"key":"b key","value":"two\nlines"}"#,
            r#"{"key":"c","value":"3"}"#
        ]
    );
    assert_eq!(l[10], r#"{"key":"b key","value":"two\nlines"}"#);
    assert_eq!(l[11], "ok");
    assert_eq!(
        &l[12..18],
        [
            r#"{"key":"b key","value":"two\nlines"}"#,
            r#"{"key":"c","value":"3"}"#,
            "kv",
            "other",
            "kv\t2",
            "other\t1"
        ]
    );
    assert_eq!(l.len(), 30, "{out}");
    assert_eq!(
        l[18],
        "appended 1 event(s) to \"order-1\"; version 0; position 0"
    );
    assert_eq!(
        l[19],
        "appended 1 event(s) to \"order-1\"; version 1; position 1"
    );
    assert_eq!(
        l[20],
        "appended 1 event(s) to \"order-2\"; version 0; position 2"
    );
    let ev = |i: usize| -> serde_json::Value { serde_json::from_str(l[i]).unwrap() };
    let kind = |i: usize| (ev(i)["version"].as_u64().unwrap(), ev(i)["type"].clone());
    // read: both events, then from version 1, then a limit of 1; tail 1.
    assert_eq!(
        ev(21)["data"],
        serde_json::json!({"total": 5, "items": ["x"]})
    );
    assert_eq!(ev(21)["stream"], "order-1");
    assert_eq!(kind(21), (0, "Created".into()));
    assert_eq!(kind(22), (1, "Paid".into()));
    assert_eq!(kind(23), (1, "Paid".into()));
    assert_eq!(kind(24), (0, "Created".into()));
    assert_eq!(kind(25), (1, "Paid".into()));
    assert_eq!(&l[26..28], ["order-1", "order-2"]);
    assert_eq!(&l[28..30], ["order-1\t1\tlive", "order-2\t0\tlive"]);

    // Errors: a missing key, table and stream.
    let (_, err) = fails(&db, &[], "get kv zz\n", 1);
    assert!(
        err.contains("line 1: error: key \"zz\" not found in table \"kv\""),
        "{err}"
    );
    let (_, err) = fails(&db, &[], "del nope k\n", 1);
    assert!(err.contains("nope"), "{err}");
    let (_, err) = fails(&db, &[], "read nope\n", 1);
    assert!(err.contains("stream \"nope\" does not exist"), "{err}");
    let (_, err) = fails(&db, &[], "tail nope\n", 1);
    assert!(err.contains("stream \"nope\" does not exist"), "{err}");
}

#[test]
fn output_modes_and_paging() {
    let (_dir, db) = with_people();
    let out = ok(
        &db,
        ".mode
.mode table
db.people.find({_id: {$lt: 3}}, {tags: 0})
.mode line
db.people.find({_id: 2})
.mode csv
db.people.find({}, {address: 0})
.mode json
db.people.findOne({_id: 1})
",
    );
    let want = r#"jsonl
+-----+------+-----+-------------------+
| _id | name | age | address           |
+-----+------+-----+-------------------+
| 1   | ada  | 36  | {"city":"London"} |
| 2   | bob  | 25  |                   |
+-----+------+-----+-------------------+
 _id = 2
name = bob
 age = 25
_id,name,age,tags
1,ada,36,"[""x"",""y""]"
2,bob,25,
3,cy,41,"[""y""]"
{
  "_id": 1,
  "name": "ada",
  "age": 36,
  "address": {
    "city": "London"
  },
  "tags": ["x", "y"]
}
"#;
    assert_eq!(out, want);

    // Tables fit the width given by COLUMNS.
    let o = cairn_env(
        &["shell", db.to_str().unwrap()],
        ".mode table\ndb.people.find()\n",
        &[("COLUMNS", "40")],
    );
    let out = String::from_utf8(o.stdout).unwrap();
    assert!(out.lines().all(|l| l.chars().count() <= 40), "{out}");
    assert!(out.contains('…'), "{out}");

    // A page larger than the internal batch of 1000 is one page.
    let many: Vec<String> = (0..2500).map(|i| format!("{{_id: {i}}}")).collect();
    ok(&db, &format!("db.many.insertMany([{}])\n", many.join(",")));
    let out = ok(&db, ".pagesize 2400\ndb.many.find()\nit\n");
    let l = lines(&out);
    assert_eq!(l.len(), 2501, "{}", &out[out.len() - 200..]);
    assert_eq!(l[2399], r#"{"_id":2399}"#);
    assert_eq!(l[2400], "Type \"it\" for more");
    assert_eq!(l[2500], r#"{"_id":2499}"#);

    // Paging: batches of 2, `it` for the next.
    let out = ok(
        &db,
        ".pagesize 2
db.people.find({}, {_id: 1})
it
it
it
",
    );
    assert_eq!(
        lines(&out),
        [
            r#"{"_id":1}"#,
            r#"{"_id":2}"#,
            "Type \"it\" for more",
            r#"{"_id":3}"#,
            "no more results",
            "no more results",
        ]
    );
}

#[test]
fn dot_commands() {
    let dir = tempfile::tempdir().unwrap();
    let d = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let db = dir.path().join("d.cairn");

    // .help names every dot-command.
    let help = ok(&db, ".help\n");
    for cmd in [
        ".help",
        ".tables",
        ".collections",
        ".indexes",
        ".streams",
        ".schema",
        ".mode",
        ".output",
        ".timer",
        ".pagesize",
        ".import",
        ".export",
        ".dump",
        ".read",
        ".stats",
        ".check",
        ".backup",
        ".begin",
        ".commit",
        ".rollback",
        ".quit",
    ] {
        assert!(help.contains(cmd), "{cmd} missing from {help}");
    }
    assert!(help.contains("db.COLL.find"), "{help}");

    // .import from JSON lines (relaxed) and CSV; .collections; .indexes;
    // .schema.
    std::fs::write(
        d("in.jsonl"),
        "{_id: 1, name: 'ada', age: 36, address: {city: 'London'}}\n\n{\"_id\": 2, \"name\": \"bob\", \"age\": 25.5}\n",
    )
    .unwrap();
    std::fs::write(
        d("in.csv"),
        "_id,name,ok,note\n1,ada,true,\"a, b\"\n2,bob,false,\n",
    )
    .unwrap();
    let out = ok(
        &db,
        &format!(
            ".import {} people
.import '{}' flags
.collections
db.people.createIndex({{age: -1}}, {{sparse: true}})
.indexes
.indexes people
.schema people
.schema flags 1
db.flags.find()
",
            d("in.jsonl"),
            d("in.csv")
        ),
    );
    let want = r#"imported 2 documents into "people"
imported 2 documents into "flags"
flags	2
people	2
index "age_-1" ready
people	age_-1	age:-1	sparse
people	age_-1	age:-1	sparse
{"path":"_id","kinds":"int","present":"100% (2/2)"}
{"path":"name","kinds":"string","present":"100% (2/2)"}
{"path":"age","kinds":"float 50%, int 50%","present":"100% (2/2)"}
{"path":"address","kinds":"object","present":"50% (1/2)"}
{"path":"address.city","kinds":"string","present":"50% (1/2)"}
{"path":"_id","kinds":"int","present":"100% (1/1)"}
{"path":"name","kinds":"string","present":"100% (1/1)"}
{"path":"ok","kinds":"bool","present":"100% (1/1)"}
{"path":"note","kinds":"string","present":"100% (1/1)"}
{"_id":1,"name":"ada","ok":true,"note":"a, b"}
{"_id":2,"name":"bob","ok":false}
"#;
    assert_eq!(out, want);

    // A bad line names its file, line and column, and imports nothing.
    std::fs::write(d("bad.jsonl"), "{_id: 7}\n{_id: 8} junk\n").unwrap();
    let (_, err) = fails(&db, &[], &format!(".import {} people\n", d("bad.jsonl")), 1);
    assert!(
        err.contains("bad.jsonl, line 2: column 10: unexpected text after the value"),
        "{err}"
    );
    std::fs::write(d("bad.jsonl"), "{_id: 7}\n[1]\n").unwrap();
    let (_, err) = fails(&db, &[], &format!(".import {} people\n", d("bad.jsonl")), 1);
    assert!(
        err.contains("line 2: a document must be an object, not array"),
        "{err}"
    );
    std::fs::write(d("bad.csv"), "a,b\n1,2,3\n").unwrap();
    let (_, err) = fails(&db, &[], &format!(".import {} people\n", d("bad.csv")), 1);
    assert!(
        err.contains("bad.csv, line 2: 3 fields, more than the header's 2"),
        "{err}"
    );
    std::fs::write(d("dup.jsonl"), "{_id: 7}\n{_id: 1}\n").unwrap();
    let (_, err) = fails(&db, &[], &format!(".import {} people\n", d("dup.jsonl")), 1);
    assert!(err.contains("duplicate"), "{err}");
    assert_eq!(ok(&db, "db.people.countDocuments()\n"), "2\n");

    // .export to JSON lines and CSV; they import back the same.
    let out = ok(
        &db,
        &format!(
            ".export people {}\n.export flags {}\n.import {} flags2\ndb.flags2.find()\n",
            d("out.jsonl"),
            d("out.csv"),
            d("out.csv")
        ),
    );
    assert!(out.starts_with("exported 2 documents to"), "{out}");
    assert_eq!(
        std::fs::read_to_string(d("out.jsonl")).unwrap(),
        "{\"_id\":1,\"name\":\"ada\",\"age\":36,\"address\":{\"city\":\"London\"}}\n{\"_id\":2,\"name\":\"bob\",\"age\":25.5}\n"
    );
    assert_eq!(
        std::fs::read_to_string(d("out.csv")).unwrap(),
        "_id,name,ok,note\n1,ada,true,\"a, b\"\n2,bob,false,\n"
    );
    assert!(
        out.contains("{\"_id\":1,\"name\":\"ada\",\"ok\":true,\"note\":\"a, b\"}"),
        "{out}"
    );

    // .output sends results to a file, .output alone back to stdout;
    // .timer prints run times on stderr.
    let o = run(
        &db,
        &[],
        &format!(
            ".output {}\ndb.people.countDocuments()\n.output\n.timer on\ndb.flags.countDocuments()\n.timer off\ndb.flags.countDocuments()\n",
            d("res.txt")
        ),
    );
    assert!(o.status.success());
    assert_eq!(std::fs::read_to_string(d("res.txt")).unwrap(), "2\n");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "2\n2\n");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.matches("Run Time: ").count(), 2, "{err}");

    // .dump is `cairn dump`: every table exactly, restored by `cairn load`.
    ok(&db, "put kv k v\nappend s-1 Created {a: 1}\n");
    let full = ok(&db, ".dump\n");
    let by_tool = cairn(&["dump", db.to_str().unwrap()], "");
    assert!(by_tool.status.success());
    assert_eq!(full, String::from_utf8_lossy(&by_tool.stdout));
    assert!(
        full.contains("\"$docs"),
        "internal tables are dumped: {full}"
    );
    let dumped = ok(&db, &format!(".dump {}\n", d("full.dump")));
    assert!(dumped.contains("cairn load"), "{dumped}");
    assert_eq!(std::fs::read_to_string(d("full.dump")).unwrap(), full);
    let loaded = dir.path().join("loaded.cairn");
    let o = cairn(
        &["load", loaded.to_str().unwrap()],
        &std::fs::read_to_string(d("full.dump")).unwrap(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(ok(&loaded, ".dump\n"), full);

    // .dump --script is a script that .read replays into a new file.
    let dump = ok(&db, ".dump --script\n");
    assert!(dump.contains("put \"kv\" \"k\" \"v\""), "{dump}");
    assert!(
        dump.contains("append \"s-1\" \"Created\" {\"a\":1}"),
        "{dump}"
    );
    assert!(
        dump.contains("db.getCollection(\"people\").createIndex({\"age\":-1}"),
        "{dump}"
    );
    std::fs::write(d("dump.txt"), &dump).unwrap();
    let copy = dir.path().join("copy.cairn");
    ok(&copy, &format!(".read {}\n", d("dump.txt")));
    assert_eq!(
        ok(&copy, ".dump --script\n").replace("copy.cairn", "d.cairn"),
        dump
    );

    // A failing .read names the file and line, fails itself and stops
    // the outer script.
    std::fs::write(
        d("bad.txt"),
        "db.people.countDocuments()\nget kv nope\nshow tables\n",
    )
    .unwrap();
    let (out, err) = fails(
        &db,
        &[],
        &format!(".read {}\ndb.people.countDocuments()\n", d("bad.txt")),
        1,
    );
    assert_eq!(out, "2\n");
    assert!(
        err.contains("bad.txt: line 2: error: key \"nope\" not found"),
        "{err}"
    );
    assert!(
        err.contains("line 1: error: ") && err.contains("a command failed"),
        "{err}"
    );

    // .stats, .check, .backup (the copy opens with the same documents).
    let out = ok(&db, ".stats\n.check\n");
    assert!(out.contains("page size:"), "{out}");
    assert!(out.contains("tables:"), "{out}");
    assert!(out.ends_with("ok\n"), "{out}");
    let backup = d("backup.cairn");
    let out = ok(&db, &format!(".backup {backup}\n"));
    assert!(out.starts_with("backed up to"), "{out}");
    assert_eq!(
        ok(Path::new(&backup), "db.people.countDocuments()\n.check\n"),
        "2\nok\n"
    );
    let (_, err) = fails(&db, &[], &format!(".backup {backup}\n"), 1);
    assert!(err.contains("error:"), "{err}");

    // .quit stops the script.
    assert_eq!(
        ok(&db, "db.people.countDocuments()\n.quit\ndb.nope.frob(\n"),
        "2\n"
    );
    assert_eq!(ok(&db, "exit\n.bogus\n"), "");
}

#[test]
fn transactions() {
    let (_dir, db) = with_people();
    // Inside .begin the writes are seen by later reads; .rollback drops
    // them all: documents, table entries, events and index changes.
    let out = ok(
        &db,
        ".begin
db.people.insertOne({_id: 10, name: 'zed', age: 50})
db.people.updateMany({}, {$inc: {age: 1}})
db.people.deleteOne({name: 'ada'})
db.people.find({}, {age: 1}).sort({age: -1}).skip(1).limit(2)
db.people.find().count()
db.people.countDocuments({age: {$gt: 40}})
put kv a 1
get kv a
append s Created
db.people.createIndex({name: 1})
show tables
.tables
.rollback
db.people.countDocuments()
db.people.getIndexes()
show tables
show streams
",
    );
    assert_eq!(
        out,
        "transaction open
inserted 1 document, _id 10
matched 4, modified 4
deleted 1
{\"_id\":3,\"age\":42}
{\"_id\":2,\"age\":26}
3
2
ok
1
appended 1 event(s) to \"s\"; version 0; position 0
index \"name_1\" ready
kv
kv\t1
rolled back
3
"
    );
    // Inside .begin, queries go through the transaction's planner: an
    // index it created, a document it inserted, explain(), hint(), sort,
    // limit and projection as outside one.
    let out = ok(
        &db,
        ".begin\ndb.people.createIndex({age: 1})\ndb.people.insertOne({_id: 11, age: 99})\n\
         db.people.find({age: {$gt: 90}}).explain()\n\
         db.people.find({age: {$gt: 90}}).hint('age_1')\n\
         db.people.find({}, {_id: 1}).sort({age: -1}).limit(1)\n.rollback\n",
    );
    assert!(
        out.contains("{\"plan\":\"index scan age_1 age > 90\"")
            && out.contains("\"keys_examined\":1,\"docs_examined\":1,\"returned\":1"),
        "{out}"
    );
    let tail: Vec<&str> = out.lines().rev().take(3).collect();
    assert_eq!(
        tail,
        ["rolled back", "{\"_id\":11}", "{\"_id\":11,\"age\":99}"],
        "{out}"
    );

    // .commit keeps them.
    let out = ok(
        &db,
        ".begin\ndb.people.insertOne({_id: 10})\nput kv a 1\n.commit\ndb.people.countDocuments()\nget kv a\n",
    );
    assert_eq!(
        out,
        "transaction open\ninserted 1 document, _id 10\nok\ncommitted\n4\n1\n"
    );
    // A failed statement inside a transaction leaves the transaction and
    // its earlier writes usable.
    let (out, err) = fails(
        &db,
        &["--keep-going"],
        ".begin\ndb.people.insertOne({_id: 11})\ndb.people.insertOne({_id: 11})\n.commit\ndb.people.countDocuments()\n",
        1,
    );
    assert!(
        err.contains("line 3: error:") && err.contains("duplicate"),
        "{err}"
    );
    assert!(out.ends_with("committed\n5\n"), "{out}");
    // An open transaction at the end is rolled back, with a note.
    let o = run(&db, &[], ".begin\ndb.people.insertOne({_id: 12})\n");
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("rolled back"));
    assert_eq!(ok(&db, "db.people.countDocuments()\n"), "5\n");
    // What needs the writer lock is refused inside a transaction (it
    // would wait for the transaction forever); reads are served.
    let (out, err) = fails(
        &db,
        &["--keep-going"],
        ".begin\n.backup x.cairn\n.stats\n.check\n.collections\n.rollback\n",
        1,
    );
    for cmd in [".backup", ".stats", ".check"] {
        assert!(
            err.contains(&format!(
                "{cmd} needs the writer lock, which the open transaction holds"
            )),
            "{err}"
        );
    }
    assert_eq!(out, "transaction open\npeople\t5\nrolled back\n");
    // Misuse.
    let (_, err) = fails(&db, &[], ".commit\n", 1);
    assert!(err.contains("no transaction is open"), "{err}");
    let (_, err) = fails(&db, &[], ".begin\n.begin\n", 1);
    assert!(err.contains("already open"), "{err}");
}

#[test]
fn errors_point_at_the_column_and_stop_the_script() {
    let (_dir, db) = with_people();

    // A parse error: the line, a caret under the column, the message; the
    // script stops there (exit status 1).
    let (out, err) = fails(
        &db,
        &[],
        "db.people.countDocuments()\n  db.people.find({age: })\ndb.people.countDocuments()\n",
        1,
    );
    assert_eq!(out, "3\n");
    assert_eq!(
        err,
        "  db.people.find({age: })\n                       ^\nline 2: parse error at column 24: unexpected `}`: expected a value\n"
    );
    // In a multi-line statement the caret is under the right line.
    let (_, err) = fails(
        &db,
        &[],
        "db.people.find({\n  age: 3,\n  name: 'x' 'y'})\n",
        1,
    );
    assert_eq!(
        err,
        "  name: 'x' 'y'})\n            ^\nline 3: parse error at column 13: expected `,` or `}`\n"
    );
    // Engine errors print the typed error's message.
    let (_, err) = fails(&db, &[], "db.people.insertOne({_id: 1})\n", 1);
    assert!(err.starts_with("line 1: error: "), "{err}");
    assert!(err.contains("duplicate key"), "{err}");
    let (_, err) = fails(&db, &[], "db.people.find({age: {$bogus: 1}})\n", 1);
    assert!(err.contains("$bogus"), "{err}");
    // --keep-going runs the rest; the status still says something failed.
    let (out, err) = fails(
        &db,
        &["--keep-going"],
        "db.people.frob()\ndb.people.countDocuments()\n.nope\nshow tables\n",
        1,
    );
    assert_eq!(out, "3\n");
    assert!(err.contains("unknown collection method `frob`"), "{err}");
    assert!(
        err.contains("line 3: error: unknown dot-command .nope"),
        "{err}"
    );

    // -c runs statements in order and stops at the first error.
    let (out, err) = fails(
        &db,
        &[
            "-c",
            "db.people.countDocuments()",
            "-c",
            "db.people.find(",
            "-c",
            "show collections",
        ],
        "",
        1,
    );
    assert_eq!(out, "3\n");
    assert!(err.contains("-c #2: "), "{err}");
    assert!(err.contains("expected"), "{err}");

    // Comments, alone or after a statement, and quotes inside bare words.
    let out = ok(
        &db,
        "// it's a comment\ndb.people.countDocuments({ // open\n  age: {$gt: 30}, // filter\n}) // done\nput t don't (x\nget t don't\n",
    );
    assert_eq!(out, "2\nok\n(x\n");

    // An unclosed statement at the end of a script is an error.
    let (_, err) = fails(&db, &[], "db.people.find({\n", 1);
    assert!(err.contains("parse error"), "{err}");

    // Nothing a user types panics: odd and broken inputs all fail cleanly.
    let junk = [
        "db",
        "db.",
        "db.x",
        "db.x.",
        "db.x.find",
        "db.x.find(",
        "db.x.find({",
        "db.x.find([1])",
        "db.x.find({}, 3)",
        "db.x.find().limit(-1)",
        "db.x.find().limit(1.5)",
        "db.x.find().sort()",
        "db.x.find().count().limit(1)",
        "db.x.insertMany([1])",
        "db.x.insertMany({})",
        "db.x.insertOne()",
        "db.x.updateOne({}, {a: 1})",
        "db.x.replaceOne({}, {$set: {a: 1}})",
        "db.x.createIndex({})",
        "db.x.createIndex({a: 2})",
        "db.x.createIndex({a: 1}, {bogus: true})",
        "db.x.dropIndex(1)",
        "db.x.dropIndex('no')",
        "db[1]",
        "db['x'",
        "db.x.find({a: \"\\u12\"})",
        "db.x.find({a: 1e999})",
        "db.x.find({a: --1})",
        "db.x.find({a: ObjectId(1)})",
        "db.x.find({a: ObjectId('zz')})",
        "db.x.find({a: undefined})",
        "'unclosed",
        "\"",
        ")",
        "}}}",
        ".",
        ". x",
        ".mode bogus",
        ".timer maybe",
        ".pagesize -1",
        ".schema",
        ".schema nope",
        ".import",
        ".import /nonexistent x",
        ".export nope /tmp/x",
        ".read /nonexistent",
        ".indexes nope",
        ".output /nonexistent/dir/f",
        "get",
        "get t",
        "put t k",
        "scan",
        "append",
        "append s",
        "read s x",
        "tail s -1",
        "show",
        "show dbs",
        "show things",
        "frob",
        "db.x.find() junk",
        "it it",
        "db.getCollection(1).find()",
        "db.bogus()",
        "\u{1F600}",
        "db.x.find({\u{1F600}: 1})",
        "get t \u{0}",
        "put t '' v",
    ];
    let script = junk.join("\n") + "\n";
    let o = run(&db, &["--keep-going"], &script);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn cairn_file_opens_the_shell_and_subcommands_still_work() {
    let (dir, db) = scratch();
    let p = db.to_str().unwrap();
    // `cairn FILE` (like sqlite3) runs the script on stdin.
    let o = cairn(&[p], "db.c.insertOne({_id: 1})\nshow collections\n");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "inserted 1 document, _id 1\nc\n"
    );
    let o = cairn(&[p, "-c", "db.c.countDocuments()"], "");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "1\n");
    // A file that is not a database is a user error (status 1), untouched.
    let txt = dir.path().join("notes.txt");
    std::fs::write(&txt, "hello\n").unwrap();
    let o = cairn(&[txt.to_str().unwrap(), "-c", "show tables"], "");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("is not a CairnDB database"));
    assert_eq!(std::fs::read_to_string(&txt).unwrap(), "hello\n");
    // Subcommands are unchanged; a mistyped one is still an error.
    let o = cairn(&["collections", p], "");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "c\t1\n");
    let o = cairn(&["frobnicate"], "");
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unrecognized subcommand"));
}

#[test]
fn a_damaged_file_exits_2_naming_the_page() {
    let (_dir, db) = scratch();
    let docs: Vec<String> = (0..2000)
        .map(|i| format!("{{_id: {i}, p: '{}'}}", "x".repeat(200)))
        .collect();
    ok(&db, &format!("db.c.insertMany([{}])\n", docs.join(",")));
    // Overwrite pages in the middle of the file (tree pages by now).
    let mut bytes = std::fs::read(&db).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid..mid + 8 * 4096].fill(0xA5);
    std::fs::write(&db, bytes).unwrap();
    let (_, err) = fails(&db, &[], "db.c.countDocuments()\n", 2);
    assert!(err.contains("line 1: error: corruption in"), "{err}");
    assert!(err.contains("file offset"), "{err}");
    let (out, _) = fails(&db, &[], ".check\n", 2);
    assert!(out.contains("checksum mismatch"), "{out}");
}
