//! Write groups: the one-operation commits of several threads run by one of
//! them in one write transaction (RocksDB's write groups, group commit one
//! step earlier).
//!
//! A thread with a one-operation commit (an event append: see "Who uses
//! them") that finds the writer lock free takes it and leads a group: it
//! runs its own operation, then every operation other threads queued
//! meanwhile (until none is queued, or [`MAX_GROUP`]), in one transaction,
//! commits once and tells each follower how its operation ended. A thread
//! that finds the lock taken queues its operation and waits — spinning
//! briefly (one thread at a time), then asleep — for its outcome, or for
//! the lock to come free with its operation still queued (it came after
//! the leader's last look): it then takes the operation back and tries to
//! lead. A leader that lets the lock go nudges the first operation still
//! queued; a writer outside the groups nudges nobody, so a sleeping
//! follower also looks again after [`FOLLOWER_SLEEP`]. No operation waits
//! on a group that will not take it.
//!
//! Each operation must leave the transaction as it found it when it fails
//! (an event append checks before it writes; see `grouped_append` for the
//! one exception, a format upgrade any append makes): a failure that may
//! have left part of a change ([`Ran::Broken`]) ends the group without a
//! commit, and every operation of it runs again alone — the failure may
//! have come from the group's earlier changes. So does every operation of a
//! group whose commit failed (the group's data may be what failed it):
//! running again gives each caller its own outcome and error, from its own
//! commit. Only the group's first operation (the leader's) meets its own
//! failure in the group: nothing ran before it. Operations of one group
//! share one commit, hence one durability: the two durabilities queue
//! apart, and a leader letting the lock go nudges the head of both.
//!
//! For [`AFFINITY_NS`] after a leader lets the lock go, other threads queue
//! rather than lead, so that a thread writing in a loop leads again and its
//! group runs where the last one's data is, in its core's cache.
//!
//! Who uses them: `EventStore::append`. Two threads appending one event per
//! commit on two cores did 0.66–0.70 of one thread's events per second
//! (each commit's data moved to the other core's cache, and each paid a
//! commit); in groups, 0.82–0.87 (BENCHMARKS.md). Document writes were
//! measured in groups too (`doc_writes` with two threads, the bench's
//! tiedot workload) and went 3–10 % slower: a follower's write must note
//! how to undo each change, and its index work, most of a document write,
//! gains nothing from sharing a commit.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use super::WriteTransaction;
use crate::commit::{lock, spin_while, Durability, Shared};
use crate::error::{CoreError, Result};
use crate::ids::TxnId;

/// How long a follower spins for its group's outcome before it sleeps
/// (a group of one-operation commits takes tens of microseconds).
const FOLLOWER_SPIN: Duration = Duration::from_micros(200);

/// How long after a leader let the lock go the next group is kept for it:
/// a thread that writes in a loop comes back sooner, and its group then
/// runs where the last one's data is, in its core's cache (leadership
/// passing between cores each group cost about 2 µs a group of two).
const AFFINITY_NS: u64 = 5_000;

/// How long a sleeping follower sleeps before it looks at the writer lock
/// again (a leader nudges it sooner; see `Groups::follow`).
const FOLLOWER_SLEEP: Duration = Duration::from_millis(1);

/// How an operation ended in the group's transaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// It changed something: the group commits.
    Changed,
    /// It changed nothing (an idempotent repeat, or a failed check that
    /// wrote nothing): its outcome stands whatever the group does.
    Unchanged,
    /// It failed and may have left part of a change: the group must not
    /// commit. Its outcome (the error) stands if it was the group's first
    /// operation (the leader's own); otherwise it runs again alone, as
    /// every other operation of the group does.
    Broken,
}

/// An operation run in the group's transaction: it returns how it ended
/// and its outcome (the caller's result type, boxed).
pub(crate) type Run<'a> = dyn Fn(&WriteTransaction) -> (Ran, Box<dyn Any + Send>) + 'a;

/// An operation another thread may run (owning what it needs).
pub(crate) type Op = Arc<dyn Fn(&WriteTransaction) -> (Ran, Box<dyn Any + Send>) + Send + Sync>;

/// What became of an operation sent to a group.
pub(crate) enum Grouped {
    /// It ran; its outcome stands. `Some((commit, operations))`: the group
    /// committed as `commit`, with this many operations in it; `None`: no
    /// commit was needed (no operation of the group changed anything).
    Done(Box<dyn Any + Send>, Option<(TxnId, usize)>),
    /// The commit of a group of this operation alone (led by this thread)
    /// failed: its error.
    CommitFailed(CoreError),
    /// Nothing of it stands (an operation broke the group, the group's
    /// commit failed, or its leader could not begin): run it alone.
    Alone,
}

