//! The wait of the package's blocking iterators (`Subscription`,
//! `ChangeStream`): in slices without the GIL, so that other Python
//! threads run while one waits, and Ctrl-C (Python's signal handlers) and
//! `close()` from another thread are seen between slices; a deadline
//! bounds the whole wait.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;

use crate::db::Fail;

/// A `timeout` argument in seconds as a wait's length: a number >= 0 that
/// a `Duration` holds (a negative, NaN, infinite or too large one is a
/// `ValueError`, as Python's own waits refuse what they cannot represent;
/// no timeout — `None` — is how to wait without a deadline).
pub fn timeout_arg(seconds: f64) -> PyResult<Duration> {
    match Duration::try_from_secs_f64(seconds) {
        Ok(d) if seconds >= 0.0 => Ok(d),
        _ => Err(pyo3::exceptions::PyValueError::new_err(format!(
            "a timeout must be a finite number of seconds >= 0 (or None to wait without a deadline), got {seconds}"
        ))),
    }
}

/// How long one wait without the GIL lasts before Python signals and
/// `close()` are looked at.
pub const SLICE: Duration = Duration::from_millis(100);

/// What one slice of waiting gave.
pub enum Slice<T> {
    /// An item.
    Item(T),
    /// Nothing in this slice.
    Nothing,
    /// Something that is not an item (a subscription's caught-up mark):
    /// wait again at once.
    Again,
    /// The end: nothing more will come.
    End,
}

/// Waits for an item at most `timeout` (`None`: without a deadline),
/// calling `step` without the GIL with each slice's length; `None` at the
/// deadline, at the end, or once `closed` is set.
pub fn in_slices<T: Send>(
    py: Python<'_>,
    timeout: Option<Duration>,
    closed: &AtomicBool,
    mut step: impl FnMut(Duration) -> Result<Slice<T>, Fail> + Send,
) -> PyResult<Option<T>> {
    // A timeout too large for an Instant waits without a deadline.
    let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
    loop {
        if closed.load(Ordering::Acquire) {
            return Ok(None);
        }
        let slice = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
            None => SLICE,
        };
        match py.allow_threads(|| step(slice)).map_err(Fail::into_py)? {
            Slice::Item(item) => return Ok(Some(item)),
            Slice::End => return Ok(None),
            Slice::Again => continue,
            Slice::Nothing => {}
        }
        py.check_signals()?;
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
    }
}
