//! Consumer status against a real server: each status produced by a
//! consumer really behaving that way, over a 3 s window (lag and age:
//! `consumer_health_lag`).
use crate::common;

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;
use nats_delivery_exporter::{reports_pausing, Exporter};
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const STATUSES: [&str; 7] = [
    "unknown", "ok", "lagging", "stalled", "stopped", "rewound", "paused",
];

/// Every series, for the tests that read the opt-in ones.
pub(crate) const EVERY_SERIES: [&str; 4] = [
    "--consumer-status-series",
    "all",
    "--consumer-opt-in-metrics",
    "all",
];

pub(crate) fn exporter(server: &NatsServer, extra: &[&str]) -> Exporter {
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

pub(crate) fn pull(name: &str, filter: &str) -> consumer::pull::Config {
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
pub(crate) async fn take_all(c: &Pull, want: usize, ack: bool) -> usize {
    let mut got = 0;
    // Fewer than `want` after 10 s: the caller's assertion says how many came.
    let _ = Wait::secs(format!("{want} messages to come"), 10)
        .try_until_async(async || {
            got += take(c, want - got, ack).await;
            (got >= want).then_some(()).ok_or(got)
        })
        .await;
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

pub(crate) async fn publish(js: &jetstream::Context, subject: &str, n: usize) {
    common::publish_acked(js, (0..n).map(|_| subject.to_string()), "x").await;
}

/// The paused consumer's series where the server reports pausing, none
/// elsewhere.
fn assert_pause_series(text: &str, paused: bool) {
    if paused {
        assert_eq!(status(text, "S", "paused"), "paused");
        let p = [("stream", "S"), ("consumer", "paused")];
        assert_eq!(value(text, "nats_delivery_consumer_paused", &p), Some(1.0));
        let left = value(text, "nats_delivery_consumer_pause_remaining_seconds", &p).unwrap();
        assert!((3500.0..=3600.0).contains(&left), "{left}");
        let o = [("stream", "S"), ("consumer", "ok")];
        assert_eq!(value(text, "nats_delivery_consumer_paused", &o), Some(0.0));
        assert_eq!(
            value(text, "nats_delivery_consumer_pause_remaining_seconds", &o),
            None
        );
    } else {
        assert!(!text.contains("nats_delivery_consumer_paused{"));
    }
}

/// Each consumer of stream S has its wanted status in every text.
fn assert_statuses(texts: &[&str], wanted: &[(&str, &str)], when: &str) {
    for text in texts {
        for (c, want) in wanted {
            assert_eq!(status(text, "S", c), *want, "{c} {when}");
        }
    }
}

/// Every metric of the consumer health section shows up in `seen` (pause
/// ones only where the server reports pausing).
fn assert_every_health_metric_seen(seen: &[String], paused: bool) {
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

/// The traffic of "lagging" and "stalled", one step between two rounds of
/// scrapes: three published for every one "lagging" reads and
/// acknowledges, one for every one "stalled" receives without
/// acknowledging. Stepped, not free-running: a backlog read between two
/// publishes (or a publish the consumer counts a moment late) falls
/// between two snapshots, and a lagging consumer is one whose backlog
/// never falls in its window (on a loaded machine it read as "ok").
struct LaggingAndStalling {
    js: jetstream::Context,
    lagging: Pull,
    stalled: Pull,
    /// What "lagging" has left to read, once the last step settled.
    pending: u64,
}

impl LaggingAndStalling {
    async fn step(&mut self) {
        publish(&self.js, "s.lag", 3).await;
        assert_eq!(take_all(&self.lagging, 1, true).await, 1);
        publish(&self.js, "s.stall", 1).await;
        assert_eq!(take_all(&self.stalled, 1, false).await, 1);
        self.pending += 2;
        // The server counts a stored message into a consumer's backlog on
        // its own time: the next snapshot must see all of this step.
        let lagging = &mut self.lagging;
        let want = self.pending;
        Wait::secs("lagging's backlog to count the step", 10)
            .until_async(async || {
                let info = lagging.info().await.unwrap();
                match info.num_pending == want {
                    true => Ok(()),
                    false => Err(info.num_pending),
                }
            })
            .await;
    }
}

/// Consumers of S that are ok, stopped, rewound (recreated later), stalled
/// and lagging once traffic runs; returns the traffic of the last two.
async fn consumers_behaving_each_way(
    js: &jetstream::Context,
    s: &stream::Stream,
) -> LaggingAndStalling {
    let make = |name: &'static str, filter: &'static str| {
        let s = s.clone();
        async move { s.create_consumer(pull(name, filter)).await.unwrap() }
    };
    // ok: read and acknowledged everything, then idle.
    let ok = make("ok", "s.ok").await;
    publish(js, "s.ok", 3).await;
    assert_eq!(take_all(&ok, 3, true).await, 3);
    // stopped: messages wait, nobody reads.
    make("stopped", "s.stop").await;
    publish(js, "s.stop", 3).await;
    // rewound: read and acknowledged; recreated at sequence 1 later.
    let rw = make("rewound", "s.rw").await;
    publish(js, "s.rw", 5).await;
    assert_eq!(take_all(&rw, 5, true).await, 5);
    // stalled: keeps receiving, never acknowledges.
    let stalled = make("stalled", "s.stall").await;
    publish(js, "s.stall", 1).await;
    assert_eq!(take_all(&stalled, 1, false).await, 1);
    // lagging: three published for every one read (and acknowledged).
    let lagging = make("lagging", "s.lag").await;
    publish(js, "s.lag", 5).await;
    LaggingAndStalling {
        js: js.clone(),
        lagging,
        stalled,
        pending: 5,
    }
}

/// Stream S of subjects `s.>`.
async fn stream_s(js: &jetstream::Context) -> stream::Stream {
    js.create_stream(stream::Config {
        name: "S".into(),
        subjects: vec!["s.>".into()],
        ..Default::default()
    })
    .await
    .unwrap()
}

/// Deletes consumer `name` and creates it again from sequence 1.
async fn recreate_from_sequence_1(s: &stream::Stream, name: &str, filter: &str) {
    s.delete_consumer(name).await.unwrap();
    let mut again = pull(name, filter);
    again.deliver_policy = consumer::DeliverPolicy::ByStartSequence { start_sequence: 1 };
    s.create_consumer(again).await.unwrap();
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
    let s = stream_s(&js).await;
    let mut traffic = consumers_behaving_each_way(&js, &s).await;
    let paused = reports_pausing(&version);
    if paused {
        let mut config = pull("paused", "s.ok");
        config.pause_until = Some(time::OffsetDateTime::now_utc() + Duration::from_secs(3600));
        s.create_consumer(config).await.unwrap();
    } else {
        println!("nats-server {version} does not report pausing: the paused consumer is skipped");
    }
    traffic.step().await;

    let exporter = exporter(&server, &[]);
    let every = self::exporter(&server, &EVERY_SERIES);
    let text = common::scrape(&exporter).await;
    let every_text = common::scrape(&every).await;
    // At the first scrape, only what one snapshot decides: nothing waits
    // for "ok" and "rewound" (not yet recreated), so they are ok at once;
    // the others could still be stopped, stalled or lagging.
    let first = [
        ("ok", "ok"),
        ("rewound", "ok"),
        ("stopped", "unknown"),
        ("stalled", "unknown"),
        ("lagging", "unknown"),
    ];
    assert_statuses(&[&text, &every_text], &first, "at the first scrape");
    let one = |t: &str| {
        nats_test_server::sample::samples(t, "nats_delivery_consumer_status", &[("consumer", "ok")])
            .len()
    };
    assert_eq!((one(&text), one(&every_text)), (1, 7));
    let text = every_text;
    assert_pause_series(&text, paused);
    // A snapshot every 250 ms until the first is more than a window old.
    let start = Instant::now();
    let mut seen = vec![text];
    while start.elapsed() < Duration::from_millis(3600) {
        tokio::time::sleep(Duration::from_millis(250)).await;
        traffic.step().await;
        common::scrape(&exporter).await;
        seen.push(common::scrape(&every).await);
    }
    let text = common::scrape(&exporter).await;
    let every_text = common::scrape(&every).await;
    let later = [
        ("ok", "ok"),
        ("stopped", "stopped"),
        ("stalled", "stalled"),
        ("lagging", "lagging"),
        ("rewound", "ok"),
    ];
    assert_statuses(&[&text, &every_text], &later, "a window later");
    if paused {
        assert_eq!(status(&text, "S", "paused"), "paused");
    }
    // Recreated under the same name, starting over from sequence 1: a step
    // back, seen between two snapshots.
    recreate_from_sequence_1(&s, "rewound", "s.rw").await;
    let text = common::scrape(&exporter).await;
    assert_eq!(status(&text, "S", "rewound"), "rewound");
    nats_test_server::reference::assert_documented(&text);
    let text = common::scrape(&every).await;
    assert_eq!(status(&text, "S", "rewound"), "rewound");
    nats_test_server::reference::assert_documented(&text);
    seen.push(text);
    assert_every_health_metric_seen(&seen, paused);
}
