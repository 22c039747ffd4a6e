//! The KV workloads on an etcd cluster (`cairn bench kv --backend
//! etcd://…`, feature `etcd`): [`Kv`] over `cairndb-etcd`, one table `kv`
//! under the URL's prefix. Each call is one transaction, as on every
//! engine; commits are always durable (etcd fsyncs its WAL before it
//! answers, unless the members run with `--unsafe-no-fsync`), so the mode
//! is ignored.

use std::ops::Range;

use cairndb_etcd::EtcdDatabase;

use crate::data::{Flat, Touch};
use crate::engine::{Kv, Mode, Res};

const TABLE: &str = "kv";

/// A prefix of an etcd cluster.
pub struct Etcd {
    db: EtcdDatabase,
}

impl Etcd {
    /// Connects to the URL; its prefix must hold no table `kv` (a fresh
    /// prefix per run, so runs do not see each other's keys).
    pub fn connect(url: &str) -> Res<Self> {
        let db = EtcdDatabase::connect(url)?;
        if db.begin_read()?.table_types(TABLE)?.is_some() {
            return Err(format!(
                "{url} already holds a table {TABLE:?}: give the bench an unused prefix"
            )
            .into());
        }
        Ok(Etcd { db })
    }

    pub fn db(&self) -> &EtcdDatabase {
        &self.db
    }

    /// Removes the table the run wrote.
    pub fn clean(&self) -> Res<()> {
        self.db
            .run_in_transaction(|tx| tx.delete_table(TABLE).map(|_| ()))?;
        Ok(())
    }
}

impl Kv for Etcd {
    fn put_batch(&self, keys: &Flat, vals: &Flat, r: Range<usize>, _mode: Mode) -> Res<()> {
        self.db.run_in_transaction(|tx| {
            let t = tx.open_table(TABLE)?;
            for i in r.clone() {
                t.insert(keys.get(i), vals.get(i))?;
            }
            Ok(())
        })?;
        Ok(())
    }

    fn delete_batch(&self, keys: &Flat, r: Range<usize>, _mode: Mode) -> Res<u64> {
        Ok(self.db.run_in_transaction(|tx| {
            let t = tx.open_table(TABLE)?;
            let mut n = 0;
            for i in r.clone() {
                if t.get(keys.get(i))?.is_some() {
                    t.remove(keys.get(i))?;
                    n += 1;
                }
            }
            Ok(n)
        })?)
    }

    fn get_each(&self, keys: &Flat, r: Range<usize>) -> Res<Touch> {
        let rx = self.db.begin_read()?;
        let t = rx.open_table(TABLE)?;
        let mut touch = Touch::default();
        for i in r {
            if let Some(v) = t.get(keys.get(i))? {
                touch.add_value(&v);
            }
        }
        Ok(touch)
    }

    fn scan(&self) -> Res<Touch> {
        let rx = self.db.begin_read()?;
        let mut touch = Touch::default();
        for (k, v) in rx.open_table(TABLE)?.range(..)? {
            touch.add(&k, &v);
        }
        Ok(touch)
    }

    fn range_reads(&self, starts: &Flat, per: usize) -> Res<Touch> {
        let rx = self.db.begin_read()?;
        let t = rx.open_table(TABLE)?;
        let mut touch = Touch::default();
        for i in 0..starts.len() {
            // A range request returns the whole rest of the table in pages;
            // the first `per` entries are the row's.
            for (k, v) in t.range(starts.get(i)..)?.into_iter().take(per) {
                touch.add(&k, &v);
            }
        }
        Ok(touch)
    }

    fn count(&self) -> Res<u64> {
        Ok(self.db.begin_read()?.open_table(TABLE)?.len()?)
    }

    fn compact(&mut self) -> Res<Option<u64>> {
        Ok(None)
    }

    /// The cluster's files are the members', elsewhere.
    fn disk_bytes(&self) -> u64 {
        0
    }
}
