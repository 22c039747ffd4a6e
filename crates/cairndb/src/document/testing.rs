//! Test fixtures shared by the document modules' tests: the three mapper
//! entities of the LiteDB mapper report (Simple, a value object built only
//! through a validating constructor, Complex) and proptest strategies for
//! dynamic values.

use std::fmt;

use proptest::prelude::*;
use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use super::value::{Document, ObjectId, Value};

/// Public fields: int, two strings, a timestamp, a bool, a double.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Simple {
    pub id: i32,
    pub name: String,
    pub email: String,
    pub created_at: i64,
    pub active: bool,
    pub score: f64,
}

pub fn simple() -> Simple {
    Simple {
        id: 42,
        name: "Ada Lovelace".into(),
        email: "ada@example.com".into(),
        created_at: 1_738_454_400_123,
        active: true,
        score: 97.5,
    }
}

/// A fixed-point decimal that validates itself; stored as its text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decimal {
    units: i64,
    scale: u8,
}

impl Decimal {
    pub fn new(units: i64, scale: u8) -> Result<Decimal, String> {
        if scale > 18 {
            return Err(format!("scale {scale} over 18"));
        }
        Ok(Decimal { units, scale })
    }

    pub fn parse(s: &str) -> Result<Decimal, String> {
        let bad = || format!("{s:?} is not a decimal");
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let neg = int.starts_with('-');
        let digits = int.trim_start_matches('-');
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        if !frac.bytes().all(|b| b.is_ascii_digit()) || frac.len() > 18 {
            return Err(bad());
        }
        let mut units: i64 = 0;
        for b in digits.bytes().chain(frac.bytes()) {
            units = units
                .checked_mul(10)
                .and_then(|u| u.checked_add(i64::from(b - b'0')))
                .ok_or_else(bad)?;
        }
        Decimal::new(if neg { -units } else { units }, frac.len() as u8)
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = 10u64.pow(u32::from(self.scale));
        let mag = self.units.unsigned_abs();
        let sign = if self.units < 0 { "-" } else { "" };
        if self.scale == 0 {
            write!(f, "{sign}{mag}")
        } else {
            let w = usize::from(self.scale);
            write!(f, "{sign}{}.{:0w$}", mag / p, mag % p)
        }
    }
}

impl Serialize for Decimal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Decimal, D::Error> {
        struct V;
        impl de::Visitor<'_> for V {
            type Value = Decimal;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a decimal string")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Decimal, E> {
                Decimal::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// A value object: private fields, set only through [`Order::new`], which
/// validates; deserialization goes through the same constructor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "OrderFields")]
pub struct Order {
    id: i64,
    customer: String,
    amount: Decimal,
    currency: String,
    placed_at: i64,
}

#[derive(Deserialize)]
struct OrderFields {
    id: i64,
    customer: String,
    amount: Decimal,
    currency: String,
    placed_at: i64,
}

impl Order {
    pub fn new(
        id: i64,
        customer: &str,
        amount: Decimal,
        currency: &str,
        placed_at: i64,
    ) -> Result<Order, String> {
        if !customer.contains('@') {
            return Err(format!("customer {customer:?} is not an email"));
        }
        if currency.len() != 3 || !currency.bytes().all(|b| b.is_ascii_uppercase()) {
            return Err(format!("currency {currency:?} is not an ISO code"));
        }
        if amount.units < 0 {
            return Err("negative amount".into());
        }
        Ok(Order {
            id,
            customer: customer.into(),
            amount,
            currency: currency.into(),
            placed_at,
        })
    }

