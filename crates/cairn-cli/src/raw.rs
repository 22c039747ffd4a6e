//! Byte-level access to tables whatever their declared key and value types,
//! as far as the library allows.
//!
//! The library checks a table's recorded key/value type names when it is
//! opened, and has no untyped way in. So the CLI opens a table as
//! `&[u8]`/`&[u8]` first and, if the catalog records other types, retries
//! with the recorded ones when it knows them: `&[u8]` and `&str` (the latter
//! is UTF-8 bytes). Tables with any other type (integers, tuples, arrays,
//! application types) are reported as unsupported.

use cairndb::{
    Error, Key, ReadOnlyTable, ReadTransaction, ReadableTable, Table, TableDefinition,
    WriteTransaction,
};

use crate::CliError;

type B = &'static [u8];
type S = &'static str;

/// A key or value type the CLI can read and write as bytes.
pub trait Raw: Key + 'static {
    /// The typed form of `bytes`, if they are a valid encoding of the type.
    fn from_raw(bytes: &[u8]) -> Option<Self::SelfType<'_>>;
    /// What must hold for the bytes (for error messages).
    const RULE: &'static str;
}

impl Raw for &'static [u8] {
    fn from_raw(bytes: &[u8]) -> Option<&[u8]> {
        Some(bytes)
    }
    const RULE: &'static str = "any bytes";
}

impl Raw for &'static str {
    fn from_raw(bytes: &[u8]) -> Option<&str> {
        std::str::from_utf8(bytes).ok()
    }
    const RULE: &'static str = "valid UTF-8";
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Bytes,
    Str,
}

fn kind(type_name: &str) -> Option<Kind> {
    match type_name {
        "&[u8]" => Some(Kind::Bytes),
        "&str" => Some(Kind::Str),
        _ => None,
    }
}

/// The types recorded for `table` when the first attempt to open it as
/// `&[u8]`/`&[u8]` failed with a type mismatch;
/// [`CliError::UnsupportedTypes`] if either is not `&[u8]` or `&str`.
fn recorded_kinds(table: &str, err: Error) -> Result<(Kind, Kind), CliError> {
    match err {
        Error::TableTypeMismatch {
            stored_key,
            stored_value,
            ..
        } => match (kind(&stored_key), kind(&stored_value)) {
            (Some(k), Some(v)) => Ok((k, v)),
            _ => Err(CliError::UnsupportedTypes {
                table: table.to_string(),
                key_type: stored_key,
                value_type: stored_value,
            }),
        },
        other => Err(other.into()),
    }
}

/// A callback over the entries of a table: key bytes, value bytes.
pub type Visit<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), CliError> + 'a;

