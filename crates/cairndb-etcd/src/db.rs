//! The database handle: a connection to the cluster, a small runtime that
//! drives it, and the requests every transaction is made of (reads at a
//! revision, one `Txn` per commit), each bounded by a timeout.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, GetOptions, KvClient, SortOrder,
    SortTarget, Txn, TxnOp, WatchOptions,
};

use crate::error::{Error, Result};
use crate::keys::{Layout, FORMAT_VERSION};
use crate::txn::{ReadTransaction, WriteTransaction};
use crate::url::EtcdUrl;

/// An etcd revision: the cluster-wide commit number a snapshot is read at
/// and a commit is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Revision(pub i64);

impl std::fmt::Display for Revision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// How the metadata key's value starts while a migration writes into the
/// prefix (FORMAT.md, "etcd key layout"): not a format record, so every
/// client refuses the prefix, older ones included.
const MIGRATION_MARKER: &str = "cairndb-etcd migration in progress: ";

/// Etcd's default `--max-request-bytes` (1.5 MiB).
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 1536 * 1024;
/// Etcd's default `--max-txn-ops`.
pub const DEFAULT_MAX_TXN_OPS: usize = 128;
/// Bytes counted per operation or compare beside its key and value (the
/// protobuf framing), so that a request this client accepts is accepted by
/// the cluster.
pub const REQUEST_OVERHEAD_BYTES_PER_OP: usize = 32;
/// How often a wait for a change ([`EtcdDatabase::wait_for_change`]) looks
/// at its stop flag.
pub(crate) const STOP_POLL: Duration = Duration::from_millis(50);
/// Keys read per range request: a range is read in pages of this many keys
/// (all at the transaction's revision).
pub const RANGE_PAGE_KEYS: i64 = 128;

/// How the client talks to the cluster. The limits must match the
/// cluster's flags (`--max-request-bytes`, `--max-txn-ops`): the client
/// refuses what the cluster would.
#[derive(Debug, Clone)]
pub struct Options {
    /// Each request's timeout (a read, a commit).
    pub request_timeout: Duration,
    /// The timeout of opening a connection.
    pub connect_timeout: Duration,
    /// The cluster's `--max-request-bytes`.
    pub max_request_bytes: usize,
    /// The cluster's `--max-txn-ops`.
    pub max_txn_ops: usize,
    /// How many times [`EtcdDatabase::run_in_transaction`] runs a
    /// transaction that keeps conflicting before it returns the conflict.
    pub max_attempts: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_txn_ops: DEFAULT_MAX_TXN_OPS,
            max_attempts: 32,
        }
    }
}

/// A CairnDB key-value database stored under one key prefix of an etcd
/// cluster. Cheap to share between threads (`&self` everywhere).
///
/// ```no_run
/// use cairndb_etcd::EtcdDatabase;
/// let db = EtcdDatabase::connect("etcd://127.0.0.1:2379,127.0.0.1:22379/app")?;
/// let tx = db.begin_write()?;
/// tx.open_table("users")?.insert(b"ann", b"{\"age\":31}")?;
/// tx.commit()?;
/// let rx = db.begin_read()?;
/// assert!(rx.open_table("users")?.get(b"ann")?.is_some());
/// # Ok::<(), cairndb_etcd::Error>(())
/// ```
pub struct EtcdDatabase {
    pub(crate) client: Client,
    pub(crate) layout: Layout,
    pub(crate) endpoints: Vec<String>,
    pub(crate) options: Options,
    /// The metadata key's value while this handle migrates into the
    /// prefix ([`EtcdDatabase::begin_migration`]); `None` otherwise.
    pub(crate) migration: Option<Vec<u8>>,
    /// Requests sent to the cluster by this handle ([`EtcdDatabase::round_trips`]).
    round_trips: AtomicU64,
    /// Keys the cluster's answers to reads held ([`EtcdDatabase::keys_read`]).
    keys_read: AtomicU64,
    runtime: Driver,
}

/// The client's runtime, which the blocking calls drive. A call made
/// inside an async context (a task of the caller's own tokio runtime, where
/// `Runtime::block_on` panics: "Cannot start a runtime from within a
/// runtime") drives it from a thread of its own instead, the caller's
/// thread blocking meanwhile; and a handle dropped there shuts the runtime
/// down in the background (dropping it there would panic too). Inside a
/// caller's runtime, [`tokio::task::spawn_blocking`] is still the better
/// place for these calls: they block the worker thread they run on.
struct Driver(Option<tokio::runtime::Runtime>);

