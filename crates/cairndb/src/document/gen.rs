//! Proptest generators for the query language, shared by the document
//! layer's tests (the evaluators' agreement, the collection's differential
//! test against the planner). Values come from a small domain with many
//! ties (`2` and `2.0`, `-0.0` and `0.0`, NaN, shared string prefixes) and
//! field names from a short list, so that random filters match random
//! documents often and reach through arrays and nested objects.

use proptest::prelude::*;

use super::filter::{Cond, ElemMatch, Filter};
use super::keys::SortOrder;
use super::path::FieldPath;
use super::projection::Projection;
use super::sort::SortSpec;
use super::update::Update;
use super::value::{Document, ObjectId, Value};

/// Field names used by documents and paths (`"0"` and `"1"` also select
/// array elements).
pub const KEYS: &[&str] = &["a", "b", "c", "0", "1"];

/// A scalar from the small domain.
pub fn scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        3 => Just(Value::Null),
        2 => any::<bool>().prop_map(Value::Bool),
        8 => (-2i64..4).prop_map(Value::Int),
        1 => prop::sample::select(vec![i64::MIN, i64::MAX, 1 << 53, (1 << 53) + 1])
            .prop_map(Value::Int),
        5 => prop::sample::select(vec![
            -0.0,
            0.0,
            1.0,
            1.5,
            2.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            9007199254740992.0,
        ])
        .prop_map(Value::Float),
        6 => prop::sample::select(vec!["", "a", "ab", "abc", "b", "ba", "é"])
            .prop_map(|s| Value::String(s.to_string())),
        1 => prop::sample::select(vec![vec![], vec![0u8], vec![0, 1], vec![1]]).prop_map(Value::Binary),
        1 => prop::sample::select(vec![[0u8; 12], [1; 12]])
            .prop_map(|b| Value::Id(ObjectId::from_bytes(b))),
        // Dates around the epoch (never equal to the numbers beside them)
        // and UUIDs beside 16-byte binaries (BinData order: length, then
        // subtype, then bytes).
        2 => prop::sample::select(vec![-1i64, 0, 1, 2]).prop_map(Value::Date),
        1 => prop::sample::select(vec![[0u8; 16], [1; 16]]).prop_map(Value::Uuid),
        1 => Just(Value::Binary(vec![1; 16])),
    ]
}

fn key() -> impl Strategy<Value = String> {
    prop::sample::select(KEYS).prop_map(String::from)
}

/// Any value: scalars, arrays and objects nested a few levels.
pub fn value() -> impl Strategy<Value = Value> {
    scalar().prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..4)
                .prop_map(|f| Value::Object(f.into_iter().collect::<Document>())),
        ]
    })
}

/// A document (an object at the top), sometimes with an `_id`.
pub fn document() -> impl Strategy<Value = Value> {
    (
        prop::option::of(scalar()),
        prop::collection::vec((key(), value()), 0..5),
    )
        .prop_map(|(id, fields)| {
            let mut d = Document::new();
            if let Some(id) = id {
                d.insert("_id", id);
            }
            d.extend(fields);
            Value::Object(d)
        })
}

/// A field path of one to three segments from [`KEYS`].
pub fn path() -> impl Strategy<Value = FieldPath> {
    prop::collection::vec(key(), 1..4)
        .prop_filter_map("valid path", |segs| FieldPath::parse(&segs.join(".")).ok())
}

fn prefix() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["", "a", "ab", "b", "é"]).prop_map(String::from)
}

/// A condition without nesting.
pub fn leaf_cond() -> impl Strategy<Value = Cond> {
    prop_oneof![
        4 => value().prop_map(Cond::Eq),
        2 => value().prop_map(Cond::Ne),
        2 => scalar().prop_map(Cond::Gt),
        2 => scalar().prop_map(Cond::Gte),
        2 => scalar().prop_map(Cond::Lt),
        2 => scalar().prop_map(Cond::Lte),
        2 => prop::collection::vec(value(), 0..4).prop_map(Cond::In),
        1 => prop::collection::vec(value(), 0..4).prop_map(Cond::Nin),
        2 => any::<bool>().prop_map(Cond::Exists),
        2 => (0u64..4).prop_map(Cond::Size),
        2 => prefix().prop_map(Cond::Prefix),
        1 => prop::sample::subsequence(vec!["string", "double", "long", "array", "null", "object", "bool"], 1..3)
            .prop_map(|ts| Cond::Type(ts.into_iter().map(String::from).collect())),
        1 => (prop::sample::select(vec![-3i64, 2, 3]), -2i64..3).prop_map(|(d, r)| Cond::Mod(d, r)),
        1 => (
            prop::sample::select(vec!["a.", "b$", "^a.*b", "(?:é|b)", "^ab?"]),
            prop::sample::select(vec!["", "i", "s", "m"]),
        )
            .prop_filter_map("compiles", |(p, o)| {
                super::filter::RegexCond::new(p, o).ok().map(Cond::Regex)
            }),
    ]
}

/// A simple filter on one path (for element filters inside conditions).
fn simple_filter() -> impl Strategy<Value = Filter> {
    prop_oneof![
        1 => Just(Filter::True),
        6 => (path(), leaf_cond()).prop_map(|(path, cond)| Filter::Field { path, cond }),
    ]
}

