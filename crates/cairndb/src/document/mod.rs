//! Documents: JSON-like values, their compact binary encoding, and the
//! order-preserving index key encoding. A layer over the public KV API only.
