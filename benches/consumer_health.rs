//! What consumer status and lag cost per poll, apart from the encoding:
//! `ConsumerHealth::candidates` and `update` over S streams x C consumers
//! (default 100 x 100, `BENCH_STREAMS`, `BENCH_CONSUMERS`), every consumer
//! with a backlog, polled `BENCH_POLLS` times (default 40) one "second"
//! apart with a 5 m window; then the heap the state holds once every
//! window holds its most entries (polls 1 s apart for 6 minutes).
//!
//! `cargo bench --bench consumer_health`

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use nats_delivery_exporter::{ConsumerHealth, ConsumerInfo, Replies, StreamDetail};

/// Counts the bytes allocated and not yet freed.
struct Counting;

static HELD: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        HELD.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let (n_streams, per_stream) = (env_or("BENCH_STREAMS", 100), env_or("BENCH_CONSUMERS", 100));
    let polls = env_or("BENCH_POLLS", 40);
    let mut streams: Vec<StreamDetail> = (0..n_streams)
        .map(|i| StreamDetail {
            name: format!("S{i}"),
            ..StreamDetail::default()
        })
        .collect();
    let mut consumers: Vec<ConsumerInfo> = (0..n_streams * per_stream)
        .map(|i| {
            let mut consumer = ConsumerInfo::default();
            consumer.name = format!("C{}", i % per_stream).into();
            consumer
        })
        .collect();
    let mut health = ConsumerHealth::new(Duration::from_secs(300));
    let before = HELD.load(Ordering::Relaxed);
    let (mut candidates, mut update) = (Vec::new(), Vec::new());
    // A second apart for six minutes: every window full, at its most entries.
    for poll in 0..polls.max(360) {
        let now = 1_000_000.0 + poll as f64;
        for s in &mut streams {
            s.state.first_seq = 1;
            s.state.first_ts = Some(1_000_000.0);
            s.state.last_seq = 10 * (poll as u64 + 1);
            s.state.last_ts = Some(now);
        }
        for (i, c) in consumers.iter_mut().enumerate() {
            // Each consumer a little behind, by a different amount.
            c.delivered.stream_seq = 10 * poll as u64 + (i % 7) as u64;
            c.ack_floor.stream_seq = c.delivered.stream_seq.saturating_sub(3);
            c.num_pending = 10 - (i % 7) as u64;
            c.num_ack_pending = 3;
        }
        let stream_rows: Vec<_> = streams.iter().map(|s| ("$G", s)).collect();
        let consumer_rows: Vec<_> = consumers
            .iter()
            .enumerate()
            .map(|(i, c)| ("$G", streams[i / per_stream].name.as_str(), c, Some(now)))
            .collect();
        let rows = (stream_rows.as_slice(), consumer_rows.as_slice());
        let t = Instant::now();
        let wanted = health.candidates(rows, now, 50);
        let t_candidates = t.elapsed();
        let out = health.update(rows, now, &Replies::new());
        let t_update = t.elapsed() - t_candidates;
        assert_eq!((wanted.len(), out.len()), (50, consumers.len()), "{poll}");
        if poll < polls {
            candidates.push(t_candidates.as_secs_f64());
            update.push(t_update.as_secs_f64());
        }
    }
    let held = HELD.load(Ordering::Relaxed) - before;
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] * 1e3
    };
    println!("{n_streams} streams x {per_stream} consumers, {polls} polls timed (median):");
    println!("candidates(limit 50)   {:.2} ms", median(&mut candidates));
    println!("update                 {:.2} ms", median(&mut update));
    let (c, s) = health.held();
    println!(
        "state held, windows full: {:.1} MB ({:.0} bytes per consumer; {c} consumers, {s} streams)",
        held as f64 / 1e6,
        held as f64 / c as f64
    );
}
