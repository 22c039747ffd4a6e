//! The file header (page 0) and the two commit slots (pages 1 and 2).
//! Byte layouts are in FORMAT.md; every integer is little-endian.

use super::log::LogRef;
use crate::error::{Corruption, DamagedPart};
use crate::ids::{PageId, TxnId};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Magic bytes at offset 0 (PNG-style: catches text-mode mangling).
pub const MAGIC: [u8; 8] = *b"\x89CAIRN\r\n";
/// The format version this build writes and the newest it reads (version 1
/// files, which name no commit log, are read too).
pub const FORMAT_VERSION: u32 = 3;
/// Bytes of page 0 that hold the header.
pub const HEADER_BYTES: usize = 32;
/// Magic bytes at the start of each commit slot.
pub const SLOT_MAGIC: [u8; 8] = *b"CAIRNSLT";
/// Bytes of a commit slot.
pub const SLOT_BYTES: usize = 128;
/// The first page that can hold data (0 = header, 1 and 2 = commit slots).
pub const FIRST_DATA_PAGE: u64 = 3;
/// The largest transaction id a commit slot may hold (2^63 − 1: centuries
/// of commits), so the ids that follow it never overflow.
pub const MAX_TXN: u64 = (1 << 63) - 1;
/// Flag bit: the slot was written by a clean close after a full sync.
pub const FLAG_CLEAN: u32 = 1;

/// A pointer to a page together with the checksum of its contents, as stored
/// in the parent (or the commit slot for roots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PageRef {
    /// The page.
    pub page: PageId,
    /// `xxh3_64(page bytes, seed = page id)`.
    pub checksum: u64,
}

impl PageRef {
    /// The null reference (empty tree / no free list).
    pub const NONE: PageRef = PageRef {
        page: PageId::NONE,
        checksum: 0,
    };
}

/// The decoded file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// Format version.
    pub version: u32,
    /// Page size in bytes.
    pub page_size: u32,
}

/// How many of the 8 magic bytes may be wrong before a file is taken for
/// something that is not a CairnDB database at all (rather than one whose
/// header is damaged).
pub const MAX_DAMAGED_MAGIC_BYTES: usize = 2;

/// Whether `b`, the first bytes of a file, look like the start of a CairnDB
/// file: at most [`MAX_DAMAGED_MAGIC_BYTES`] of the magic bytes are wrong,
/// or, for a file shorter than the magic, every byte it has matches. Used to
/// tell a damaged or truncated database (corruption) from another kind of
/// file (not a database).
pub fn looks_like_magic(b: &[u8]) -> bool {
    if b.is_empty() {
        return false;
    }
    if b.len() < MAGIC.len() {
        return b == &MAGIC[..b.len()];
    }
    wrong_magic_bytes(b) <= MAX_DAMAGED_MAGIC_BYTES
}

fn wrong_magic_bytes(b: &[u8]) -> usize {
    MAGIC.iter().zip(b.iter()).filter(|(m, x)| m != x).count() + MAGIC.len().saturating_sub(b.len())
}

/// Why a header could not be decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// The magic bytes are wrong (more than [`MAX_DAMAGED_MAGIC_BYTES`] of
    /// them), or the buffer is shorter than the header: not a CairnDB file,
    /// as far as the header can tell.
    BadMagic,
    /// A newer format version.
    NewerVersion(u32),
    /// Magic is right but the checksum or a field is wrong.
    Damaged(String),
}

#[inline]
pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    if let Some(s) = b.get(at..at + 4) {
        a.copy_from_slice(s);
    }
    u32::from_le_bytes(a)
}

#[inline]
pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    if let Some(s) = b.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

#[inline]
pub(crate) fn le_u16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    if let Some(s) = b.get(at..at + 2) {
        a.copy_from_slice(s);
    }
    u16::from_le_bytes(a)
}