/// A condition, possibly nested (`$not`, several operators, `$elemMatch`).
pub fn cond() -> impl Strategy<Value = Cond> {
    leaf_cond().prop_recursive(2, 8, 3, |inner| {
        prop_oneof![
            inner.clone().prop_map(|c| Cond::Not(Box::new(c))),
            prop::collection::vec(inner.clone(), 0..3).prop_map(Cond::All),
            inner.prop_map(|c| Cond::ElemMatch(ElemMatch::Element(Box::new(c)))),
            simple_filter().prop_map(|f| Cond::ElemMatch(ElemMatch::Document(Box::new(f)))),
        ]
    })
}

/// A filter: fields with (possibly nested) conditions under `$and`, `$or`
/// and `$nor`, element filters included.
pub fn filter() -> impl Strategy<Value = Filter> {
    let leaf = prop_oneof![
        1 => Just(Filter::True),
        12 => (path(), cond()).prop_map(|(path, cond)| Filter::Field { path, cond }),
    ];
    leaf.prop_recursive(3, 16, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(Filter::And),
            prop::collection::vec(inner.clone(), 1..4).prop_map(Filter::Or),
            prop::collection::vec(inner.clone(), 1..3).prop_map(Filter::Nor),
            (path(), inner).prop_map(|(path, f)| Filter::Field {
                path,
                cond: Cond::ElemMatch(ElemMatch::Document(Box::new(f))),
            }),
        ]
    })
}

/// A conjunction of equalities (what an upsert seeds a document from).
pub fn equality_filter() -> impl Strategy<Value = Filter> {
    prop::collection::vec((path(), value()), 1..4).prop_map(|eqs| {
        Filter::And(
            eqs.into_iter()
                .map(|(path, v)| Filter::Field {
                    path,
                    cond: Cond::Eq(v),
                })
                .collect(),
        )
    })
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        (-2i64..4).prop_map(Value::Int),
        prop::sample::select(vec![i64::MAX, i64::MIN]).prop_map(Value::Int),
        prop::sample::select(vec![0.5, -1.0, 2.0, f64::NAN]).prop_map(Value::Float),
    ]
}

fn operand(op: &'static str) -> BoxedStrategy<Value> {
    match op {
        "$inc" | "$mul" => number().boxed(),
        "$rename" => path().prop_map(|p| Value::String(p.to_string())).boxed(),
        "$push" | "$addToSet" => prop_oneof![
            value(),
            prop::collection::vec(value(), 0..3).prop_map(|items| Value::Object(
                Document::new().with("$each", Value::Array(items))
            )),
        ]
        .boxed(),
        "$pull" => prop_oneof![
            scalar(),
            leaf_cond().prop_map(|c| super::filter::cond_object(&c)),
            simple_filter().prop_map(|f| f.to_value()),
        ]
        .boxed(),
        _ => value().boxed(),
    }
}

/// A valid operator update of one to four operators, or sometimes a
/// replacement.
pub fn update() -> impl Strategy<Value = Update> {
    let op = prop::sample::select(vec![
        "$set",
        "$unset",
        "$inc",
        "$mul",
        "$min",
        "$max",
        "$rename",
        "$push",
        "$addToSet",
        "$pull",
        "$setOnInsert",
    ]);
    let entry = (op, path()).prop_flat_map(|(op, p)| (Just(op), Just(p), operand(op)));
    let ops = prop::collection::vec(entry, 1..5).prop_filter_map("valid update", |entries| {
        let mut groups: Vec<(&'static str, Document)> = Vec::new();
        for (op, path, arg) in entries {
            match groups.iter_mut().find(|(n, _)| *n == op) {
                Some((_, d)) => {
                    d.insert(path.as_str(), arg);
                }
                None => groups.push((op, Document::new().with(path.as_str(), arg))),
            }
        }
        Update::from_value(Value::Object(groups.into_iter().collect())).ok()
    });
    let replacement = prop::collection::vec((key(), value()), 0..4)
        .prop_filter_map("valid replacement", |f| {
            Update::from_value(Value::Object(f.into_iter().collect())).ok()
        });
    prop_oneof![8 => ops, 1 => replacement]
}

/// A valid projection (inclusion or exclusion, `_id` sometimes set).
pub fn projection() -> impl Strategy<Value = Projection> {
    (
        prop::collection::vec(path(), 0..4),
        any::<bool>(),
        prop::option::of(any::<bool>()),
    )
        .prop_filter_map("valid projection", |(paths, include, id)| {
            let mut d = Document::new();
            if let Some(id) = id {
                d.insert("_id", Value::Int(i64::from(id)));
            }
            for p in paths {
                d.insert(p.as_str(), Value::Int(i64::from(include)));
            }
            Projection::from_value(Value::Object(d)).ok()
        })
}

/// A sort on one to three distinct paths.
pub fn sort_spec() -> impl Strategy<Value = SortSpec> {
    prop::collection::vec((path(), any::<bool>()), 1..4).prop_filter_map("valid sort", |keys| {
        SortSpec::new(
            keys.into_iter()
                .map(|(p, asc)| {
                    let order = if asc {
                        SortOrder::Ascending
                    } else {
                        SortOrder::Descending
                    };
                    (p, order)
                })
                .collect(),
        )
        .ok()
    })
}