impl Driver {
    /// Runs `fut` to completion on the runtime; `Err` names why it could
    /// not (the runtime shut down, no thread to run it on).
    fn block_on<F>(&self, fut: F) -> std::result::Result<F::Output, String>
    where
        F: Future + Send,
        F::Output: Send,
    {
        let Some(runtime) = &self.0 else {
            return Err("the client's runtime is shut down".into());
        };
        if tokio::runtime::Handle::try_current().is_err() {
            return Ok(runtime.block_on(fut));
        }
        std::thread::scope(|scope| {
            let thread = std::thread::Builder::new()
                .name("cairndb-etcd-call".into())
                .spawn_scoped(scope, || runtime.block_on(fut))
                .map_err(|e| {
                    format!("cannot start a thread for a call made inside an async runtime: {e}")
                })?;
            // A panic of the call is the caller's, as it would have been
            // on its own thread.
            thread.join().map_err(|p| std::panic::resume_unwind(p))
        })
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            }
        }
    }
}

impl EtcdDatabase {
    /// Connects to the cluster of an `etcd://host:port,host:port/prefix`
    /// URL with the default [`Options`], and checks (or, on an empty
    /// prefix, writes) the prefix's format record.
    pub fn connect(url: &str) -> Result<EtcdDatabase> {
        EtcdDatabase::connect_with(url, Options::default())
    }

    /// [`connect`](Self::connect) with options.
    pub fn connect_with(url: &str, options: Options) -> Result<EtcdDatabase> {
        let db = EtcdDatabase::connect_only(url, options)?;
        db.check_format()?;
        Ok(db)
    }

    /// Starts a migration into the URL's prefix, which must hold no key
    /// (or only the format record a client's connect wrote;
    /// [`Error::NotEmpty`] otherwise): one `Txn`, guarded by "no key in
    /// the prefix", writes the migration marker into the metadata key
    /// (naming `source`), so that from then on every client refuses the
    /// prefix ([`Error::MigrationIncomplete`]) until
    /// [`finish_migration`](Self::finish_migration) replaces the marker by
    /// the format record in the last `Txn`. The handle returned writes the
    /// tables in as many transactions as the limits need; it may create
    /// internal `$` tables ([`WriteTransaction::open_table_with_types`]).
    pub fn begin_migration(url: &str, options: Options, source: &str) -> Result<EtcdDatabase> {
        let mut db = EtcdDatabase::connect_only(url, options)?;
        let (start, end) = db.layout.prefix_range();
        let revision = db.current_revision()?;
        let keys = db.count_at(start.clone(), end.clone(), revision)?;
        let meta = db.layout.meta();
        let record = format!("cairndb-etcd format {FORMAT_VERSION}");
        // A prefix a client connected to but wrote nothing into holds its
        // format record alone: that is empty too.
        let only_record = keys == 1
            && db
                .get_at(meta.clone(), revision)?
                .is_some_and(|(v, _)| v == record.as_bytes());
        let not_empty = |db: &EtcdDatabase| -> Result<Error> {
            let revision = db.current_revision()?;
            let (start, end) = db.layout.prefix_range();
            Ok(Error::NotEmpty {
                prefix: db.prefix().to_string(),
                keys: db.count_at(start, end, revision)?.max(1),
            })
        };
        if keys > 0 && !only_record {
            return Err(not_empty(&db)?);
        }
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let marker = format!(
            "{MIGRATION_MARKER}from {source}, started at unix time {nonce:.6} by process {}",
            std::process::id()
        )
        .into_bytes();
        // No key of the prefix (but the format record, when it was seen)
        // exists: checked by the cluster in the same Txn that writes the
        // marker (a range compare holds when every key in the range passes;
        // an absent key has create revision 0).
        let absent = |from: Vec<u8>, to: Vec<u8>| {
            Compare::create_revision(from, CompareOp::Equal, 0).with_range(to)
        };
        let compares = if only_record {
            vec![
                absent(start, meta.clone()),
                absent(crate::keys::successor(meta.clone()), end),
                Compare::value(meta.clone(), CompareOp::Equal, record.into_bytes()),
            ]
        } else {
            vec![absent(start, end)]
        };
        let put = TxnOp::put(meta, marker.clone(), None);
        if db.send_txn(compares, vec![put], revision)?.is_none() {
            return Err(not_empty(&db)?);
        }
        db.migration = Some(marker);
        Ok(db)
    }

