//! Durable counting under the faults that break it: the exporter killed
//! (SIGKILL) and stopped (SIGTERM) while messages die, and a server that
//! comes back with an empty store. The truth is the number of advisories
//! the server wrote into the advisory stream.
use crate::advisories_support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use advisories_support::binary::{scrape_port, Exporter};
use advisories_support::*;
use async_nats::jetstream;

const NAME: &str = "nats_delivery_jetstream_max_deliveries_total";
const LABELS: &[(&str, &str)] = &[
    ("account", "APP"),
    ("stream", "WORK"),
    ("consumer", "worker"),
];

/// [`let_die`] for a spawned task.
async fn wave(
    js: jetstream::Context,
    c: jetstream::consumer::PullConsumer,
    first: usize,
    n: usize,
    expected: u64,
) {
    let_die(&js, &c, first, n, expected).await
}

/// Scrapes `port` every `every` like Prometheus, keeping each value read.
fn scraper(port: u16, every: Duration) -> (Arc<Mutex<Vec<f64>>>, Arc<Mutex<bool>>) {
    let values = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(Mutex::new(false));
    let (v, s) = (values.clone(), stop.clone());
    std::thread::spawn(move || {
        while !*s.lock().unwrap() {
            if let Some(x) = scrape_port(port).and_then(|t| exact(&t, NAME, LABELS)) {
                v.lock().unwrap().push(x);
            }
            std::thread::sleep(every);
        }
    });
    (values, stop)
}

/// Waits until the scraper's last value read is `want`: Prometheus has
/// seen it.
async fn wait_read(values: &Mutex<Vec<f64>>, want: f64) {
    Wait::secs(format!("a scrape to read {want}"), 60)
        .every(Duration::from_millis(100))
        .until(|| {
            let last = values.lock().unwrap().last().copied();
            (last == Some(want)).then_some(()).ok_or(last)
        })
        .await;
}

/// Waits for two more values from the scraper: the second began after
/// this call.
async fn wait_scrape_after(values: &Mutex<Vec<f64>>) {
    let read = values.lock().unwrap().len();
    Wait::secs("a scrape begun after this point", 60)
        .every(Duration::from_millis(100))
        .until(|| {
            let now = values.lock().unwrap().len();
            (now >= read + 2).then_some(()).ok_or(now - read)
        })
        .await;
}

/// Waits until `name` on `e` has begun to count and is not yet at `total`:
/// the moment to kill it inside a burst.
async fn wait_mid_burst(e: &Exporter, name: &str, total: f64) {
    let x = Wait::secs(format!("something counted in {name}"), 30)
        .every(Duration::from_millis(20))
        .until(|| {
            let x = tokio::task::block_in_place(|| e.value(name, LABELS)).unwrap_or(0.0);
            (x > 0.0).then_some(x).ok_or(x)
        })
        .await;
    assert!(x < total, "the burst was over before the kill");
}

/// Waits up to 60 s for the exporter's count of dead messages to reach `n`.
async fn wait_for_count(e: &Exporter, n: f64) {
    Wait::secs(format!("the exporter to reach {n}"), 60)
        .every(Duration::from_millis(200))
        .until(|| {
            let got = tokio::task::block_in_place(|| e.value(NAME, LABELS));
            (got == Some(n)).then_some(()).ok_or(got)
        })
        .await;
}

