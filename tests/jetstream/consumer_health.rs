//! Consumer status and lag against a real server: each status produced by
//! a consumer really behaving that way, over a 3 s window, and the
//! estimated delivery lag compared with the true store time of the message.
use crate::common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use nats_delivery_exporter::scrape::exporter::Exporter;
use nats_delivery_exporter::sources::jsz::reports_pausing;
use nats_test_server::sample::value;
use nats_test_server::NatsServer;

const STATUSES: [&str; 7] = [
    "unknown", "ok", "lagging", "stalled", "stopped", "rewound", "paused",
];

/// Every series, for the tests that read the opt-in ones.
const EVERY_SERIES: [&str; 4] = [
    "--consumer-status-series",
    "all",
    "--consumer-opt-in-metrics",
    "all",
];

fn exporter(server: &NatsServer, extra: &[&str]) -> Exporter {
    let flags = ["--sources", "varz,jsz", "--consumer-status-window", "3s"];
    common::exporter(&[server.monitor_url()], &[&flags[..], extra].concat())
}

/// The status of `consumer`: by default its one series, at 1; with
/// `--consumer-status-series all` the one of its seven at 1 (the others 0).
fn status(text: &str, stream: &str, consumer: &str) -> &'static str {
    let of = |s: &str| {
        let labels = [
            ("account", "$G"),
            ("stream", stream),
            ("consumer", consumer),
            ("status", s),
        ];
        value(text, "nats_delivery_consumer_status", &labels)
    };
    let written: Vec<_> = STATUSES
        .into_iter()
        .filter_map(|s| Some((s, of(s)?)))
        .collect();
    let on: Vec<_> = written
        .iter()
        .filter(|(_, v)| *v == 1.0)
        .map(|(s, _)| *s)
        .collect();
    assert_eq!(on.len(), 1, "{consumer}: {written:?}");
    assert!(
        written.len() == 1
            || (written.len() == 7 && written.iter().all(|(_, v)| matches!(v, 0.0 | 1.0))),
        "{consumer}: {written:?}"
    );
    on[0]
}

fn pull(name: &str, filter: &str) -> consumer::pull::Config {
    consumer::pull::Config {
        durable_name: Some(name.into()),
        filter_subject: filter.into(),
        ack_policy: consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(60),
        ..Default::default()
    }
}

type Pull = consumer::Consumer<consumer::pull::Config>;