    /// Ends a migration begun by [`begin_migration`](Self::begin_migration):
    /// one `Txn` replaces the marker by the format record (if the marker is
    /// still this migration's), after which the prefix opens normally.
    pub fn finish_migration(mut self) -> Result<EtcdDatabase> {
        let Some(marker) = self.migration.take() else {
            return Err(self.format_error("this handle is not migrating"));
        };
        let key = self.layout.meta();
        let record = format!("cairndb-etcd format {FORMAT_VERSION}");
        let same = Compare::value(key.clone(), CompareOp::Equal, marker);
        let put = TxnOp::put(key, record, None);
        let revision = self.current_revision()?;
        if self.send_txn(vec![same], vec![put], revision)?.is_none() {
            return Err(self.format_error(
                "its migration marker changed during the migration (another client?)",
            ));
        }
        Ok(self)
    }

    /// Whether this handle is migrating into its prefix.
    pub fn is_migrating(&self) -> bool {
        self.migration.is_some()
    }

    /// Connects without reading or writing the format record.
    fn connect_only(url: &str, options: Options) -> Result<EtcdDatabase> {
        let parsed = EtcdUrl::parse(url)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("cairndb-etcd")
            .enable_all()
            .build()
            .map_err(|e| Error::Unavailable {
                endpoints: parsed.endpoints.clone(),
                detail: format!("cannot start the client's runtime: {e}"),
            })?;
        let mut connect = ConnectOptions::new()
            .with_timeout(options.request_timeout)
            .with_connect_timeout(options.connect_timeout)
            .with_keep_alive(Duration::from_secs(2), options.request_timeout)
            .with_require_leader(true);
        if let Some((user, password)) = &parsed.user {
            connect = connect.with_user(user.clone(), password.clone());
        }
        let endpoints = parsed.endpoints.clone();
        let limit = options.connect_timeout + options.request_timeout;
        let runtime = Driver(Some(runtime));
        let client = runtime
            .block_on(async {
                tokio::time::timeout(limit, Client::connect(&endpoints, Some(connect))).await
            })
            .map_err(|detail| Error::Unavailable {
                endpoints: endpoints.clone(),
                detail,
            })?
            .map_err(|_| Error::Unavailable {
                endpoints: endpoints.clone(),
                detail: format!("no answer within {limit:?}"),
            })?
            .map_err(|e| map_error(e, &endpoints, Kind::Read, None))?;
        let db = EtcdDatabase {
            client,
            layout: Layout::new(&parsed.prefix),
            endpoints,
            options,
            migration: None,
            round_trips: AtomicU64::new(0),
            keys_read: AtomicU64::new(0),
            runtime,
        };
        Ok(db)
    }

    /// The key prefix this database lives under.
    pub fn prefix(&self) -> &str {
        self.layout.prefix()
    }

    /// The endpoints the client was given.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The cluster's members, as the cluster lists them: each one's name
    /// and client URLs.
    pub fn members(&self) -> Result<Vec<(String, Vec<String>)>> {
        let mut cluster = self.client.cluster_client();
        let resp = self.run(Kind::Read, None, async move { cluster.member_list().await })?;
        Ok(resp
            .members()
            .iter()
            .map(|m| (m.name().to_string(), m.client_urls().to_vec()))
            .collect())
    }

    /// The client's options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// How many requests this handle has sent to the cluster (reads,
    /// commits, watches, member lists), each one network round trip: what
    /// tests and `cairn bench` count per operation (the difference of two
    /// readings).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// How many keys the cluster's answers to this handle's reads held
    /// (point reads, ranges, read-aheads; not counts): with
    /// [`round_trips`](Self::round_trips), what tests check a bounded read
    /// by (the difference of two readings).
    pub fn keys_read(&self) -> u64 {
        self.keys_read.load(Ordering::Relaxed)
    }

    fn count_keys(&self, n: usize) {
        self.keys_read
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Starts a read transaction: a snapshot at the cluster's newest
    /// revision (found by a linearizable read, so it includes every commit
    /// acknowledged before this call).
    pub fn begin_read(&self) -> Result<ReadTransaction<'_>> {
        Ok(ReadTransaction::new(self, self.current_revision()?))
    }

