//! Live Server-Sent Event streams: the shape an event subscription
//! (`events.rs`) and a collection's change stream (`changes.rs`) share.
//!
//! The library's waits block, so each stream runs on a thread of its own,
//! counted in the subscribers' cap (`--max-subscribers`; a stream over the
//! cap is a 503 with `Retry-After`). The thread asks its stream for the
//! next item with a wait of at most [`POLL`], so that it sees the client go
//! and the server stop within that time; a failure is sent as a last
//! `error` event carrying the problem document, and ends the stream.

use std::convert::Infallible;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;

/// One item of an SSE body.
type SseItem = Result<Event, Infallible>;

/// The longest a stream's thread waits for its next item before it looks
/// at the client and at shutdown again.
pub const POLL: Duration = Duration::from_millis(200);

/// The `Retry-After` of a stream refused for the cap, in seconds.
const SUBSCRIBER_RETRY_SECS: u64 = 5;

/// Events buffered between a stream's thread and the connection.
const BUFFERED_EVENTS: usize = 256;

/// The interval of SSE keep-alive comments on a quiet stream.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// What a stream's next step gives.
pub enum Step {
    /// An event to send.
    Send(Event),
    /// Nothing yet: look at the client and at shutdown, then ask again.
    Idle,
    /// The stream is over (its last event was sent).
    End,
}

/// A live stream's side of the connection, handed to the body that
/// [`spawn`] runs on the stream's thread.
pub struct Feed {
    st: Arc<AppState>,
    tx: mpsc::Sender<SseItem>,
}

impl Feed {
    /// The server's state.
    pub fn state(&self) -> &Arc<AppState> {
        &self.st
    }

    /// Sends what `next` gives until the client goes, the server stops,
    /// `next` ends the stream ([`Step::End`]) or fails (sent as a last
    /// `error` event with the problem document).
    pub fn pump(&self, mut next: impl FnMut() -> ApiResult<Step>) {
        loop {
            if self.st.stopping.load(Ordering::SeqCst) || self.tx.is_closed() {
                return;
            }
            let event = match next() {
                Ok(Step::Send(event)) => event,
                Ok(Step::Idle) => continue,
                Ok(Step::End) => return,
                Err(problem) => {
                    let _ = self.tx.blocking_send(Ok(Event::default()
                        .event("error")
                        .data(problem.body().to_string())));
                    return;
                }
            };
            if self.tx.blocking_send(Ok(event)).is_err() {
                return;
            }
        }
    }
}

/// A place in the subscribers' cap, given back when dropped (when the
/// stream's thread ends, however it ends).
struct Place(Arc<AppState>);

impl Place {
    /// Takes a place, or refuses with 503 and `Retry-After` when
    /// `--max-subscribers` streams are open.
    fn take(st: &Arc<AppState>) -> ApiResult<Place> {
        let max = st.config.max_subscribers;
        let before = st.metrics.subscribers.fetch_add(1, Ordering::SeqCst);
        let place = Place(st.clone());
        if before >= max as i64 {
            drop(place);
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "too_many_subscribers",
                format!(
                    "{max} live subscriptions are open (the limit, --max-subscribers); retry later"
                ),
            )
            .retry_after(SUBSCRIBER_RETRY_SECS));
        }
        Ok(place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        self.0.metrics.subscribers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Starts a live stream: takes a place in the subscribers' cap, runs
/// `body` on a thread of its own named `thread` (the place is given back
/// when it returns), and returns the SSE response its [`Feed`] writes to.
pub fn spawn(
    st: &Arc<AppState>,
    thread: &str,
    body: impl FnOnce(&Feed) + Send + 'static,
) -> ApiResult<Response> {
    let place = Place::take(st)?;
    let (tx, rx) = mpsc::channel::<SseItem>(BUFFERED_EVENTS);
    let feed = Feed { st: st.clone(), tx };
    std::thread::Builder::new()
        .name(thread.into())
        .spawn(move || {
            let _place = place;
            body(&feed);
        })
        .map_err(|e| ApiError::internal(format!("cannot start a {thread} thread: {e}")))?;
    Ok(Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}
