//! The event layer's records: how a stream's state, an event and a global
//! record are laid out as table values (FORMAT.md, "Event streams", layer
//! format v2), and v1's global log entry, read to upgrade a v1 file.
//! Every decoder checks lengths and returns `CoreError::Corruption`-free typed
//! `CoreError::Decode` on malformed bytes: never a panic.

use super::error::{EventError, EventResult};
use crate::error::CoreError;

/// Where the layer keeps its data. Names start with the reserved `$`.
pub(crate) mod tables {
    use crate::table::TableDefinition;

    /// Stream name -> [`super::StreamRecord`].
    pub const STREAMS: TableDefinition<&str, &[u8]> = TableDefinition::internal("$ev.streams");
    /// (stream id, version) -> [`super::EventRecord`]: a stream's events
    /// are contiguous, so reading a stream is one range scan.
    pub const EVENTS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::internal("$ev.events");
    /// Global position -> [`super::GlobalRecord`] (layer format v2): which
    /// stream event it is and, unless large, its body, so reading the
    /// global log is a scan of this table alone.
    pub const GLOBAL: TableDefinition<u64, &[u8]> = TableDefinition::internal("$ev.global");
    /// Layer format v1's global log: position -> [`super::LogEntry`]. Only
    /// read (v1 files) and deleted by the upgrade.
    pub const LOG: TableDefinition<u64, &[u8]> = TableDefinition::internal("$ev.log");
    /// (stream id, version) -> snapshot bytes.
    pub const SNAPSHOTS: TableDefinition<(u64, u64), &[u8]> =
        TableDefinition::internal("$ev.snapshots");
    /// [`super::id_key`] (stream id, event id) -> the version of the
    /// stream's last event with that id (FORMAT.md, "Event ids").
    pub const IDS: TableDefinition<&[u8], u64> = TableDefinition::internal("$ev.ids");
}

/// The key of an event id in `$ev.ids`: the stream id (big-endian), then
/// the id's 16 bytes.
pub(crate) fn id_key(stream_id: u64, id: &[u8; 16]) -> [u8; 24] {
    let mut k = [0u8; 24];
    k[..8].copy_from_slice(&stream_id.to_be_bytes());
    k[8..].copy_from_slice(id);
    k
}

fn decode_err(what: &str) -> EventError {
    EventError::Core(CoreError::Decode {
        type_name: format!("event layer {what}"),
        detail: "stored bytes are not a valid record".to_string(),
    })
}

/// A little reader over a byte slice that fails instead of panicking.
struct Reader<'a> {
    bytes: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> EventResult<&'a [u8]> {
        if self.bytes.len() < n {
            return Err(decode_err(self.what));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn u8(&mut self) -> EventResult<u8> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> EventResult<u16> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> EventResult<u32> {
        let mut a = [0u8; 4];
        a.copy_from_slice(self.take(4)?);
        Ok(u32::from_le_bytes(a))
    }
    fn u64(&mut self) -> EventResult<u64> {
        let mut a = [0u8; 8];
        a.copy_from_slice(self.take(8)?);
        Ok(u64::from_le_bytes(a))
    }
    fn str(&mut self, n: usize) -> EventResult<&'a str> {
        let what = self.what;
        std::str::from_utf8(self.take(n)?).map_err(|_| decode_err(what))
    }
}

/// Whether a stream is live, soft-deleted or tombstoned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamState {
    /// Readable and appendable.
    Live,
    /// Deleted; appending recreates it, and version numbers continue.
    SoftDeleted,
    /// Tombstoned: never readable or appendable again.
    HardDeleted,
}

/// A stream's state (value of `$ev.streams`), 42 bytes:
/// `u8 format (1) | u64 id | u64 next_version | u8 state |
///  u64 truncate_before | u64 max_count (u64::MAX = none) | u64 created_at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamRecord {
    pub id: u64,
    /// How many events were ever appended: the next version to write.
    pub next_version: u64,
    pub state: StreamState,
    /// Versions below this are hidden (truncation, or a soft delete).
    pub truncate_before: u64,
    /// Only the newest `max_count` events are visible (`u64::MAX`: all).
    pub max_count: u64,
    /// The version this incarnation of the stream began at (0, or where
    /// an append recreated it after a soft delete).
    pub created_at: u64,
}

const STREAM_RECORD_BYTES: usize = 42;

