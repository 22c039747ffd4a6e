//! The commit log's pages (FORMAT.md, "Commit log"): a write's payload
//! framed into self-checked pages, and the scan that reads a log back at
//! recovery. What the payload holds (commit records) is the transaction
//! layer's business (`commit/log.rs`); the pager only frames bytes.
//!
//! Invariants: a log page is written once per log (a write never rewrites a
//! page of an earlier write, so a torn write cannot damage an acknowledged
//! record); a page is accepted only if its kind, checksum (seeded with its
//! page id XOR the log's salt), salt and sequence all match, so stale pages
//! of an older log, misplaced and torn pages end the log instead of being
//! read as records.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use super::header::{le_u16, le_u32, le_u64};
use super::Pager;
use crate::error::{CoreError, Result};
use crate::ids::PageId;

/// Page kind byte: commit-log page.
pub const KIND_LOG: u8 = 4;
/// Bytes before a log page's payload.
pub const LOG_HEADER_BYTES: usize = 32;
/// Bytes after the payload area: the page's checksum.
const LOG_TRAILER_BYTES: usize = 8;
/// Flag bit: the last page of a write.
pub const FLAG_END: u8 = 1;
/// Flag bit: the log's end marker, written after every write (and at the
/// log's start), so that recovery tells the log's proper end from a page
/// that a crash tore or that was damaged since.
pub const FLAG_TERMINATOR: u8 = 2;

/// The commit log a commit slot names: an extent of pages and its salt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogRef {
    /// First page of the extent (`PageId::NONE`: no log).
    pub start: PageId,
    /// Length of the extent in pages.
    pub pages: u64,
    /// Random, nonzero when there is a log: pages of another log never
    /// pass for this one's.
    pub salt: u64,
}

impl LogRef {
    /// No log.
    pub const NONE: LogRef = LogRef {
        start: PageId::NONE,
        pages: 0,
        salt: 0,
    };

    /// Whether this names no log.
    pub fn is_none(&self) -> bool {
        self.start.is_none()
    }

    /// The page id of the log page with sequence `seq`.
    pub fn page(&self, seq: u64) -> PageId {
        PageId(self.start.0 + seq)
    }
}

/// Payload bytes a log page holds.
pub fn payload_per_page(page_size: usize) -> usize {
    page_size - LOG_HEADER_BYTES - LOG_TRAILER_BYTES
}

/// Pages a write of `payload_bytes` takes (at least one).
pub fn pages_for(payload_bytes: usize, page_size: usize) -> u64 {
    payload_bytes.div_ceil(payload_per_page(page_size)).max(1) as u64
}

fn log_checksum(pid: PageId, salt: u64, bytes: &[u8]) -> u64 {
    xxh3_64_with_seed(bytes, pid.0 ^ salt)
}

/// Frames `payload` as the pages of one write starting at sequence `seq`
/// of `log`; the last page is flagged *end*, and the end marker follows it
/// (the next write starts on it). An empty payload gives just the marker.
/// `durable_mark` is how many log pages are known durable. Returns the
/// pages' bytes, contiguous.
pub fn encode_write(
    log: &LogRef,
    seq: u64,
    durable_mark: u64,
    payload: &[u8],
    page_size: usize,
) -> Vec<u8> {
    let per = payload_per_page(page_size);
    let n = if payload.is_empty() {
        0
    } else {
        pages_for(payload.len(), page_size) as usize
    };
    let mut out = vec![0u8; (n + 1) * page_size];
    for (i, page) in out.chunks_exact_mut(page_size).enumerate() {
        let chunk = if i < n {
            &payload[i * per..((i + 1) * per).min(payload.len())]
        } else {
            &[][..]
        };
        page[0] = KIND_LOG;
        page[1] = if i == n {
            FLAG_TERMINATOR
        } else if i + 1 == n {
            FLAG_END
        } else {
            0
        };
        page[2..4].copy_from_slice(&(chunk.len() as u16).to_le_bytes());
        page[8..16].copy_from_slice(&log.salt.to_le_bytes());
        page[16..24].copy_from_slice(&(seq + i as u64).to_le_bytes());
        page[24..32].copy_from_slice(&durable_mark.to_le_bytes());
        page[LOG_HEADER_BYTES..LOG_HEADER_BYTES + chunk.len()].copy_from_slice(chunk);
        let at = page_size - LOG_TRAILER_BYTES;
        let sum = log_checksum(log.page(seq + i as u64), log.salt, &page[..at]);
        page[at..].copy_from_slice(&sum.to_le_bytes());
    }
    out
}

/// A log page that passed every check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPageView<'a> {
    /// The last page of its write.
    pub end: bool,
    /// The log's end marker (no payload).
    pub terminator: bool,
    /// Log pages known durable when it was written.
    pub durable_mark: u64,
    /// Its payload.
    pub payload: &'a [u8],
}

