//! Seed 003's event mix (docs/benchmarks.md: create an entity, rename it, add
//! items, toggle their flags, delete items: small records with 16-byte ids
//! and short strings) and a small hand-written binary encoding for it.
//!
//! The encoding is the bench's own until the document codec (typed payloads)
//! lands: a tag byte, the 16-byte ids, a flag byte where the event has one,
//! and strings as a length byte plus UTF-8. Every event of every stream is a
//! pure function of (entity, version), so any event can be regenerated
//! identically outside the timed regions.

use cairndb::events::{EventData, Uuid};

use crate::data::Rng;

/// The fixed seed of the event data (printed with the results).
pub const SEED_E: u64 = 0xE7E7_0003_227B_B170;

/// One decoded event, borrowing its strings from the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    Created {
        id: [u8; 16],
        name: &'a str,
    },
    Renamed {
        id: [u8; 16],
        name: &'a str,
    },
    ItemAdded {
        id: [u8; 16],
        item: [u8; 16],
        name: &'a str,
    },
    FlagToggled {
        id: [u8; 16],
        item: [u8; 16],
        enabled: bool,
    },
    ItemDeleted {
        id: [u8; 16],
        item: [u8; 16],
    },
}

const T_CREATED: u8 = 1;
const T_RENAMED: u8 = 2;
const T_ITEM_ADDED: u8 = 3;
const T_FLAG_TOGGLED: u8 = 4;
const T_ITEM_DELETED: u8 = 5;

/// The event type names, by tag.
pub fn type_name(tag: u8) -> &'static str {
    match tag {
        T_CREATED => "EntityCreated",
        T_RENAMED => "EntityRenamed",
        T_ITEM_ADDED => "ItemAdded",
        T_FLAG_TOGGLED => "FlagToggled",
        _ => "ItemDeleted",
    }
}

/// The kinds after version 0 (which creates the entity), cycling: versions
/// 0–6 are the seed's 7-event mix.
const CYCLE: [u8; 6] = [
    T_RENAMED,
    T_ITEM_ADDED,
    T_FLAG_TOGGLED,
    T_ITEM_ADDED,
    T_FLAG_TOGGLED,
    T_ITEM_DELETED,
];

fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let n = b.len().min(255);
    out.push(n as u8);
    out.extend_from_slice(&b[..n]);
}

/// Appends the encoding of `p` to `out`.
pub fn encode(p: &Payload<'_>, out: &mut Vec<u8>) {
    match *p {
        Payload::Created { id, name } => {
            out.push(T_CREATED);
            out.extend_from_slice(&id);
            put_str(out, name);
        }
        Payload::Renamed { id, name } => {
            out.push(T_RENAMED);
            out.extend_from_slice(&id);
            put_str(out, name);
        }
        Payload::ItemAdded { id, item, name } => {
            out.push(T_ITEM_ADDED);
            out.extend_from_slice(&id);
            out.extend_from_slice(&item);
            put_str(out, name);
        }
        Payload::FlagToggled { id, item, enabled } => {
            out.push(T_FLAG_TOGGLED);
            out.extend_from_slice(&id);
            out.extend_from_slice(&item);
            out.push(enabled as u8);
        }
        Payload::ItemDeleted { id, item } => {
            out.push(T_ITEM_DELETED);
            out.extend_from_slice(&id);
            out.extend_from_slice(&item);
        }
    }
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }
    fn id(&mut self) -> Option<[u8; 16]> {
        self.take(16)?.try_into().ok()
    }
    fn str(&mut self) -> Option<&'a str> {
        let n = self.byte()? as usize;
        std::str::from_utf8(self.take(n)?).ok()
    }
}

/// Decodes one payload; `None` on bytes this encoding did not produce.
pub fn decode(b: &[u8]) -> Option<Payload<'_>> {
    let mut r = Reader(b);
    let p = match r.byte()? {
        T_CREATED => Payload::Created {
            id: r.id()?,
            name: r.str()?,
        },
        T_RENAMED => Payload::Renamed {
            id: r.id()?,
            name: r.str()?,
        },
        T_ITEM_ADDED => Payload::ItemAdded {
            id: r.id()?,
            item: r.id()?,
            name: r.str()?,
        },
        T_FLAG_TOGGLED => Payload::FlagToggled {
            id: r.id()?,
            item: r.id()?,
            enabled: r.byte()? != 0,
        },
        T_ITEM_DELETED => Payload::ItemDeleted {
            id: r.id()?,
            item: r.id()?,
        },
        _ => return None,
    };
    r.0.is_empty().then_some(p)
}

/// What replaying an entity's events builds (the "aggregate").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct State {
    pub id: [u8; 16],
    pub name_len: u32,
    pub renames: u32,
    pub items: u32,
    pub enabled_toggles: u32,
    pub events: u64,
    /// A checksum over every field decoded, so no decode is optimized away.
    pub sum: u64,
}

