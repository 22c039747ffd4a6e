//! fjall (an LSM tree).

use std::ops::{Bound, Range};
use std::path::{Path, PathBuf};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode, Readable};

use crate::data::{Flat, Touch};
use crate::engine::{dir_bytes, Kv, Mode, Res};

pub struct FjallKv {
    db: Database,
    ks: Keyspace,
    dir: PathBuf,
}

impl FjallKv {
    pub fn open(dir: &Path) -> Res<Self> {
        let db = Database::builder(dir).open()?;
        let ks = db.keyspace("kv", KeyspaceCreateOptions::default)?;
        Ok(FjallKv {
            db,
            ks,
            dir: dir.to_path_buf(),
        })
    }

    fn persist(mode: Mode) -> PersistMode {
        match mode {
            Mode::D => PersistMode::SyncData,
            Mode::N => PersistMode::Buffer,
        }
    }
}

impl Kv for FjallKv {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()> {
        let mut b = self.db.batch().durability(Some(Self::persist(mode)));
        for i in r {
            b.insert(&self.ks, keys.get(i), vals.get(i));
        }
        b.commit()?;
        Ok(())
    }

    fn append_sorted(&self, keys: &Flat, vals: &Flat, _mode: Mode) -> Res<()> {
        let mut ing = self.ks.start_ingestion()?;
        for i in 0..keys.len() {
            ing.write(keys.get(i), vals.get(i))?;
        }
        ing.finish()?;
        Ok(())
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64> {
        let mut b = self.db.batch().durability(Some(Self::persist(mode)));
        let n = r.len() as u64;
        for i in r {
            b.remove(&self.ks, keys.get(i));
        }
        b.commit()?;
        // An LSM delete is a blind tombstone: it does not know whether the
        // key existed. Report the request count.
        Ok(n)
    }

    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch> {
        let snap = self.db.snapshot();
        let mut touch = Touch::default();
        for i in r {
            if let Some(v) = snap.get(&self.ks, keys.get(i))? {
                touch.add_value(&v);
            }
        }
        Ok(touch)
    }

    fn scan(&self) -> Res<Touch> {
        let snap = self.db.snapshot();
        let mut touch = Touch::default();
        for g in snap.iter(&self.ks) {
            let (k, v) = g.into_inner()?;
            touch.add(&k, &v);
        }
        Ok(touch)
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        let snap = self.db.snapshot();
        let mut touch = Touch::default();
        for i in 0..starts.len() {
            let range: (Bound<&[u8]>, Bound<&[u8]>) =
                (Bound::Included(starts.get(i)), Bound::Unbounded);
            for g in snap.range::<&[u8], _>(&self.ks, range).take(per) {
                let (k, v) = g.into_inner()?;
                touch.add(&k, &v);
            }
        }
        Ok(touch)
    }

    fn count(&self) -> Res<u64> {
        // fjall counts by iterating (an LSM tree keeps no exact count).
        Ok(self.ks.len()? as u64)
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        self.ks.major_compact()?;
        Ok(Some(self.disk_bytes()))
    }

    fn disk_bytes(&self) -> u64 {
        dir_bytes(&self.dir)
    }
}
