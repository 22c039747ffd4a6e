//! Read transactions: a snapshot of one commit (its trees, the overlay
//! above them, the commit id it shows), registered with the commit layer's
//! reader registry so that no page it can reach is reused while it lives.

use std::sync::Arc;

use crate::btree::NodeSource;
use crate::catalog::{list_catalog, lookup_table, TableRecord};
use crate::commit::overlay::Overlay;
use crate::commit::snapshots::ReaderStart;
use crate::commit::{CachedTable, Shared, TableCache};
use crate::error::{CoreError, Result};
use crate::ids::TxnId;
use crate::pager::header::{CommitRecord, PageRef};
use crate::pager::pins::PagePins;

/// A consistent snapshot of the database as of one commit. Many can be open
/// at once, from any threads; the writer never blocks them.
pub struct ReadTransaction {
    pub(crate) shared: Arc<Shared>,
    /// The trees' commit this snapshot reads (and pins).
    pub(crate) record: CommitRecord,
    /// The commit it shows: the newest user commit when it began
    /// (`Snapshots::shown`; `record` may be a newer spill of the same data).
    txn: TxnId,
    /// Non-durable changes above `record`'s trees.
    pub(crate) overlay: Arc<Overlay>,
    /// Table records of `record`'s catalog looked up so far (shared with
    /// the other readers of that commit).
    tables: Arc<TableCache>,
    /// Leaf pages kept alive for the keys and values this snapshot hands
    /// out (`pager/pins.rs`).
    pins: PagePins,
}

impl std::fmt::Debug for ReadTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReadTransaction")
            .field("txn", &self.txn)
            .finish()
    }
}

impl ReadTransaction {
    pub(crate) fn begin(shared: Arc<Shared>) -> Result<Self> {
        let ReaderStart {
            record,
            shown: txn,
            overlay,
            tables,
        } = shared.register_reader()?;
        let pins = PagePins::new(shared.pager.pin_budget);
        Ok(ReadTransaction {
            shared,
            record,
            txn,
            overlay,
            tables,
            pins,
        })
    }

    /// The commit this snapshot shows.
    pub fn txn_id(&self) -> TxnId {
        self.txn
    }

    pub(crate) fn source(&self) -> NodeSource<'_> {
        NodeSource {
            pager: &self.shared.pager,
            dirty: None,
            pins: Some(&self.pins),
        }
    }

    /// Looks up a table's record in this snapshot's catalog.
    pub(crate) fn table_record(&self, name: &str) -> Result<Option<TableRecord>> {
        lookup_table(
            self.source(),
            self.record.catalog,
            name,
            self.shared.pager.page_size(),
        )
    }

    /// Table `name`'s root and length, through the commit's table cache.
    /// With `types`, the Rust key and value types the caller opens it as:
    /// `check` compares them with the record's type names the first time
    /// (its error is returned), and the cache remembers that they matched.
    pub(crate) fn open_cached(
        &self,
        name: &str,
        types: Option<(std::any::TypeId, std::any::TypeId)>,
        check: impl FnOnce(&TableRecord) -> Result<()>,
    ) -> Result<(PageRef, u64)> {
        if let Some(t) = self.tables.get(name) {
            if types.is_none() || t.checked == types {
                return Ok((t.root, t.len));
            }
        }
        let rec = self
            .table_record(name)?
            .ok_or_else(|| CoreError::TableNotFound(name.to_string()))?;
        check(&rec)?;
        self.tables.put(
            name,
            CachedTable {
                root: rec.root,
                len: rec.len,
                checked: types,
            },
        );
        Ok((rec.root, rec.len))
    }

    /// The key and value type names a table was created with, if it exists.
    pub fn table_types(&self, name: &str) -> Result<Option<(String, String)>> {
        Ok(self.table_record(name)?.map(|r| (r.key_type, r.value_type)))
    }

    /// Names of every table in this snapshot, in order.
    pub fn list_tables(&self) -> Result<Vec<String>> {
        Ok(list_catalog(self.source(), self.record.catalog)?
            .into_iter()
            .map(|(n, _)| n)
            .collect())
    }
}

impl Drop for ReadTransaction {
    fn drop(&mut self) {
        self.pins.release(&self.shared.pager.counters);
        self.shared.unregister_reader(self.record.txn);
    }
}