impl StreamRecord {
    pub fn encode(&self) -> [u8; STREAM_RECORD_BYTES] {
        let mut b = [0u8; STREAM_RECORD_BYTES];
        b[0] = 1;
        b[1..9].copy_from_slice(&self.id.to_le_bytes());
        b[9..17].copy_from_slice(&self.next_version.to_le_bytes());
        b[17] = match self.state {
            StreamState::Live => 0,
            StreamState::SoftDeleted => 1,
            StreamState::HardDeleted => 2,
        };
        b[18..26].copy_from_slice(&self.truncate_before.to_le_bytes());
        b[26..34].copy_from_slice(&self.max_count.to_le_bytes());
        b[34..42].copy_from_slice(&self.created_at.to_le_bytes());
        b
    }

    pub fn decode(bytes: &[u8]) -> EventResult<Self> {
        let mut r = Reader {
            bytes,
            what: "stream record",
        };
        if bytes.len() != STREAM_RECORD_BYTES || r.u8()? != 1 {
            return Err(decode_err("stream record"));
        }
        let id = r.u64()?;
        let next_version = r.u64()?;
        let state = match r.u8()? {
            0 => StreamState::Live,
            1 => StreamState::SoftDeleted,
            2 => StreamState::HardDeleted,
            _ => return Err(decode_err("stream record")),
        };
        Ok(StreamRecord {
            id,
            next_version,
            state,
            truncate_before: r.u64()?,
            max_count: r.u64()?,
            created_at: r.u64()?,
        })
    }

    /// The first version reads show.
    pub fn first_visible(&self) -> u64 {
        let by_count = self.next_version.saturating_sub(self.max_count);
        self.truncate_before.max(by_count).min(self.next_version)
    }

    /// The current version: the last event's version, if any was appended
    /// (since the stream was last recreated) and it is live.
    pub fn current_version(&self) -> Option<u64> {
        (self.state == StreamState::Live && self.next_version > 0).then(|| self.next_version - 1)
    }
}

/// An event as stored (value of `$ev.events`):
/// `u64 position | [16] id | u64 recorded_at (µs since the Unix epoch) |
///  u8 type length | type | u32 metadata length | metadata | data (rest)`.
pub(crate) struct EventRecord<'a> {
    pub position: u64,
    pub id: [u8; 16],
    pub recorded_at: u64,
    pub event_type: &'a str,
    pub metadata: &'a [u8],
    pub data: &'a [u8],
}

impl<'a> EventRecord<'a> {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.reserve(
            8 + 16 + 8 + 1 + self.event_type.len() + 4 + self.metadata.len() + self.data.len(),
        );
        out.extend_from_slice(&self.position.to_le_bytes());
        out.extend_from_slice(&self.id);
        out.extend_from_slice(&self.recorded_at.to_le_bytes());
        // Lengths are checked against the limits before encoding.
        out.push(self.event_type.len() as u8);
        out.extend_from_slice(self.event_type.as_bytes());
        out.extend_from_slice(&(self.metadata.len() as u32).to_le_bytes());
        out.extend_from_slice(self.metadata);
        out.extend_from_slice(self.data);
    }

    pub fn decode(bytes: &'a [u8]) -> EventResult<Self> {
        let mut r = Reader {
            bytes,
            what: "event record",
        };
        let position = r.u64()?;
        let mut id = [0u8; 16];
        id.copy_from_slice(r.take(16)?);
        let recorded_at = r.u64()?;
        let tlen = r.u8()? as usize;
        let event_type = r.str(tlen)?;
        let mlen = r.u32()? as usize;
        let metadata = r.take(mlen)?;
        Ok(EventRecord {
            position,
            id,
            recorded_at,
            event_type,
            metadata,
            data: r.bytes,
        })
    }
}

/// A v1 global log entry (value of `$ev.log`): which stream event holds this
/// position, with what it is filtered by:
/// `u64 stream id | u64 version | u8 type length | type | u16 stream name
///  length | stream name`.
pub(crate) struct LogEntry<'a> {
    pub stream_id: u64,
    pub version: u64,
    pub event_type: &'a str,
    pub stream: &'a str,
}

