//! Row R8p: random gets in reader *processes* beside a writer in this
//! process, for the engines that let several processes share one database
//! (CairnDB through its lock file, LMDB through `lock.mdb`, SQLite in WAL
//! mode). Each reader is this binary again (`cairn bench kv-reader`, a
//! hidden subcommand): it opens the database read-only, loads its keys from
//! a file, says `READY`, waits for `GO` on stdin, gets every key in one
//! read transaction and prints `DONE found seconds`.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use crate::args::KvReaderArgs;
use crate::data::{Flat, Touch};
use crate::engine::Res;

/// What a reader process needs to open an engine's database read-only.
#[derive(Debug, Clone)]
pub struct ReaderSpec {
    /// `cairn`, `lmdb` or `sqlite`.
    pub engine: &'static str,
    /// The database file (CairnDB, SQLite) or directory (LMDB).
    pub path: PathBuf,
}

/// The reader side: one read transaction getting every key.
trait KvRead {
    fn get_each(&self, keys: &Flat) -> Res<Touch>;
}

struct CairnRead(cairndb::Database);

impl KvRead for CairnRead {
    fn get_each(&self, keys: &Flat) -> Res<Touch> {
        use cairndb::ReadableTable;
        let r = self.0.begin_read()?;
        let t = r.open_table(crate::peers::cairn_kv::TABLE)?;
        let mut touch = Touch::default();
        for i in 0..keys.len() {
            if let Some(v) = t.get(keys.get(i))? {
                touch.add_value(v.value());
            }
        }
        Ok(touch)
    }
}

#[cfg(feature = "peers")]
struct LmdbRead {
    env: heed::Env,
    db: heed::Database<'static, heed::types::Bytes, heed::types::Bytes>,
}

#[cfg(feature = "peers")]
impl KvRead for LmdbRead {
    fn get_each(&self, keys: &Flat) -> Res<Touch> {
        let rt = self.env.read_txn()?;
        let mut touch = Touch::default();
        for i in 0..keys.len() {
            if let Some(v) = self.db.get(&rt, keys.get(i))? {
                touch.add_value(v);
            }
        }
        Ok(touch)
    }
}

#[cfg(feature = "peers")]
struct SqliteRead(rusqlite::Connection);

#[cfg(feature = "peers")]
impl KvRead for SqliteRead {
    fn get_each(&self, keys: &Flat) -> Res<Touch> {
        use rusqlite::OptionalExtension;
        let tx = self.0.unchecked_transaction()?;
        let mut touch = Touch::default();
        {
            let mut st = tx.prepare_cached("SELECT v FROM kv WHERE k = ?1")?;
            for i in 0..keys.len() {
                let hit = st
                    .query_row([keys.get(i)], |row| {
                        Ok(crate::data::touch(row.get_ref(0)?.as_blob()?))
                    })
                    .optional()?;
                if let Some(sum) = hit {
                    touch.found += 1;
                    touch.sum = touch.sum.wrapping_add(sum);
                }
            }
        }
        tx.commit()?;
        Ok(touch)
    }
}

fn open_reader(engine: &str, path: &Path) -> Res<Box<dyn KvRead>> {
    match engine {
        "cairn" => Ok(Box::new(CairnRead(cairndb::Database::open_read_only(
            path,
        )?))),
        #[cfg(feature = "peers")]
        "lmdb" => {
            let mut opts = heed::EnvOpenOptions::new();
            opts.map_size(16 << 30).max_readers(256);
            // SAFETY: the writer process opened the environment with the
            // same map size; this handle only reads.
            let env = unsafe { opts.flags(heed::EnvFlags::READ_ONLY).open(path)? };
            let rt = env.read_txn()?;
            let db: Option<heed::Database<'static, heed::types::Bytes, heed::types::Bytes>> = env
                .open_databases_and_commit(rt, |dbo, rt| {
                    dbo.open_database::<heed::types::Bytes, heed::types::Bytes>(rt, None)
                        .map(heed::CommitOrAbort::<_, ()>::Commit)
                })?
                .unwrap_commit();
            let db = db.ok_or("lmdb: the benchmark database is missing")?;
            Ok(Box::new(LmdbRead { env, db }))
        }
        #[cfg(feature = "peers")]
        "sqlite" => {
            let c = rusqlite::Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY
                    | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            c.execute_batch("PRAGMA cache_size=-1048576;")?;
            Ok(Box::new(SqliteRead(c)))
        }
        other => Err(format!("kv-reader: no reader for engine {other:?} in this build").into()),
    }
}

