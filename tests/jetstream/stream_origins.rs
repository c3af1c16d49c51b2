//! Mirrors and sources, against a real server where one `/jsz` shows both
//! ends: account A holds ORIG (max_msgs 5) and its mirror M; account B
//! holds S, which sources ORIG through A's exported API (`$JS.A.API`) and
//! also an origin no account holds. The exporter reports each one's lag
//! exactly as the server does, the age of its last contact (absent for the
//! origin never reached), and, once A stops exporting the delivery
//! subject, an age that grows while the server's lag stays as it was
//! (2.10+: 2.9.10 keeps delivering through that reload).
use crate::common;

use async_nats::jetstream;
use nats_test_server::sample::value;
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;
use serde_json::{json, Value};

/// The stream export that carries what ORIG sends to S, and B's import of
/// it; removing both (the import first) cuts S off.
pub(crate) const DELIVERY_EXPORT: &str = r#", {stream: "deliver.B.>"}"#;
pub(crate) const DELIVERY_IMPORT: &str = r#",
                         {stream: {account: A, subject: "deliver.B.>"}}"#;

/// Accounts A (exports its JetStream API and S's delivery subject) and B.
pub(crate) fn accounts() -> String {
    format!(
        "accounts {{\n\
         A: {{ jetstream: enabled, users: [{{user: a, password: a}}],\n\
              exports: [ {{service: \"$JS.API.>\"}}, {{service: \"$JS.FC.>\"}}{DELIVERY_EXPORT} ] }}\n\
         B: {{ jetstream: enabled, users: [{{user: b, password: b}}],\n\
              imports: [ {{service: {{account: A, subject: \"$JS.API.>\"}}, to: \"$JS.A.API.>\"}},\n\
                         {{service: {{account: A, subject: \"$JS.FC.>\"}}}}{DELIVERY_IMPORT} ] }}\n\
         }}\n"
    )
}

pub(crate) async fn connect(server: &NatsServer, user: &str) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password(user.into(), user.into())
        .connect(server.client_url())
        .await
        .unwrap()
}

/// Creates stream `config` through `client`'s account.
pub(crate) async fn create(client: &async_nats::Client, config: Value) {
    let subject = format!("$JS.API.STREAM.CREATE.{}", config["name"].as_str().unwrap());
    let reply = client
        .request(subject, config.to_string().into())
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(v.get("error").is_none(), "{v}");
}

/// ORIG and M in account A, S in account B.
pub(crate) async fn origin_mirror_and_source(a: &async_nats::Client, b: &async_nats::Client) {
    let plain = json!({"storage": "file", "num_replicas": 1, "max_msgs": -1});
    let with = |extra: Value| {
        let mut c = plain.clone();
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    create(
        a,
        with(json!({"name": "ORIG", "subjects": ["orig.>"], "max_msgs": 5})),
    )
    .await;
    create(a, with(json!({"name": "M", "mirror": {"name": "ORIG"}}))).await;
    let external = json!({"api": "$JS.A.API", "deliver": "deliver.B"});
    let nowhere = json!({"api": "$JS.NOWHERE.API", "deliver": "deliver.B.none"});
    let sources = json!([
        {"name": "ORIG", "external": external},
        {"name": "GONE", "external": nowhere},
    ]);
    create(b, with(json!({"name": "S", "sources": sources}))).await;
}

/// The server's own entry for stream `name` of `account`.
pub(crate) fn server_stream(server: &NatsServer, account: &str, name: &str) -> Value {
    let jsz = common::monitor_json(&server.monitor_url(), "jsz?accounts=true&streams=true");
    let accounts = jsz["account_details"].as_array().unwrap();
    let a = accounts.iter().find(|a| a["name"] == account).unwrap();
    let streams = a["stream_detail"].as_array().unwrap();
    streams.iter().find(|s| s["name"] == name).unwrap().clone()
}

pub(crate) fn labels<'a>(
    account: &'a str,
    stream: &'a str,
    kind: &'a str,
    origin: &'a str,
    api: &'a str,
) -> [(&'a str, &'a str); 5] {
    [
        ("account", account),
        ("stream", stream),
        ("kind", kind),
        ("origin_stream", origin),
        ("origin_api", api),
    ]
}

const LAG: &str = "nats_delivery_stream_origin_lag_messages";
const AGE: &str = "nats_delivery_stream_origin_contact_age_seconds";