impl<'a> LogEntry<'a> {
    /// Only tests write v1 entries (to build v1 layers).
    #[cfg(test)]
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&self.stream_id.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.push(self.event_type.len() as u8);
        out.extend_from_slice(self.event_type.as_bytes());
        out.extend_from_slice(&(self.stream.len() as u16).to_le_bytes());
        out.extend_from_slice(self.stream.as_bytes());
    }

    pub fn decode(bytes: &'a [u8]) -> EventResult<Self> {
        let mut r = Reader {
            bytes,
            what: "global log entry",
        };
        let stream_id = r.u64()?;
        let version = r.u64()?;
        let tlen = r.u8()? as usize;
        let event_type = r.str(tlen)?;
        let slen = r.u16()? as usize;
        let stream = r.str(slen)?;
        if !r.bytes.is_empty() {
            return Err(decode_err("global log entry"));
        }
        Ok(LogEntry {
            stream_id,
            version,
            event_type,
            stream,
        })
    }
}

/// Bodies of at most this many bytes (metadata + data) are stored in the
/// global record too; larger ones only in `$ev.events`, read by reference.
/// Only writers use it: readers accept either form at any size.
pub(crate) const INLINE_BODY_MAX_BYTES: usize = 512;

/// An event's body as a global record may hold it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct InlineBody<'a> {
    pub id: [u8; 16],
    pub recorded_at: u64,
    pub metadata: &'a [u8],
    pub data: &'a [u8],
}

/// A global record (value of `$ev.global`, layer format v2):
/// `u8 form (1 inline, 0 by reference) | u64 stream id | u64 version |
///  u8 type length | type | u16 stream name length | stream name` and, in
/// form 1, `[16] id | u64 recorded_at | u32 metadata length | metadata |
///  data (rest)`.
pub(crate) struct GlobalRecord<'a> {
    pub stream_id: u64,
    pub version: u64,
    pub event_type: &'a str,
    pub stream: &'a str,
    /// `None`: the body is only in `$ev.events` at (stream id, version).
    pub body: Option<InlineBody<'a>>,
}

impl<'a> GlobalRecord<'a> {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.clear();
        let body_len = self
            .body
            .map_or(0, |b| 28 + b.metadata.len() + b.data.len());
        out.reserve(20 + self.event_type.len() + self.stream.len() + body_len);
        out.push(u8::from(self.body.is_some()));
        out.extend_from_slice(&self.stream_id.to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        // Lengths are checked against the limits before encoding.
        out.push(self.event_type.len() as u8);
        out.extend_from_slice(self.event_type.as_bytes());
        out.extend_from_slice(&(self.stream.len() as u16).to_le_bytes());
        out.extend_from_slice(self.stream.as_bytes());
        if let Some(b) = self.body {
            out.extend_from_slice(&b.id);
            out.extend_from_slice(&b.recorded_at.to_le_bytes());
            out.extend_from_slice(&(b.metadata.len() as u32).to_le_bytes());
            out.extend_from_slice(b.metadata);
            out.extend_from_slice(b.data);
        }
    }

    /// Decodes the record stored at `position` (named in the error).
    pub fn decode(bytes: &'a [u8], position: u64) -> EventResult<Self> {
        Self::decode_inner(bytes).ok_or_else(|| {
            EventError::Core(CoreError::Decode {
                type_name: "event layer global record".to_string(),
                detail: format!("the record at position {position} is not a valid record"),
            })
        })
    }

    fn decode_inner(bytes: &'a [u8]) -> Option<Self> {
        let mut r = Reader {
            bytes,
            what: "global record",
        };
        let inline = match r.u8().ok()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        let stream_id = r.u64().ok()?;
        let version = r.u64().ok()?;
        let tlen = r.u8().ok()? as usize;
        let event_type = r.str(tlen).ok()?;
        let slen = r.u16().ok()? as usize;
        let stream = r.str(slen).ok()?;
        let body = if inline {
            let mut id = [0u8; 16];
            id.copy_from_slice(r.take(16).ok()?);
            let recorded_at = r.u64().ok()?;
            let mlen = r.u32().ok()? as usize;
            let metadata = r.take(mlen).ok()?;
            Some(InlineBody {
                id,
                recorded_at,
                metadata,
                data: r.bytes,
            })
        } else if r.bytes.is_empty() {
            None
        } else {
            return None;
        };
        Some(GlobalRecord {
            stream_id,
            version,
            event_type,
            stream,
            body,
        })
    }
}

