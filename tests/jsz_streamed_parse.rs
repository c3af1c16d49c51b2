//! A large `/jsz` reply is parsed as it arrives: the heap never holds the
//! whole body. This binary counts every allocation, so it holds this one
//! test only (another running beside it would move the peak).
mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use common::fake_endpoint::{self, Reply};
use nats_test_server::sample::value;

/// The system allocator, keeping the bytes in use and their peak.
struct Counting;

static IN_USE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(n: usize) {
    let now = IN_USE.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as both blocks at once, as a copying realloc holds them.
            grew(new_size);
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MB: usize = 1 << 20;

#[tokio::test]
async fn a_64_mb_jsz_reply_is_parsed_without_holding_it_whole() {
    let jsz = r#"{"now":"2026-01-01T00:00:10Z","account_details":[{"name":"A","stream_detail":[
        {"name":"S","state":{"messages":1},"consumer_detail":[{"name":"C","num_ack_pending":7}]}]}]}"#;
    // Padded outside the streams, then inside one (after its `"state":`),
    // where a stream is kept as sent until it grows large.
    let inside = jsz.find(r#""state":"#).unwrap() + 8;
    for at in [1, inside] {
        let body = 64 * MB;
        let big = fake_endpoint::start(move |_| {
            Reply::SpacedJson(jsz.to_string(), at, (body - jsz.len()) as u64)
        })
        .await;
        let exporter = common::exporter(
            std::slice::from_ref(&big.url),
            &["--sources", "jsz", "--timeout", "60s"],
        );
        let before = IN_USE.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let text = common::scrape(&exporter).await;
        let peak = PEAK.load(Ordering::Relaxed) - before;

        let labels = [("account", "A"), ("stream", "S"), ("consumer", "C")];
        assert_eq!(
            value(
                &text,
                "nats_delivery_consumer_ack_pending_messages",
                &labels
            ),
            Some(7.0),
            "padded at {at}: {text}"
        );
        assert_eq!(big.requests(), 1);
        // Gathering the reply first would hold all 64 MB; chunks in flight
        // and the parser's buffers are a few MB at most.
        assert!(
            peak < 16 * MB,
            "padded at {at}: heap grew by {} MB",
            peak / MB
        );
    }
}