impl State {
    /// Applies one decoded event.
    #[inline]
    pub fn apply(&mut self, p: &Payload<'_>) {
        self.events += 1;
        let fold = |s: u64, id: &[u8; 16]| {
            s.wrapping_mul(31)
                .wrapping_add(u64::from_le_bytes(id[..8].try_into().unwrap_or([0; 8])))
        };
        match p {
            Payload::Created { id, name } => {
                self.id = *id;
                self.name_len = name.len() as u32;
                self.sum = fold(self.sum, id).wrapping_add(name.len() as u64);
            }
            Payload::Renamed { id, name } => {
                self.renames += 1;
                self.name_len = name.len() as u32;
                self.sum = fold(self.sum, id).wrapping_add(name.len() as u64);
            }
            Payload::ItemAdded { item, name, .. } => {
                self.items += 1;
                self.sum = fold(self.sum, item).wrapping_add(name.len() as u64);
            }
            Payload::FlagToggled { item, enabled, .. } => {
                self.enabled_toggles += *enabled as u32;
                self.sum = fold(self.sum, item);
            }
            Payload::ItemDeleted { item, .. } => {
                self.items = self.items.saturating_sub(1);
                self.sum = fold(self.sum, item);
            }
        }
    }

    /// Decodes and applies one payload; an undecodable one is an error.
    #[inline]
    pub fn apply_bytes(&mut self, b: &[u8]) -> Result<(), String> {
        match decode(b) {
            Some(p) => {
                self.apply(&p);
                Ok(())
            }
            None => Err(format!("undecodable event payload of {} bytes", b.len())),
        }
    }

    /// The snapshot encoding: fixed-width little-endian fields.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48);
        out.extend_from_slice(&self.id);
        for v in [
            self.name_len,
            self.renames,
            self.items,
            self.enabled_toggles,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.events.to_le_bytes());
        out.extend_from_slice(&self.sum.to_le_bytes());
        out
    }

    pub fn decode(b: &[u8]) -> Option<State> {
        if b.len() != 48 {
            return None;
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or([0; 4]));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or([0; 8]));
        Some(State {
            id: b[..16].try_into().ok()?,
            name_len: u32_at(16),
            renames: u32_at(20),
            items: u32_at(24),
            enabled_toggles: u32_at(28),
            events: u64_at(32),
            sum: u64_at(40),
        })
    }
}

fn rng_for(entity: usize, version: u64) -> Rng {
    Rng::new(
        SEED_E
            ^ (entity as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
            ^ version.wrapping_mul(0xC2B2_AE3D_27D4_EB4F),
    )
}

/// The 16-byte id of entity `entity`.
pub fn entity_id(entity: usize) -> [u8; 16] {
    let mut r = rng_for(entity, u64::MAX);
    let mut id = [0u8; 16];
    r.fill(&mut id);
    id
}

/// The stream name of entity `entity` (`entity-` and its id in hex).
pub fn stream_name(entity: usize) -> String {
    let mut s = String::with_capacity(39);
    s.push_str("entity-");
    for b in entity_id(entity) {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Event number `version` of entity `entity`, with a deterministic event id.
pub fn event(entity: usize, version: u64) -> EventData {
    let mut r = rng_for(entity, version);
    let id = entity_id(entity);
    // Items are drawn from a small per-entity pool so adds, toggles and
    // deletes refer to the same few items.
    let item = {
        let mut it = entity_id(entity);
        it[0] ^= (r.next_u64() % 8) as u8 + 1;
        it
    };
    let tag = if version == 0 {
        T_CREATED
    } else {
        CYCLE[((version - 1) % CYCLE.len() as u64) as usize]
    };
    let name = match tag {
        T_CREATED => format!("Entity {entity:05}"),
        T_RENAMED => format!("Entity {entity:05} v{version}"),
        _ => format!("item-{:06}", r.next_u64() % 1_000_000),
    };
    let p = match tag {
        T_CREATED => Payload::Created { id, name: &name },
        T_RENAMED => Payload::Renamed { id, name: &name },
        T_ITEM_ADDED => Payload::ItemAdded {
            id,
            item,
            name: &name,
        },
        T_FLAG_TOGGLED => Payload::FlagToggled {
            id,
            item,
            enabled: r.next_u64() & 1 == 1,
        },
        _ => Payload::ItemDeleted { id, item },
    };
    let mut data = Vec::with_capacity(56);
    encode(&p, &mut data);
    let uuid = Uuid::from_u128(((r.next_u64() as u128) << 64) | r.next_u64() as u128);
    EventData {
        id: uuid,
        event_type: type_name(tag).to_string(),
        data,
        metadata: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_determinism() {
        let mut st = State::default();
        for v in 0..14 {
            let e = event(7, v);
            assert_eq!(e, event(7, v));
            let p = decode(&e.data).expect("decodes");
            let mut again = Vec::new();
            encode(&p, &mut again);
            assert_eq!(again, e.data);
            assert_eq!(type_name(e.data[0]), e.event_type);
            st.apply(&p);
        }
        assert_eq!(st.events, 14);
        assert_eq!(st.id, entity_id(7));
        assert_eq!(State::decode(&st.encode()), Some(st));
        assert!(decode(&[9, 1, 2]).is_none());
        assert!(decode(&[]).is_none());
        assert_eq!(stream_name(3).len(), 39);
        assert_ne!(stream_name(3), stream_name(4));
    }
}