    pub fn currency(&self) -> &str {
        &self.currency
    }
}

impl TryFrom<OrderFields> for Order {
    type Error = String;
    fn try_from(f: OrderFields) -> Result<Order, String> {
        Order::new(f.id, &f.customer, f.amount, &f.currency, f.placed_at)
    }
}

pub fn order() -> Order {
    Order::new(
        7001,
        "grace@example.com",
        Decimal::new(199_995, 2).unwrap(),
        "EUR",
        1_738_454_400_456,
    )
    .unwrap()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Address {
    pub street: String,
    pub city: String,
    pub zip: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tag {
    pub name: String,
    pub value: String,
}

/// Nested: an id, a title, an address of 3 strings, 1–4 tags of 2 strings,
/// a timestamp.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Complex {
    pub id: ObjectId,
    pub title: String,
    pub address: Address,
    pub tags: Vec<Tag>,
    pub created_at: i64,
}

pub fn complex(tags: usize) -> Complex {
    Complex {
        id: ObjectId::from_bytes([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]),
        title: "Quarterly report".into(),
        address: Address {
            street: "12 Harbour Road".into(),
            city: "Lisbon".into(),
            zip: "1100-001".into(),
        },
        tags: (0..tags)
            .map(|i| Tag {
                name: format!("tag{i}"),
                value: format!("value{i}"),
            })
            .collect(),
        created_at: 1_738_454_400_789,
    }
}

// ---------------------------------------------------------------------------
// Strategies

/// Floats with many ties and edge cases, plus arbitrary bit patterns.
pub fn arb_f64() -> impl Strategy<Value = f64> {
    prop_oneof![
        prop::sample::select(vec![
            0.0,
            -0.0,
            0.5,
            -1.5,
            1.0,
            2.0,
            -2.0,
            3.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            5e-324,
            -5e-324,
            9007199254740992.0,
            9007199254740994.0,
            -9007199254740992.0,
            9.223372036854776e18,
            -9.223372036854776e18,
            1e300,
        ]),
        any::<f64>(),
        (-4i32..4).prop_map(|i| f64::from(i) * 0.25),
    ]
}

/// Integers with many ties against the floats above.
pub fn arb_i64() -> impl Strategy<Value = i64> {
    prop_oneof![
        -4i64..4,
        prop::sample::select(vec![
            i64::MIN,
            i64::MAX,
            i64::MIN + 1,
            1 << 53,
            (1 << 53) + 1,
            -(1 << 53) - 1,
            1 << 62,
            127,
            128,
            -129,
            32767,
            32768,
            i64::from(i32::MAX) + 1,
        ]),
        any::<i64>(),
    ]
}

/// Short strings over an alphabet with NUL, shared prefixes and multibyte.
pub fn arb_string() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(
            prop::sample::select(vec!['a', 'b', '\0', '\u{1}', 'é', '\u{ffff}']),
            0..4
        )
        .prop_map(|v| v.into_iter().collect()),
        any::<String>(),
    ]
}

pub fn arb_key() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["a", "b", "c", "", "0", "1", "a\0"]).prop_map(String::from)
}

pub fn arb_scalar() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        arb_i64().prop_map(Value::Int),
        arb_f64().prop_map(Value::Float),
        arb_string().prop_map(Value::String),
        prop::collection::vec(prop::sample::select(vec![0u8, 1, 0xFF, 0x7F]), 0..4)
            .prop_map(Value::Binary),
        prop::sample::select(vec![[0u8; 12], [1; 12], [0xFF; 12]])
            .prop_map(|b| Value::Id(ObjectId::from_bytes(b))),
        // Dates: the extremes, around the epoch, and any i64.
        prop_oneof![
            prop::sample::select(vec![i64::MIN, -1, 0, 1, i64::MAX]),
            any::<i64>()
        ]
        .prop_map(Value::Date),
        // UUIDs beside 16-byte binaries (they differ only by subtype).
        prop::sample::select(vec![[0u8; 16], [1; 16], [0xFF; 16]]).prop_map(Value::Uuid),
        prop::sample::select(vec![[0u8; 16], [0xFF; 16]]).prop_map(|b| Value::Binary(b.to_vec())),
    ]
}

/// Any value: scalars, arrays and objects nested a few levels.
pub fn arb_value() -> impl Strategy<Value = Value> {
    arb_scalar().prop_recursive(4, 48, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((arb_key(), inner), 0..5)
                .prop_map(|f| Value::Object(f.into_iter().collect::<Document>())),
        ]
    })
}

/// An object at the top, as stored documents are.
pub fn arb_document() -> impl Strategy<Value = Value> {
    prop::collection::vec((arb_key(), arb_value()), 0..6)
        .prop_map(|f| Value::Object(f.into_iter().collect::<Document>()))
}