/// A follower's operation and the word its leader leaves.
struct Slot {
    op: Op,
    word: Mutex<Word>,
    /// Set (after `word.outcome`) when the outcome is there.
    done: AtomicBool,
    woken: Condvar,
}

#[derive(Default)]
struct Word {
    outcome: Option<Grouped>,
    /// The follower sleeps on `woken` (the leader then wakes it).
    asleep: bool,
    /// A leader that released the writer lock found this operation still
    /// queued: the follower should take it back and lead.
    nudged: bool,
}

impl Slot {
    fn new(op: Op) -> Arc<Slot> {
        Arc::new(Slot {
            op,
            word: Mutex::new(Word::default()),
            done: AtomicBool::new(false),
            woken: Condvar::new(),
        })
    }

    fn tell(&self, outcome: Grouped) {
        let mut w = lock(&self.word);
        w.outcome = Some(outcome);
        self.done.store(true, Ordering::Release);
        if w.asleep {
            self.woken.notify_one();
        }
    }

    fn nudge(&self) {
        let mut w = lock(&self.word);
        w.nudged = true;
        if w.asleep {
            self.woken.notify_one();
        }
    }

    /// The leader's word, once it took the operation (it will come).
    fn wait(&self) -> Grouped {
        let mut w = lock(&self.word);
        loop {
            if let Some(o) = w.outcome.take() {
                return o;
            }
            w.asleep = true;
            w = self.woken.wait(w).unwrap_or_else(|e| e.into_inner());
            w.asleep = false;
        }
    }
}

/// How a follower's wait ended.
enum Follow {
    /// Its leader's word.
    Told(Grouped),
    /// Taken back from the queue with the writer lock free.
    Retry,
}

/// Operations queued for the writer lock's holder.
type Queue = Vec<Arc<Slot>>;

/// The write groups of one database.
pub(crate) struct Groups {
    /// One queue per durability: `Immediate`, `None`.
    queues: [Mutex<Queue>; 2],
    /// Followers spinning for their outcome.
    spinners: AtomicUsize,
    /// Groups committed with followers, and the operations of those.
    counts: [AtomicU64; 2],
    /// The thread (`thread_no`) that led the last group, and when it let
    /// the lock go (nanoseconds since `epoch`): see [`AFFINITY_NS`].
    last_leader: AtomicU64,
    released_at: AtomicU64,
    epoch: std::time::Instant,
}

impl Default for Groups {
    fn default() -> Self {
        Groups {
            queues: Default::default(),
            spinners: AtomicUsize::new(0),
            counts: Default::default(),
            last_leader: AtomicU64::new(0),
            released_at: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
        }
    }
}

/// This thread's number (from 1) among the threads that wrote in groups.
fn thread_no() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NO: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NO.with(|n| *n)
}

impl std::fmt::Debug for Groups {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Groups").finish_non_exhaustive()
    }
}

/// The followers a leader took: each one not told otherwise when the
/// group ends (also when the leader unwinds) is told to run alone.
struct Followers(Vec<Arc<Slot>>);

impl Drop for Followers {
    fn drop(&mut self) {
        for s in self.0.drain(..) {
            s.tell(Grouped::Alone);
        }
    }
}