#[tokio::test]
async fn lag_and_contact_of_a_mirror_and_a_source_from_another_account() {
    let server = NatsServer::builder()
        .jetstream()
        .config(&accounts())
        .start();
    let (a, b) = (connect(&server, "a").await, connect(&server, "b").await);
    origin_mirror_and_source(&a, &b).await;
    let js = jetstream::new(a.clone());
    common::publish_acked(&js, (1..=3).map(|i| format!("orig.{i}")), "m").await;
    Wait::secs("M and S to copy 3 messages", 20)
        .until(|| {
            let copied = |acc, s| server_stream(&server, acc, s)["state"]["last_seq"] == 3;
            copied("A", "M") && copied("B", "S")
        })
        .await;

    let exporter = common::exporter(&[server.monitor_url()], &[]);
    let text = common::scrape(&exporter).await;
    nats_test_server::reference::assert_documented(&text);
    let m = labels("A", "M", "mirror", "ORIG", "");
    let s = labels("B", "S", "source", "ORIG", "$JS.A.API");
    let gone = labels("B", "S", "source", "GONE", "$JS.NOWHERE.API");
    let server_lag = |acc, name, origin: Option<&str>| {
        let st = server_stream(&server, acc, name);
        let o = match origin {
            None => st["mirror"].clone(),
            Some(origin) => {
                let sources = st["sources"].as_array().unwrap();
                sources
                    .iter()
                    .find(|o| o["name"] == origin)
                    .unwrap()
                    .clone()
            }
        };
        o["lag"].as_f64()
    };
    assert_eq!(value(&text, LAG, &m), server_lag("A", "M", None), "{text}");
    assert_eq!(value(&text, LAG, &s), server_lag("B", "S", Some("ORIG")));
    assert_eq!(value(&text, LAG, &gone), server_lag("B", "S", Some("GONE")));
    assert!(value(&text, AGE, &m).is_some(), "{text}");
    assert!(value(&text, AGE, &s).is_some(), "{text}");
    // Never reached: no age, not 0.
    assert_eq!(value(&text, AGE, &gone), None, "{text}");
    // ORIG itself has no origin.
    assert!(!text.contains(r#"stream="ORIG",kind="#), "{text}");

    // nats-server 2.9.10 keeps delivering through a reload that removes
    // the export and the import (S heard from ORIG 1 s before, 4 s after
    // the reload): there is no cut to see.
    let version = nats_test_server::version_numbers(&nats_test_server::version_under_test());
    if version < vec![2, 10] {
        return;
    }
    // A stops exporting S's delivery subject: S hears nothing more (not even
    // the heartbeats that keep an idle source's age below a few seconds),
    // its age grows past what it was, and the server's lag stays as it was
    // while ORIG takes 12 messages more.
    let before = value(&text, AGE, &s).unwrap();
    server.reload_with(DELIVERY_IMPORT, "");
    server.reload_with(DELIVERY_EXPORT, "");
    let age_past = |past: f64| {
        let exporter = &exporter;
        async move || {
            let text = common::scrape(exporter).await;
            let age = value(&text, AGE, &s);
            if age.is_some_and(|a| a > past) {
                Ok(text)
            } else {
                Err(age)
            }
        }
    };
    let text = Wait::secs("S's contact age to pass 5 s", 30)
        .every(std::time::Duration::from_millis(250))
        .until_async(age_past(before.max(5.0)))
        .await;
    let cut_at = value(&text, AGE, &s).unwrap();
    common::publish_acked(&js, (4..=15).map(|i| format!("orig.{i}")), "m").await;
    Wait::secs("M to copy 15 messages", 20)
        .until(|| server_stream(&server, "A", "M")["state"]["last_seq"] == 15)
        .await;
    let text = Wait::secs("S's contact age to grow further", 30)
        .every(std::time::Duration::from_millis(250))
        .until_async(age_past(cut_at + 1.0))
        .await;
    assert_eq!(value(&text, LAG, &s), server_lag("B", "S", Some("ORIG")));
    // 12 messages it never got, 7 of them gone from ORIG: the lag says 0.
    assert_eq!(value(&text, LAG, &s), Some(0.0));
    assert_eq!(value(&text, LAG, &m), Some(0.0));
    assert_eq!(server_stream(&server, "B", "S")["state"]["last_seq"], 3);
    // S is 12 behind an origin that removes (max_msgs 5), but reaches it
    // through `$JS.A.API`: no /jsz of S's shows it, so nothing is forecast.
    let forecast = "nats_delivery_stream_origin_removal_forecast_seconds";
    assert_eq!(value(&text, forecast, &s), None, "{text}");
}

const REMOVED: &str = "nats_delivery_stream_origin_removed_before_copy_messages_total";
const EXACT: &str = "nats_delivery_stream_origin_removed_before_copy_exact";

/// The payloads stream `name` of `b`'s account holds, read message by message.
pub(crate) async fn payloads(b: &async_nats::Client, name: &str) -> Vec<String> {
    let stream = jetstream::new(b.clone()).get_stream(name).await.unwrap();
    let st = server_state(&stream).await;
    let mut out = Vec::new();
    for seq in st.0..=st.1 {
        if let Ok(m) = stream.get_raw_message(seq).await {
            out.push(String::from_utf8(m.payload.to_vec()).unwrap());
        }
    }
    out
}

async fn server_state(stream: &jetstream::stream::Stream) -> (u64, u64) {
    let info = stream.get_info().await.unwrap();
    (info.state.first_sequence, info.state.last_sequence)
}

#[tokio::test]
async fn what_the_origin_removed_while_a_mirror_and_a_source_were_cut_off_is_counted() {
    let version = nats_test_server::version_numbers(&nats_test_server::version_under_test());
    let server = NatsServer::builder()
        .jetstream()
        .config(&accounts())
        .start();
    let (a, b) = (connect(&server, "a").await, connect(&server, "b").await);
    let plain = json!({"storage": "file", "num_replicas": 1, "max_msgs": -1});
    let mut orig = plain.clone();
    orig.as_object_mut().unwrap().extend(
        json!({"name": "ORIG", "subjects": ["orig.>"], "max_msgs": 5})
            .as_object()
            .unwrap()
            .clone(),
    );
    create(&a, orig).await;
    let external = json!({"api": "$JS.A.API", "deliver": "deliver.B"});
    for (name, how) in [
        (
            "MB",
            json!({"mirror": {"name": "ORIG", "external": external}}),
        ),
        (
            "S1",
            json!({"sources": [{"name": "ORIG", "external": external}]}),
        ),
    ] {
        let mut c = plain.clone();
        c.as_object_mut()
            .unwrap()
            .extend(how.as_object().unwrap().clone());
        c["name"] = name.into();
        create(&b, c).await;
    }
    let js = jetstream::new(a.clone());
    // Payloads m1 to m15: ORIG's sequences.
    let publish = async |range: std::ops::RangeInclusive<u32>| {
        for i in range {
            let ack = js.publish("orig.x", format!("m{i}").into()).await.unwrap();
            ack.await.unwrap();
        }
    };
    publish(1..=3).await;
    let copied = |name: &str, n: u64| server_stream(&server, "B", name)["state"]["messages"] == n;
    Wait::secs("MB and S1 to copy 3 messages", 20)
        .until(|| copied("MB", 3) && copied("S1", 3))
        .await;
    let exporter = common::exporter(&[server.monitor_url()], &[]);
    let mb = labels("B", "MB", "mirror", "ORIG", "$JS.A.API");
    let s1 = labels("B", "S1", "source", "ORIG", "$JS.A.API");
    let text = common::scrape(&exporter).await;
    assert_eq!(value(&text, REMOVED, &mb), Some(0.0), "{text}");
    if version < vec![2, 10] {
        return; // 2.9.10 keeps delivering through the reload (above).
    }
    server.reload_with(DELIVERY_IMPORT, "");
    server.reload_with(DELIVERY_EXPORT, "");
    Wait::secs("MB's contact age to pass 5 s", 30)
        .every(std::time::Duration::from_millis(250))
        .until_async(async || {
            let text = common::scrape(&exporter).await;
            value(&text, AGE, &mb).is_some_and(|a| a > 5.0)
        })
        .await;
    // ORIG keeps 11 to 15: 4 to 10 are removed before either copies them.
    publish(4..=15).await;
    let text = common::scrape(&exporter).await;
    assert_eq!(value(&text, REMOVED, &mb), Some(0.0), "{text}");
    // Contact again: the export first, then the import.
    let (export_end, import_end) = (
        r#"{service: "$JS.FC.>"} ]"#,
        r#"{service: {account: A, subject: "$JS.FC.>"}} ]"#,
    );
    let restored = |end: &str, back: &str| format!("{}{back} ]", end.trim_end_matches(" ]"));
    server.reload_with(export_end, &restored(export_end, DELIVERY_EXPORT));
    server.reload_with(import_end, &restored(import_end, DELIVERY_IMPORT));
    Wait::secs("MB and S1 to copy 11 to 15", 30)
        .until(|| copied("MB", 8) && copied("S1", 8))
        .await;

    // The truth, from what each holds.
    let all: Vec<String> = (1..=15).map(|i| format!("m{i}")).collect();
    let never: Vec<String> = (4..=10).map(|i| format!("m{i}")).collect();
    for name in ["MB", "S1"] {
        let got = payloads(&b, name).await;
        let missing: Vec<String> = all.iter().filter(|m| !got.contains(m)).cloned().collect();
        assert_eq!(missing, never, "{name} holds {got:?}");
    }
    let text = common::scrape(&exporter).await;
    nats_test_server::reference::assert_documented(&text);
    assert_eq!(value(&text, REMOVED, &mb), Some(7.0), "{text}");
    assert_eq!(value(&text, EXACT, &mb), Some(1.0), "{text}");
    // Sources say which origin sequence they copied last from 2.15 on.
    let (removed, exact) = if version >= vec![2, 15] {
        (Some(7.0), Some(1.0))
    } else {
        (None, None)
    };
    assert_eq!(value(&text, REMOVED, &s1), removed, "{text}");
    assert_eq!(value(&text, EXACT, &s1), exact, "{text}");
}
