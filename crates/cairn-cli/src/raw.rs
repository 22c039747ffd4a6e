//! Byte-level access to tables whatever their declared key and value types,
//! on the library's untyped API.
//!
//! Reading needs no knowledge of a table's types: keys and values are the
//! bytes stored. Writing is where types matter:
//! - `cairn put` writes command-line text, which is a valid encoding only of
//!   `&[u8]` (any bytes) and `&str` (UTF-8) keys and values; tables of other
//!   types (integers, tuples, arrays, application types) are refused, as the
//!   CLI cannot tell how the text should be encoded.
//! - `cairn load` restores the bytes of a dump into tables of any types,
//!   still checking UTF-8 where the declared type is `&str`.
//! - `cairn del` removes a key given as raw bytes from any table.

use cairndb::{CoreError, ReadOnlyTable, ReadTransaction, Restore, Table, WriteTransaction};

use crate::CliError;

type B = &'static [u8];

/// The type name of byte-string keys and values.
const BYTES: &str = "&[u8]";
/// The type name of UTF-8 string keys and values (`&str` and `String`).
const STR: &str = "&str";

/// Opens `table` in a read snapshot as raw bytes, whatever its types.
pub fn open_read<'t>(
    txn: &'t ReadTransaction,
    table: &str,
) -> Result<ReadOnlyTable<'t, B, B>, CliError> {
    Ok(txn.open_untyped_table(table)?)
}

/// The declared key and value types of an existing `table`.
pub fn types(txn: &ReadTransaction, table: &str) -> Result<(String, String), CliError> {
    txn.table_types(table)?
        .ok_or_else(|| CoreError::TableNotFound(table.to_string()).into())
}

/// Whether CLI text can be written as a key or value of this type.
fn text_writable(type_name: &str) -> bool {
    type_name == BYTES || type_name == STR
}

/// A table open in the write transaction as raw bytes, checking UTF-8 for
/// keys or values declared `&str`.
pub struct WriteTable<'t> {
    table: Table<'t, B, B>,
    utf8_keys: bool,
    utf8_values: bool,
}

fn check_utf8(required: bool, bytes: &[u8], what: &str) -> Result<(), CliError> {
    if required && std::str::from_utf8(bytes).is_err() {
        return Err(CliError::User(format!(
            "the table stores {STR} {what}s, which must be valid UTF-8; this {what} is not"
        )));
    }
    Ok(())
}

impl<'t> WriteTable<'t> {
    fn new(txn: &WriteTransaction, name: &str, table: Table<'t, B, B>) -> Result<Self, CliError> {
        let (k, v) = txn
            .table_types(name)?
            .ok_or_else(|| CoreError::TableNotFound(name.to_string()))?;
        Ok(WriteTable {
            table,
            utf8_keys: k == STR,
            utf8_values: v == STR,
        })
    }

    /// Stores `value` under `key`; returns whether a value was replaced.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, CliError> {
        check_utf8(self.utf8_keys, key, "key")?;
        check_utf8(self.utf8_values, value, "value")?;
        Ok(self.table.insert(key, value)?.is_some())
    }

    /// The table, for reading it within the transaction.
    pub fn table(&self) -> &Table<'t, B, B> {
        &self.table
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&mut self, key: &[u8]) -> Result<bool, CliError> {
        Ok(self.table.remove(key)?.is_some())
    }
}

/// Opens `table` for `cairn put`: a missing table is created with `&[u8]`
/// keys and values; an existing one must hold `&[u8]` or `&str` keys and
/// values ([`CliError::UnsupportedTypes`] otherwise).
pub fn open_for_text<'t>(
    txn: &'t WriteTransaction,
    table: &str,
) -> Result<WriteTable<'t>, CliError> {
    if let Some((key_type, value_type)) = txn.table_types(table)? {
        if !text_writable(&key_type) || !text_writable(&value_type) {
            return Err(CliError::UnsupportedTypes {
                table: table.to_string(),
                key_type,
                value_type,
            });
        }
    }
    let t = txn.open_untyped_table(table)?;
    WriteTable::new(txn, table, t)
}

/// Opens an existing `table` of any types ([`CoreError::TableNotFound`] if
/// missing), for removing keys by their bytes.
pub fn open_existing<'t>(
    txn: &'t WriteTransaction,
    table: &str,
) -> Result<WriteTable<'t>, CliError> {
    if txn.table_types(table)?.is_none() {
        return Err(CoreError::TableNotFound(table.to_string()).into());
    }
    let t = txn.open_untyped_table(table)?;
    WriteTable::new(txn, table, t)
}

/// Opens `table` for `cairn load`. With `types`, a missing table is created
/// with them and an existing one must have them; without, a missing table
/// is created with `&[u8]` keys and values and an existing one is used
/// whatever its types.
pub fn open_for_load<'t>(
    txn: &'t WriteTransaction,
    table: &str,
    types: Option<(&str, &str)>,
) -> Result<WriteTable<'t>, CliError> {
    let t = match types {
        Some((k, v)) => txn.open_untyped_table_with_types(table, k, v)?,
        None => txn.open_untyped_table(table)?,
    };
    WriteTable::new(txn, table, t)
}

/// Opens any `table`, internal `$` tables included, for restoring a whole
/// dump into an empty database (`restore` from
/// [`cairndb::Database::begin_restore`]); a missing table is created with
/// the given types and an existing one must have them.
pub fn open_for_restore<'t>(
    txn: &'t WriteTransaction,
    restore: &Restore,
    table: &str,
    key_type: &str,
    value_type: &str,
) -> Result<WriteTable<'t>, CliError> {
    let t = txn.open_table_for_restore(restore, table, key_type, value_type)?;
    WriteTable::new(txn, table, t)
}
