//! Criterion micro-benchmark for event payloads (benchmark suite E, "Event
//! serialization" of seed 003 in `docs/benchmarks.md`, an event store on
//! RocksDB): the seed's mix of seven small events
//! (16-byte ids, short strings, a flag) encoded with
//! [`cairndb::events::EventData::encode`]'s codec into a reused buffer, and
//! decoded back borrowing their strings. Target: all seven in ≤ 150 ns with
//! no allocation (the seed: 429 ns to serialize, 477 ns and 592 B to
//! deserialize).
//!
//! Run with `cargo bench -p cairndb --bench events`. Before measuring, a
//! counting global allocator checks that encoding allocates nothing (the
//! process fails otherwise) and prints what decoding allocates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};

use cairndb::document::codec;
use cairndb::events::Uuid;
use criterion::{criterion_group, criterion_main, Criterion};
use serde::{Deserialize, Serialize};

struct Counting;
static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only adds relaxed counters.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The seed's loadout events: small records with 16-byte ids and short
/// strings. Strings borrow from the payload when decoding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum LoadoutEvent<'a> {
    CreateLoadout {
        id: Uuid,
        name: &'a str,
    },
    RenameLoadout {
        id: Uuid,
        name: &'a str,
    },
    AddItem {
        loadout: Uuid,
        item: Uuid,
        name: &'a str,
    },
    ToggleFlag {
        item: Uuid,
        enabled: bool,
    },
    SetPriority {
        item: Uuid,
        priority: u32,
    },
    DeleteItem {
        loadout: Uuid,
        item: Uuid,
    },
    DeleteLoadout {
        id: Uuid,
    },
}

fn mix() -> Vec<LoadoutEvent<'static>> {
    let (l, i) = (Uuid::from_bytes([1u8; 16]), Uuid::from_bytes([2u8; 16]));
    vec![
        LoadoutEvent::CreateLoadout {
            id: l,
            name: "Skyrim SE",
        },
        LoadoutEvent::RenameLoadout {
            id: l,
            name: "Skyrim AE",
        },
        LoadoutEvent::AddItem {
            loadout: l,
            item: i,
            name: "SkyUI",
        },
        LoadoutEvent::ToggleFlag {
            item: i,
            enabled: true,
        },
        LoadoutEvent::SetPriority {
            item: i,
            priority: 7,
        },
        LoadoutEvent::DeleteItem {
            loadout: l,
            item: i,
        },
        LoadoutEvent::DeleteLoadout { id: l },
    ]
}

fn encode_all(events: &[LoadoutEvent<'_>], bufs: &mut [Vec<u8>]) {
    for (e, b) in events.iter().zip(bufs.iter_mut()) {
        b.clear();
        codec::encode_into(e, b).expect("encode");
    }
}

fn decode_all(bufs: &[Vec<u8>]) -> usize {
    let mut n = 0;
    for b in bufs {
        let e: LoadoutEvent<'_> = codec::from_slice(b).expect("decode");
        n += matches!(e, LoadoutEvent::ToggleFlag { enabled: true, .. }) as usize;
    }
    n
}

fn events(c: &mut Criterion) {
    let evs = mix();
    let mut bufs: Vec<Vec<u8>> = (0..evs.len()).map(|_| Vec::with_capacity(128)).collect();
    encode_all(&evs, &mut bufs);
    // The round trip is exact.
    for (e, b) in evs.iter().zip(&bufs) {
        assert_eq!(
            &codec::from_slice::<LoadoutEvent<'_>>(b).expect("decode"),
            e
        );
    }
    let bytes: usize = bufs.iter().map(Vec::len).sum();
    let a0 = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..1000 {
        encode_all(&evs, &mut bufs);
    }
    let enc_allocs = ALLOCS.load(Ordering::Relaxed) - a0;
    assert_eq!(
        enc_allocs, 0,
        "encoding into reused buffers must not allocate"
    );
    let (a0, b0) = (
        ALLOCS.load(Ordering::Relaxed),
        BYTES.load(Ordering::Relaxed),
    );
    for _ in 0..1000 {
        black_box(decode_all(&bufs));
    }
    let dec_allocs = (ALLOCS.load(Ordering::Relaxed) - a0) as f64 / 1000.0;
    let dec_bytes = (BYTES.load(Ordering::Relaxed) - b0) as f64 / 1000.0;
    eprintln!(
        "event mix: 7 events, {bytes} bytes encoded; encode allocations 0; decode {dec_allocs} allocations, {dec_bytes} bytes per 7 events"
    );
    c.bench_function("events/encode_7", |b| {
        b.iter(|| encode_all(black_box(&evs), &mut bufs))
    });
    c.bench_function("events/decode_7", |b| {
        b.iter(|| decode_all(black_box(&bufs)))
    });
}

criterion_group!(benches, events);
criterion_main!(benches);
