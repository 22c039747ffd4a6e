//! Typed keys: integers, tuples and strings, and why their byte encodings
//! preserve order.
//!
//! CairnDB compares keys as raw bytes (memcmp). Every key type therefore
//! encodes so that byte order equals logical order:
//! * unsigned integers are big-endian (so 256 sorts after 2, unlike
//!   little-endian bytes or decimal text);
//! * signed integers are big-endian with the sign bit flipped (so -100 sorts
//!   before -5 before 3);
//! * tuples concatenate fixed-width leading elements with a last element of
//!   any key type, so `(a, b)` sorts by `a`, then `b`: a composite index;
//! * `&str` and `&[u8]` are their bytes (lexicographic; a prefix sorts first).
//!
//! Run with `cargo run -p cairndb --example typed_keys`.

use cairndb::{Database, ReadableTable, TableDefinition, Value};

const BY_ID: TableDefinition<u64, &str> = TableDefinition::new("by_id");
const TEMPS: TableDefinition<i64, ()> = TableDefinition::new("temperatures");
/// (user id, sequence number) → event text: all events of one user are
/// contiguous and ordered by sequence number.
const EVENTS: TableDefinition<(u64, u64), &str> = TableDefinition::new("events");
const CONFIG: TableDefinition<&str, &str> = TableDefinition::new("config");

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let db = Database::create(dir.path().join("typed.cairn"))?;

    // The encodings themselves.
    assert_eq!(u64::as_bytes(&256), [0, 0, 0, 0, 0, 0, 1, 0]);
    assert!(i64::as_bytes(&-1) < i64::as_bytes(&0));
    assert!(<(u64, u64)>::as_bytes(&(1, u64::MAX)) < <(u64, u64)>::as_bytes(&(2, 0)));
    assert_eq!(<(u64, u64)>::type_name(), "(u64,u64)");

    let txn = db.begin_write()?;
    {
        // Inserted out of order on purpose.
        let mut t = txn.open_table(BY_ID)?;
        for (id, name) in [
            (256u64, "two-five-six"),
            (2, "two"),
            (10, "ten"),
            (1, "one"),
        ] {
            t.insert(id, name)?;
        }
        let mut t = txn.open_table(TEMPS)?;
        for c in [3i64, -100, 0, -5, i64::MIN, 42] {
            t.insert(c, ())?;
        }
        let mut t = txn.open_table(EVENTS)?;
        let events = [
            ((2u64, 1u64), "bob logs in"),
            ((1, 2), "ada edits"),
            ((2, 3), "bob logs out"),
            ((1, 1), "ada logs in"),
            ((3, 1), "cyd logs in"),
            ((2, 2), "bob uploads"),
            ((1, 10), "ada logs out"),
        ];
        for (k, v) in events {
            t.insert(k, v)?;
        }
        let mut t = txn.open_table(CONFIG)?;
        for (k, v) in [
            ("app/theme", "dark"),
            ("db/path", "/var/x"),
            ("app", "root"),
            ("app/lang", "en"),
            ("apple", "fruit"),
        ] {
            t.insert(k, v)?;
        }
    }
    txn.commit()?;

    let read = db.begin_read()?;

    // Integers: numeric order, and numeric ranges.
    let t = read.open_table(BY_ID)?;
    let ids: Vec<u64> = t
        .iter()?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()?;
    println!("u64 keys in order:      {ids:?}");
    assert_eq!(ids, [1, 2, 10, 256]);
    let mid: Vec<u64> = t
        .range(2u64..=10)?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()?;
    assert_eq!(mid, [2, 10]);

    let t = read.open_table(TEMPS)?;
    let temps: Vec<i64> = t
        .iter()?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()?;
    println!("i64 keys in order:      {temps:?}");
    assert_eq!(temps, [i64::MIN, -100, -5, 0, 3, 42]);
    let below_zero: Vec<i64> = t
        .range(..0i64)?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()?;
    assert_eq!(below_zero, [i64::MIN, -100, -5]);

    // Tuples: all of user 1's events, in sequence order, by a range over the
    // first element: (1, 0) ..= (1, u64::MAX), written as (1, 0)..(2, 0).
    let t = read.open_table(EVENTS)?;
    let mut ada = Vec::new();
    for e in t.range((1u64, 0u64)..(2, 0))? {
        let (k, v) = e?;
        let (user, seq) = k.value();
        println!("event user={user} seq={seq}: {}", v.value());
        ada.push((seq, v.value().to_string()));
    }
    assert_eq!(
        ada,
        [
            (1, "ada logs in".to_string()),
            (2, "ada edits".into()),
            (10, "ada logs out".into())
        ]
    );
    // Bob's latest event: the last key below (3, 0).
    let (k, v) = t
        .range(..(3u64, 0u64))?
        .next_back()
        .transpose()?
        .ok_or("no events")?;
    assert_eq!(k.value(), (2, 3));
    assert_eq!(v.value(), "bob logs out");
    let all: Vec<(u64, u64)> = t
        .iter()?
        .map(|e| e.map(|(k, _)| k.value()))
        .collect::<Result<_, _>>()?;
    println!("(u64, u64) keys:        {all:?}");
    assert!(all.windows(2).all(|w| w[0] < w[1]));

    // Strings: byte-lexicographic order. A prefix scan for "app/" is the
    // range "app/".."app0" ('0' is the byte after '/').
    let t = read.open_table(CONFIG)?;
    let keys: Vec<String> = t
        .iter()?
        .map(|e| e.map(|(k, _)| k.value().to_string()))
        .collect::<Result<_, _>>()?;
    println!("&str keys in order:     {keys:?}");
    assert_eq!(keys, ["app", "app/lang", "app/theme", "apple", "db/path"]);
    let app: Vec<(String, String)> = t
        .range("app/".."app0")?
        .map(|e| e.map(|(k, v)| (k.value().to_string(), v.value().to_string())))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        app,
        [
            ("app/lang".to_string(), "en".to_string()),
            ("app/theme".into(), "dark".into())
        ]
    );

    // The key and value types are recorded: opening a table with other types
    // is a typed error, never a misdecoded value.
    const WRONG: TableDefinition<u32, &str> = TableDefinition::new("by_id");
    let err = read
        .open_table(WRONG)
        .err()
        .ok_or("opened with the wrong types")?;
    println!("wrong types: {err}");
    assert!(
        matches!(&err, cairndb::CoreError::TableTypeMismatch(m) if { let cairndb::TypeMismatch { stored_key, .. } = &**m; stored_key == "u64" }),
        "expected a type mismatch, got {err:?}"
    );
    println!("typed_keys: ok");
    Ok(())
}