/// What `increase()` adds up over a series: every rise, and after a fall
/// (a counter reset) the new value.
fn reset_aware_sum(values: &[f64]) -> f64 {
    let mut sum = values.first().copied().unwrap_or(0.0);
    for w in values.windows(2) {
        sum += if w[1] >= w[0] { w[1] - w[0] } else { w[1] };
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_and_sigterm_while_messages_die_lose_and_repeat_nothing() {
    let s = server();
    let port = nats_test_server::free_port();
    let mut exporter = Some(tokio::task::block_in_place(|| {
        Exporter::start_on(&s, port, &[])
    }));
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let c = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    // The first value a scrape reads is 0, once a message died.
    wave(js.clone(), c.clone(), 0, 1, 1).await;
    let (values, stop) = scraper(port, Duration::from_secs(2));

    // Six waves of 40; the exporter is killed twice and stopped once while
    // a wave is under way, and started again at once on the same address.
    let faults = ["kill", "none", "term", "none", "kill", "none"];
    let mut total = 1;
    for (i, fault) in faults.iter().enumerate() {
        let w = tokio::spawn(wave(js.clone(), c.clone(), 1 + i * 40, 40, total + 40));
        if *fault != "none" {
            let e = exporter.take().unwrap();
            // Once the wave's first deaths are counted.
            let before = total as f64;
            Wait::secs("the wave to be counted", 30)
                .every(Duration::from_millis(20))
                .until(|| {
                    let x = tokio::task::block_in_place(|| e.value(NAME, LABELS));
                    x.filter(|x| *x > before).ok_or(x)
                })
                .await;
            tokio::task::block_in_place(|| match *fault {
                "kill" => e.kill_9(),
                _ => e.stop(),
            });
            exporter = Some(tokio::task::block_in_place(|| {
                Exporter::start_on(&s, port, &[])
            }));
        }
        w.await.unwrap();
        total += 40;
        // A scrape reads the value between waves.
        wait_read(&values, total as f64).await;
    }
    assert_eq!(total, 241);
    let e = exporter.take().unwrap();
    wait_for_count(&e, 241.0).await;
    // Nothing left to count; then one more scrape reads the final value.
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    wait_scrape_after(&values).await;
    *stop.lock().unwrap() = true;
    let values = values.lock().unwrap().clone();
    assert!(values.len() >= 8, "too few scrapes: {values:?}");
    // Never a step back, so Prometheus sees no reset, and what it adds up
    // from the first scrape is exactly the 240 that died since.
    assert!(
        values.windows(2).all(|w| w[1] >= w[0]),
        "the counter went backwards: {values:?}"
    );
    assert_eq!(
        reset_aware_sum(&values) - values[0],
        241.0 - values[0],
        "{values:?}"
    );
    assert_eq!(*values.last().unwrap(), 241.0);
    let text = tokio::task::block_in_place(|| e.scrape()).unwrap();
    assert_eq!(
        exact(
            &text,
            "nats_delivery_advisories_received_total",
            &[("account", "APP")]
        ),
        Some(241.0)
    );
    assert_eq!(
        exact(
            &text,
            "nats_delivery_advisories_duplicate_total",
            &[("account", "APP")]
        ),
        Some(0.0)
    );
    tokio::task::block_in_place(|| e.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restarted_with_an_empty_store_is_noticed_and_counting_resumes() {
    let mut s = server();
    let naks = "nats_delivery_jetstream_naks_total";
    let up = "nats_delivery_advisory_listener_up";
    let app = [("account", "APP")];
    let e = tokio::task::block_in_place(|| Exporter::start(&s, &[]));
    let nak_labels = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    nak(&s, 5).await;
    wait_scraped(&e, naks, &nak_labels, 5.0, 20).await;

    tokio::task::block_in_place(|| s.kill_and_restart(true));
    let lost = Instant::now();
    // Within 30 s the exporter says it is not counting, and why.
    wait_scraped(&e, up, &app, 0.0, 30).await;
    assert!(lost.elapsed() < Duration::from_secs(30));
    let text = tokio::task::block_in_place(|| e.scrape()).unwrap();
    let errors = |kind: &str| {
        exact(
            &text,
            "nats_delivery_advisory_listener_errors_total",
            &[("account", "APP"), ("kind", kind)],
        )
        .unwrap_or(0.0)
    };
    let counted: f64 = ["consumer_missing", "stream_missing", "timeout", "connect"]
        .iter()
        .map(|k| errors(k))
        .sum();
    assert!(counted >= 1.0, "no failure counted:\n{text}");
    // It sets everything up again; the stored totals went with the store,
    // so the counter starts again, and exactly the 20 new NAKs are counted.
    wait_scraped(&e, up, &app, 1.0, 30).await;
    nak(&s, 20).await;
    wait_scraped(&e, naks, &nak_labels, 20.0, 30).await;
    let js = jetstream::new(client(&s, "app").await);
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    let text = tokio::task::block_in_place(|| e.scrape()).unwrap();
    assert_eq!(exact(&text, naks, &nak_labels), Some(20.0));
    nats_test_server::reference::assert_documented(&text);
    tokio::task::block_in_place(|| e.stop());
}

/// Creates WORK/worker if missing, publishes `n` messages and NAKs each
/// once, acknowledging it when it comes back. A message is known by its
/// stream sequence, not its delivery count: a fetch may return fewer than
/// asked, so a NAKed message can come back before the last new one, and a
/// delivery the client never saw comes back after `ack_wait` as a second
/// one; each is still NAKed the first time it is seen and acknowledged the
/// next. Fails after 60 s (longer than `ack_wait`) with what it saw.
async fn nak(s: &nats_test_server::NatsServer, n: usize) {
    use futures::StreamExt;
    let js = jetstream::new(client(s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let c = pull_consumer(&st, "worker", 100, Duration::from_secs(30)).await;
    publish(&js, "work", n).await;
    let mut naked = std::collections::HashSet::new();
    // (stream sequence, delivery count) of every message received.
    let mut seen = Vec::new();
    let mut acked = 0;
    Wait::secs(format!("{n} messages NAKed once, then acknowledged"), 60)
        .every(Duration::from_millis(50))
        .until_async(async || {
            if acked == n {
                return Ok(());
            }
            let mut batch = c.fetch().max_messages(n - acked).messages().await.unwrap();
            while let Some(m) = batch.next().await {
                let m = m.unwrap();
                let info = m.info().unwrap();
                let (seq, delivered) = (info.stream_sequence, info.delivered);
                seen.push((seq, delivered));
                if naked.insert(seq) {
                    m.ack_with(jetstream::AckKind::Nak(None)).await.unwrap();
                } else {
                    m.double_ack().await.unwrap();
                    acked += 1;
                }
            }
            Err(format!(
                "NAKed {} and acknowledged {acked} of {n}; received {seen:?}",
                naked.len()
            ))
        })
        .await;
    eprintln!("nak({n}): received {seen:?}");
}

async fn wait_scraped(e: &Exporter, name: &str, labels: &[(&str, &str)], want: f64, secs: u64) {
    Wait::secs(format!("{name}{labels:?} = {want}"), secs)
        .every(Duration::from_millis(200))
        .until(|| {
            let v = tokio::task::block_in_place(|| e.value(name, labels));
            (v == Some(want)).then_some(()).ok_or(v)
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_one_killed_mid_burst_keep_the_max_exact() {
    let s = server();
    let (pa, pb) = (nats_test_server::free_port(), nats_test_server::free_port());
    let a = tokio::task::block_in_place(|| Exporter::start_on(&s, pa, &[]));
    let b = tokio::task::block_in_place(|| Exporter::start_on(&s, pb, &[]));
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let c = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    let (va, stop_a) = scraper(pa, Duration::from_millis(500));
    let (vb, stop_b) = scraper(pb, Duration::from_millis(500));

    // 120 deaths spread over six steps, so the kill lands inside the burst.
    let burst = tokio::spawn({
        let (js, c) = (js.clone(), c.clone());
        async move {
            for step in 0..6 {
                wave(js.clone(), c.clone(), step * 20, 20, (step as u64 + 1) * 20).await;
            }
        }
    });
    // Kill one replica once the count has begun and before it is done.
    wait_mid_burst(&a, NAME, 120.0).await;
    tokio::task::block_in_place(|| a.kill_9());
    let a = tokio::task::block_in_place(|| Exporter::start_on(&s, pa, &[]));
    burst.await.unwrap();

    // The documented aggregate: max over replicas.
    Wait::secs("both replicas at 120", 30)
        .every(Duration::from_millis(200))
        .until(|| {
            let both =
                tokio::task::block_in_place(|| (a.value(NAME, LABELS), b.value(NAME, LABELS)));
            (both == (Some(120.0), Some(120.0)))
                .then_some(())
                .ok_or(both)
        })
        .await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    wait_scrape_after(&va).await;
    wait_scrape_after(&vb).await;
    *stop_a.lock().unwrap() = true;
    *stop_b.lock().unwrap() = true;
    // Neither replica's counter ever went back, and none ever showed more
    // than died.
    for v in [va.lock().unwrap().clone(), vb.lock().unwrap().clone()] {
        assert!(v.windows(2).all(|w| w[1] >= w[0]), "{v:?}");
        assert!(v.iter().all(|x| *x <= 120.0), "{v:?}");
        assert_eq!(v.last(), Some(&120.0), "{v:?}");
    }
    tokio::task::block_in_place(|| {
        a.stop();
        b.stop();
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_copies_are_stored_once_across_kill_9() {
    let s = server();
    let port = nats_test_server::free_port();
    let flags = ["--dead-letter-stream", "DLQ"];
    let e = tokio::task::block_in_place(|| Exporter::start_on(&s, port, &flags));
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let c = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    let stored = "nats_delivery_dead_letter_stored_total";
    let burst = tokio::spawn({
        let (js, c) = (js.clone(), c.clone());
        async move {
            for step in 0..5 {
                wave(js.clone(), c.clone(), step * 10, 10, (step as u64 + 1) * 10).await;
            }
        }
    });
    // Killed while copies are being made, started again at once.
    wait_mid_burst(&e, stored, 50.0).await;
    tokio::task::block_in_place(|| e.kill_9());
    let e = tokio::task::block_in_place(|| Exporter::start_on(&s, port, &flags));
    burst.await.unwrap();
    wait_scraped(&e, stored, LABELS, 50.0, 60).await;
    wait_scraped(&e, NAME, LABELS, 50.0, 10).await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    assert_eq!(
        tokio::task::block_in_place(|| e.value(stored, LABELS)),
        Some(50.0)
    );
    // Each dead message is in the dead-letter stream exactly once.
    let mut dlq = js.get_stream("DLQ").await.unwrap();
    assert_eq!(dlq.info().await.unwrap().state.messages, 50);
    let mut seqs = Vec::new();
    for n in 1..=50 {
        let m = dlq.get_raw_message(n).await.unwrap();
        let seq: u64 = m
            .headers
            .get("Dead-Letter-Stream-Sequence")
            .unwrap()
            .as_str()
            .parse()
            .unwrap();
        seqs.push(seq);
    }
    seqs.sort();
    assert_eq!(seqs, (1..=50).collect::<Vec<u64>>());
    tokio::task::block_in_place(|| e.stop());
}