impl Groups {
    /// Runs `op` in a write group of durability `durability`: as its
    /// leader, or as a follower of another thread's.
    pub(crate) fn run(
        &self,
        shared: &Arc<Shared>,
        durability: Durability,
        own: &Run<'_>,
        to_queue: &dyn Fn() -> Op,
    ) -> Grouped {
        let queue = &self.queues[usize::from(durability == Durability::None)];
        let mut slot = None;
        let me = thread_no();
        loop {
            // (While the next group is kept for the last leader, queue for
            // it.)
            let begun = if self.kept_for_other(me) {
                Ok(None)
            } else {
                WriteTransaction::try_begin(shared.clone())
            };
            match begun {
                // (Begun alone, the operation meets the error itself.)
                Err(_) => return Grouped::Alone,
                Ok(Some(txn)) => {
                    let outcome = self.lead(txn, durability, own, queue);
                    self.last_leader.store(me, Ordering::Relaxed);
                    self.released_at.store(self.now(), Ordering::Release);
                    // The lock is free: an operation queued after the
                    // group's last look leads the next group — in either
                    // queue (a follower of the other durability is never
                    // drained by this one's leaders).
                    for q in &self.queues {
                        let next = lock(q).first().cloned();
                        if let Some(next) = next {
                            next.nudge();
                        }
                    }
                    return outcome;
                }
                Ok(None) => {}
            }
            // (The operation is made owned only now: a thread writing
            // alone never copies its arguments.)
            let slot = slot.get_or_insert_with(|| Slot::new(to_queue()));
            lock(queue).push(slot.clone());
            match self.follow(shared, queue, slot, me) {
                Follow::Told(outcome) => return outcome,
                // Taken back with the lock free: try again.
                Follow::Retry => {}
            }
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether the next group is kept for a thread other than `me` (see
    /// [`AFFINITY_NS`]).
    fn kept_for_other(&self, me: u64) -> bool {
        let last = self.last_leader.load(Ordering::Relaxed);
        last != 0
            && last != me
            && self.now()
                < self
                    .released_at
                    .load(Ordering::Acquire)
                    .saturating_add(AFFINITY_NS)
    }

    /// Waits for the outcome of `slot` (queued), or takes it back from the
    /// queue when the writer lock comes free with it still there (and the
    /// next group is not kept for another thread).
    fn follow(&self, shared: &Shared, queue: &Mutex<Queue>, slot: &Arc<Slot>, me: u64) -> Follow {
        let free = || !shared.writer_busy.load(Ordering::Acquire) && !self.kept_for_other(me);
        let take_back = || {
            let mut q = lock(queue);
            match q.iter().position(|s| Arc::ptr_eq(s, slot)) {
                Some(i) => {
                    q.remove(i);
                    true
                }
                None => false,
            }
        };
        // One follower spins at a time (as one waiter for the writer lock
        // does): with more threads than cores, spinners would take the
        // core the leader needs.
        let (mut taken_back, mut taken) = (false, false);
        if self.spinners.fetch_add(1, Ordering::AcqRel) == 0 {
            spin_while(FOLLOWER_SPIN, || {
                if slot.done.load(Ordering::Acquire) {
                    return false;
                }
                // (Once a leader took it, only its word is awaited.)
                if !taken && free() {
                    taken_back = take_back();
                    taken = !taken_back;
                }
                !taken_back
            });
        }
        self.spinners.fetch_sub(1, Ordering::AcqRel);
        if taken_back {
            return Follow::Retry;
        }
        // Asleep until told, or nudged by a leader that let the lock go
        // with this operation queued. A writer outside the groups (an
        // explicit transaction, a spill) nudges nobody: the sleep is
        // bounded, and the lock checked again after it.
        let mut w = lock(&slot.word);
        loop {
            if let Some(o) = w.outcome.take() {
                return Follow::Told(o);
            }
            let nudged = std::mem::take(&mut w.nudged);
            let lock_free = nudged || !shared.writer_busy.load(Ordering::Acquire);
            let kept = lock_free && self.kept_for_other(me);
            if lock_free && !kept {
                drop(w);
                if take_back() {
                    return Follow::Retry;
                }
                // A leader took it: its word will come.
                return Follow::Told(slot.wait());
            }
            // (The lock free but the next group kept for the last leader:
            // look again once that ends.)
            let sleep = if kept {
                w.nudged = nudged;
                Duration::from_nanos(AFFINITY_NS)
            } else {
                FOLLOWER_SLEEP
            };
            w.asleep = true;
            w = match slot.woken.wait_timeout(w, sleep) {
                Ok((w, _)) => w,
                Err(e) => e.into_inner().0,
            };
            w.asleep = false;
        }
    }

    /// Groups committed with more than one operation, and the operations
    /// of those groups, since the database was opened.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn counts(&self) -> (u64, u64) {
        (
            self.counts[0].load(Ordering::Relaxed),
            self.counts[1].load(Ordering::Relaxed),
        )
    }

    /// Runs `ops` as one group led by this thread, as if all but the
    /// first had been queued by other threads: their outcomes, in order
    /// (tests).
    #[cfg(test)]
    pub(crate) fn run_as_group(
        &self,
        shared: &Arc<Shared>,
        durability: Durability,
        ops: Vec<Op>,
    ) -> Result<Vec<Grouped>> {
        let mut ops = ops.into_iter();
        let Some(first) = ops.next() else {
            return Ok(Vec::new());
        };
        let slots: Vec<Arc<Slot>> = ops.map(Slot::new).collect();
        let queue = Mutex::new(slots.clone());
        let txn = WriteTransaction::begin(shared.clone())?;
        let mut out = vec![self.lead(txn, durability, &*first, &queue)];
        // Operations the leader did not take (in `run`, nudged: they lead
        // the next group).
        for s in lock(&queue).drain(..) {
            s.tell(Grouped::Alone);
        }
        for s in slots {
            out.push(s.wait());
        }
        Ok(out)
    }

    /// The leader's part: runs its own operation in `txn`, then those
    /// queued in `queue` until none is (or the group is full), commits and
    /// tells their threads.
    fn lead(
        &self,
        txn: WriteTransaction,
        durability: Durability,
        own: &Run<'_>,
        queue: &Mutex<Queue>,
    ) -> Grouped {
        txn.set_durability(durability);
        let (mine, out) = own(&txn);
        if mine == Ran::Broken {
            // (Dropping `txn` aborts.)
            return Grouped::Done(out, None);
        }
        let mut f = Followers(Vec::new());
        let mut outs = Vec::new();
        let mut changed = mine == Ran::Changed;
        while f.0.len() < MAX_GROUP {
            let taken = {
                let mut q = lock(queue);
                let n = q.len().min(MAX_GROUP - f.0.len());
                q.drain(..n).collect::<Vec<_>>()
            };
            if taken.is_empty() {
                break;
            }
            f.0.extend(taken);
            while outs.len() < f.0.len() {
                let (ran, o) = (f.0[outs.len()].op)(&txn);
                match ran {
                    Ran::Changed => changed = true,
                    Ran::Unchanged => {}
                    // It failed over the group's earlier changes, which are
                    // gone with the transaction: it and every other
                    // operation (the leader's too) run alone (`f`'s drop
                    // tells them), so its error, if it has one, is its own.
                    Ran::Broken => return Grouped::Alone,
                }
                outs.push(o);
            }
        }
        if !changed {
            txn.abort();
            for (s, o) in f.0.drain(..).zip(outs) {
                s.tell(Grouped::Done(o, None));
            }
            return Grouped::Done(out, None);
        }
        match txn.commit() {
            Ok(id) => {
                let n = f.0.len() + 1;
                if n > 1 {
                    self.counts[0].fetch_add(1, Ordering::Relaxed);
                    self.counts[1].fetch_add(n as u64, Ordering::Relaxed);
                }
                for (s, o) in f.0.drain(..).zip(outs) {
                    s.tell(Grouped::Done(o, Some((id, n))));
                }
                Grouped::Done(out, Some((id, n)))
            }
            // Alone (then its own operation changed something), the
            // commit was the leader's own: its error.
            Err(e) if f.0.is_empty() => Grouped::CommitFailed(e),
            // The group's data may be what failed it: every operation runs
            // again alone (the followers: `f`'s drop), each meeting its own
            // outcome. (A commit that fails after it was published — its
            // flush — has poisoned the handle: those runs fail with
            // `Poisoned`, never write twice.)
            Err(_) => Grouped::Alone,
        }
    }
}

/// The most operations one group takes (the rest wait for the next).
const MAX_GROUP: usize = 64;

/// Whether a write transaction was left unable to commit by a change that
/// failed part-way.
pub(crate) fn is_broken(txn: &WriteTransaction) -> bool {
    txn.broken_cause().is_some()
}

/// Unboxes an outcome of type `R` (the type its operation returned).
pub(crate) fn unbox<R: 'static>(b: Box<dyn Any + Send>) -> Result<R> {
    b.downcast::<R>()
        .map(|r| *r)
        .map_err(|_| CoreError::Internal("a write group's outcome has another type".into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::table::ReadableTable;
    use crate::{Database, TableDefinition};

    const T: TableDefinition<&str, u64> = TableDefinition::new("t");

    /// An operation that inserts `key` (or fails with `fail`, leaving the
    /// transaction as it was, or broken after a write).
    fn put(key: &'static str, v: u64, fail: Option<Ran>) -> Op {
        Arc::new(move |txn: &WriteTransaction| {
            let r = (|| -> Result<()> {
                if fail == Some(Ran::Unchanged) {
                    // Refused before any change (not even the table's
                    // creation).
                    return Err(CoreError::Internal("refused on purpose".into()));
                }
                let mut t = txn.open_table(T)?;
                t.insert(key, v)?;
                if fail == Some(Ran::Broken) {
                    // A change, then a failure: the group must not commit
                    // it.
                    return Err(CoreError::Internal("broken on purpose".into()));
                }
                Ok(())
            })();
            let ran = match (&r, fail) {
                (Ok(()), _) => Ran::Changed,
                (Err(_), Some(f)) => f,
                (Err(_), None) => Ran::Broken,
            };
            // (The message alone: `Internal` errors add a request to report.)
            let r = r.map_err(|e| match e {
                CoreError::Internal(m) => m,
                e => e.to_string(),
            });
            (ran, Box::new(r) as Box<dyn Any + Send>)
        })
    }

    fn read(db: &Database) -> Vec<(String, u64)> {
        let r = db.begin_read().unwrap_or_else(|e| panic!("{e}"));
        let Ok(t) = r.open_table(T) else {
            return Vec::new();
        };
        t.iter()
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|kv| {
                let (k, v) = kv.unwrap_or_else(|e| panic!("{e}"));
                (k.value().to_string(), v.value())
            })
            .collect()
    }

    fn outcome(g: &Grouped) -> String {
        match g {
            Grouped::Done(o, c) => {
                let r = o
                    .downcast_ref::<std::result::Result<(), String>>()
                    .cloned()
                    .unwrap_or_else(|| Err("another type".into()));
                format!("{r:?} committed={}", c.is_some())
            }
            Grouped::CommitFailed(e) => format!("commit failed: {e}"),
            Grouped::Alone => "alone".into(),
        }
    }

    /// Runs `put("a", 1, ..), put("b", 2, ..), put("c", 3, ..)` as one
    /// group, `a` and `b` failing as `a_b_fail` says (and `c` as `b` when
    /// `a` fails): the database, the commits the group made, and each
    /// operation's outcome.
    fn group_of_three(
        durability: Durability,
        a_b_fail: (Option<Ran>, Option<Ran>),
    ) -> (tempfile::TempDir, Database, u64, Vec<String>) {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let db = Database::create(dir.path().join("g.cairn")).unwrap_or_else(|e| panic!("{e}"));
        let before = db.shared.shown();
        let ops = vec![
            put("a", 1, a_b_fail.0),
            put("b", 2, a_b_fail.1),
            put(
                "c",
                3,
                if a_b_fail.0.is_some() {
                    a_b_fail.1
                } else {
                    None
                },
            ),
        ];
        let out = Groups::default()
            .run_as_group(&db.shared, durability, ops)
            .unwrap_or_else(|e| panic!("{e}"));
        let commits = db.shared.shown().0 - before.0;
        (dir, db, commits, out.iter().map(outcome).collect())
    }

    #[test]
    fn a_group_commits_its_operations_once_and_a_refused_one_leaves_nothing() {
        let (_dir, db, commits, got) =
            group_of_three(Durability::None, (None, Some(Ran::Unchanged)));
        assert_eq!(
            got,
            [
                "Ok(()) committed=true",
                "Err(\"refused on purpose\") committed=true",
                "Ok(()) committed=true",
            ]
        );
        assert_eq!(commits, 1);
        assert_eq!(read(&db), [("a".to_string(), 1), ("c".to_string(), 3)]);
    }

    #[test]
    fn a_broken_operation_ends_its_group_without_a_commit() {
        let (_dir, db, commits, got) = group_of_three(Durability::None, (None, Some(Ran::Broken)));
        // Every operation (the broken one too: it failed over the group's
        // earlier changes) must run again alone: nothing was committed.
        assert_eq!(got, ["alone", "alone", "alone"]);
        assert_eq!(commits, 0);
        assert_eq!(read(&db), []);
    }

    #[test]
    fn a_leader_whose_own_operation_breaks_takes_no_other() {
        let (_dir, db, commits, got) = group_of_three(Durability::None, (Some(Ran::Broken), None));
        // Its own failure (nothing ran before it); the others were not run.
        assert_eq!(
            got,
            [
                "Err(\"broken on purpose\") committed=false",
                "alone",
                "alone"
            ]
        );
        assert_eq!(commits, 0);
        assert_eq!(read(&db), []);
    }

    #[test]
    fn a_group_whose_operations_change_nothing_does_not_commit() {
        let (_dir, db, commits, got) = group_of_three(
            Durability::Immediate,
            (Some(Ran::Unchanged), Some(Ran::Unchanged)),
        );
        assert!(
            got.iter().all(|g| g.ends_with("committed=false")),
            "{got:?}"
        );
        assert_eq!(commits, 0);
        assert_eq!(read(&db), []);
    }
}
