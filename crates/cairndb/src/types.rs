//! Typed keys and values: how Rust values become bytes and back.
//!
//! Keys are compared as bytes (memcmp order), so every [`Key`] encoding is
//! *order-preserving*: integers are big-endian with the sign bit flipped,
//! strings and byte slices are their bytes, fixed arrays are their bytes, and
//! tuples concatenate fixed-width leading elements with a final element of
//! any key type.

use std::fmt::Debug;

/// A type that can be stored as a value.
pub trait Value: Debug {
    /// The decoded form, possibly borrowing from the stored bytes.
    type SelfType<'a>: Debug
    where
        Self: 'a;
    /// The encoded form.
    type AsBytes<'a>: AsRef<[u8]>
    where
        Self: 'a;
    /// Decodes bytes that passed [`Value::validate`].
    fn from_bytes<'a>(data: &'a [u8]) -> Self::SelfType<'a>
    where
        Self: 'a;
    /// Encodes a value.
    fn as_bytes<'a, 'b: 'a>(value: &'a Self::SelfType<'b>) -> Self::AsBytes<'a>
    where
        Self: 'b;
    /// Whether `data` is a valid encoding (checked before every decode, so a
    /// type mismatch is an error, never a panic or a wrong value).
    fn validate(data: &[u8]) -> bool;
    /// The encoded width if every value has the same width.
    fn fixed_width() -> Option<usize>;
    /// A stable name recorded in the catalog and checked when a table is opened.
    fn type_name() -> String;
}

/// A type that can be a key. Its encoding must be order-preserving: for any
/// two values, comparing their encodings as bytes gives their logical order.
pub trait Key: Value {}

/// A key type whose encoding has the same width for every value; such types
/// may lead a tuple key.
pub trait FixedKey: Key {}

impl Value for &[u8] {
    type SelfType<'a>
        = &'a [u8]
    where
        Self: 'a;
    type AsBytes<'a>
        = &'a [u8]
    where
        Self: 'a;
    fn from_bytes<'a>(data: &'a [u8]) -> &'a [u8]
    where
        Self: 'a,
    {
        data
    }
    fn as_bytes<'a, 'b: 'a>(value: &'a &'b [u8]) -> &'a [u8]
    where
        Self: 'b,
    {
        value
    }
    fn validate(_: &[u8]) -> bool {
        true
    }
    fn fixed_width() -> Option<usize> {
        None
    }
    fn type_name() -> String {
        "&[u8]".into()
    }
}
impl Key for &[u8] {}

impl Value for &str {
    type SelfType<'a>
        = &'a str
    where
        Self: 'a;
    type AsBytes<'a>
        = &'a [u8]
    where
        Self: 'a;
    fn from_bytes<'a>(data: &'a [u8]) -> &'a str
    where
        Self: 'a,
    {
        std::str::from_utf8(data).unwrap_or_default()
    }
    fn as_bytes<'a, 'b: 'a>(value: &'a &'b str) -> &'a [u8]
    where
        Self: 'b,
    {
        value.as_bytes()
    }
    fn validate(data: &[u8]) -> bool {
        std::str::from_utf8(data).is_ok()
    }
    fn fixed_width() -> Option<usize> {
        None
    }
    fn type_name() -> String {
        "&str".into()
    }
}
impl Key for &str {}

impl Value for String {
    type SelfType<'a>
        = String
    where
        Self: 'a;
    type AsBytes<'a>
        = &'a [u8]
    where
        Self: 'a;
    fn from_bytes<'a>(data: &'a [u8]) -> String
    where
        Self: 'a,
    {
        String::from_utf8_lossy(data).into_owned()
    }
    fn as_bytes<'a, 'b: 'a>(value: &'a String) -> &'a [u8]
    where
        Self: 'b,
    {
        value.as_bytes()
    }
    fn validate(data: &[u8]) -> bool {
        std::str::from_utf8(data).is_ok()
    }
    fn fixed_width() -> Option<usize> {
        None
    }
    fn type_name() -> String {
        // Same encoding as &str: the two are interchangeable.
        "&str".into()
    }
}
impl Key for String {}

