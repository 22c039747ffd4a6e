//! redb.

use std::ops::Range;
use std::path::{Path, PathBuf};

use redb::{
    Database, Durability, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
};

use crate::data::{Flat, Touch};
use crate::engine::{dir_bytes, Kv, Mode, Res};

const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

pub struct RedbKv {
    db: Database,
    dir: PathBuf,
}

impl RedbKv {
    pub fn open(dir: &Path) -> Res<Self> {
        let db = Database::create(dir.join("bench.redb"))?;
        let txn = db.begin_write()?;
        txn.open_table(TABLE)?;
        txn.commit()?;
        Ok(RedbKv {
            db,
            dir: dir.to_path_buf(),
        })
    }

    fn begin(&self, mode: Mode) -> Res<redb::WriteTransaction> {
        let mut txn = self.db.begin_write()?;
        txn.set_durability(match mode {
            Mode::D => Durability::Immediate,
            Mode::N => Durability::None,
        })?;
        Ok(txn)
    }
}

impl Kv for RedbKv {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()> {
        let txn = self.begin(mode)?;
        {
            let mut t = txn.open_table(TABLE)?;
            for i in r {
                t.insert(keys.get(i), vals.get(i))?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64> {
        let txn = self.begin(mode)?;
        let mut n = 0;
        {
            let mut t = txn.open_table(TABLE)?;
            for i in r {
                if t.remove(keys.get(i))?.is_some() {
                    n += 1;
                }
            }
        }
        txn.commit()?;
        Ok(n)
    }

    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch> {
        let read = self.db.begin_read()?;
        let t = read.open_table(TABLE)?;
        let mut touch = Touch::default();
        for i in r {
            if let Some(v) = t.get(keys.get(i))? {
                touch.add_value(v.value());
            }
        }
        Ok(touch)
    }

    fn scan(&self) -> Res<Touch> {
        let read = self.db.begin_read()?;
        let t = read.open_table(TABLE)?;
        let mut touch = Touch::default();
        for e in t.iter()? {
            let (k, v) = e?;
            touch.add(k.value(), v.value());
        }
        Ok(touch)
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        let read = self.db.begin_read()?;
        let t = read.open_table(TABLE)?;
        let mut touch = Touch::default();
        for i in 0..starts.len() {
            let start: &[u8] = starts.get(i);
            for e in t.range(start..)?.take(per) {
                let (k, v) = e?;
                touch.add(k.value(), v.value());
            }
        }
        Ok(touch)
    }

    fn count(&self) -> Res<u64> {
        let read = self.db.begin_read()?;
        let t = read.open_table(TABLE)?;
        Ok(t.len()?)
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        for _ in 0..16 {
            if !self.db.compact()? {
                break;
            }
        }
        Ok(Some(self.disk_bytes()))
    }

    fn disk_bytes(&self) -> u64 {
        dir_bytes(&self.dir)
    }
}
