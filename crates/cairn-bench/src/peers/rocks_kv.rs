//! RocksDB (cargo feature `rocksdb`: a long C++ build).

use std::ops::Range;
use std::path::{Path, PathBuf};

use rocksdb::{Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB};

use crate::data::{Flat, Touch};
use crate::engine::{dir_bytes, Kv, Mode, Res};

pub struct RocksKv {
    db: DB,
    dir: PathBuf,
}

impl RocksKv {
    pub fn open(dir: &Path) -> Res<Self> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        let db = DB::open(&opts, dir)?;
        Ok(RocksKv {
            db,
            dir: dir.to_path_buf(),
        })
    }

    fn write(&self, b: WriteBatch, mode: Mode) -> Res<()> {
        let mut wo = WriteOptions::default();
        wo.set_sync(mode == Mode::D);
        self.db.write_opt(b, &wo)?;
        Ok(())
    }
}

impl Kv for RocksKv {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()> {
        let mut b = WriteBatch::default();
        for i in r {
            b.put(keys.get(i), vals.get(i));
        }
        self.write(b, mode)
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64> {
        let mut b = WriteBatch::default();
        let n = r.len() as u64;
        for i in r {
            b.delete(keys.get(i));
        }
        self.write(b, mode)?;
        Ok(n)
    }

    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch> {
        let snap = self.db.snapshot();
        let mut touch = Touch::default();
        for i in r {
            if let Some(v) = snap.get_pinned(keys.get(i))? {
                touch.add_value(&v);
            }
        }
        Ok(touch)
    }

    fn scan(&self) -> Res<Touch> {
        let snap = self.db.snapshot();
        let mut touch = Touch::default();
        for e in snap.iterator(IteratorMode::Start) {
            let (k, v) = e?;
            touch.add(&k, &v);
        }
        Ok(touch)
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        let snap = self.db.snapshot();
        let mut touch = Touch::default();
        for i in 0..starts.len() {
            let it = snap.iterator(IteratorMode::From(starts.get(i), Direction::Forward));
            for e in it.take(per) {
                let (k, v) = e?;
                touch.add(&k, &v);
            }
        }
        Ok(touch)
    }

    fn count(&self) -> Res<u64> {
        let mut n = 0;
        for e in self.db.iterator(IteratorMode::Start) {
            e?;
            n += 1;
        }
        Ok(n)
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        self.db.compact_range::<&[u8], &[u8]>(None, None);
        Ok(Some(self.disk_bytes()))
    }

    fn disk_bytes(&self) -> u64 {
        dir_bytes(&self.dir)
    }
}