impl Value for Vec<u8> {
    type SelfType<'a>
        = Vec<u8>
    where
        Self: 'a;
    type AsBytes<'a>
        = &'a [u8]
    where
        Self: 'a;
    fn from_bytes<'a>(data: &'a [u8]) -> Vec<u8>
    where
        Self: 'a,
    {
        data.to_vec()
    }
    fn as_bytes<'a, 'b: 'a>(value: &'a Vec<u8>) -> &'a [u8]
    where
        Self: 'b,
    {
        value
    }
    fn validate(_: &[u8]) -> bool {
        true
    }
    fn fixed_width() -> Option<usize> {
        None
    }
    fn type_name() -> String {
        "&[u8]".into()
    }
}
impl Key for Vec<u8> {}

impl Value for () {
    type SelfType<'a>
        = ()
    where
        Self: 'a;
    type AsBytes<'a>
        = [u8; 0]
    where
        Self: 'a;
    fn from_bytes<'a>(_: &'a [u8]) -> Self::SelfType<'a>
    where
        Self: 'a,
    {
    }
    fn as_bytes<'a, 'b: 'a>(_: &'a ()) -> [u8; 0]
    where
        Self: 'b,
    {
        []
    }
    fn validate(data: &[u8]) -> bool {
        data.is_empty()
    }
    fn fixed_width() -> Option<usize> {
        Some(0)
    }
    fn type_name() -> String {
        "()".into()
    }
}
impl Key for () {}
impl FixedKey for () {}

impl<const N: usize> Value for [u8; N] {
    type SelfType<'a>
        = [u8; N]
    where
        Self: 'a;
    type AsBytes<'a>
        = [u8; N]
    where
        Self: 'a;
    fn from_bytes<'a>(data: &'a [u8]) -> [u8; N]
    where
        Self: 'a,
    {
        let mut a = [0u8; N];
        if data.len() == N {
            a.copy_from_slice(data);
        }
        a
    }
    fn as_bytes<'a, 'b: 'a>(value: &'a [u8; N]) -> [u8; N]
    where
        Self: 'b,
    {
        *value
    }
    fn validate(data: &[u8]) -> bool {
        data.len() == N
    }
    fn fixed_width() -> Option<usize> {
        Some(N)
    }
    fn type_name() -> String {
        format!("[u8;{N}]")
    }
}
impl<const N: usize> Key for [u8; N] {}
impl<const N: usize> FixedKey for [u8; N] {}

macro_rules! int_type {
    ($t:ty, $u:ty, $flip:expr) => {
        impl Value for $t {
            type SelfType<'a>
                = $t
            where
                Self: 'a;
            type AsBytes<'a>
                = [u8; std::mem::size_of::<$t>()]
            where
                Self: 'a;
            fn from_bytes<'a>(data: &'a [u8]) -> $t
            where
                Self: 'a,
            {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                if data.len() == a.len() {
                    a.copy_from_slice(data);
                }
                (<$u>::from_be_bytes(a) ^ $flip) as $t
            }
            fn as_bytes<'a, 'b: 'a>(value: &'a $t) -> [u8; std::mem::size_of::<$t>()]
            where
                Self: 'b,
            {
                ((*value as $u) ^ $flip).to_be_bytes()
            }
            fn validate(data: &[u8]) -> bool {
                data.len() == std::mem::size_of::<$t>()
            }
            fn fixed_width() -> Option<usize> {
                Some(std::mem::size_of::<$t>())
            }
            fn type_name() -> String {
                stringify!($t).into()
            }
        }
        impl Key for $t {}
        impl FixedKey for $t {}
    };
}

int_type!(u8, u8, 0);
int_type!(u16, u16, 0);
int_type!(u32, u32, 0);
int_type!(u64, u64, 0);
int_type!(u128, u128, 0);
int_type!(i8, u8, 1u8 << 7);
int_type!(i16, u16, 1u16 << 15);
int_type!(i32, u32, 1u32 << 31);
int_type!(i64, u64, 1u64 << 63);
int_type!(i128, u128, 1u128 << 127);

