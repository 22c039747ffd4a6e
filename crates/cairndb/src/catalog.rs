//! The catalog: a B+tree mapping table names to table records.
//! Layout in FORMAT.md ("Catalog record").

use crate::btree::cursor::RawRange;
use crate::btree::NodeSource;
use crate::error::{CoreError, Corruption, DamagedPart, Result};
use crate::ids::PageId;
use crate::pager::header::{le_u16, le_u64, PageRef};

/// What the catalog stores about one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableRecord {
    pub root: PageRef,
    pub len: u64,
    pub key_type: String,
    pub value_type: String,
}

impl TableRecord {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(28 + self.key_type.len() + self.value_type.len());
        b.extend_from_slice(&self.root.page.0.to_le_bytes());
        b.extend_from_slice(&self.root.checksum.to_le_bytes());
        b.extend_from_slice(&self.len.to_le_bytes());
        for s in [&self.key_type, &self.value_type] {
            b.extend_from_slice(&(s.len() as u16).to_le_bytes());
            b.extend_from_slice(s.as_bytes());
        }
        b
    }

    pub(crate) fn decode(b: &[u8]) -> Result<TableRecord, String> {
        if b.len() < 28 {
            return Err(format!("table record of {} bytes is too short", b.len()));
        }
        let mut at = 24;
        let mut name = || -> Result<String, String> {
            let n = le_u16(b, at) as usize;
            let s = b
                .get(at + 2..at + 2 + n)
                .ok_or("type name runs past the record")?;
            at += 2 + n;
            String::from_utf8(s.to_vec()).map_err(|_| "type name is not UTF-8".to_string())
        };
        let key_type = name()?;
        let value_type = name()?;
        Ok(TableRecord {
            root: PageRef {
                page: PageId(le_u64(b, 0)),
                checksum: le_u64(b, 8),
            },
            len: le_u64(b, 16),
            key_type,
            value_type,
        })
    }

    pub(crate) fn decode_or_corrupt(
        b: &[u8],
        name: &[u8],
        catalog_root: PageId,
        page_size: usize,
    ) -> Result<TableRecord, CoreError> {
        TableRecord::decode(b).map_err(|detail| {
            Corruption {
                part: DamagedPart::Catalog,
                page: catalog_root,
                offset: catalog_root.0 * page_size as u64,
                detail: format!("table {:?}: {detail}", String::from_utf8_lossy(name)),
            }
            .into()
        })
    }
}

/// Table `name`'s record in the catalog rooted at `catalog`.
pub(crate) fn lookup_table(
    src: NodeSource<'_>,
    catalog: PageRef,
    name: &str,
    page_size: usize,
) -> Result<Option<TableRecord>> {
    match src.find(catalog, name.as_bytes())? {
        None => Ok(None),
        Some((node, i)) => {
            let v = src.value(&node, i)?;
            Ok(Some(TableRecord::decode_or_corrupt(
                v.as_slice(),
                name.as_bytes(),
                catalog.page,
                page_size,
            )?))
        }
    }
}

/// Every table in the catalog rooted at `catalog`, in name order.
pub(crate) fn list_catalog(
    src: NodeSource<'_>,
    catalog: PageRef,
) -> Result<Vec<(String, TableRecord)>> {
    let mut out = Vec::new();
    let mut r = RawRange::new(
        src,
        catalog,
        std::ops::Bound::Unbounded,
        std::ops::Bound::Unbounded,
    )?;
    while let Some(item) = r.next() {
        let (k, v) = item?;
        let name = String::from_utf8_lossy(k.as_slice()).into_owned();
        let rec = TableRecord::decode_or_corrupt(
            v.as_slice(),
            k.as_slice(),
            catalog.page,
            src.pager.page_size(),
        )?;
        out.push((name, rec));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = TableRecord {
            root: PageRef {
                page: PageId(9),
                checksum: 77,
            },
            len: 3,
            key_type: "&str".into(),
            value_type: "u64".into(),
        };
        assert_eq!(TableRecord::decode(&r.encode()), Ok(r.clone()));
        let e = r.encode();
        assert!(TableRecord::decode(&e[..e.len() - 1]).is_err());
    }
}