    /// Starts a write transaction: it reads at the cluster's newest
    /// revision (fixed by its first read, which is linearizable, so no
    /// request is spent on starting it), buffers its writes, and commits
    /// them as one etcd `Txn` that checks nothing it read has changed
    /// since.
    pub fn begin_write(&self) -> Result<WriteTransaction<'_>> {
        Ok(WriteTransaction::new(self))
    }

    /// Runs `f` in a write transaction and commits it, running it again
    /// from the start (after a short, growing, jittered pause) while the
    /// commit reports an [`Error::Conflict`] — or a read inside `f` an
    /// [`Error::Compacted`] — at most [`Options::max_attempts`] times
    /// ([`Error::is_retryable`]). Any other error is returned at once. `f`
    /// must have no effect outside the transaction.
    pub fn run_in_transaction<T>(
        &self,
        mut f: impl FnMut(&WriteTransaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let tx = self.begin_write()?;
            let outcome = f(&tx).and_then(|value| tx.commit().map(|_| value));
            match outcome {
                Err(e) if e.is_retryable() && attempt < self.options.max_attempts => {
                    std::thread::sleep(backoff(attempt));
                }
                other => return other,
            }
        }
    }

    /// The cluster's newest revision (a linearizable read).
    pub fn current_revision(&self) -> Result<Revision> {
        let key = self.layout.meta();
        let mut kv = self.kv();
        let resp = self.run(Kind::Read, None, async move {
            kv.get(key, Some(GetOptions::new().with_count_only())).await
        })?;
        header_revision(resp.header(), &self.endpoints)
    }

    /// Gets a key the layout never writes (`<prefix>/probe`): one round
    /// trip that reads nothing. Linearizable, the member answering confirms
    /// its read index with the leader; `serializable`, it answers from its
    /// own store. What `cairn bench --backend etcd://…` times as the
    /// cluster's network cost.
    pub fn probe(&self, serializable: bool) -> Result<()> {
        let key = format!("{}/probe", self.layout.prefix()).into_bytes();
        let mut kv = self.kv();
        let mut options = GetOptions::new();
        if serializable {
            options = options.with_serializable();
        }
        self.run(
            Kind::Read,
            None,
            async move { kv.get(key, Some(options)).await },
        )?;
        Ok(())
    }

    /// Compacts the cluster's history up to `revision` (every key of the
    /// cluster, not only this prefix's): transactions reading at an older
    /// revision fail with [`Error::Compacted`] from then on.
    pub fn compact(&self, revision: Revision) -> Result<()> {
        let mut kv = self.kv();
        self.run(Kind::Read, None, async move {
            kv.compact(revision.0, Some(CompactionOptions::new().with_physical()))
                .await
        })?;
        Ok(())
    }

    pub(crate) fn kv(&self) -> KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(usize::MAX)
    }

    /// Runs one request on the runtime, bounded by the request timeout
    /// (plus a margin: the client's own timeout should fire first).
    pub(crate) fn run<T: Send>(
        &self,
        kind: Kind,
        revision: Option<Revision>,
        fut: impl Future<Output = std::result::Result<T, etcd_client::Error>> + Send,
    ) -> Result<T> {
        let limit = self.options.request_timeout + Duration::from_secs(1);
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let outcome = self
            .runtime
            .block_on(async { tokio::time::timeout(limit, fut).await })
            .map_err(|detail| Error::Unavailable {
                endpoints: self.endpoints.clone(),
                detail,
            })?;
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(map_error(e, &self.endpoints, kind, revision)),
            Err(_) => {
                let detail = format!("no answer within {limit:?}");
                Err(match kind {
                    Kind::Commit => Error::CommitIndeterminate {
                        endpoints: self.endpoints.clone(),
                        detail,
                    },
                    Kind::Read => Error::Unavailable {
                        endpoints: self.endpoints.clone(),
                        detail,
                    },
                })
            }
        }
    }

    /// One key at `revision`: its value and mod revision (`None` when absent).
    pub(crate) fn get_at(
        &self,
        key: Vec<u8>,
        revision: Revision,
    ) -> Result<Option<(Vec<u8>, i64)>> {
        let mut kv = self.kv();
        let mut resp = self.run(Kind::Read, Some(revision), async move {
            kv.get(key, Some(GetOptions::new().with_revision(revision.0)))
                .await
        })?;
        self.count_keys(resp.kvs().len());
        Ok(resp
            .take_kvs()
            .into_iter()
            .next()
            .map(|kv| (kv.value().to_vec(), kv.mod_revision())))
    }

    /// The keys of `[start, end)` at `revision`, in key order, read in pages.
    pub(crate) fn range_at(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        revision: Revision,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let mut out = Vec::new();
        let mut from = start;
        loop {
            let mut kv = self.kv();
            let opts = GetOptions::new()
                .with_range(end.clone())
                .with_revision(revision.0)
                .with_limit(RANGE_PAGE_KEYS);
            let key = from.clone();
            let mut resp = self.run(Kind::Read, Some(revision), async move {
                kv.get(key, Some(opts)).await
            })?;
            let more = resp.more();
            let kvs = resp.take_kvs();
            self.count_keys(kvs.len());
            let Some(last) = kvs.last() else {
                return Ok(out);
            };
            from = crate::keys::successor(last.key().to_vec());
            out.extend(kvs.into_iter().map(|kv| {
                let (k, v) = kv.into_key_value();
                (k, v)
            }));
            if !more {
                return Ok(out);
            }
        }
    }

    /// One page of `[start, end)` at `revision`: at most `limit` keys, from
    /// the first (or, `descending`, the last) key, and whether the range
    /// holds more. A descending read is sorted by the cluster, which reads
    /// the whole range to do it (etcd pushes a limit down only for
    /// ascending key order): a reader of a table's last key pays for the
    /// table's size on the server (ARCHITECTURE.md, "The storage seam").
    pub(crate) fn range_page_at(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        revision: Revision,
        limit: i64,
        descending: bool,
    ) -> Result<(Vec<crate::txn::Entry>, bool)> {
        let mut kv = self.kv();
        let mut opts = GetOptions::new()
            .with_range(end)
            .with_revision(revision.0)
            .with_limit(limit);
        if descending {
            opts = opts.with_sort(SortTarget::Key, SortOrder::Descend);
        }
        let mut resp = self.run(Kind::Read, Some(revision), async move {
            kv.get(start, Some(opts)).await
        })?;
        let more = resp.more();
        self.count_keys(resp.kvs().len());
        let page = resp
            .take_kvs()
            .into_iter()
            .map(|kv| kv.into_key_value())
            .collect();
        Ok((page, more))
    }

    /// At most `limit` keys of `table` after `after` (all from its first
    /// with `None`), in key order, at `revision`; the table's own keys
    /// (without the etcd key's header), keys only.
    pub(crate) fn table_keys_after(
        &self,
        table: &str,
        after: Option<&[u8]>,
        revision: Revision,
        limit: usize,
    ) -> Result<Vec<Vec<u8>>> {
        let (table_start, end) = self.layout.data_range(table);
        let start = match after {
            Some(k) => crate::keys::successor(self.layout.data(table, k)),
            None => table_start,
        };
        let header = self.layout.data_header_len(table);
        let mut kv = self.kv();
        let opts = GetOptions::new()
            .with_range(end)
            .with_revision(revision.0)
            .with_limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .with_keys_only();
        let mut resp = self.run(Kind::Read, Some(revision), async move {
            kv.get(start, Some(opts)).await
        })?;
        self.count_keys(resp.kvs().len());
        Ok(resp
            .take_kvs()
            .into_iter()
            .map(|kv| {
                let (mut k, _) = kv.into_key_value();
                k.split_off(header.min(k.len()))
            })
            .collect())
    }

    /// Waits until `key` changes after `after` (a watch from the next
    /// revision), at most `wait` (less than the request timeout); returns
    /// early too when the watch is canceled or its revision compacted, or
    /// within [`STOP_POLL`] of `stop` being set. A wake-up only: the caller
    /// reads what changed at a new revision.
    pub(crate) fn wait_for_change(
        &self,
        key: Vec<u8>,
        after: Revision,
        wait: Duration,
        stop: &AtomicBool,
    ) -> Result<()> {
        let mut watch = self.client.watch_client();
        let start = after.0 + 1;
        self.run(Kind::Read, None, async move {
            let changed = async {
                let opts = WatchOptions::new().with_start_revision(start);
                let mut stream = watch.watch(key, Some(opts)).await?;
                loop {
                    if stop.load(Ordering::Acquire) {
                        return Ok(());
                    }
                    // `message` is cancel safe: a timeout loses no answer.
                    let Ok(message) = tokio::time::timeout(STOP_POLL, stream.message()).await
                    else {
                        continue;
                    };
                    match message? {
                        Some(m) if m.created() && m.events().is_empty() && !m.canceled() => {}
                        _ => return Ok(()),
                    }
                }
            };
            tokio::time::timeout(wait, changed).await.unwrap_or(Ok(()))
        })
    }

    /// Several reads in one request: a read-only `Txn` whose range
    /// operations (`TxnOp::get`) are all made at `revision` (`None`: at the
    /// cluster's newest revision, a linearizable read). Returns the
    /// revision they were read at and, for each operation in order, its
    /// keys with their values and mod revisions and whether its range
    /// holds more than it returned.
    pub(crate) fn read_txn(
        &self,
        reads: Vec<(Vec<u8>, GetOptions)>,
        revision: Option<Revision>,
    ) -> Result<(Revision, Vec<ReadAnswer>)> {
        let ops = reads
            .into_iter()
            .map(|(key, opts)| {
                let opts = match revision {
                    Some(r) => opts.with_revision(r.0),
                    None => opts,
                };
                TxnOp::get(key, Some(opts))
            })
            .collect::<Vec<_>>();
        let n = ops.len();
        let mut kv = self.kv();
        let resp = self.run(Kind::Read, revision, async move {
            kv.txn(Txn::new().and_then(ops)).await
        })?;
        let at = header_revision(resp.header(), &self.endpoints)?;
        let mut answers = Vec::with_capacity(n);
        for op in resp.op_responses() {
            let etcd_client::TxnOpResponse::Get(mut get) = op else {
                continue;
            };
            let more = get.more();
            self.count_keys(get.kvs().len());
            let kvs = get
                .take_kvs()
                .into_iter()
                .map(|kv| {
                    let m = kv.mod_revision();
                    let (k, v) = kv.into_key_value();
                    (k, v, m)
                })
                .collect();
            answers.push(ReadAnswer { kvs, more });
        }
        if answers.len() != n {
            return Err(Error::Etcd {
                endpoints: self.endpoints.clone(),
                detail: format!(
                    "a read of {n} ranges in one Txn was answered with {} ranges",
                    answers.len()
                ),
            });
        }
        Ok((at, answers))
    }

    /// How many keys `[start, end)` holds at `revision`.
    pub(crate) fn count_at(&self, start: Vec<u8>, end: Vec<u8>, revision: Revision) -> Result<i64> {
        let mut kv = self.kv();
        let opts = GetOptions::new()
            .with_range(end)
            .with_revision(revision.0)
            .with_count_only();
        let resp = self.run(Kind::Read, Some(revision), async move {
            kv.get(start, Some(opts)).await
        })?;
        Ok(resp.count())
    }

    /// Sends one commit: `Ok(Some(revision))` when the compares held and
    /// the operations were applied, `Ok(None)` when a compare failed.
    pub(crate) fn send_txn(
        &self,
        compares: Vec<Compare>,
        ops: Vec<TxnOp>,
        read_revision: Revision,
    ) -> Result<Option<Revision>> {
        let mut kv = self.kv();
        let resp = self.run(Kind::Commit, Some(read_revision), async move {
            kv.txn(Txn::new().when(compares).and_then(ops)).await
        })?;
        if !resp.succeeded() {
            return Ok(None);
        }
        header_revision(resp.header(), &self.endpoints).map(Some)
    }

    /// Reads the prefix's format record; writes it on an empty prefix.
    fn check_format(&self) -> Result<()> {
        let key = self.layout.meta();
        let record = format!("cairndb-etcd format {FORMAT_VERSION}");
        let deadline = Instant::now() + self.options.request_timeout;
        loop {
            let revision = self.current_revision()?;
            match self.get_at(key.clone(), revision)? {
                Some((value, _)) => return self.parse_format(&value),
                None => {
                    let put = TxnOp::put(key.clone(), record.clone(), None);
                    let absent = Compare::mod_revision(key.clone(), CompareOp::Equal, 0);
                    if self.send_txn(vec![absent], vec![put], revision)?.is_some() {
                        return Ok(());
                    }
                    // Another client wrote it first: read theirs.
                    if Instant::now() > deadline {
                        return Err(self.format_error("the format record keeps changing"));
                    }
                }
            }
        }
    }

    fn parse_format(&self, value: &[u8]) -> Result<()> {
        let text = String::from_utf8_lossy(value);
        if let Some(detail) = text.strip_prefix(MIGRATION_MARKER) {
            return Err(Error::MigrationIncomplete {
                prefix: self.layout.prefix().to_string(),
                detail: detail.to_string(),
            });
        }
        let version = text
            .strip_prefix("cairndb-etcd format ")
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| {
                self.format_error(&format!(
                    "its metadata key holds {text:?}, not a cairndb-etcd format record"
                ))
            })?;
        if version > FORMAT_VERSION {
            return Err(self.format_error(&format!(
                "written in format {version} by a newer cairndb-etcd; this one reads format {FORMAT_VERSION}"
            )));
        }
        if version == 0 {
            return Err(self.format_error("format 0 does not exist"));
        }
        Ok(())
    }

    fn format_error(&self, detail: &str) -> Error {
        Error::Format {
            prefix: self.layout.prefix().to_string(),
            detail: detail.to_string(),
        }
    }
}

