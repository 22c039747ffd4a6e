//! The key layout under a prefix (FORMAT.md, "etcd key layout").
//!
//! ```text
//! <prefix>/meta                     format record: "cairndb-etcd format <n>"
//! <prefix>/c/<table>                catalog: the table exists (value "table")
//! <prefix>/cv                      the catalog's version: rewritten by every commit that
//!                                   creates or deletes a table
//! <prefix>/v/<table>                the table's version: rewritten by every commit that
//!                                   writes the table (phantom detection for range reads)
//! <prefix>/t/<table> 0x00 <key>     the table's entries, the key's bytes as they are
//! <prefix>/n/<table>                the table's counter (ASCII decimal), valid while its
//!                                   mod revision is the version key's
//! <prefix>/b/<table>                the table is an index still being built in batches
//!                                   (value: the last data key indexed, empty before the
//!                                   first batch); deleted with the table, or when the
//!                                   build completes
//! ```
//!
//! A table name holds no control character (the engine's rule), so `0x00`
//! ends it and one table's entries never fall inside another's range.

use std::ops::Bound;

/// The format of the layout this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// The keys of one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    prefix: String,
}

impl Layout {
    pub(crate) fn new(prefix: &str) -> Layout {
        Layout {
            prefix: prefix.to_string(),
        }
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    pub(crate) fn meta(&self) -> Vec<u8> {
        format!("{}/meta", self.prefix).into_bytes()
    }

    /// Every key of the prefix as `[start, end)`.
    pub(crate) fn prefix_range(&self) -> (Vec<u8>, Vec<u8>) {
        (
            format!("{}/", self.prefix).into_bytes(),
            format!("{}0", self.prefix).into_bytes(),
        )
    }

    pub(crate) fn catalog(&self, table: &str) -> Vec<u8> {
        format!("{}/c/{table}", self.prefix).into_bytes()
    }

    /// The first key after every catalog key, and the catalog's start.
    pub(crate) fn catalog_range(&self) -> (Vec<u8>, Vec<u8>) {
        (
            format!("{}/c/", self.prefix).into_bytes(),
            format!("{}/c0", self.prefix).into_bytes(),
        )
    }

    /// The table name of a catalog key.
    pub(crate) fn table_of_catalog_key<'k>(&self, key: &'k [u8]) -> Option<&'k str> {
        let start = self.prefix.len() + 3;
        key.get(start..).and_then(|k| std::str::from_utf8(k).ok())
    }

    /// Rewritten by every commit that creates or deletes a table.
    pub(crate) fn catalog_version(&self) -> Vec<u8> {
        format!("{}/cv", self.prefix).into_bytes()
    }

    pub(crate) fn version(&self, table: &str) -> Vec<u8> {
        format!("{}/v/{table}", self.prefix).into_bytes()
    }

    /// A counter kept with the table (FORMAT.md: valid only while its mod
    /// revision equals the version key's).
    pub(crate) fn counter(&self, table: &str) -> Vec<u8> {
        format!("{}/n/{table}", self.prefix).into_bytes()
    }

    /// The mark of an index table being built in batches (its value: the
    /// last data key indexed).
    pub(crate) fn building(&self, table: &str) -> Vec<u8> {
        format!("{}/b/{table}", self.prefix).into_bytes()
    }

    /// The marks of the tables whose names start with `table_prefix`, as
    /// `[start, end)`.
    pub(crate) fn building_range(&self, table_prefix: &str) -> (Vec<u8>, Vec<u8>) {
        let start = self.building(table_prefix);
        let mut end = start.clone();
        // A table name is UTF-8 without control characters: 0xFF follows
        // every byte it may hold.
        end.push(0xFF);
        (start, end)
    }

    /// The table name of a building mark's key.
    pub(crate) fn table_of_building_key<'k>(&self, key: &'k [u8]) -> Option<&'k str> {
        let start = self.prefix.len() + 3;
        key.get(start..).and_then(|k| std::str::from_utf8(k).ok())
    }

    fn data_start(&self, table: &str) -> Vec<u8> {
        let mut k = format!("{}/t/{table}", self.prefix).into_bytes();
        k.push(0);
        k
    }

    /// The etcd key of a table's entry.
    pub(crate) fn data(&self, table: &str, key: &[u8]) -> Vec<u8> {
        let mut k = self.data_start(table);
        k.extend_from_slice(key);
        k
    }

    /// The length of the etcd key before an entry's own key.
    pub(crate) fn data_header_len(&self, table: &str) -> usize {
        self.prefix.len() + 3 + table.len() + 1
    }

    /// The whole of a table's entries as `[start, end)`.
    pub(crate) fn data_range(&self, table: &str) -> (Vec<u8>, Vec<u8>) {
        let start = self.data_start(table);
        let mut end = start.clone();
        if let Some(last) = end.last_mut() {
            *last = 1;
        }
        (start, end)
    }

    /// A range of a table's keys as etcd's `[start, end)`; `None` when empty.
    pub(crate) fn data_bounds(
        &self,
        table: &str,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Option<(Vec<u8>, Vec<u8>)> {
        let (table_start, table_end) = self.data_range(table);
        let s = match start {
            Bound::Unbounded => table_start,
            Bound::Included(k) => self.data(table, k),
            Bound::Excluded(k) => successor(self.data(table, k)),
        };
        let e = match end {
            Bound::Unbounded => table_end,
            Bound::Excluded(k) => self.data(table, k),
            Bound::Included(k) => successor(self.data(table, k)),
        };
        (s < e).then_some((s, e))
    }
}

