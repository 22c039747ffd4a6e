//! Subscriptions: catch-up over history, then live delivery of new commits.
//!
//! A subscription *pulls*: it reads the next batch from a fresh snapshot
//! and, once it has delivered everything committed, sleeps on the
//! database's commit notification (no polling). Because it reads committed
//! data at its own pace, a slow subscriber holds nobody up and misses
//! nothing: back-pressure is inherent, and its checkpoint (the next position
//! or version it wants) is all it needs to resume after a restart.

use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::EventResult;
use super::{
    store, Direction, EventFilter, EventRef, Position, ReadFrom, RecordedEvent, StreamVersion,
};
use crate::db::Database;

/// What a subscription delivers; `P` is its checkpoint: a [`Position`] for
/// the global log, a [`StreamVersion`] for one stream. `E` is the event: a
/// [`RecordedEvent`], or an [`EventRef`] read in place from the
/// [`Subscription::poll_borrowed`] and [`Subscription::run_borrowed`]
/// forms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubscriptionMessage<P, E = RecordedEvent> {
    /// The next event.
    Event(E),
    /// Every event committed when the subscription last looked has been
    /// delivered; what follows is live. Sent once, when first caught up.
    CaughtUp {
        /// The checkpoint at that moment (next position or version).
        checkpoint: P,
    },
}

/// Stops a running subscription from another thread.
#[derive(Debug, Clone, Default)]
pub struct SubscriptionStop(Arc<AtomicBool>);

impl SubscriptionStop {
    /// Asks the subscription to stop; a waiting `next` returns within about
    /// 50 ms.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn stopped(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

enum Target {
    All(EventFilter),
    Stream(String),
}

/// A catch-up-then-live subscription to the global log
/// (`Subscription<Position>`, from [`EventStore::subscribe_all`]) or to one
/// stream (`Subscription<StreamVersion>`, from
/// [`EventStore::subscribe_stream`]); `P` is the checkpoint's type.
/// Use it as a blocking iterator, with [`Subscription::next_timeout`], or
/// with a callback through [`Subscription::run`].
///
/// [`EventStore::subscribe_all`]: super::EventStore::subscribe_all
/// [`EventStore::subscribe_stream`]: super::EventStore::subscribe_stream
pub struct Subscription<'db, P> {
    db: &'db Database,
    target: Target,
    /// The next position (global log) or version (stream) to deliver.
    checkpoint: u64,
    /// Makes a checkpoint of the bare number (`Position` or `StreamVersion`).
    wrap: fn(u64) -> P,
    buffer: VecDeque<RecordedEvent>,
    caught_up_sent: bool,
    stop: SubscriptionStop,
    batch: usize,
}

/// How long one wait on the commit notification lasts before the stop flag
/// is looked at again.
const WAIT_SLICE: Duration = Duration::from_millis(50);

impl<'db> Subscription<'db, Position> {
    pub(crate) fn all(db: &'db Database, from: Position, filter: EventFilter) -> Self {
        Subscription::new(db, Target::All(filter), from.0, Position)
    }
}

impl<'db> Subscription<'db, StreamVersion> {
    pub(crate) fn stream(db: &'db Database, stream: &str, from: StreamVersion) -> Self {
        Subscription::new(
            db,
            Target::Stream(stream.to_string()),
            from.0,
            StreamVersion,
        )
    }
}

impl<'db, P> Subscription<'db, P> {
    fn new(db: &'db Database, target: Target, from: u64, wrap: fn(u64) -> P) -> Self {
        Subscription {
            db,
            target,
            checkpoint: from,
            wrap,
            buffer: VecDeque::new(),
            caught_up_sent: false,
            stop: SubscriptionStop::default(),
            batch: 512,
        }
    }

    /// The checkpoint to keep for resuming: the next position (global log)
    /// or version (stream) this subscription would deliver.
    pub fn checkpoint(&self) -> P {
        (self.wrap)(
            self.buffer
                .front()
                .map(|e| match self.target {
                    Target::All(_) => e.position.0,
                    Target::Stream(_) => e.version.0,
                })
                .unwrap_or(self.checkpoint),
        )
    }

    /// A handle that stops this subscription from another thread.
    pub fn stop_handle(&self) -> SubscriptionStop {
        self.stop.clone()
    }