/// Takes `want` messages, fetching what is there until they all came (a
/// message just stored reaches the consumer a moment later on a busy
/// machine), for at most 10 s; returns how many came.
async fn take_all(c: &Pull, want: usize, ack: bool) -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut got = 0;
    while got < want && std::time::Instant::now() < deadline {
        got += take(c, want - got, ack).await;
        if got < want {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    got
}

/// Fetches what is there now (without waiting); acknowledges it if `ack`.
async fn take(c: &Pull, n: usize, ack: bool) -> usize {
    let mut got = c.fetch().max_messages(n).messages().await.unwrap();
    let mut count = 0;
    while let Some(m) = got.next().await {
        let m = m.unwrap();
        if ack {
            m.double_ack().await.unwrap();
        }
        count += 1;
    }
    count
}

async fn publish(js: &jetstream::Context, subject: &str, n: usize) {
    common::publish_acked(js, (0..n).map(|_| subject.to_string()), "x").await;
}

#[tokio::test]
async fn each_status_comes_from_a_consumer_behaving_that_way() {
    let server = NatsServer::builder().jetstream().start();
    let version = common::monitor_json(&server.monitor_url(), "varz")["version"]
        .as_str()
        .unwrap()
        .to_string();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    let s = js
        .create_stream(stream::Config {
            name: "S".into(),
            subjects: vec!["s.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let make = |name: &'static str, filter: &'static str| {
        let s = s.clone();
        async move { s.create_consumer(pull(name, filter)).await.unwrap() }
    };
    // ok: read and acknowledged everything, then idle.
    let ok = make("ok", "s.ok").await;
    publish(&js, "s.ok", 3).await;
    assert_eq!(take_all(&ok, 3, true).await, 3);
    // stopped: messages wait, nobody reads.
    make("stopped", "s.stop").await;
    publish(&js, "s.stop", 3).await;
    // rewound: read and acknowledged; recreated at sequence 1 later.
    let rw = make("rewound", "s.rw").await;
    publish(&js, "s.rw", 5).await;
    assert_eq!(take_all(&rw, 5, true).await, 5);
    // stalled: keeps receiving, never acknowledges.
    let stalled = make("stalled", "s.stall").await;
    publish(&js, "s.stall", 1).await;
    assert_eq!(take_all(&stalled, 1, false).await, 1);
    // lagging: three published for every one read (and acknowledged).
    let lagging = make("lagging", "s.lag").await;
    publish(&js, "s.lag", 5).await;
    let paused = reports_pausing(&version);
    if paused {
        let mut config = pull("paused", "s.ok");
        config.pause_until = Some(time::OffsetDateTime::now_utc() + Duration::from_secs(3600));
        s.create_consumer(config).await.unwrap();
    } else {
        println!("nats-server {version} does not report pausing: the paused consumer is skipped");
    }
    let traffic = {
        let js = js.clone();
        tokio::spawn(async move {
            loop {
                publish(&js, "s.lag", 3).await;
                take(&lagging, 1, true).await;
                publish(&js, "s.stall", 1).await;
                take(&stalled, 1, false).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let exporter = exporter(&server, &[]);
    let every = self::exporter(&server, &EVERY_SERIES);
    let text = common::scrape(&exporter).await;
    let every_text = common::scrape(&every).await;
    // At the first scrape, only what one snapshot decides: nothing waits
    // for "ok" and "rewound" (not yet recreated), so they are ok at once;
    // the others could still be stopped, stalled or lagging.
    for (c, want) in [
        ("ok", "ok"),
        ("rewound", "ok"),
        ("stopped", "unknown"),
        ("stalled", "unknown"),
        ("lagging", "unknown"),
    ] {
        assert_eq!(status(&text, "S", c), want, "{c} at the first scrape");
        assert_eq!(status(&every_text, "S", c), want, "{c} at the first scrape");
    }
    let one = |t: &str| {
        nats_test_server::sample::samples(t, "nats_delivery_consumer_status", &[("consumer", "ok")])
            .len()
    };
    assert_eq!((one(&text), one(&every_text)), (1, 7));
    let text = every_text;
    if paused {
        assert_eq!(status(&text, "S", "paused"), "paused");
        let p = [("stream", "S"), ("consumer", "paused")];
        assert_eq!(value(&text, "nats_delivery_consumer_paused", &p), Some(1.0));
        let left = value(&text, "nats_delivery_consumer_pause_remaining_seconds", &p).unwrap();
        assert!((3500.0..=3600.0).contains(&left), "{left}");
        let o = [("stream", "S"), ("consumer", "ok")];
        assert_eq!(value(&text, "nats_delivery_consumer_paused", &o), Some(0.0));
        assert_eq!(
            value(&text, "nats_delivery_consumer_pause_remaining_seconds", &o),
            None
        );
    } else {
        assert!(!text.contains("nats_delivery_consumer_paused{"));
    }
    // A snapshot every 250 ms until the first is more than a window old.
    let start = Instant::now();
    let mut seen = vec![text];
    while start.elapsed() < Duration::from_millis(3600) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        common::scrape(&exporter).await;
        seen.push(common::scrape(&every).await);
    }
    let text = common::scrape(&exporter).await;
    let every_text = common::scrape(&every).await;
    traffic.abort();
    for (c, want) in [
        ("ok", "ok"),
        ("stopped", "stopped"),
        ("stalled", "stalled"),
        ("lagging", "lagging"),
        ("rewound", "ok"),
    ] {
        assert_eq!(status(&text, "S", c), want, "{c}");
        assert_eq!(status(&every_text, "S", c), want, "{c}");
    }
    if paused {
        assert_eq!(status(&text, "S", "paused"), "paused");
    }
    // Recreated under the same name, starting over from sequence 1: a step
    // back, seen between two snapshots.
    s.delete_consumer("rewound").await.unwrap();
    let mut again = pull("rewound", "s.rw");
    again.deliver_policy = consumer::DeliverPolicy::ByStartSequence { start_sequence: 1 };
    s.create_consumer(again).await.unwrap();
    let text = common::scrape(&exporter).await;
    assert_eq!(status(&text, "S", "rewound"), "rewound");
    nats_test_server::reference::assert_documented(&text);
    let text = common::scrape(&every).await;
    assert_eq!(status(&text, "S", "rewound"), "rewound");
    nats_test_server::reference::assert_documented(&text);
    // Every metric of the section shows up (pause ones only where reported).
    seen.push(text);
    let all = seen.concat();
    let exposed = nats_test_server::reference::exposed(&all);
    for name in nats_test_server::reference::documented_in(&[
        "Consumer health (from /jsz, kept across scrapes)",
    ])
    .into_keys()
    {
        if paused || !name.contains("pause") {
            assert!(exposed.contains_key(&name), "{name} never exposed");
        }
    }
}

#[tokio::test]
async fn estimated_delivery_lag_is_within_the_bound_the_spacing_allows() {
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client);
    let s = js
        .create_stream(stream::Config {
            name: "L".into(),
            subjects: vec!["l".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let reader = s.create_consumer(pull("reader", "l")).await.unwrap();
    let exporter = exporter(&server, &EVERY_SERIES);
    // Ten messages 200 ms apart, then ten at once. The exporter polls after
    // every fifth, so it learns the store times of 1, 5, 10, 15 and 20.
    let n = 20u64;
    for i in 1..=n {
        publish(&js, "l", 1).await;
        if i % 5 == 0 {
            common::scrape(&exporter).await;
        }
        if i <= 10 {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    // The reader stops after 7: message 8 is the first it has not delivered.
    assert_eq!(take_all(&reader, 7, true).await, 7);
    let text = common::scrape(&exporter).await;
    let c = [("stream", "L"), ("consumer", "reader")];
    let lag = value(&text, "nats_delivery_consumer_delivery_lag_seconds", &c).unwrap();
    assert_eq!(
        value(&text, "nats_delivery_consumer_delivery_lag_exact", &c),
        Some(0.0)
    );
    // The server's clock at that poll: last delivery age + last delivery time.
    let age = value(
        &text,
        "nats_delivery_consumer_last_delivery_age_seconds",
        &c,
    )
    .unwrap();
    let mut reader = reader;
    let last_active = reader.info().await.unwrap().delivered.last_active.unwrap();
    let now = last_active.unix_timestamp_nanos() as f64 / 1e9 + age;
    // stored[k] is when sequence k was stored (stored[0] unused).
    let mut stored = vec![0.0];
    for seq in 1..=n {
        let m = s.get_raw_message(seq).await.unwrap();
        stored.push(m.time.unix_timestamp_nanos() as f64 / 1e9);
    }
    let true_lag = now - stored[8];
    let error = lag - true_lag;
    // Message 8 lies between the known points 5 and 10, and the estimate
    // interpolates between their true times. Messages 5..=10 were sent at
    // an even pace: each true time lies within `spread` of the straight
    // line through 5 and 10, so the interpolation and the truth differ by
    // at most 2 x spread (and 1 ms for rounding). Whatever the pace, the
    // truth lies between the times of 5 and 10.
    let line = |k: usize| stored[5] + (stored[10] - stored[5]) * (k - 5) as f64 / 5.0;
    let spread = (5..=10)
        .map(|k| (stored[k] - line(k)).abs())
        .fold(0.0, f64::max);
    // Had only this poll's first and last points been kept (1 and 20, with
    // the burst at the end), the estimate would be far off.
    let one_poll = stored[1] + (stored[20] - stored[1]) * 7.0 / 19.0;
    let one_poll_error = stored[8] - one_poll;
    println!(
        "delivery lag {lag:.4} s, true {true_lag:.4} s, error {error:+.4} s \
         (bound {:.4} s; from one poll's points only the error would be {one_poll_error:+.4} s)",
        2.0 * spread + 0.001
    );
    assert!(error.abs() <= 2.0 * spread + 0.001, "error {error}");
    assert!(error.abs() <= stored[10] - stored[5]);
    assert!(
        one_poll_error.abs() > 0.3,
        "the history is what makes it close"
    );
    // Nothing acknowledged after 7 either: the same message.
    let unacked = value(
        &text,
        "nats_delivery_consumer_oldest_unacked_age_seconds",
        &c,
    )
    .unwrap();
    assert_eq!(unacked, lag);
}

/// With a timestamp reader, the lag and the age come from the stored
/// messages themselves: exact, and equal to the truth to the millisecond,
/// where the estimate from one poll's points is seconds off.
#[tokio::test]
async fn read_timestamps_make_lag_and_age_exact() {
    use nats_delivery_exporter::jetstream::message_timestamps::MessageTimestamps;
    let server = NatsServer::builder().jetstream().start();
    let client = async_nats::connect(server.client_url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let s = js
        .create_stream(stream::Config {
            name: "R".into(),
            subjects: vec!["r".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let reader = s.create_consumer(pull("reader", "r")).await.unwrap();
    // Five messages 300 ms apart, then five at once: a straight line
    // between the first and the last is far from message 4.
    for i in 1..=10 {
        publish(&js, "r", 1).await;
        if i <= 5 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    }
    // Delivered 1..=3 and not acknowledged: the oldest unacknowledged is 1,
    // the first undelivered is 4.
    assert_eq!(take_all(&reader, 3, false).await, 3);
    let flags = ["--sources", "varz,jsz", "--consumer-timestamp-reads", "2"];
    let mut exporter = common::exporter_builder(
        &[server.monitor_url()],
        &[&flags[..], &EVERY_SERIES].concat(),
    );
    exporter.read_timestamps(MessageTimestamps::new(client, "$G", 100));
    let exporter = exporter.build();
    let text = common::scrape(&exporter).await;
    let c = [("stream", "R"), ("consumer", "reader")];
    let get = |name: &str| value(&text, name, &c).unwrap();
    assert_eq!(get("nats_delivery_consumer_delivery_lag_exact"), 1.0);
    assert_eq!(get("nats_delivery_consumer_oldest_unacked_age_exact"), 1.0);
    // The server's clock at that poll: last delivery age + last delivery time.
    let mut reader = reader;
    let last_active = reader.info().await.unwrap().delivered.last_active.unwrap();
    let now = last_active.unix_timestamp_nanos() as f64 / 1e9
        + get("nats_delivery_consumer_last_delivery_age_seconds");
    let stored = |seq| {
        let s = s.clone();
        async move {
            let m = s.get_raw_message(seq).await.unwrap();
            m.time.unix_timestamp_nanos() as f64 / 1e9
        }
    };
    let lag = get("nats_delivery_consumer_delivery_lag_seconds");
    let age = get("nats_delivery_consumer_oldest_unacked_age_seconds");
    let (true_lag, true_age) = (now - stored(4).await, now - stored(1).await);
    println!("lag {lag:.4} (true {true_lag:.4}), age {age:.4} (true {true_age:.4})");
    assert!((lag - true_lag).abs() < 0.002, "lag {lag}, true {true_lag}");
    assert!((age - true_age).abs() < 0.002, "age {age}, true {true_age}");
    assert!(
        (lag - age).abs() > 0.8,
        "two different messages: 1 and 4 were stored 0.9 s apart"
    );
}
