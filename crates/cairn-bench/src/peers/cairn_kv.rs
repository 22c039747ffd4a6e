//! CairnDB's KV adapter, and what CairnDB's event and document adapters
//! share: the file opened through a storage wrapper that counts device
//! flushes, the durability of each mode, the directory's size after a sync.

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use cairndb::storage::{FileStorage, OpenMode, StorageFile};
use cairndb::{Database, Durability, ReadableTable, TableDefinition};

use crate::data::{Flat, Touch};
use crate::engine::{dir_bytes, Kv, Mode, Res};

/// The bytes of CairnDB's directory once everything committed is in the
/// file: non-durable commits are held in memory (the overlay, staged pages)
/// until a sync, which is not timed here.
pub fn synced_dir_bytes(db: &Database, dir: &Path) -> u64 {
    if let Err(e) = db.sync() {
        eprintln!("warning: sync before measuring the file size failed: {e}");
    }
    dir_bytes(dir)
}

/// A [`FileStorage`] that counts device flushes.
#[derive(Debug)]
struct CountingStorage {
    inner: FileStorage,
    flushes: Arc<AtomicU64>,
}

impl StorageFile for CountingStorage {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        self.inner.read_at(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> std::io::Result<()> {
        self.inner.write_at(buf, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        self.flushes.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()
    }
    fn set_len(&self, len: u64) -> std::io::Result<()> {
        self.inner.set_len(len)
    }
    fn len(&self) -> std::io::Result<u64> {
        self.inner.len()
    }
}

/// Opens (or creates) a CairnDB file with the default builder through a
/// storage wrapper that counts device flushes into `flushes`.
pub fn open_counting_db(path: &Path, flushes: &Arc<AtomicU64>) -> Res<Database> {
    let inner = FileStorage::open(path, OpenMode::CreateOrOpen)?;
    let storage = CountingStorage {
        inner,
        flushes: flushes.clone(),
    };
    Ok(cairndb::Builder::new().open_with_storage(Box::new(storage), true, false)?)
}

/// The durability of a commit in `mode`.
pub fn durability(mode: Mode) -> Durability {
    match mode {
        Mode::D => Durability::Immediate,
        Mode::N => Durability::None,
    }
}

pub(crate) const TABLE: TableDefinition<&[u8], &[u8]> = TableDefinition::new("kv");

/// CairnDB.
pub struct Cairn {
    db: Database,
    dir: PathBuf,
    flushes: Arc<AtomicU64>,
}

impl Cairn {
    pub fn open(dir: &Path) -> Res<Self> {
        let path = dir.join("bench.cairn");
        let flushes = Arc::new(AtomicU64::new(0));
        let db = Self::open_db(&path, &flushes)?;
        // Create the table up front so readers never see it missing.
        let txn = db.begin_write()?;
        txn.open_table(TABLE)?;
        txn.set_durability(Durability::None);
        txn.commit()?;
        Ok(Cairn {
            db,
            dir: dir.to_path_buf(),
            flushes,
        })
    }

    fn open_db(path: &Path, flushes: &Arc<AtomicU64>) -> Res<Database> {
        open_counting_db(path, flushes)
    }

    fn db(&self) -> &Database {
        &self.db
    }
}

impl Kv for Cairn {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, mode: Mode) -> Res<()> {
        let txn = self.db().begin_write()?;
        txn.set_durability(durability(mode));
        {
            let mut t = txn.open_table(TABLE)?;
            for i in r {
                t.insert(keys.get(i), vals.get(i))?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn append_sorted(&self, keys: &Flat, vals: &Flat, mode: Mode) -> Res<()> {
        let txn = self.db().begin_write()?;
        txn.set_durability(durability(mode));
        {
            let mut t = txn.open_table(TABLE)?;
            for i in 0..keys.len() {
                t.append(keys.get(i), vals.get(i))?;
            }
        }
        txn.commit()?;
        Ok(())
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, mode: Mode) -> Res<u64> {
        let txn = self.db().begin_write()?;
        txn.set_durability(durability(mode));
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
        let read = self.db().begin_read()?;
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
        let read = self.db().begin_read()?;
        let t = read.open_table(TABLE)?;
        let mut touch = Touch::default();
        for e in t.iter()? {
            let (k, v) = e?;
            touch.add(k.value(), v.value());
        }
        Ok(touch)
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        let read = self.db().begin_read()?;
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
        let read = self.db().begin_read()?;
        let t = read.open_table(TABLE)?;
        Ok(t.len())
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        self.db().compact()?;
        Ok(Some(self.disk_bytes()))
    }

    fn publish(&self) -> Res<()> {
        Ok(self.db().sync()?)
    }

    fn reader_spec(&self) -> Option<crate::kv::procs::ReaderSpec> {
        Some(crate::kv::procs::ReaderSpec {
            engine: "cairn",
            path: self.dir.join("bench.cairn"),
        })
    }

    fn disk_bytes(&self) -> u64 {
        synced_dir_bytes(self.db(), &self.dir)
    }

    fn flushes(&self) -> Option<u64> {
        Some(self.flushes.load(Ordering::Relaxed))
    }
}