impl FileHeader {
    /// Encodes the header into its 32 bytes.
    pub fn encode(&self) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&self.version.to_le_bytes());
        b[12..16].copy_from_slice(&self.page_size.to_le_bytes());
        let sum = xxh3_64_with_seed(&b[0..24], 0);
        b[24..32].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes and validates a header. Magic bytes that are only slightly
    /// wrong (see [`looks_like_magic`]) are a damaged header, not another
    /// kind of file.
    pub fn decode(b: &[u8]) -> Result<FileHeader, HeaderError> {
        if b.len() < HEADER_BYTES || !looks_like_magic(&b[0..8]) {
            return Err(HeaderError::BadMagic);
        }
        let wrong = wrong_magic_bytes(&b[0..8]);
        if wrong > 0 {
            return Err(HeaderError::Damaged(format!(
                "{wrong} of the 8 magic bytes are wrong"
            )));
        }
        let sum = xxh3_64_with_seed(&b[0..24], 0);
        if sum != le_u64(b, 24) {
            return Err(HeaderError::Damaged("header checksum mismatch".into()));
        }
        let version = le_u32(b, 8);
        if version > FORMAT_VERSION {
            return Err(HeaderError::NewerVersion(version));
        }
        if version == 0 {
            return Err(HeaderError::Damaged("format version 0".into()));
        }
        let page_size = le_u32(b, 12);
        if crate::limits::check_page_size(page_size as usize).is_err() {
            return Err(HeaderError::Damaged(format!(
                "invalid page size {page_size}"
            )));
        }
        Ok(FileHeader { version, page_size })
    }
}

/// The contents of a commit slot: everything needed to find the state of one
/// commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitRecord {
    /// The commit's transaction id; recovery picks the valid slot with the
    /// larger id.
    pub txn: TxnId,
    /// Pages `0..page_count` belong to the format; the file may be longer.
    pub page_count: u64,
    /// Root of the catalog B+tree (table name → table record).
    pub catalog: PageRef,
    /// Head of the free-list chain.
    pub freelist: PageRef,
    /// Set only by a clean close, after a full sync: recovery may trust this
    /// commit without walking its trees.
    pub clean: bool,
    /// The page size, repeated from the header as a cross-check.
    pub page_size: u32,
    /// The commit log whose records follow this commit (FORMAT.md, "Commit
    /// log"), or none.
    pub log: LogRef,
}

impl CommitRecord {
    /// Encodes the record for slot `slot` (0 or 1); the slot index seeds the
    /// checksum so a slot copied into the other position is rejected.
    pub fn encode(&self, slot: usize) -> [u8; SLOT_BYTES] {
        let mut b = [0u8; SLOT_BYTES];
        b[0..8].copy_from_slice(&SLOT_MAGIC);
        b[8..16].copy_from_slice(&self.txn.0.to_le_bytes());
        b[16..24].copy_from_slice(&self.page_count.to_le_bytes());
        b[24..32].copy_from_slice(&self.catalog.page.0.to_le_bytes());
        b[32..40].copy_from_slice(&self.catalog.checksum.to_le_bytes());
        b[40..48].copy_from_slice(&self.freelist.page.0.to_le_bytes());
        b[48..56].copy_from_slice(&self.freelist.checksum.to_le_bytes());
        let flags = if self.clean { FLAG_CLEAN } else { 0 };
        b[56..60].copy_from_slice(&flags.to_le_bytes());
        b[60..64].copy_from_slice(&self.page_size.to_le_bytes());
        b[64..72].copy_from_slice(&self.log.start.0.to_le_bytes());
        b[72..76].copy_from_slice(&(self.log.pages as u32).to_le_bytes());
        b[80..88].copy_from_slice(&self.log.salt.to_le_bytes());
        let sum = xxh3_64_with_seed(&b[0..120], slot as u64);
        b[120..128].copy_from_slice(&sum.to_le_bytes());
        b
    }