/// A table open in a read transaction, with one of the supported type pairs.
pub enum ReadTable<'t> {
    BB(ReadOnlyTable<'t, B, B>),
    BS(ReadOnlyTable<'t, B, S>),
    SB(ReadOnlyTable<'t, S, B>),
    SS(ReadOnlyTable<'t, S, S>),
}

/// A table open in the write transaction, with one of the supported type pairs.
pub enum WriteTable<'t> {
    BB(Table<'t, B, B>),
    BS(Table<'t, B, S>),
    SB(Table<'t, S, B>),
    SS(Table<'t, S, S>),
}

macro_rules! each {
    ($enum:ident, $value:expr, $t:ident => $body:expr) => {
        match $value {
            $enum::BB($t) => $body,
            $enum::BS($t) => $body,
            $enum::SB($t) => $body,
            $enum::SS($t) => $body,
        }
    };
}

/// Opens `table` in a read snapshot.
pub fn open_read<'t>(txn: &'t ReadTransaction, table: &str) -> Result<ReadTable<'t>, CliError> {
    let err = match txn.open_table(TableDefinition::<B, B>::new(table)) {
        Ok(t) => return Ok(ReadTable::BB(t)),
        Err(e) => e,
    };
    Ok(match recorded_kinds(table, err)? {
        (Kind::Bytes, Kind::Bytes) => ReadTable::BB(txn.open_table(TableDefinition::new(table))?),
        (Kind::Bytes, Kind::Str) => ReadTable::BS(txn.open_table(TableDefinition::new(table))?),
        (Kind::Str, Kind::Bytes) => ReadTable::SB(txn.open_table(TableDefinition::new(table))?),
        (Kind::Str, Kind::Str) => ReadTable::SS(txn.open_table(TableDefinition::new(table))?),
    })
}

/// Opens `table` in the write transaction. A missing table is created as
/// `&[u8]`/`&[u8]` if `create`, else it is [`Error::TableNotFound`].
pub fn open_write<'t>(
    txn: &'t WriteTransaction,
    table: &str,
    create: bool,
) -> Result<WriteTable<'t>, CliError> {
    if !create && !txn.list_tables()?.iter().any(|n| n == table) {
        return Err(Error::TableNotFound(table.to_string()).into());
    }
    let err = match txn.open_table(TableDefinition::<B, B>::new(table)) {
        Ok(t) => return Ok(WriteTable::BB(t)),
        Err(e) => e,
    };
    Ok(match recorded_kinds(table, err)? {
        (Kind::Bytes, Kind::Bytes) => WriteTable::BB(txn.open_table(TableDefinition::new(table))?),
        (Kind::Bytes, Kind::Str) => WriteTable::BS(txn.open_table(TableDefinition::new(table))?),
        (Kind::Str, Kind::Bytes) => WriteTable::SB(txn.open_table(TableDefinition::new(table))?),
        (Kind::Str, Kind::Str) => WriteTable::SS(txn.open_table(TableDefinition::new(table))?),
    })
}

fn typed<'a, T: Raw>(bytes: &'a [u8], what: &str) -> Result<T::SelfType<'a>, CliError> {
    T::from_raw(bytes).ok_or_else(|| {
        CliError::User(format!(
            "the table stores {} {what}s, which must be {}; this {what} is not",
            T::type_name(),
            T::RULE
        ))
    })
}

fn get_in<K: Raw, V: Raw>(
    t: &impl ReadableTable<K, V>,
    key: &[u8],
) -> Result<Option<Vec<u8>>, CliError> {
    // A key that is not a valid encoding of the key type cannot be stored.
    let Some(k) = K::from_raw(key) else {
        return Ok(None);
    };
    Ok(t.get(k)?.map(|v| v.as_bytes().to_vec()))
}

fn for_each_in<K: Raw, V: Raw>(
    t: &impl ReadableTable<K, V>,
    f: &mut Visit<'_>,
) -> Result<(), CliError> {
    for entry in t.iter()? {
        let (k, v) = entry?;
        f(k.as_bytes(), v.as_bytes())?;
    }
    Ok(())
}

fn insert_in<K: Raw, V: Raw>(
    t: &mut Table<'_, K, V>,
    key: &[u8],
    value: &[u8],
) -> Result<bool, CliError> {
    let k = typed::<K>(key, "key")?;
    let v = typed::<V>(value, "value")?;
    Ok(t.insert(k, v)?.is_some())
}

fn remove_in<K: Raw, V: Raw>(t: &mut Table<'_, K, V>, key: &[u8]) -> Result<bool, CliError> {
    let Some(k) = K::from_raw(key) else {
        return Ok(false);
    };
    Ok(t.remove(k)?.is_some())
}

impl ReadTable<'_> {
    /// The value stored under `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, CliError> {
        each!(ReadTable, self, t => get_in(t, key))
    }

    /// Calls `f` on every entry in key order.
    pub fn for_each(&self, f: &mut Visit<'_>) -> Result<(), CliError> {
        each!(ReadTable, self, t => for_each_in(t, f))
    }

    /// The number of entries.
    pub fn len(&self) -> u64 {
        each!(ReadTable, self, t => t.len())
    }
}

impl WriteTable<'_> {
    /// Stores `value` under `key`; returns whether a value was replaced.
    pub fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<bool, CliError> {
        each!(WriteTable, self, t => insert_in(t, key, value))
    }

    /// Removes `key`; returns whether it was present.
    pub fn remove(&mut self, key: &[u8]) -> Result<bool, CliError> {
        each!(WriteTable, self, t => remove_in(t, key))
    }
}
