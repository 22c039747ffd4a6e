//! Property: an append on a cluster takes the global log's end from the
//! counter key `P/n/$ev.global` (FORMAT.md, "etcd key layout"), not from
//! the log (a descending read etcd answers by reading the whole log); the
//! counter is trusted only while its mod revision is the log's version
//! key's, so a prefix of the previous layout, or a commit that wrote the
//! log without the counter, falls back to the log's last key and the next
//! append rewrites the counter; and an append into an existing stream
//! takes a fixed number of requests (a regression in batching or caching
//! fails it).

use cairndb::events::{EventData, ExpectedVersion, Position, StreamVersion};
use cairndb::Value;
use cairndb_etcd::{Error, EtcdDatabase, EtcdUrl};
use etcd_client::{Client, GetOptions, Txn, TxnOp};

use crate::common::{cluster, connect};

/// A plain etcd client on the same cluster: what another program (or a
/// client of the previous layout) could do to the prefix's keys.
struct Raw {
    rt: tokio::runtime::Runtime,
    client: Client,
    prefix: String,
}

impl Raw {
    fn new(url: &str) -> Raw {
        let parsed = EtcdUrl::parse(url).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = rt
            .block_on(Client::connect(&parsed.endpoints, None))
            .unwrap();
        Raw {
            rt,
            client,
            prefix: parsed.prefix,
        }
    }

    fn key(&self, rest: &str) -> Vec<u8> {
        format!("{}/{rest}", self.prefix).into_bytes()
    }

    fn log_entry(&self, position: u64) -> Vec<u8> {
        let mut k = self.key("t/$ev.global");
        k.push(0);
        k.extend_from_slice(<u64 as Value>::as_bytes(&position).as_ref());
        k
    }

    /// A key's value and mod revision.
    fn get(&self, key: Vec<u8>) -> Option<(Vec<u8>, i64)> {
        let mut kv = self.client.kv_client();
        let resp = self
            .rt
            .block_on(kv.get(key, Some(GetOptions::new())))
            .unwrap();
        resp.kvs()
            .first()
            .map(|kv| (kv.value().to_vec(), kv.mod_revision()))
    }

    /// One `Txn` of puts (`Some`) and deletes (`None`).
    fn write(&self, ops: Vec<(Vec<u8>, Option<Vec<u8>>)>) {
        let ops = ops
            .into_iter()
            .map(|(k, v)| match v {
                Some(v) => TxnOp::put(k, v, None),
                None => TxnOp::delete(k, None),
            })
            .collect::<Vec<_>>();
        let mut kv = self.client.kv_client();
        let resp = self.rt.block_on(kv.txn(Txn::new().and_then(ops))).unwrap();
        assert!(resp.succeeded());
    }

    /// The counter's value, asserted valid (written with the log).
    fn valid_counter(&self) -> u64 {
        let (value, counter_mod) = self.get(self.key("n/$ev.global")).expect("a counter key");
        let (_, version_mod) = self.get(self.key("v/$ev.global")).expect("a version key");
        assert_eq!(
            counter_mod, version_mod,
            "the counter was written with the log"
        );
        String::from_utf8(value).unwrap().parse().unwrap()
    }
}

fn event(ty: &str) -> EventData {
    EventData::new(ty, b"{}".to_vec())
}

fn append_one(db: &EtcdDatabase, stream: &str) -> u64 {
    let r = db
        .events()
        .append(stream, ExpectedVersion::Any, &[event("E")])
        .unwrap();
    r.first_position.unwrap().0
}

