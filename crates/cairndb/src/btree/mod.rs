//! Layer 3: the copy-on-write B+tree.
//!
//! A tree is a root [`PageRef`]; every branch holds its children's page ids
//! *and checksums*. A write transaction never changes a committed page: the
//! first change to a page copies it into an in-memory [`node::Node`] under a
//! newly allocated page id (the old id goes to the allocator as freed), and
//! the path to the root is copied the same way. At commit, [`TreeMut::finalize`]
//! serializes the changed nodes bottom-up so each parent records its
//! children's final checksums.
//!
//! Invariants: keys are strictly ascending within a leaf and across leaves;
//! for branch key `k[i]`, every key in child `i` is `< k[i]` and every key in
//! child `i+1` is `>= k[i]`; the tree never touches `std::fs` or the commit
//! slots.

pub(crate) mod cursor;
pub(crate) mod node;
pub(crate) mod search;
pub(crate) mod tree;
pub(crate) mod walk;

pub(crate) use tree::{NodeSource, TreeMut, ValueBytes};