    /// Reads the next batch into the buffer; returns the commit it read.
    fn fill(&mut self) -> EventResult<crate::ids::TxnId> {
        let buffer = &mut self.buffer;
        let (seen, _) = read_batch(
            self.db,
            &self.target,
            &mut self.checkpoint,
            self.batch,
            |e| {
                buffer.push_back(e.to_owned());
                ControlFlow::Continue(())
            },
        )?;
        Ok(seen)
    }

    /// The next message, waiting at most `timeout` for one; `Ok(None)` if
    /// none came in time or the subscription was stopped.
    pub fn next_timeout(
        &mut self,
        timeout: Duration,
    ) -> EventResult<Option<SubscriptionMessage<P>>> {
        // The buffered case first: no clock read per delivered event.
        if let Some(e) = self.buffer.pop_front() {
            return Ok(Some(SubscriptionMessage::Event(e)));
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(e) = self.buffer.pop_front() {
                return Ok(Some(SubscriptionMessage::Event(e)));
            }
            if self.stop.stopped() {
                return Ok(None);
            }
            let before = self.checkpoint;
            let seen = self.fill()?;
            if !self.buffer.is_empty() {
                continue;
            }
            if self.checkpoint != before {
                // Scanned filtered-out entries only: keep reading.
                continue;
            }
            if !self.caught_up_sent {
                self.caught_up_sent = true;
                return Ok(Some(SubscriptionMessage::CaughtUp {
                    checkpoint: (self.wrap)(self.checkpoint),
                }));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.db
                .wait_for_commit(seen, (deadline - now).min(WAIT_SLICE));
        }
    }

    /// Delivers the events committed so far to `f` without copying them
    /// (each an [`EventRef`] read in place from a snapshot's pages), in
    /// batches read each from a fresh snapshot, until caught up or for about
    /// `timeout` (a batch ends past it); if none is new, waits at most
    /// `timeout` for a commit. Returns `ControlFlow::Break` if `f` broke
    /// (the checkpoint is then past the event it broke at, and not past the
    /// next event the subscription would deliver), `Continue` once caught
    /// up, after the timeout, or when stopped. [`SubscriptionMessage::CaughtUp`]
    /// is sent once, when first caught up, as by [`Subscription::next_timeout`]
    /// — but then, if nothing was delivered, the call goes on waiting for a
    /// commit (break on it to return at once). An error leaves the
    /// checkpoint past the last event delivered.
    ///
    /// A batch's snapshot stays open while `f` runs over its events (up to
    /// 512), so a slow `f` holds back the reclaiming of pages that later
    /// commits free; keep with [`EventRef::to_owned`] what must outlive the
    /// call. Events an earlier [`Subscription::next_timeout`] buffered come
    /// first.
    ///
    /// ```
    /// use std::ops::ControlFlow;
    /// use std::time::Duration;
    /// use cairndb::events::{EventData, EventFilter, EventStore, ExpectedVersion, Position, SubscriptionMessage};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairndb::Database::create(dir.path().join("e.cairn"))?;
    /// let store = EventStore::new(&db);
    /// store.append("s", ExpectedVersion::Any, &[EventData::new("A", b"12".to_vec())])?;
    /// let mut sub = store.subscribe_all(Position(0), EventFilter::all());
    /// let mut seen = Vec::new();
    /// sub.poll_borrowed(Duration::from_millis(10), |m| {
    ///     if let SubscriptionMessage::Event(e) = m {
    ///         seen.push((e.position.0, e.data.len()));
    ///     }
    ///     ControlFlow::Continue(())
    /// })?;
    /// assert_eq!(seen, [(0, 2)]);
    /// assert_eq!(sub.checkpoint(), Position(1));
    /// # Ok::<(), cairndb::Error>(())
    /// ```
    pub fn poll_borrowed(
        &mut self,
        timeout: Duration,
        mut f: impl FnMut(SubscriptionMessage<P, EventRef<'_>>) -> ControlFlow<()>,
    ) -> EventResult<ControlFlow<()>> {
        let mut delivered = !self.buffer.is_empty();
        while let Some(e) = self.buffer.pop_front() {
            if f(SubscriptionMessage::Event(e.as_event_ref())).is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        let deadline = Instant::now() + timeout;
        loop {
            if self.stop.stopped() {
                return Ok(ControlFlow::Continue(()));
            }
            let before = self.checkpoint;
            let (seen, flow) = read_batch(
                self.db,
                &self.target,
                &mut self.checkpoint,
                self.batch,
                |e| {
                    delivered = true;
                    f(SubscriptionMessage::Event(e))
                },
            )?;
            if flow.is_break() {
                return Ok(flow);
            }
            if self.checkpoint != before {
                // A batch read (or only filtered-out entries): read on,
                // unless that has taken the time given.
                if delivered && Instant::now() >= deadline {
                    return Ok(ControlFlow::Continue(()));
                }
                continue;
            }
            if !self.caught_up_sent {
                self.caught_up_sent = true;
                let checkpoint = (self.wrap)(self.checkpoint);
                if f(SubscriptionMessage::CaughtUp { checkpoint }).is_break() {
                    return Ok(ControlFlow::Break(()));
                }
            }
            let now = Instant::now();
            if delivered || now >= deadline {
                return Ok(ControlFlow::Continue(()));
            }
            self.db
                .wait_for_commit(seen, (deadline - now).min(WAIT_SLICE));
        }
    }

    /// [`Subscription::run`] without copies: delivers messages to `f`
    /// ([`Subscription::poll_borrowed`]'s events read in place) until it
    /// returns `ControlFlow::Break` or the subscription is stopped. Returns
    /// the checkpoint to resume from.
    pub fn run_borrowed(
        &mut self,
        mut f: impl FnMut(SubscriptionMessage<P, EventRef<'_>>) -> ControlFlow<()>,
    ) -> EventResult<P> {
        loop {
            if self.poll_borrowed(WAIT_SLICE, &mut f)?.is_break() || self.stop.stopped() {
                return Ok(self.checkpoint());
            }
        }
    }

    /// Delivers messages to `f` until it returns `ControlFlow::Break`, the
    /// subscription is stopped ([`Subscription::stop_handle`]), or an error
    /// occurs. Returns the checkpoint to resume from.
    pub fn run(
        &mut self,
        mut f: impl FnMut(SubscriptionMessage<P>) -> ControlFlow<()>,
    ) -> EventResult<P> {
        loop {
            let flow = match self.next_timeout(WAIT_SLICE)? {
                Some(m) => f(m),
                None if self.stop.stopped() => ControlFlow::Break(()),
                None => ControlFlow::Continue(()),
            };
            if flow.is_break() {
                return Ok(self.checkpoint());
            }
        }
    }
}

/// Reads the next batch of `target` from `checkpoint` in a fresh snapshot of
/// `db`, handing each event to `visit` read in place until it breaks, and
/// moves `checkpoint` past what was read. Returns the commit it read and
/// whether `visit` broke.
fn read_batch(
    db: &Database,
    target: &Target,
    checkpoint: &mut u64,
    batch: usize,
    mut visit: impl FnMut(EventRef<'_>) -> ControlFlow<()>,
) -> EventResult<(crate::ids::TxnId, ControlFlow<()>)> {
    let r = db.begin_read()?;
    let seen = r.txn_id();
    let mut flow = ControlFlow::Continue(());
    match target {
        Target::All(filter) => {
            let from = *checkpoint;
            // Moved past each event before it is handed on, so that an
            // error later in the batch does not hand it on again; then past
            // what the read scanned (entries the filter skipped).
            let end = store::read_all(
                &r,
                ReadFrom::At(Position(from)),
                Direction::Forward,
                batch,
                filter,
                (batch as u64) * 16,
                |e| {
                    *checkpoint = e.position.0 + 1;
                    flow = visit(e);
                    flow
                },
            )?;
            *checkpoint = end;
        }
        Target::Stream(name) => {
            match store::readable_stream(&r, name)? {
                // Not written yet (or soft-deleted): wait for it.
                None => {}
                Some(rec) => {
                    // (The record just read bounds the read: not looked up
                    // again.)
                    let lo = (*checkpoint).max(rec.first_visible());
                    store::visit_stream(
                        &r,
                        name,
                        &rec,
                        (lo, rec.next_version, Direction::Forward, batch),
                        |e| {
                            *checkpoint = e.version.0 + 1;
                            flow = visit(e);
                            flow
                        },
                    )?;
                }
            }
        }
    }
    Ok((seen, flow))
}

impl<P> Iterator for Subscription<'_, P> {
    type Item = EventResult<SubscriptionMessage<P>>;

    /// Blocks until the next message; `None` once stopped.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Ok(Some(m)) => return Some(Ok(m)),
                Ok(None) if self.stop.stopped() => return None,
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

impl<P: std::fmt::Debug> std::fmt::Debug for Subscription<'_, P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subscription")
            .field("checkpoint", &self.checkpoint())
            .finish()
    }
}
