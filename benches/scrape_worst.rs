//! Scrape time at its worst, against a real server that grows: the window
//! of `support/worst.rs` alone (a jump from 10,000 to 100,000 consumers,
//! 21 rounds 2 s apart with a full `/jsz` fetch beside each scrape, a
//! configuration refresh among them, then a new exporter's first scrape),
//! printed with its rounds and beside the targets. `BENCH_WORST_CONSUMERS`,
//! `BENCH_WORST_BEFORE`, `BENCH_WORST_ROUNDS` and `BENCH_WORST_PACE` change
//! its sizes and pace,
//! `BENCH_EXPORTER_ARGS` adds flags to the exporters.
//!
//! `cargo bench --bench scrape_worst`

mod support;

use support::worst::{self, Window};

#[tokio::main]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let window = Window::from_env().expect("BENCH_WORST_CONSUMERS=0: no window to measure");
    let figures = worst::measure(&window).await;
    figures.print();
    figures.print_server_cpu();
}
