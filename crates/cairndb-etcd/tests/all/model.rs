//! Property: random sequences of transactions (inserts, removals, point
//! and range reads, table creation, deletion and listing; committed or
//! aborted) on the cluster read exactly what an in-memory model of
//! `BTreeMap`s says, inside the transaction (its own writes) and after.

use std::collections::BTreeMap;
use std::ops::Bound;

use crate::common::{cluster, connect, Rng};

type Model = BTreeMap<String, BTreeMap<Vec<u8>, Vec<u8>>>;

const TABLES: [&str; 3] = ["a", "b", "c d"];
const TRANSACTIONS: usize = 60;

fn key(rng: &mut Rng) -> Vec<u8> {
    // Short keys, with 0x00 and 0xff, so that neighbours and prefixes meet.
    let alphabet = [0x00u8, 0x01, b'a', b'b', 0xfe, 0xff];
    (0..1 + rng.below(2))
        .map(|_| alphabet[rng.below(alphabet.len() as u64) as usize])
        .collect()
}

fn bound(rng: &mut Rng) -> Bound<Vec<u8>> {
    match rng.below(3) {
        0 => Bound::Unbounded,
        1 => Bound::Included(key(rng)),
        _ => Bound::Excluded(key(rng)),
    }
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
    }
}

fn model_range(
    t: Option<&BTreeMap<Vec<u8>, Vec<u8>>>,
    start: &Bound<Vec<u8>>,
    end: &Bound<Vec<u8>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let valid = match (start, end) {
        (Bound::Included(s), Bound::Included(e)) => s <= e,
        (Bound::Included(s) | Bound::Excluded(s), Bound::Excluded(e) | Bound::Included(e)) => s < e,
        _ => true,
    };
    match t {
        Some(t) if valid => t
            .range::<Vec<u8>, _>((start.clone(), end.clone()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        _ => Vec::new(),
    }
}

#[test]
fn random_transactions_match_a_btreemap_model() {
    let Some(c) = cluster("random_transactions_match_a_btreemap_model") else {
        return;
    };
    let db = connect(&c.url("model"));
    let mut rng = Rng::new("random_transactions_match_a_btreemap_model");
    let mut model = Model::new();
    let mut ops = 0;
    for txn in 0..TRANSACTIONS {
        let tx = db.begin_write().unwrap();
        let mut view = model.clone();
        for _ in 0..1 + rng.below(6) {
            ops += 1;
            let name = TABLES[rng.below(TABLES.len() as u64) as usize];
            let ctx = format!("txn {txn} op {ops} table {name:?}");
            match rng.below(20) {
                0..=6 => {
                    let (k, v) = (key(&mut rng), key(&mut rng));
                    tx.open_table(name).unwrap().insert(&k, &v).unwrap();
                    view.entry(name.into()).or_default().insert(k, v);
                }
                7..=9 => {
                    let k = key(&mut rng);
                    tx.open_table(name).unwrap().remove(&k).unwrap();
                    view.entry(name.into()).or_default().remove(&k);
                }
                10..=12 => {
                    let k = key(&mut rng);
                    let got = tx.open_table(name).unwrap().get(&k).unwrap();
                    let t = view.entry(name.into()).or_default();
                    assert_eq!(got, t.get(&k).cloned(), "{ctx}: get {k:?}");
                }
                13..=16 => {
                    let (s, e) = (bound(&mut rng), bound(&mut rng));
                    let got = tx
                        .open_table(name)
                        .unwrap()
                        .range((as_ref(&s), as_ref(&e)))
                        .unwrap();
                    let t = view.entry(name.into()).or_default();
                    assert_eq!(
                        got,
                        model_range(Some(t), &s, &e),
                        "{ctx}: range {s:?}..{e:?}"
                    );
                }
                17 => {
                    let existed = tx.delete_table(name).unwrap();
                    assert_eq!(existed, view.remove(name).is_some(), "{ctx}: delete_table");
                }
                _ => {
                    let names: Vec<String> = view.keys().cloned().collect();
                    assert_eq!(tx.list_tables().unwrap(), names, "{ctx}: list_tables");
                }
            }
        }
        if rng.below(5) == 0 {
            tx.abort();
        } else {
            tx.commit().unwrap();
            model = view;
        }
        // A snapshot after each transaction shows the model, whole.
        let rx = db.begin_read().unwrap();
        let names: Vec<String> = model.keys().cloned().collect();
        assert_eq!(rx.list_tables().unwrap(), names, "after txn {txn}");
        for name in TABLES {
            match model.get(name) {
                Some(t) => {
                    let got = rx.open_table(name).unwrap().range(..).unwrap();
                    let want: Vec<_> = t.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    assert_eq!(got, want, "after txn {txn}: table {name:?}");
                }
                None => assert!(matches!(
                    rx.open_table(name),
                    Err(cairndb_etcd::Error::TableDoesNotExist(_))
                )),
            }
        }
    }
    eprintln!("model: {TRANSACTIONS} transactions, {ops} operations");
}