impl std::fmt::Debug for EtcdDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdDatabase")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.layout.prefix())
            .finish()
    }
}

/// One range's answer in [`EtcdDatabase::read_txn`].
#[derive(Debug, Default)]
pub(crate) struct ReadAnswer {
    /// Key, value, mod revision; in key order.
    pub(crate) kvs: Vec<(Vec<u8>, Vec<u8>, i64)>,
    /// The range holds more keys than were returned (its limit).
    pub(crate) more: bool,
}

/// What a request was, to name its failure: a lost read changed nothing, a
/// lost commit may have been applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Commit,
}

fn header_revision(
    header: Option<&etcd_client::ResponseHeader>,
    endpoints: &[String],
) -> Result<Revision> {
    header
        .map(|h| Revision(h.revision()))
        .ok_or_else(|| Error::Etcd {
            endpoints: endpoints.to_vec(),
            detail: "a response without a header".into(),
        })
}

/// Names an etcd client error by what the caller can do about it.
fn map_error(
    e: etcd_client::Error,
    endpoints: &[String],
    kind: Kind,
    revision: Option<Revision>,
) -> Error {
    let lost = |detail: String| match kind {
        Kind::Commit => Error::CommitIndeterminate {
            endpoints: endpoints.to_vec(),
            detail,
        },
        Kind::Read => Error::Unavailable {
            endpoints: endpoints.to_vec(),
            detail,
        },
    };
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            let message = status.message().to_string();
            if message.contains("required revision has been compacted") {
                if let Some(revision) = revision {
                    return Error::Compacted { revision };
                }
            }
            // The NOSPACE alarm (the backend is over its quota): a
            // write refused before it was proposed, whichever its kind.
            if message.contains("database space exceeded") {
                return Error::QuotaExceeded {
                    endpoints: endpoints.to_vec(),
                    detail: message,
                };
            }
            use tonic::Code;
            match status.code() {
                // Refused before anything was proposed: nothing was applied.
                Code::Unavailable if message.contains("no leader") => Error::Unavailable {
                    endpoints: endpoints.to_vec(),
                    detail: message,
                },
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown => {
                    lost(format!("{:?}: {message}", status.code()))
                }
                _ => Error::Etcd {
                    endpoints: endpoints.to_vec(),
                    detail: format!("{:?}: {message}", status.code()),
                },
            }
        }
        etcd_client::Error::TransportError(t) => lost(format!("transport: {t}")),
        etcd_client::Error::IoError(io) => lost(format!("i/o: {io}")),
        other => Error::Etcd {
            endpoints: endpoints.to_vec(),
            detail: other.to_string(),
        },
    }
}

/// The pause before attempt `attempt + 1`: 1, 2, 4 … 64 ms, jittered to
/// between half and all of it so that conflicting clients drift apart.
fn backoff(attempt: u32) -> Duration {
    let base_us = 1000u64 << attempt.min(6);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    let jitter = (nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 33) % (base_us / 2 + 1);
    Duration::from_micros(base_us / 2 + jitter)
}
