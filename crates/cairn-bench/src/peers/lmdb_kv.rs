//! LMDB through heed.

use std::ops::{Bound, Range};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use heed::types::Bytes;
use heed::{
    CommitOrAbort, CompactionOption, Database, Env, EnvFlags, EnvOpenOptions, FlagSetMode, PutFlags,
};

use crate::data::{Flat, Touch};
use crate::engine::{dir_bytes, Kv, Mode, Res};

pub struct LmdbKv {
    env: Env,
    db: Database<'static, Bytes, Bytes>,
    dir: PathBuf,
    mode: Mutex<Mode>,
}

impl LmdbKv {
    pub fn open(dir: &Path) -> Res<Self> {
        let mut opts = EnvOpenOptions::new();
        opts.map_size(16 << 30).max_readers(256);
        // SAFETY: the directory is fresh and only this handle opens it.
        let env = unsafe { opts.open(dir)? };
        let w = env.write_txn()?;
        let db: Database<'static, Bytes, Bytes> = env
            .create_databases_and_commit(w, |dbo, w| {
                dbo.create_database::<Bytes, Bytes>(w, None)
                    .map(CommitOrAbort::<_, ()>::Commit)
            })?
            .unwrap_commit();
        Ok(LmdbKv {
            env,
            db,
            dir: dir.to_path_buf(),
            mode: Mutex::new(Mode::D),
        })
    }

    /// Switches MDB_NOSYNC on for N and off for D (rows switch modes only
    /// between runs, never while writers run).
    fn set_mode(&self, mode: Mode) -> Res<()> {
        let mut cur = self.mode.lock().unwrap_or_else(|e| e.into_inner());
        if *cur != mode {
            let how = match mode {
                Mode::N => FlagSetMode::Enable,
                Mode::D => FlagSetMode::Disable,
            };
            // SAFETY: MDB_NOSYNC may be changed at any time; no write
            // transaction is open while the mode changes.
            unsafe { self.env.set_flags(EnvFlags::NO_SYNC, how)? };
            *cur = mode;
        }
        Ok(())
    }
}

impl Kv for LmdbKv {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()> {
        self.set_mode(mode)?;
        let mut w = self.env.write_txn()?;
        for i in r {
            self.db.put(&mut w, keys.get(i), vals.get(i))?;
        }
        w.commit()?;
        Ok(())
    }

    fn append_sorted(&self, keys: &Flat, vals: &Flat, mode: Mode) -> Res<()> {
        self.set_mode(mode)?;
        let mut w = self.env.write_txn()?;
        for i in 0..keys.len() {
            self.db
                .put_with_flags(&mut w, PutFlags::APPEND, keys.get(i), vals.get(i))?;
        }
        w.commit()?;
        Ok(())
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64> {
        self.set_mode(mode)?;
        let mut w = self.env.write_txn()?;
        let mut n = 0;
        for i in r {
            if self.db.delete(&mut w, keys.get(i))? {
                n += 1;
            }
        }
        w.commit()?;
        Ok(n)
    }

    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch> {
        let rt = self.env.read_txn()?;
        let mut touch = Touch::default();
        for i in r {
            if let Some(v) = self.db.get(&rt, keys.get(i))? {
                touch.add_value(v);
            }
        }
        Ok(touch)
    }

    fn scan(&self) -> Res<Touch> {
        let rt = self.env.read_txn()?;
        let mut touch = Touch::default();
        for e in self.db.iter(&rt)? {
            let (k, v) = e?;
            touch.add(k, v);
        }
        Ok(touch)
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        let rt = self.env.read_txn()?;
        let mut touch = Touch::default();
        for i in 0..starts.len() {
            let range: (Bound<&[u8]>, Bound<&[u8]>) =
                (Bound::Included(starts.get(i)), Bound::Unbounded);
            for e in self.db.range(&rt, &range)?.take(per) {
                let (k, v) = e?;
                touch.add(k, v);
            }
        }
        Ok(touch)
    }

    fn count(&self) -> Res<u64> {
        let rt = self.env.read_txn()?;
        Ok(self.db.len(&rt)?)
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        // LMDB compacts by copying: mdb_env_copy2 with MDB_CP_COMPACT.
        let target = self.dir.join("compacted");
        std::fs::create_dir_all(&target)?;
        let path = target.join("data.mdb");
        let _ = std::fs::remove_file(&path);
        let f = self.env.copy_to_path(&path, CompactionOption::Enabled)?;
        Ok(Some(f.metadata()?.len()))
    }

    fn reader_spec(&self) -> Option<crate::kv::procs::ReaderSpec> {
        Some(crate::kv::procs::ReaderSpec {
            engine: "lmdb",
            path: self.dir.clone(),
        })
    }

    fn disk_bytes(&self) -> u64 {
        // data.mdb plus lock.mdb.
        dir_bytes(&self.dir)
    }
}
