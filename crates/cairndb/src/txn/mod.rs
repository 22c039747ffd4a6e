//! Layer 5: transactions — read snapshots and the single write transaction,
//! over raw (byte) tables. The typed table API in `table.rs` sits on top.
//!
//! Invariants: a read transaction pins its snapshot (the allocator never
//! reuses a page that snapshot can reach); a write transaction changes only
//! pages it allocated; nothing a write transaction does is visible to anyone
//! until `commit` publishes it, and an abort (or drop) leaves no trace.
//!
//! | file | owns |
//! |---|---|
//! | `read.rs` | [`ReadTransaction`]: a snapshot pinned in the reader registry |
//! | `write.rs` | [`WriteTransaction`]: the writer lock, table slots, changes through the overlay or the trees, and the commit |
//! | `group.rs` | write groups: one-operation commits of several threads run by one of them in one transaction |
//! | `spill.rs` | commits the engine makes by itself (overlay spills, write-outs) and the snapshots maintenance reads |

pub(crate) mod group;
mod read;
pub(crate) mod spill;
mod write;

pub use read::ReadTransaction;
pub(crate) use write::Types;
pub use write::WriteTransaction;