    /// Decodes slot `slot`; `Err` describes why it is not a valid record.
    pub fn decode(b: &[u8], slot: usize, page_size: u32) -> Result<CommitRecord, String> {
        if b.len() < SLOT_BYTES {
            return Err("slot is truncated".into());
        }
        // Both slots are written when a file is created, so a zero slot is
        // damage (a lost or zero-filled sector), never "not written yet".
        if b[..SLOT_BYTES].iter().all(|&x| x == 0) {
            return Err("slot is all zeros (a lost or zero-filled sector)".into());
        }
        if b[0..8] != SLOT_MAGIC {
            return Err("slot magic is wrong (damaged)".into());
        }
        let sum = xxh3_64_with_seed(&b[0..120], slot as u64);
        if sum != le_u64(b, 120) {
            return Err("slot checksum mismatch (torn or damaged)".into());
        }
        let rec = CommitRecord {
            txn: TxnId(le_u64(b, 8)),
            page_count: le_u64(b, 16),
            catalog: PageRef {
                page: PageId(le_u64(b, 24)),
                checksum: le_u64(b, 32),
            },
            freelist: PageRef {
                page: PageId(le_u64(b, 40)),
                checksum: le_u64(b, 48),
            },
            clean: le_u32(b, 56) & FLAG_CLEAN != 0,
            page_size: le_u32(b, 60),
            log: LogRef {
                start: PageId(le_u64(b, 64)),
                pages: le_u32(b, 72) as u64,
                salt: le_u64(b, 80),
            },
        };
        if rec.page_size != page_size {
            return Err(format!(
                "slot page size {} differs from header page size {page_size}",
                rec.page_size
            ));
        }
        if rec.txn.0 > MAX_TXN {
            // Only a damaged or forged slot gets here (ids grow by one per
            // commit); the next transaction id must not overflow.
            return Err(format!("slot transaction id {} is out of range", rec.txn));
        }
        if rec.page_count < FIRST_DATA_PAGE {
            return Err(format!("slot page count {} is too small", rec.page_count));
        }
        for r in [rec.catalog, rec.freelist] {
            if !r.page.is_none() && (r.page.0 < FIRST_DATA_PAGE || r.page.0 >= rec.page_count) {
                return Err(format!("slot points at {:?} outside the file", r.page));
            }
        }
        if le_u32(b, 56) & !FLAG_CLEAN != 0 || le_u32(b, 76) != 0 {
            return Err("slot has reserved bits set".into());
        }
        let l = rec.log;
        let log_ok = if l.is_none() {
            l.pages == 0 && l.salt == 0
        } else {
            l.pages > 0
                && l.salt != 0
                && l.start.0 >= FIRST_DATA_PAGE
                && l.start
                    .0
                    .checked_add(l.pages)
                    .is_some_and(|e| e <= rec.page_count)
        };
        if !log_ok {
            return Err(format!(
                "slot names an invalid commit log (pages {}..+{}, salt {:x})",
                l.start.0, l.pages, l.salt
            ));
        }
        Ok(rec)
    }
}

/// A corruption error about a commit slot.
pub fn slot_corruption(slot: usize, page_size: usize, detail: String) -> Corruption {
    Corruption {
        part: DamagedPart::CommitSlot,
        page: PageId(1 + slot as u64),
        offset: (1 + slot as u64) * page_size as u64,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_rejections() {
        let h = FileHeader {
            version: 1,
            page_size: 4096,
        };
        let b = h.encode();
        assert_eq!(FileHeader::decode(&b), Ok(h));
        // One or two wrong magic bytes: a damaged header; more: another file.
        let mut bad = b;
        bad[0] ^= 1;
        assert!(matches!(
            FileHeader::decode(&bad),
            Err(HeaderError::Damaged(_))
        ));
        bad[5] = b'x';
        assert!(matches!(
            FileHeader::decode(&bad),
            Err(HeaderError::Damaged(_))
        ));
        bad[7] = 0;
        assert_eq!(FileHeader::decode(&bad), Err(HeaderError::BadMagic));
        assert!(looks_like_magic(b"\x89CAI"));
        assert!(!looks_like_magic(b"\x89PNG"));
        assert!(!looks_like_magic(b""));
        let mut bad = b;
        bad[13] ^= 1;
        assert!(matches!(
            FileHeader::decode(&bad),
            Err(HeaderError::Damaged(_))
        ));
        let newer = FileHeader {
            version: 3,
            page_size: 4096,
        }
        .encode();
        assert_eq!(
            FileHeader::decode(&newer),
            Err(HeaderError::NewerVersion(3))
        );
    }

    #[test]
    fn slot_round_trip_and_every_byte_flip_detected() {
        let rec = CommitRecord {
            txn: TxnId(7),
            page_count: 10,
            catalog: PageRef {
                page: PageId(4),
                checksum: 99,
            },
            freelist: PageRef::NONE,
            clean: true,
            page_size: 4096,
            log: LogRef {
                start: PageId(5),
                pages: 3,
                salt: 0xfeed,
            },
        };
        let b = rec.encode(1);
        assert_eq!(CommitRecord::decode(&b, 1, 4096), Ok(rec));
        assert!(
            CommitRecord::decode(&b, 0, 4096).is_err(),
            "slot position is checked"
        );
        for i in 0..SLOT_BYTES {
            let mut bad = b;
            bad[i] ^= 0x10;
            assert!(CommitRecord::decode(&bad, 1, 4096).is_err(), "byte {i}");
        }
    }
}
