//! Property: an `EtcdSubscription` stopped through its stop handle (as the
//! embedded `SubscriptionStop`) ends the thread that follows it — a live
//! wait on the cluster's `Watch` returns within a fraction of a second —
//! and delivers nothing more, its checkpoint naming the next event it
//! would have delivered.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use cairndb::events::{EventData, EventFilter, ExpectedVersion, Position, SubscriptionMessage};
use cairndb_etcd::EtcdDatabase;

use crate::common::{cluster, connect};

fn event(ty: &str) -> EventData {
    EventData::new(ty, b"{}".to_vec())
}

/// How long a stop may take to end a subscriber waiting on the cluster
/// (the wait looks at the flag every 50 ms; its slice is a second).
const STOP_WITHIN: Duration = Duration::from_millis(700);

#[test]
fn a_stopped_subscription_ends_its_thread_and_delivers_nothing_more() {
    let Some(c) = cluster("a_stopped_subscription_ends_its_thread_and_delivers_nothing_more")
    else {
        return;
    };
    // The subscriber thread outlives nothing it borrows: the handle lives
    // for the test process (so a subscription that never stops fails the
    // test below instead of hanging it).
    let db: &'static EtcdDatabase = Box::leak(Box::new(connect(&c.url("stop"))));
    let ev = db.events();
    ev.append(
        "s",
        ExpectedVersion::NoStream,
        &[event("A"), event("B"), event("C")],
    )
    .unwrap();
    let sub = ev.subscribe_all(Position(0), EventFilter::all());
    let stop = sub.stop_handle();
    let (tx, rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut sub = sub;
        for m in &mut sub {
            if tx.send(m.unwrap()).is_err() {
                break;
            }
        }
        let _ = done_tx.send(sub.checkpoint());
    });
    let recv = || rx.recv_timeout(Duration::from_secs(10)).unwrap();
    for p in 0..3 {
        match recv() {
            SubscriptionMessage::Event(e) => assert_eq!(e.position, Position(p)),
            other => panic!("expected event {p}, got {other:?}"),
        }
    }
    assert!(matches!(recv(), SubscriptionMessage::CaughtUp { .. }));
    ev.append("s", ExpectedVersion::Any, &[event("Live")])
        .unwrap();
    match recv() {
        SubscriptionMessage::Event(e) => assert_eq!(e.event_type, "Live"),
        other => panic!("expected the live event, got {other:?}"),
    }
    // The subscriber now waits on the cluster's Watch.
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    stop.stop();
    let checkpoint = done_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the subscriber thread ended after stop()");
    let took = t.elapsed();
    assert!(took < STOP_WITHIN, "the thread ended {took:?} after stop()");
    assert_eq!(checkpoint, Position(4));
    ev.append("s", ExpectedVersion::Any, &[event("After")])
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        matches!(rx.try_recv(), Err(mpsc::TryRecvError::Disconnected)),
        "nothing delivered after stop()"
    );

    // A stopped subscription with events to deliver delivers none of them
    // and keeps its checkpoint; `run` returns at once.
    let mut sub = ev.subscribe_all(Position(0), EventFilter::all());
    sub.stop_handle().stop();
    let t = Instant::now();
    assert!(sub.next_timeout(Duration::from_secs(5)).unwrap().is_none());
    assert!(sub.next().is_none());
    let mut seen = 0;
    let resume = sub
        .run(|_| {
            seen += 1;
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
    assert_eq!((seen, resume), (0, Position(0)));
    assert!(t.elapsed() < Duration::from_secs(1));
}
