//! The event layer's error family. Errors of the engine underneath arrive as
//! [`EventError::Core`].

use crate::document::DocumentError;
use crate::error::CoreError;

/// Result alias for the event layer.
pub type EventResult<T> = std::result::Result<T, EventError>;

/// Every error the event layer returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EventError {
    /// The storage engine underneath failed (I/O, corruption, a limit, a
    /// transaction error): see [`CoreError`].
    #[error(transparent)]
    Core(#[from] CoreError),

    /// A typed payload did not encode or decode ([`EventData::encode`],
    /// [`RecordedEvent::decode`]).
    ///
    /// [`EventData::encode`]: super::EventData::encode
    /// [`RecordedEvent::decode`]: super::RecordedEvent::decode
    #[error("event payload: {0}")]
    Payload(#[from] DocumentError),

    /// An append's or delete's expected version does not match the stream.
    #[error("wrong expected version for stream {stream:?}: expected {expected}, but the stream {}", match .actual { Some(v) => format!("is at version {v}"), None => "does not exist".to_string() })]
    WrongExpectedVersion {
        /// The stream.
        stream: String,
        /// The expectation that failed (`any`, `no stream`, `exists`, or a version).
        expected: String,
        /// The stream's actual current version (`None`: no stream).
        actual: Option<super::StreamVersion>,
    },

    /// The stream was hard-deleted (tombstoned): it can be neither read nor
    /// appended to again.
    #[error("stream {0:?} is deleted (tombstoned) and cannot be read or written")]
    StreamDeleted(String),

    /// The stream does not exist (never written, or soft-deleted).
    #[error("stream {0:?} does not exist")]
    StreamNotFound(String),

    /// A stream name that breaks the naming rules of
    /// [`check_stream_name`](super::check_stream_name).
    #[error("invalid stream name {name:?}: {reason}")]
    InvalidStreamName {
        /// The rejected name.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// An event that breaks the rules in [`crate::limits`] (empty or long
    /// type name, oversized payload or metadata).
    #[error("invalid event {index} of the append to {stream:?}: {reason}")]
    InvalidEvent {
        /// The stream appended to.
        stream: String,
        /// The event's index within the append.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },

    /// A snapshot was to be saved at a version the stream has not reached.
    #[error("cannot save a snapshot of stream {stream:?} at version {version}: that is past the end of the stream (its next version is {next})")]
    SnapshotPastEnd {
        /// The stream.
        stream: String,
        /// The version the snapshot was for.
        version: u64,
        /// The stream's next version (its event count, truncated ones
        /// included).
        next: u64,
    },

    /// A snapshot's state is larger than an event's data may be
    /// ([`MAX_EVENT_DATA_BYTES`](crate::limits::MAX_EVENT_DATA_BYTES)).
    #[error("cannot save a snapshot of stream {stream:?} at version {version}: its state is {bytes} bytes, more than the limit of {limit}")]
    SnapshotTooLarge {
        /// The stream.
        stream: String,
        /// The version the snapshot was for.
        version: u64,
        /// The state's size.
        bytes: usize,
        /// The limit.
        limit: usize,
    },

    /// An append whose first events (by event id) are already the stream's
    /// events where a retry of it would have put them, but not all of its
    /// events: neither a retry of an append that was written (which would
    /// repeat all of them) nor new events (which need new ids). Nothing was
    /// written. KurrentDB refuses such an append too.
    #[error("append to stream {stream:?}: its first {repeated} of {count} events are already in the stream (same event ids, from version {version}) but the others are not; a retry must repeat the same events and new events need new ids, so nothing was written")]
    IdempotencyConflict {
        /// The stream.
        stream: String,
        /// How many of the append's first events are already written.
        repeated: u64,
        /// How many events the append holds.
        count: u64,
        /// The stream version of the first repeated event.
        version: super::StreamVersion,
    },

    /// A read asked to start past the end of a stream or of the global log.
    /// Shared by both, so `from` and `end` are bare numbers: stream versions
    /// ([`StreamVersion`](super::StreamVersion)) or global positions
    /// ([`Position`](super::Position)), as `what` says.
    #[error("cannot read {what} from {from}: it ends at {end} (the next version or position to be written)")]
    ReadPastEnd {
        /// `stream "name"` or `the global log`.
        what: String,
        /// The requested start.
        from: u64,
        /// The first version or position not yet written.
        end: u64,
    },
}

impl EventError {
    /// Whether this error reports corruption of the file.
    pub fn is_corruption(&self) -> bool {
        matches!(self, EventError::Core(e) if e.is_corruption())
    }
}
