//! Durable mode against a real server: counts survive an exporter restart,
//! replicas share the work without double counting.
use crate::advisories_support;

use std::time::Duration;

use advisories_support::*;
use async_nats::jetstream;
use nats_delivery_exporter::{ensure_stream, DurableError};

const APP: &[(&str, &str)] = &[("account", "APP")];

/// Publishes what the server sends when messages `seqs` of consumer `C` on
/// stream `S` run out of deliveries: one max-deliveries advisory each.
pub(crate) async fn announce_deaths(app: &async_nats::Client, seqs: std::ops::RangeInclusive<u64>) {
    for seq in seqs {
        let body = format!(
            r#"{{"type":"io.nats.jetstream.advisory.v1.max_deliver","stream":"S","consumer":"C","stream_seq":{seq},"deliveries":2}}"#
        );
        app.publish(
            "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.S.C",
            body.into(),
        )
        .await
        .unwrap();
    }
    app.flush().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisories_made_while_the_exporter_is_stopped_are_counted_after_restart() {
    let s = server();
    let flags = [
        "--advisories-stream",
        "ADV",
        "--advisories-stream-max-age",
        "1h",
    ];
    let first = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let js = jetstream::new(client(&s, "app").await);
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    let labels = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let name = "nats_delivery_jetstream_max_deliveries_total";

    let_die(&js, &consumer, 0, 5, 5).await;
    wait_value(&first.registry, name, &labels, 5.0, 15).await;
    first.stop().await;

    // The exporter is down: 30 messages die.
    let_die(&js, &consumer, 5, 30, 35).await;

    // A new process starts from the stored 5 and counts exactly those 30.
    let second = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    wait_value(&second.registry, name, &labels, 35.0, 20).await;
    // Everything ADV holds was handed out and counted: nothing more comes.
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    let text = second.text();
    assert_eq!(
        exact(&text, "nats_delivery_advisories_received_total", APP),
        Some(35.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(0.0)
    );
    nats_test_server::reference::assert_documented(&text);
    second.stop().await;

    // The stream the exporter created has the advisory subjects (delivery,
    // then abandoned batches and pins) and the max age asked for.
    let mut adv = js.get_stream("ADV").await.unwrap();
    let cfg = adv.info().await.unwrap().config.clone();
    assert_eq!(cfg.max_age, Duration::from_secs(3600));
    let subjects = [
        "MAX_DELIVERIES",
        "MSG_TERMINATED",
        "MSG_NAKED",
        "BATCH_ABANDONED",
        "PINNED",
        "UNPINNED",
    ]
    .map(|kind| {
        let of = if kind == "BATCH_ABANDONED" {
            "STREAM"
        } else {
            "CONSUMER"
        };
        format!("$JS.EVENT.ADVISORY.{of}.{kind}.>")
    });
    assert_eq!(cfg.subjects, subjects);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_sharing_the_consumer_both_show_the_exact_count() {
    let s = server();
    let js = jetstream::new(client(&s, "app").await);
    // An existing, wider stream is used as-is: it also captures consumer
    // create/delete advisories, which the exporter's consumer filters out.
    js.create_stream(jetstream::stream::Config {
        name: "ADV".into(),
        subjects: vec!["$JS.EVENT.ADVISORY.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let flags = [
        "--advisories-stream",
        "ADV",
        "--advisories-consumer",
        "shared",
    ];
    let a = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let b = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;

    const N: f64 = 60.0;
    let labels = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let name = "nats_delivery_jetstream_max_deliveries_total";
    // Each replica commits its share to the totals bucket and shows the
    // stored totals: both read the whole count (alerts take the max).
    let both = |a: &Running, b: &Running| {
        let v = |r: &Running| exact(&r.text(), name, &labels).unwrap_or(0.0);
        (v(a), v(b))
    };
    publish(&js, "work", N as usize).await;
    pull_without_ack(&consumer, 60, || both(&a, &b) == (N, N)).await;
    // Nothing left to count: the totals shown are final.
    wait_all_acknowledged(&js, "shared").await;
    assert_eq!(both(&a, &b), (N, N), "a:\n{}\nb:\n{}", a.text(), b.text());
    let received =
        |r: &Running| exact(&r.text(), "nats_delivery_advisories_received_total", APP).unwrap();
    assert_eq!((received(&a), received(&b)), (N, N));
    for r in [&a, &b] {
        let t = r.text();
        assert_eq!(
            exact(&t, "nats_delivery_advisories_unknown_total", APP),
            Some(0.0)
        );
        assert_eq!(
            exact(&t, "nats_delivery_advisories_duplicate_total", APP),
            Some(0.0)
        );
        nats_test_server::reference::assert_documented(&t);
    }
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_stream_that_does_not_fit_is_a_clear_error() {
    let s = server();
    let js = jetstream::new(client(&s, "app").await);
    js.create_stream(jetstream::stream::Config {
        name: "ADV".into(),
        subjects: vec![
            "orders.>".into(),
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_NAKED.>".into(),
        ],
        ..Default::default()
    })
    .await
    .unwrap();
    let err = ensure_stream(&js, "ADV", Duration::from_secs(60), 1)
        .await
        .unwrap_err();
    match &err {
        DurableError::StreamMismatch { missing, .. } => assert_eq!(
            missing,
            &vec![
                "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.>".to_string(),
                "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.>".to_string()
            ]
        ),
        other => panic!("unexpected error {other}"),
    }
    assert!(err.to_string().contains("\"ADV\""), "{err}");
    // The listener reports itself down instead of counting nothing silently.
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = nats_delivery_exporter::AdvisoryMetrics::register(&mut registry);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let listener = nats_delivery_exporter::AccountListener {
        nats: nats_args(&s),
        account: "APP".into(),
        auth: "user:app:app-secret".parse().unwrap(),
        args: advisory_args(&["--advisories-stream", "ADV"]),
        metrics,
    };
    let task = tokio::spawn(listener.run(rx));
    let mismatch = [("account", "APP"), ("kind", "stream_mismatch")];
    Wait::secs("the mismatch counted", 20)
        .until(|| {
            let text = encode(&registry);
            let errors = "nats_delivery_advisory_listener_errors_total";
            exact(&text, errors, &mismatch).ok_or(Text(text))
        })
        .await;
    assert_eq!(
        exact(
            &encode(&registry),
            "nats_delivery_advisory_listener_up",
            APP
        ),
        Some(0.0)
    );
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .unwrap()
        .unwrap();
    // The mismatched stream was left alone.
    let mut adv = js.get_stream("ADV").await.unwrap();
    assert_eq!(adv.info().await.unwrap().config.subjects.len(), 2);
}

/// An advisory acknowledged long ago and handed out again (a consumer
/// replica that had not caught up becomes leader after a server is lost;
/// here: the consumer made again from the stream's start while the exporter
/// is stopped) is recognised as handled, not counted again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_advisories_handed_out_again_are_not_counted_again() {
    let s = server();
    let flags = ["--advisories-stream", "ADV"];
    let app = client(&s, "app").await;
    let js = jetstream::new(app.clone());
    let labels = [("account", "APP"), ("stream", "S"), ("consumer", "C")];
    let name = "nats_delivery_jetstream_max_deliveries_total";
    let first = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    // Two waves a probe apart: the series is stored with the first wave's
    // sequences behind the ack floor.
    announce_deaths(&app, 1..=20).await;
    wait_value(&first.registry, name, &labels, 20.0, 20).await;
    wait_stored_ack_floor(&js, 20).await;
    announce_deaths(&app, 21..=40).await;
    wait_value(&first.registry, name, &labels, 40.0, 20).await;
    wait_stored_ack_floor(&js, 40).await;
    first.stop().await;

    let adv = js.get_stream("ADV").await.unwrap();
    adv.delete_consumer("nats-delivery-exporter").await.unwrap();
    adv.create_consumer(jetstream::consumer::pull::Config {
        durable_name: Some("nats-delivery-exporter".into()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        deliver_policy: jetstream::consumer::DeliverPolicy::All,
        max_deliver: -1,
        ..Default::default()
    })
    .await
    .unwrap();

    let second = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    // Every advisory is handed out again; wait until all are acknowledged.
    Wait::secs("all 40 acknowledged", 30)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let mut c: jetstream::consumer::PullConsumer =
                adv.get_consumer("nats-delivery-exporter").await.unwrap();
            let floor = c.info().await.unwrap().ack_floor.stream_sequence;
            (floor == 40).then_some(()).ok_or(floor)
        })
        .await;
    let text = second.text();
    assert_eq!(exact(&text, name, &labels), Some(40.0), "{text}");
    assert_eq!(
        exact(&text, "nats_delivery_advisories_received_total", APP),
        Some(40.0)
    );
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(0.0)
    );
    second.stop().await;
}

/// A new consumer leader announces max deliveries again for every message
/// still in its replicated state (nats-server 2.9 was seen sending 60 at
/// once after a server of three was lost): far more than the last few events
/// a series remembers. Each is the same death, counted once, across an
/// exporter restart too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deaths_announced_again_by_a_new_leader_are_counted_once() {
    let s = server();
    let flags = ["--advisories-stream", "ADV"];
    let app = client(&s, "app").await;
    let js = jetstream::new(app.clone());
    let st = stream(&js, "WORK", "work", -1).await;
    let consumer = pull_consumer(&st, "worker", 2, Duration::from_millis(300)).await;
    let labels = [
        ("account", "APP"),
        ("stream", "WORK"),
        ("consumer", "worker"),
    ];
    let name = "nats_delivery_jetstream_max_deliveries_total";

    let first = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let_die(&js, &consumer, 0, 40, 40).await;
    wait_value(&first.registry, name, &labels, 40.0, 30).await;
    let adv = js.get_stream("ADV").await.unwrap();
    let announce_again = |seqs: std::ops::RangeInclusive<u64>| {
        let (app, adv) = (app.clone(), adv.clone());
        async move {
            for seq in seqs {
                let original = adv.get_raw_message(seq).await.unwrap();
                app.publish(original.subject.to_string(), original.payload.clone())
                    .await
                    .unwrap();
            }
            app.flush().await.unwrap();
        }
    };
    // While the exporter runs: 30 deaths announced again.
    announce_again(1..=30).await;
    let received = "nats_delivery_advisories_received_total";
    wait_value(&first.registry, received, APP, 70.0, 30).await;
    let text = first.text();
    assert_eq!(exact(&text, name, &labels), Some(40.0), "{text}");
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(30.0)
    );
    first.stop().await;

    // While it is stopped: all 40 again; a new process knows them from the store.
    announce_again(1..=40).await;
    let second = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    wait_value(&second.registry, received, APP, 110.0, 30).await;
    let text = second.text();
    assert_eq!(exact(&text, name, &labels), Some(40.0), "{text}");
    assert_eq!(
        exact(&text, "nats_delivery_advisories_duplicate_total", APP),
        Some(70.0)
    );
    // A message that really dies now is still counted.
    let_die(&js, &consumer, 40, 1, 111).await;
    wait_value(&second.registry, name, &labels, 41.0, 30).await;
    wait_all_acknowledged(&js, "nats-delivery-exporter").await;
    let text = second.text();
    assert_eq!(exact(&text, name, &labels), Some(41.0), "{text}");
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_wider_stream_the_exporters_own_requests_do_not_keep_it_busy() {
    let s = server();
    let js = jetstream::new(client(&s, "app").await);
    // Before 2.10 the consumer's filter is ignored: every JetStream request
    // of the account adds an API audit advisory to this stream, and the
    // exporter's consumer is handed it.
    js.create_stream(jetstream::stream::Config {
        name: "ADV".into(),
        subjects: vec!["$JS.EVENT.ADVISORY.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let flags = ["--advisories-stream", "ADV"];
    let running = start_listener(&s, "APP", "app", advisory_args(&flags)).await;
    let app = client(&s, "app").await;
    announce_deaths(&app, 1..=3).await;
    let labels = [("account", "APP"), ("stream", "S"), ("consumer", "C")];
    let name = "nats_delivery_jetstream_max_deliveries_total";
    wait_value(&running.registry, name, &labels, 3.0, 20).await;
    // Idle, the stream grows by this wait's one request per look (and a
    // probe's every 5 s). An exporter that made a request for each batch,
    // audits included, answered its own audit with the next, for ever (some
    // 50 a second on 2.9.10): no 5 quiet looks in a row then.
    let mut adv = js.get_stream("ADV").await.unwrap();
    let mut last = adv.info().await.unwrap().state.last_sequence;
    let mut quiet = 0;
    Wait::secs("5 looks at ADV in a row with little more stored", 30)
        .every(Duration::from_millis(200))
        .until_async(async || {
            let now = adv
                .info()
                .await
                .map_err(|e| e.to_string())?
                .state
                .last_sequence;
            let grown = now - last;
            last = now;
            quiet = if grown <= 2 { quiet + 1 } else { 0 };
            (quiet >= 5)
                .then_some(())
                .ok_or(format!("{grown} more advisories since the last look"))
        })
        .await;
    assert_eq!(
        exact(
            &running.text(),
            "nats_delivery_advisories_received_total",
            APP
        ),
        Some(3.0)
    );
    running.stop().await;
}
