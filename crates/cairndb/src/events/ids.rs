//! The event layer's numbers: a stream's versions and the global log's
//! positions. Both print and serialize as the bare number; the layer's
//! records store them as plain `u64` (FORMAT.md, "Event streams").

use std::fmt;

/// An event's number within its stream: 0 for the first event, then 1, 2, …
/// without gaps (a soft-deleted and recreated stream continues its numbering).
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct StreamVersion(pub u64);

impl StreamVersion {
    /// The version after this one.
    #[must_use]
    pub const fn next(self) -> StreamVersion {
        StreamVersion(self.0 + 1)
    }
}

/// An event's place in the global log: dense and in commit order, 0 for the
/// first event ever appended.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Position(pub u64);

impl Position {
    /// The position after this one.
    #[must_use]
    pub const fn next(self) -> Position {
        Position(self.0 + 1)
    }
}

macro_rules! bare_number {
    ($t:ty) => {
        impl fmt::Debug for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl fmt::Display for $t {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }

        impl From<$t> for u64 {
            fn from(n: $t) -> u64 {
                n.0
            }
        }
    };
}

bare_number!(StreamVersion);
bare_number!(Position);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_and_serialize_as_the_bare_number() {
        assert_eq!(format!("{} {:?}", StreamVersion(3), Position(7)), "3 7");
        assert_eq!(format!("{:?}", Some(StreamVersion(2))), "Some(2)");
        assert_eq!(serde_json::to_string(&Position(42)).unwrap(), "42");
        assert_eq!(
            serde_json::from_str::<StreamVersion>("5").unwrap(),
            StreamVersion(5)
        );
        assert_eq!(StreamVersion(0).next(), StreamVersion(1));
        assert_eq!(u64::from(Position(0).next()), 1);
    }
}