/// Checks `data`, read from the page with sequence `seq` of `log`; `Err`
/// says why it is not a valid page of this log.
pub fn decode_page<'a>(
    data: &'a [u8],
    log: &LogRef,
    seq: u64,
) -> std::result::Result<LogPageView<'a>, String> {
    let ps = data.len();
    if ps < LOG_HEADER_BYTES + LOG_TRAILER_BYTES {
        return Err("page too small for a log page".into());
    }
    let at = ps - LOG_TRAILER_BYTES;
    let want = log_checksum(log.page(seq), log.salt, &data[..at]);
    if le_u64(data, at) != want {
        return Err("checksum mismatch (not written by this log, torn, stale or damaged)".into());
    }
    if data[0] != KIND_LOG {
        return Err(format!("kind byte {} is not a log page", data[0]));
    }
    let flags = data[1];
    if flags & !(FLAG_END | FLAG_TERMINATOR) != 0
        || flags == FLAG_END | FLAG_TERMINATOR
        || le_u32(data, 4) != 0
    {
        return Err("reserved bits are set".into());
    }
    if le_u64(data, 8) != log.salt {
        return Err("salt differs from the commit slot's".into());
    }
    if le_u64(data, 16) != seq {
        return Err(format!(
            "sequence {} where {seq} was expected",
            le_u64(data, 16)
        ));
    }
    let n = le_u16(data, 2) as usize;
    if n > payload_per_page(ps) || (flags & FLAG_TERMINATOR != 0 && n != 0) {
        return Err(format!("payload length {n} does not fit the page"));
    }
    Ok(LogPageView {
        end: flags & FLAG_END != 0,
        terminator: flags & FLAG_TERMINATOR != 0,
        durable_mark: le_u64(data, 24),
        payload: &data[LOG_HEADER_BYTES..LOG_HEADER_BYTES + n],
    })
}

/// What reading a log back found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogScan {
    /// Each complete write: its first page's sequence and its payload.
    pub writes: Vec<(u64, Vec<u8>)>,
    /// Sequence of the log's end: its end marker, the first page that is
    /// not valid, or the extent's length.
    pub end: u64,
    /// Why the page at `end` is not valid (`None`: the log ended properly,
    /// at its end marker or the extent's end). A page that is not valid
    /// where the log should go on is a write in flight at a crash, or damage.
    pub end_reason: Option<String>,
    /// A write whose *end* page was never reached (in flight at a crash):
    /// its first page's sequence and how many valid pages it had.
    pub incomplete: Option<(u64, u64)>,
    /// A later valid page whose durable mark covers page `end`: that page
    /// held flushed records and is damaged (its sequence, the mark).
    pub witness: Option<(u64, u64)>,
}

impl Pager {
    /// Reads `log` from its first page until the first page that is not
    /// valid; then, if `look_for_damage`, the rest of the extent for a page
    /// whose durable mark shows that invalid page was durable. Only I/O
    /// errors are `Err`; what the pages hold is in the scan.
    pub fn scan_log(&self, log: &LogRef, look_for_damage: bool) -> Result<LogScan> {
        let mut scan = LogScan::default();
        if log.is_none() {
            return Ok(scan);
        }
        let ps = self.page_size();
        // Read in chunks of up to 256 pages.
        let chunk_pages = 256u64;
        let mut buf = vec![0u8; chunk_pages as usize * ps];
        let mut pending: Vec<u8> = Vec::new();
        let mut pending_first = 0u64;
        let mut pending_pages = 0u64;
        let mut seq = 0u64;
        let mut ended = false;
        // The page after an end marker must not be a page of this log: if
        // it is, the marker is stale (an older copy of a page a later write
        // replaced) or a write landed in part, and the end is not proper.
        let mut check_after_marker = false;
        while seq < log.pages {
            let n = chunk_pages.min(log.pages - seq);
            let bytes = &mut buf[..n as usize * ps];
            self.read_log_pages(log.page(seq), bytes)?;
            for (i, data) in bytes.chunks_exact(ps).enumerate() {
                let s = seq + i as u64;
                let page = decode_page(data, log, s);
                if check_after_marker {
                    check_after_marker = false;
                    if page.is_ok() && scan.end_reason.is_none() {
                        scan.end_reason = Some(
                            "a valid log page follows the end marker (the marker is stale, or a write landed in part)"
                                .into(),
                        );
                    }
                    if !look_for_damage {
                        return Ok(scan);
                    }
                }
                if !ended {
                    match page {
                        Ok(p) if p.terminator => {
                            ended = true;
                            scan.end = s;
                            if pending_pages > 0 {
                                scan.end_reason =
                                    Some("an end marker follows a write without its end".into());
                                scan.incomplete = Some((pending_first, pending_pages));
                            }
                            check_after_marker = true;
                        }
                        Ok(p) => {
                            if pending_pages == 0 {
                                pending_first = s;
                            }
                            pending.extend_from_slice(p.payload);
                            pending_pages += 1;
                            if p.end {
                                scan.writes
                                    .push((pending_first, std::mem::take(&mut pending)));
                                pending_pages = 0;
                            }
                        }
                        Err(why) => {
                            ended = true;
                            scan.end = s;
                            scan.end_reason = Some(why);
                            if pending_pages > 0 {
                                scan.incomplete = Some((pending_first, pending_pages));
                            }
                            if !look_for_damage {
                                return Ok(scan);
                            }
                        }
                    }
                } else if let Ok(p) = page {
                    if p.durable_mark > scan.end
                        && scan.witness.is_none_or(|(_, m)| p.durable_mark > m)
                    {
                        scan.witness = Some((s, p.durable_mark));
                    }
                }
            }
            seq += n;
        }
        if !ended {
            scan.end = log.pages;
            if pending_pages > 0 {
                scan.end_reason = Some("the extent ends inside a write".into());
                scan.incomplete = Some((pending_first, pending_pages));
            }
        }
        Ok(scan)
    }

