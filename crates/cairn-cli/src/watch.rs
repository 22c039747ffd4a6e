//! `cairn watch FILE COLLECTION`: a collection's change stream as JSON
//! lines, from now or from a resume token, following new commits (as
//! `cairn events all --follow` does); `--enable`/`--disable` turn the
//! collection's change stream on or off.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use cairndb::document::{ChangeStreamOptions, Document, FullDocument, ResumeToken, Value};
use cairndb::Database;
use clap::Args;

use crate::{CliError, Res};

/// `cairn watch`'s arguments.
#[derive(Args)]
pub struct WatchArgs {
    /// The database file.
    db: PathBuf,
    /// The collection.
    collection: String,
    /// Resume after this event's token (`_id._data` of an event, or the
    /// whole `{"_data": …}`); not after an `invalidate`.
    #[arg(long, conflicts_with = "start_after")]
    resume_after: Option<String>,
    /// Start after this token, an `invalidate`'s included.
    #[arg(long)]
    start_after: Option<String>,
    /// A pipeline over the events, as a JSON array (`$match`, `$project`,
    /// `$addFields`, `$set`, `$unset`, `$replaceRoot`, `$replaceWith`).
    #[arg(long)]
    pipeline: Option<String>,
    /// `updateLookup`: update events carry the document as the update left
    /// it (`default`: only inserts and replaces carry it).
    #[arg(long, default_value = "default")]
    full_document: String,
    /// Print the events committed now and exit instead of following.
    #[arg(long)]
    no_follow: bool,
    /// Stop after this many events.
    #[arg(long)]
    limit: Option<u64>,
    /// Turn the collection's change stream on (creating the collection),
    /// then exit.
    #[arg(long, conflicts_with = "disable")]
    enable: bool,
    /// Turn the collection's change stream off (its streams end with
    /// `invalidate`), then exit.
    #[arg(long)]
    disable: bool,
    /// With --enable: the change log's retention, in records (for every
    /// watched collection of the file together).
    #[arg(long, requires = "enable")]
    retention: Option<u64>,
}

fn token(text: &str, flag: &str) -> Result<ResumeToken, CliError> {
    ResumeToken::parse(text).map_err(|e| CliError::User(format!("{flag}: {e}")))
}

/// Runs `cairn watch` on a file, or on an `etcd://` URL (the cluster's
/// change streams, woken by an etcd `Watch`).
pub fn run(args: WatchArgs, out: &mut impl Write) -> Res {
    let url = match crate::etcd::Backend::of(&args.db) {
        crate::etcd::Backend::Etcd(url) => Some(url),
        crate::etcd::Backend::File(_) => None,
    };
    if args.enable || args.disable {
        if let Some(url) = &url {
            let db = cairndb_etcd::EtcdDatabase::connect(url)?;
            let c = db.collection::<Document>(&args.collection);
            if args.enable {
                c.enable_change_stream()?;
                if let Some(n) = args.retention {
                    db.set_change_log_retention(n)?;
                }
            } else {
                c.disable_change_stream()?;
            }
            return switched(&args, out);
        }
        // --enable creates the file if needed, as `import` does; --disable
        // needs an existing one (a mistyped path must not leave a new
        // empty file behind).
        let db = if args.enable {
            Database::create(&args.db)?
        } else {
            Database::open(&args.db)?
        };
        let c = db.collection::<Document>(&args.collection);
        if args.enable {
            c.enable_change_stream()?;
            if let Some(n) = args.retention {
                db.set_change_log_retention(n)?;
            }
        } else {
            c.disable_change_stream()?;
        }
        db.close()?;
        return switched(&args, out);
    }
    let full_document = match args.full_document.as_str() {
        "default" => FullDocument::Default,
        "updateLookup" | "update-lookup" => FullDocument::UpdateLookup,
        other => {
            return Err(CliError::User(format!(
                "--full-document {other:?}: expected default or updateLookup"
            )))
        }
    };
    let opts = ChangeStreamOptions {
        full_document,
        resume_after: args
            .resume_after
            .as_deref()
            .map(|t| token(t, "--resume-after"))
            .transpose()?,
        start_after: args
            .start_after
            .as_deref()
            .map(|t| token(t, "--start-after"))
            .transpose()?,
    };
    let pipeline: serde_json::Value = match &args.pipeline {
        Some(p) => serde_json::from_str(p)
            .map_err(|e| CliError::User(format!("--pipeline is not JSON: {e}")))?,
        None => serde_json::json!([]),
    };
    if let Some(url) = &url {
        let db = cairndb_etcd::EtcdDatabase::connect(url)?;
        let coll = db.collection::<Document>(&args.collection);
        let mut stream = coll.watch_with(pipeline, opts)?;
        return follow(&args, out, |wait| match wait {
            Some(t) => Ok(stream.next_timeout(t)?),
            None => Ok(stream.try_next()?),
        });
    }
    // A read-only handle opens beside a writer in this or another process.
    let db = Database::open_read_only(&args.db)?;
    let coll = db.collection::<Document>(&args.collection);
    let mut stream = coll.watch_with(pipeline, opts)?;
    follow(&args, out, |wait| match wait {
        Some(t) => Ok(stream.next_timeout(t)?),
        None => Ok(stream.try_next()?),
    })
}

/// Prints that the change stream was switched on or off.
fn switched(args: &WatchArgs, out: &mut impl Write) -> Res {
    let state = if args.enable { "on" } else { "off" };
    writeln!(out, "change stream of {:?} {state}", args.collection)?;
    Ok(())
}

/// Prints the events `next` gives (`next(None)`: without waiting;
/// `next(Some(t))`: waiting at most `t`), one JSON line each, up to
/// `--limit`, until the stream ends (its `invalidate`) or, with
/// `--no-follow`, nothing more is committed.
fn follow(
    args: &WatchArgs,
    out: &mut impl Write,
    mut next: impl FnMut(Option<Duration>) -> Result<Option<Document>, CliError>,
) -> Res {
    let mut left = args.limit.unwrap_or(u64::MAX);
    while left > 0 {
        let wait = (!args.no_follow).then(|| Duration::from_millis(500));
        match next(wait)? {
            Some(ev) => {
                let ended = ev.get("operationType").and_then(Value::as_str) == Some("invalidate");
                writeln!(out, "{}", Value::Object(ev).to_json())?;
                out.flush()?;
                left -= 1;
                if ended {
                    break;
                }
            }
            None if args.no_follow => break,
            None => out.flush()?,
        }
    }
    Ok(())
}