/// `cairn bench kv-reader` (a child of row R8p).
pub fn run_child(a: &KvReaderArgs, w: &mut dyn Write) -> Res<()> {
    let kv = open_reader(&a.engine, &a.path)?;
    let bytes = std::fs::read(&a.keys)?;
    if a.key_len == 0 || bytes.len() % a.key_len != 0 {
        return Err(format!(
            "kv-reader: {} is not a list of {}-byte keys",
            a.keys.display(),
            a.key_len
        )
        .into());
    }
    let mut keys = Flat::with_capacity(a.key_len, bytes.len() / a.key_len);
    for k in bytes.chunks_exact(a.key_len) {
        keys.push(k);
    }
    writeln!(w, "READY")?;
    w.flush()?;
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    let t = Instant::now();
    let touch = kv.get_each(&keys)?;
    writeln!(w, "DONE {} {}", touch.found, t.elapsed().as_secs_f64())?;
    w.flush()?;
    Ok(())
}

/// The binary to start readers with: `CAIRN_BENCH_EXE`, else this one if it
/// is `cairn` (the benchmark's library also runs inside test binaries,
/// which have no `bench kv-reader`).
pub fn reader_exe() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAIRN_BENCH_EXE") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    (exe.file_stem()? == "cairn").then_some(exe)
}

/// Runs `procs` reader processes over `keys` split evenly (each one read
/// transaction), all started at once, while `write` runs in this process
/// until they are done. Returns (entries found, seconds from the start
/// signal to the last reader's end, writer operations).
pub fn run_readers(
    exe: &Path,
    spec: &ReaderSpec,
    keys: &Flat,
    procs: usize,
    scratch: &Path,
    mut write: impl FnMut() -> Res<()> + Send,
) -> Res<(u64, f64, u64)> {
    let per = keys.len() / procs;
    let mut children: Vec<(Child, std::io::Lines<BufReader<std::process::ChildStdout>>)> =
        Vec::new();
    let result = (|| -> Res<(u64, f64, u64)> {
        for p in 0..procs {
            let file = scratch.join(format!("r8p-{p}.keys"));
            let mut buf = Vec::with_capacity(per * 24);
            for i in p * per..(p + 1) * per {
                buf.extend_from_slice(keys.get(i));
            }
            std::fs::write(&file, &buf)?;
            let mut child = Command::new(exe)
                .args(["bench", "kv-reader", "--engine", spec.engine, "--key-len"])
                .arg(keys.get(0).len().to_string())
                .arg("--path")
                .arg(&spec.path)
                .arg("--keys")
                .arg(&file)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()?;
            let out = child.stdout.take().ok_or("kv-reader: no stdout")?;
            children.push((child, BufReader::new(out).lines()));
        }
        for (_, lines) in children.iter_mut() {
            match lines.next() {
                Some(Ok(l)) if l.trim() == "READY" => {}
                other => return Err(format!("kv-reader did not start: {other:?}").into()),
            }
        }
        let stop = std::sync::atomic::AtomicBool::new(false);
        let started = Instant::now();
        let (stop, write) = (&stop, &mut write);
        std::thread::scope(|sc| -> Res<(u64, f64, u64)> {
            let writer = sc.spawn(move || -> Res<u64> {
                let mut ops = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    write()?;
                    ops += 1;
                }
                Ok(ops)
            });
            let mut found = 0u64;
            let mut outcome: Res<()> = Ok(());
            for (child, _) in children.iter_mut() {
                if let Some(stdin) = child.stdin.as_mut() {
                    let _ = writeln!(stdin, "GO");
                }
            }
            for (_, lines) in children.iter_mut() {
                match lines.next() {
                    Some(Ok(l)) if l.starts_with("DONE ") => {
                        found += l
                            .split_whitespace()
                            .nth(1)
                            .and_then(|f| f.parse::<u64>().ok())
                            .unwrap_or(0);
                    }
                    other => {
                        outcome = Err(format!("kv-reader failed: {other:?}").into());
                    }
                }
            }
            let secs = started.elapsed().as_secs_f64();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let ops = writer.join().map_err(|_| "the R8p writer panicked")??;
            outcome?;
            Ok((found, secs, ops))
        })
    })();
    for (mut child, _) in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    result
}