/// The value of a table's catalog key: `table` for `&[u8]` keys and
/// values (what format 1 writes for every table), else
/// `table 0x00 <key type> 0x00 <value type>`.
pub(crate) fn catalog_value(key_type: &str, value_type: &str) -> Vec<u8> {
    if key_type == BYTES && value_type == BYTES {
        return b"table".to_vec();
    }
    format!("table\0{key_type}\0{value_type}").into_bytes()
}

/// The key and value type names of a catalog value (`None`: not one).
pub(crate) fn parse_catalog_value(value: &[u8]) -> Option<(String, String)> {
    if value == b"table" {
        return Some((BYTES.to_string(), BYTES.to_string()));
    }
    let text = std::str::from_utf8(value).ok()?;
    let mut parts = text.split('\0');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some("table"), Some(k), Some(v), None) if !k.is_empty() && !v.is_empty() => {
            Some((k.to_string(), v.to_string()))
        }
        _ => None,
    }
}

/// A counter's value as stored: ASCII decimal.
pub(crate) fn counter_value(value: u64) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// A counter's value (`None`: not ASCII decimal without a sign or a
/// leading zero, or over `u64::MAX`).
pub(crate) fn parse_counter_value(value: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(value).ok()?;
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical.then(|| text.parse().ok()).flatten()
}

/// The type name of byte-string keys and values.
pub const BYTES: &str = "&[u8]";

/// The smallest key after `key`.
pub(crate) fn successor(mut key: Vec<u8>) -> Vec<u8> {
    key.push(0);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_ranges_do_not_overlap_and_keep_key_order() {
        let l = Layout::new("app");
        let (s, e) = l.data_range("a");
        for key in [&b""[..], b"\x00", b"\xff\xff", b"zzz"] {
            let k = l.data("a", key);
            assert!(s <= k && k < e);
        }
        // Table "a" and table "a b" / "ab": neither range holds the other's keys.
        for other in ["ab", "a b", "a/", "b"] {
            let k = l.data(other, b"");
            assert!(!(s <= k && k < e), "{other}");
        }
        assert!(l.data("a", b"\x01") < l.data("a", b"\x01\x00"));
        let (cs, ce) = l.catalog_range();
        assert!(cs <= l.catalog("x") && l.catalog("x") < ce);
        assert_eq!(l.table_of_catalog_key(&l.catalog("x y")), Some("x y"));
        let (bs, be) = l.building_range("$docs.3.");
        for t in ["$docs.3.0", "$docs.3.17", "$docs.3.é"] {
            let k = l.building(t);
            assert!(bs <= k && k < be, "{t}");
            assert_eq!(l.table_of_building_key(&k), Some(t));
        }
        for t in ["$docs.3", "$docs.30.1", "$docs.4.0"] {
            let k = l.building(t);
            assert!(!(bs <= k && k < be), "{t}");
        }
        assert_eq!(
            l.data_bounds("a", Bound::Included(b"b"), Bound::Excluded(b"b")),
            None
        );
        let (ps, pe) = l.prefix_range();
        for k in [
            l.meta(),
            l.catalog("x"),
            l.catalog_version(),
            l.counter("x"),
            l.building("x"),
            l.data("a", b"\xff"),
        ] {
            assert!(ps <= k && k < pe);
        }
        assert!(!(ps <= b"app0".to_vec() && b"app0".to_vec() < pe));
        assert!(!(ps <= b"apx/".to_vec() && b"apx/".to_vec() < pe));
    }

    #[test]
    fn counter_values_are_canonical_decimal() {
        for v in [0, 1, 10, 4096, u64::MAX] {
            assert_eq!(parse_counter_value(&counter_value(v)), Some(v));
        }
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b"01",
            b"00",
            b" 1",
            b"1 ",
            b"18446744073709551616",
            b"\xff",
        ] {
            assert_eq!(parse_counter_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn catalog_values_carry_table_types() {
        assert_eq!(catalog_value(BYTES, BYTES), b"table");
        for (k, v) in [(BYTES, BYTES), ("&str", "u64"), ("(u64, &str)", "[u8; 4]")] {
            assert_eq!(
                parse_catalog_value(&catalog_value(k, v)),
                Some((k.to_string(), v.to_string()))
            );
        }
        for bad in [
            &b"tables"[..],
            b"table\0a",
            b"table\0\0b",
            b"x\0a\0b",
            b"table\0a\0b\0c",
        ] {
            assert_eq!(parse_catalog_value(bad), None, "{bad:?}");
        }
    }
}