impl Value for bool {
    type SelfType<'a>
        = bool
    where
        Self: 'a;
    type AsBytes<'a>
        = [u8; 1]
    where
        Self: 'a;
    fn from_bytes<'a>(data: &'a [u8]) -> bool
    where
        Self: 'a,
    {
        data.first() == Some(&1)
    }
    fn as_bytes<'a, 'b: 'a>(value: &'a bool) -> [u8; 1]
    where
        Self: 'b,
    {
        [*value as u8]
    }
    fn validate(data: &[u8]) -> bool {
        data.len() == 1 && data[0] <= 1
    }
    fn fixed_width() -> Option<usize> {
        Some(1)
    }
    fn type_name() -> String {
        "bool".into()
    }
}
impl Key for bool {}
impl FixedKey for bool {}

macro_rules! tuple_type {
    ($($fixed:ident $fi:tt),+ ; $last:ident $li:tt) => {
        impl<$($fixed: FixedKey,)+ $last: Value> Value for ($($fixed,)+ $last,) {
            type SelfType<'a>
                = ($($fixed::SelfType<'a>,)+ $last::SelfType<'a>,)
            where
                Self: 'a;
            type AsBytes<'a>
                = Vec<u8>
            where
                Self: 'a;
            fn from_bytes<'a>(data: &'a [u8]) -> Self::SelfType<'a>
            where
                Self: 'a,
            {
                let mut at = 0usize;
                (
                    $({
                        let w = $fixed::fixed_width().unwrap_or(0);
                        let part = data.get(at..at + w).unwrap_or(&[]);
                        at += w;
                        $fixed::from_bytes(part)
                    },)+
                    $last::from_bytes(data.get(at..).unwrap_or(&[])),
                )
            }
            fn as_bytes<'a, 'b: 'a>(value: &'a Self::SelfType<'b>) -> Vec<u8>
            where
                Self: 'b,
            {
                let mut out = Vec::new();
                $(out.extend_from_slice($fixed::as_bytes(&value.$fi).as_ref());)+
                out.extend_from_slice($last::as_bytes(&value.$li).as_ref());
                out
            }
            fn validate(data: &[u8]) -> bool {
                let mut at = 0usize;
                $(
                    let w = $fixed::fixed_width().unwrap_or(0);
                    match data.get(at..at + w) {
                        Some(p) if $fixed::validate(p) => at += w,
                        _ => return false,
                    }
                )+
                data.get(at..).is_some_and($last::validate)
            }
            fn fixed_width() -> Option<usize> {
                Some(0 $(+ $fixed::fixed_width()?)+ + $last::fixed_width()?)
            }
            fn type_name() -> String {
                let names: Vec<String> = vec![$($fixed::type_name(),)+ $last::type_name()];
                format!("({})", names.join(","))
            }
        }
        impl<$($fixed: FixedKey,)+ $last: Key> Key for ($($fixed,)+ $last,) {}
    };
}

tuple_type!(A 0; B 1);
tuple_type!(A 0, B 1; C 2);
tuple_type!(A 0, B 1, C 2; D 3);

#[cfg(test)]
mod tests {
    use super::*;

    fn enc<T: Value>(v: &T::SelfType<'_>) -> Vec<u8> {
        T::as_bytes(v).as_ref().to_vec()
    }

    #[test]
    fn signed_integers_sort_as_bytes() {
        let vals = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        let bytes: Vec<_> = vals.iter().map(enc::<i64>).collect();
        assert!(bytes.windows(2).all(|w| w[0] < w[1]));
        for v in vals {
            assert_eq!(i64::from_bytes(&enc::<i64>(&v)), v);
        }
        assert_eq!(i8::from_bytes(&enc::<i8>(&-128)), -128);
    }

    #[test]
    fn tuples_sort_and_round_trip() {
        let a = enc::<(u64, &str)>(&(1, "zz"));
        let b = enc::<(u64, &str)>(&(2, "a"));
        assert!(a < b);
        assert_eq!(<(u64, &str)>::from_bytes(&b), (2, "a"));
        assert!(<(u64, &str)>::validate(&b));
        assert!(!<(u64, &str)>::validate(&b[..5]));
        assert_eq!(<(u32, u32)>::fixed_width(), Some(8));
        assert_eq!(<(u64, &str)>::type_name(), "(u64,&str)");
    }

    #[test]
    fn validation_rejects_wrong_widths_and_utf8() {
        assert!(!u64::validate(&[1, 2, 3]));
        assert!(!<&str>::validate(&[0xff, 0xfe]));
        assert!(!bool::validate(&[2]));
        assert!(<[u8; 3]>::validate(&[1, 2, 3]));
    }
}