/// A log entry far past the end, written in one `Txn` with the version key
/// and the counter (so the counter stays valid): an append goes to the
/// counter's position, not after the log's last key.
#[test]
fn appends_take_the_log_end_from_the_counter_key() {
    let Some(c) = cluster("appends_take_the_log_end_from_the_counter_key") else {
        return;
    };
    let url = c.url("counter");
    let db = connect(&url);
    let raw = Raw::new(&url);
    let ev = db.events();
    ev.append("s", ExpectedVersion::NoStream, &[event("A"), event("B")])
        .unwrap();
    assert_eq!(append_one(&db, "s"), 2);
    assert_eq!(raw.valid_counter(), 3);

    let stray = raw.get(raw.log_entry(2)).unwrap().0;
    raw.write(vec![
        (raw.log_entry(1000), Some(stray)),
        (raw.key("v/$ev.global"), Some(Vec::new())),
        (raw.key("n/$ev.global"), Some(b"3".to_vec())),
    ]);
    assert_eq!(ev.next_position().unwrap(), Position(3), "the read side");
    assert_eq!(append_one(&db, "s"), 3, "the counter's position");
    assert_eq!(raw.valid_counter(), 4);
    assert_eq!(ev.stream_version("s").unwrap(), Some(StreamVersion(3)));
}

/// A prefix of the previous layout (no counter key), a commit that wrote
/// the log without the counter (a client of the previous layout), and a
/// counter that is not a number.
#[test]
fn a_counter_not_written_with_the_log_is_ignored_and_rewritten() {
    let Some(c) = cluster("a_counter_not_written_with_the_log_is_ignored_and_rewritten") else {
        return;
    };
    let url = c.url("stale");
    let db = connect(&url);
    let raw = Raw::new(&url);
    let ev = db.events();
    ev.append("s", ExpectedVersion::NoStream, &[event("A"), event("B")])
        .unwrap();

    // The previous layout: no counter. Read from the log; the append
    // writes the counter.
    raw.write(vec![(raw.key("n/$ev.global"), None)]);
    assert_eq!(ev.next_position().unwrap(), Position(2));
    assert_eq!(append_one(&db, "s"), 2);
    assert_eq!(raw.valid_counter(), 3);
    assert!(ev.check().unwrap().is_empty());

    // A commit of the log without the counter: the counter (3) is stale,
    // the log's last key (1000) is the truth.
    let stray = raw.get(raw.log_entry(2)).unwrap().0;
    raw.write(vec![
        (raw.log_entry(1000), Some(stray)),
        (raw.key("v/$ev.global"), Some(Vec::new())),
    ]);
    assert_eq!(ev.next_position().unwrap(), Position(1001), "the read side");
    assert_eq!(append_one(&db, "s"), 1001, "after the log's last key");
    assert_eq!(raw.valid_counter(), 1002);

    // A valid counter that is not a number: a typed error naming the key.
    raw.write(vec![
        (raw.key("v/$ev.global"), Some(Vec::new())),
        (raw.key("n/$ev.global"), Some(b"12x".to_vec())),
    ]);
    match ev.append("s", ExpectedVersion::Any, &[event("E")]) {
        Err(e @ Error::Format { .. }) => {
            assert!(e.to_string().contains("stale/n/$ev.global"), "{e}")
        }
        other => panic!("expected a format error, got {other:?}"),
    }
}

/// Requests per append into an existing stream (`EtcdDatabase::round_trips`):
/// with `Any` the catalog read ahead (the first table opened), the
/// stream's record, the idempotency check's event id entry, the counter and
/// version keys, the commit (10 before the counter and the read-ahead);
/// with an exact version, no idempotency lookup.
#[test]
fn a_one_event_append_to_an_existing_stream_takes_five_round_trips() {
    let Some(c) = cluster("a_one_event_append_to_an_existing_stream_takes_five_round_trips") else {
        return;
    };
    let db = connect(&c.url("trips"));
    let ev = db.events();
    ev.append("s", ExpectedVersion::NoStream, &[event("A")])
        .unwrap();
    let before = db.round_trips();
    ev.append("s", ExpectedVersion::Any, &[event("B")]).unwrap();
    assert_eq!(db.round_trips() - before, 5, "an append with Any");
    let before = db.round_trips();
    ev.append("s", ExpectedVersion::Exact(StreamVersion(1)), &[event("C")])
        .unwrap();
    assert_eq!(
        db.round_trips() - before,
        4,
        "an append with an exact version"
    );
    let before = db.round_trips();
    assert_eq!(ev.next_position().unwrap(), Position(3));
    assert_eq!(db.round_trips() - before, 3, "next_position on a snapshot");
}
