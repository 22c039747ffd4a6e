//! sled 0.34.

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::data::{Flat, Touch};
use crate::engine::{dir_bytes, Kv, Mode, Res};

pub struct SledKv {
    db: sled::Db,
    /// sled's data file, opened again so D can issue a real fdatasync:
    /// sled's own flush uses `sync_file_range`, which flushes no device cache.
    file: File,
    dir: PathBuf,
}

impl SledKv {
    pub fn open(dir: &Path) -> Res<Self> {
        let db = sled::Config::new().path(dir).open()?;
        let file = File::open(dir.join("db"))?;
        Ok(SledKv {
            db,
            file,
            dir: dir.to_path_buf(),
        })
    }

    fn finish(&self, mode: Mode) -> Res<()> {
        if mode == Mode::D {
            self.db.flush()?;
            self.file.sync_data()?;
        }
        Ok(())
    }
}

impl Kv for SledKv {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()> {
        if r.len() == 1 {
            self.db.insert(keys.get(r.start), vals.get(r.start))?;
        } else {
            let mut b = sled::Batch::default();
            for i in r {
                b.insert(keys.get(i), vals.get(i));
            }
            self.db.apply_batch(b)?;
        }
        self.finish(mode)
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64> {
        let mut b = sled::Batch::default();
        let n = r.len() as u64;
        for i in r {
            b.remove(keys.get(i));
        }
        self.db.apply_batch(b)?;
        self.finish(mode)?;
        // A batch remove does not report whether the key existed.
        Ok(n)
    }

    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch> {
        // sled has no read transactions: each get sees the latest state.
        let mut touch = Touch::default();
        for i in r {
            if let Some(v) = self.db.get(keys.get(i))? {
                touch.add_value(&v);
            }
        }
        Ok(touch)
    }

    fn scan(&self) -> Res<Touch> {
        let mut touch = Touch::default();
        for e in self.db.iter() {
            let (k, v) = e?;
            touch.add(&k, &v);
        }
        Ok(touch)
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        let mut touch = Touch::default();
        for i in 0..starts.len() {
            for e in self.db.range(starts.get(i)..).take(per) {
                let (k, v) = e?;
                touch.add(&k, &v);
            }
        }
        Ok(touch)
    }

    fn count(&self) -> Res<u64> {
        // sled's len() iterates the whole tree.
        Ok(self.db.len() as u64)
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        Ok(None)
    }

    fn disk_bytes(&self) -> u64 {
        dir_bytes(&self.dir)
    }
}