/// The global record of an event as an append (or the v1 upgrade) writes
/// it: its body inline unless larger than [`INLINE_BODY_MAX_BYTES`].
pub(crate) fn global_record<'a>(
    stream_id: u64,
    version: u64,
    stream: &'a str,
    e: &EventRecord<'a>,
) -> GlobalRecord<'a> {
    let small = e.metadata.len() + e.data.len() <= INLINE_BODY_MAX_BYTES;
    GlobalRecord {
        stream_id,
        version,
        event_type: e.event_type,
        stream,
        body: small.then_some(InlineBody {
            id: e.id,
            recorded_at: e.recorded_at,
            metadata: e.metadata,
            data: e.data,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_reject_every_truncation() {
        let s = StreamRecord {
            id: 7,
            next_version: 10,
            state: StreamState::SoftDeleted,
            truncate_before: 4,
            max_count: 3,
            created_at: 2,
        };
        assert_eq!(StreamRecord::decode(&s.encode()).unwrap(), s);
        assert_eq!(s.first_visible(), 7);
        let mut buf = Vec::new();
        EventRecord {
            position: 99,
            id: [3; 16],
            recorded_at: 12345,
            event_type: "Created",
            metadata: b"m",
            data: b"payload",
        }
        .encode_into(&mut buf);
        let e = EventRecord::decode(&buf).unwrap();
        assert_eq!(
            (e.position, e.event_type, e.metadata, e.data),
            (99, "Created", &b"m"[..], &b"payload"[..])
        );
        for cut in 0..41 {
            assert!(EventRecord::decode(&buf[..cut]).is_err(), "cut {cut}");
        }
        LogEntry {
            stream_id: 1,
            version: 2,
            event_type: "T",
            stream: "s-1",
        }
        .encode_into(&mut buf);
        let l = LogEntry::decode(&buf).unwrap();
        assert_eq!(
            (l.stream_id, l.version, l.event_type, l.stream),
            (1, 2, "T", "s-1")
        );
        for cut in 0..buf.len() {
            assert!(LogEntry::decode(&buf[..cut]).is_err(), "cut {cut}");
        }
        for cut in 0..STREAM_RECORD_BYTES {
            assert!(StreamRecord::decode(&s.encode()[..cut]).is_err());
        }
    }

    #[test]
    fn global_records_round_trip_in_both_forms() {
        let small = EventRecord {
            position: 5,
            id: [4; 16],
            recorded_at: 77,
            event_type: "Typ",
            metadata: b"meta",
            data: b"data",
        };
        let big_data = vec![1u8; INLINE_BODY_MAX_BYTES];
        let big = EventRecord {
            metadata: b"m",
            data: &big_data,
            ..small
        };
        let mut buf = Vec::new();
        global_record(3, 9, "stream-x", &small).encode_into(&mut buf);
        let g = GlobalRecord::decode(&buf, 5).unwrap();
        assert_eq!(
            (g.stream_id, g.version, g.event_type, g.stream),
            (3, 9, "Typ", "stream-x")
        );
        assert_eq!(
            g.body,
            Some(InlineBody {
                id: [4; 16],
                recorded_at: 77,
                metadata: b"meta",
                data: b"data",
            })
        );
        // Every cut before the data's start is an error naming the position.
        for cut in 0..buf.len() - 4 {
            let err = GlobalRecord::decode(&buf[..cut], 5)
                .err()
                .map(|e| e.to_string());
            assert!(err.is_some_and(|e| e.contains("position 5")), "cut {cut}");
        }
        let inline_len = buf.len();
        global_record(3, 9, "stream-x", &big).encode_into(&mut buf);
        assert_eq!(buf[0], 0, "metadata + data over the limit: by reference");
        assert_eq!(buf.len(), inline_len - 4 - 4 - 28);
        let g = GlobalRecord::decode(&buf, 5).unwrap();
        assert!(g.body.is_none() && g.stream == "stream-x");
        for cut in 0..buf.len() {
            assert!(GlobalRecord::decode(&buf[..cut], 5).is_err(), "cut {cut}");
        }
        buf.push(0);
        assert!(GlobalRecord::decode(&buf, 5).is_err(), "bytes after form 0");
        buf.pop();
        buf[0] = 2;
        assert!(GlobalRecord::decode(&buf, 5).is_err(), "unknown form");
    }
}