    /// Checks that log pages `0 .. upto` of `log` (flushed, so never
    /// written again) are valid pages of it; returns the first that is not.
    pub fn check_log_pages(
        &self,
        log: &LogRef,
        upto: u64,
    ) -> Result<Option<crate::error::Corruption>> {
        let ps = self.page_size();
        let mut buf = vec![0u8; ps];
        for seq in 0..upto.min(log.pages) {
            let pid = log.page(seq);
            self.read_log_pages(pid, &mut buf)?;
            let problem = match decode_page(&buf, log, seq) {
                Ok(p) if p.terminator => Some("an end marker inside the flushed log".to_string()),
                Ok(_) => None,
                Err(why) => Some(why),
            };
            if let Some(why) = problem {
                return Ok(Some(crate::error::Corruption {
                    part: crate::error::DamagedPart::LogPage,
                    page: pid,
                    offset: self.offset(pid),
                    detail: format!("flushed commit-log page {seq} is not valid: {why}"),
                }));
            }
        }
        Ok(None)
    }

    /// Reads whole log pages into `buf` (no verification; a read past the
    /// end of the file is a truncated file).
    fn read_log_pages(&self, first: PageId, buf: &mut [u8]) -> Result<()> {
        let offset = self.offset(first);
        if offset.saturating_add(buf.len() as u64) > self.file_len() {
            return Err(CoreError::Corruption(crate::error::Corruption {
                part: crate::error::DamagedPart::FileLength,
                page: first,
                offset,
                detail: "the commit log's extent lies past the end of the file (truncated file)"
                    .into(),
            }));
        }
        self.read_raw(offset, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log() -> LogRef {
        LogRef {
            start: PageId(40),
            pages: 16,
            salt: 0x1234_5678_9abc_def0,
        }
    }

    #[test]
    fn write_round_trips_and_every_byte_flip_is_caught() {
        let ps = 512;
        let payload: Vec<u8> = (0..1200u32).map(|i| (i * 7) as u8).collect();
        let bytes = encode_write(&log(), 3, 2, &payload, ps);
        assert_eq!(
            bytes.len(),
            4 * ps,
            "1200 bytes over 472-byte payloads, and the end marker"
        );
        let mut got = Vec::new();
        for (i, page) in bytes.chunks_exact(ps).enumerate() {
            let v = decode_page(page, &log(), 3 + i as u64).unwrap();
            assert_eq!(v.end, i == 2);
            assert_eq!(v.terminator, i == 3);
            assert_eq!(v.durable_mark, 2);
            got.extend_from_slice(v.payload);
        }
        assert_eq!(got, payload);
        let page = &bytes[..ps];
        for i in 0..ps {
            let mut bad = page.to_vec();
            bad[i] ^= 0x04;
            assert!(decode_page(&bad, &log(), 3).is_err(), "byte {i}");
        }
        // Misplaced (another sequence), another log's salt.
        assert!(decode_page(page, &log(), 4).is_err());
        let other = LogRef { salt: 99, ..log() };
        assert!(decode_page(page, &other, 3).is_err());
        // A zero page (never written) is not a log page.
        assert!(decode_page(&vec![0u8; ps], &log(), 0).is_err());
        // An empty write is just the end marker.
        let empty = encode_write(&log(), 0, 0, &[], ps);
        assert_eq!(empty.len(), ps);
        assert!(decode_page(&empty, &log(), 0).unwrap().terminator);
    }
}
