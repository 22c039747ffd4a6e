//! Every limit CairnDB enforces, as a named constant or function, each with
//! a typed error (see `tests/bad_input.rs` for both sides of each).

use crate::error::{CoreError, Result};

/// Size of the header at the start of every B+tree or free-list page.
pub const PAGE_HEADER_BYTES: usize = 16;
/// The smallest page size accepted at creation.
pub const MIN_PAGE_SIZE: usize = 512;
/// The largest page size accepted at creation (entry offsets are 16-bit).
pub const MAX_PAGE_SIZE: usize = 32 * 1024;
/// The default page size.
pub const DEFAULT_PAGE_SIZE: usize = 4096;
/// Per-entry overhead of a leaf entry: a 2-byte offset, a 7-byte entry header,
/// and room for a 24-byte out-of-line value reference.
pub const LEAF_ENTRY_OVERHEAD_BYTES: usize = 2 + 7 + 24;

/// The largest value, in bytes (2 GiB). Values larger than a quarter page are
/// stored out of line in contiguous pages.
pub const MAX_VALUE_BYTES: usize = 1 << 31;
/// The longest table name, in bytes of UTF-8.
pub const MAX_TABLE_NAME_BYTES: usize = 255;
/// The longest stream name, in bytes of UTF-8.
pub const MAX_STREAM_NAME_BYTES: usize = 255;
/// The longest event type name, in bytes of UTF-8.
pub const MAX_EVENT_TYPE_BYTES: usize = 255;
/// The largest event payload, in bytes (16 MiB).
pub const MAX_EVENT_DATA_BYTES: usize = 16 << 20;
/// The largest event metadata, in bytes (64 KiB).
pub const MAX_EVENT_METADATA_BYTES: usize = 64 << 10;
/// The default maximum number of concurrent read transactions.
pub const DEFAULT_MAX_READERS: usize = 1 << 16;

/// The largest serialized leaf entry (offset + header + key + inline value)
/// for a page size: a quarter of the usable page, so a split of a full page
/// always yields two pages that fit.
pub fn max_entry_bytes(page_size: usize) -> usize {
    (page_size - PAGE_HEADER_BYTES) / 4
}

/// The longest key for a page size (987 bytes for 4 KiB pages).
pub fn max_key_bytes(page_size: usize) -> usize {
    max_entry_bytes(page_size) - LEAF_ENTRY_OVERHEAD_BYTES
}

/// Checks a key length against [`max_key_bytes`].
pub fn check_key_len(len: usize, page_size: usize) -> Result<()> {
    let max = max_key_bytes(page_size);
    if len > max {
        return Err(CoreError::KeyTooLarge { len, max });
    }
    Ok(())
}

/// Checks a value length against [`MAX_VALUE_BYTES`].
pub fn check_value_len(len: usize) -> Result<()> {
    if len > MAX_VALUE_BYTES {
        return Err(CoreError::ValueTooLarge {
            len,
            max: MAX_VALUE_BYTES,
        });
    }
    Ok(())
}

/// Checks a page size: a power of two in `MIN_PAGE_SIZE..=MAX_PAGE_SIZE`.
pub fn check_page_size(page_size: usize) -> Result<()> {
    if !page_size.is_power_of_two() || !(MIN_PAGE_SIZE..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(CoreError::InvalidOption(format!(
            "page size {page_size} must be a power of two between {MIN_PAGE_SIZE} and {MAX_PAGE_SIZE}"
        )));
    }
    Ok(())
}

/// Table names: 1 to [`MAX_TABLE_NAME_BYTES`] bytes, no control characters,
/// and not starting with `$` (reserved for CairnDB's own tables).
pub fn check_table_name(name: &str) -> Result<()> {
    check_table_name_syntax(name)?;
    if name.starts_with('$') {
        return Err(CoreError::InvalidTableName {
            name: name.to_string(),
            reason: "names starting with '$' are reserved",
        });
    }
    Ok(())
}

/// The checks of [`check_table_name`] except the reserved `$` prefix: the
/// layers' own tables (`$docs…`, `$ev…`) and raw tools (dump, import) pass
/// here.
pub(crate) fn check_table_name_syntax(name: &str) -> Result<()> {
    let bad = |reason| {
        Err(CoreError::InvalidTableName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("a table name must not be empty");
    }
    if name.len() > MAX_TABLE_NAME_BYTES {
        return bad("a table name must be at most 255 bytes of UTF-8");
    }
    // (Every table is opened by name per transaction: ASCII names, the
    // common case, are checked a word at a time.)
    let control = if name.is_ascii() {
        name.bytes().any(|b| b.is_ascii_control())
    } else {
        name.chars().any(char::is_control)
    };
    if control {
        return bad("a table name must not contain control characters");
    }
    Ok(())
}

/// Bytes of a table's catalog entry besides its name and type names: the
/// leaf entry's offset and header (2 + 7) and the record's fixed fields
/// (root, checksum, length, two name lengths: 28).
pub const CATALOG_ENTRY_OVERHEAD_BYTES: usize = 2 + 7 + 28;

/// A new table's catalog record is stored inline like any leaf entry, so it
/// must fit [`max_entry_bytes`]: the name and both type names together are
/// at most `(P − 16) / 4 − 37` bytes (87 with 512-byte pages, 983 with 4 KiB
/// pages). Checked when a table is created.
pub fn check_table_record_len(
    name: &str,
    key_type: &str,
    value_type: &str,
    page_size: usize,
) -> Result<()> {
    let len = CATALOG_ENTRY_OVERHEAD_BYTES + name.len() + key_type.len() + value_type.len();
    if len > max_entry_bytes(page_size) {
        return Err(CoreError::InvalidTableName {
            name: name.to_string(),
            reason: "the name and its type names are too long for the page size",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_limit_for_4k_pages() {
        assert_eq!(max_key_bytes(4096), 987);
        assert!(check_key_len(987, 4096).is_ok());
        assert!(matches!(
            check_key_len(988, 4096),
            Err(CoreError::KeyTooLarge { len: 988, max: 987 })
        ));
    }

    #[test]
    fn value_limit_both_sides() {
        assert!(check_value_len(MAX_VALUE_BYTES).is_ok());
        assert!(matches!(
            check_value_len(MAX_VALUE_BYTES + 1),
            Err(CoreError::ValueTooLarge { .. })
        ));
    }

    #[test]
    fn page_size_rules() {
        for ok in [512, 1024, 4096, 32768] {
            assert!(check_page_size(ok).is_ok());
        }
        for bad in [0, 256, 1000, 4095, 65536] {
            assert!(check_page_size(bad).is_err());
        }
    }

    #[test]
    fn table_name_rules() {
        assert!(check_table_name("users").is_ok());
        assert!(check_table_name(&"x".repeat(255)).is_ok());
        assert!(check_table_name(&"x".repeat(256)).is_err());
        assert!(check_table_name("").is_err());
        assert!(check_table_name("a\nb").is_err());
        assert!(check_table_name("$catalog").is_err());
    }

    #[test]
    fn table_record_fits_a_quarter_page() {
        // 512-byte pages: 124-byte entries, 87 bytes for name and types.
        assert!(check_table_record_len(&"x".repeat(81), "u64", "u64", 512).is_ok());
        assert!(matches!(
            check_table_record_len(&"x".repeat(82), "u64", "u64", 512),
            Err(CoreError::InvalidTableName { .. })
        ));
        assert!(check_table_record_len(&"x".repeat(255), "&str", "&[u8]", 4096).is_ok());
    }
}
