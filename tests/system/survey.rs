//! Surveys over the system account, against a real 3-node cluster: every
//! server answers once with its own monitoring reply; a killed server is
//! named missing; a reply that comes after its survey ended is counted late
//! and its server expected from then on.
use std::time::{Duration, Instant};

use futures::StreamExt;
use nats_delivery_exporter::{Survey, SurveyOutcome, Waiting};
use nats_test_server::wait::Wait;
use nats_test_server::NatsServer;

const ACCOUNTS: &str = r#"
accounts {
  SYS { users: [ { user: sys, password: sys-secret } ] }
  APP { users: [ { user: app, password: app-secret } ], jetstream: enabled }
}
system_account: SYS
"#;

const WAITING: Waiting = Waiting {
    gap: Duration::from_millis(500),
    deadline: Duration::from_secs(5),
};

async fn system_client(server: &NatsServer) -> async_nats::Client {
    async_nats::ConnectOptions::with_user_and_password("sys".into(), "sys-secret".into())
        .connect(server.client_url())
        .await
        .expect("system account connection")
}

fn names(outcome: &SurveyOutcome) -> Vec<String> {
    let mut names: Vec<_> = outcome
        .answers
        .iter()
        .map(|a| a.server.name.clone())
        .collect();
    names.sort();
    names
}

/// Asks until all `n` servers answer (routes come up in the first seconds).
async fn until_all_answer(survey: &Survey, n: usize) -> SurveyOutcome {
    let all = Wait::secs(format!("all {n} servers to answer"), 30)
        .every(Duration::from_millis(200))
        .try_until_async(async || {
            let outcome = survey
                .ask("VARZ", &serde_json::json!({}), WAITING)
                .await
                .unwrap();
            match outcome.answers.len() == n {
                true => Ok(outcome),
                false => Err(outcome),
            }
        })
        .await;
    all.unwrap_or_else(|outcome| outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_answers_once_and_a_silent_one_is_missing() {
    let mut servers = nats_test_server::cluster(3, ACCOUNTS);
    let client = system_client(&servers[0]).await;
    let survey = Survey::new(client, 0).await.unwrap();

    let outcome = until_all_answer(&survey, 3).await;
    assert_eq!(names(&outcome), ["n0", "n1", "n2"]);
    assert_eq!((outcome.expected, outcome.missing.len()), (3, 0));
    assert_eq!((outcome.broken, outcome.duplicates), (0, 0));
    for answer in &outcome.answers {
        // Each one's data is that server's own /varz.
        let varz: serde_json::Value =
            serde_json::from_slice(answer.data.as_ref().unwrap()).unwrap();
        assert_eq!(varz["server_name"], answer.server.name.as_str());
        assert_eq!(varz["server_id"], answer.server.id.as_str());
        assert_eq!(answer.server.cluster.as_deref(), Some("C"));
    }

    // All three expected, all three answered: the survey ends without
    // waiting for the gap.
    let started = Instant::now();
    let jsz = survey
        .ask(
            "JSZ",
            &serde_json::json!({"accounts": true}),
            Waiting {
                gap: Duration::from_secs(20),
                deadline: Duration::from_secs(30),
            },
        )
        .await
        .unwrap();
    assert_eq!(names(&jsz), ["n0", "n1", "n2"]);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "waited for the gap"
    );

    // n2 killed: named missing, still expected.
    drop(servers.pop());
    let outcome = survey
        .ask("VARZ", &serde_json::json!({}), WAITING)
        .await
        .unwrap();
    assert_eq!(names(&outcome), ["n0", "n1"]);
    let missing: Vec<_> = outcome.missing.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(missing, ["n2"]);
    assert_eq!(outcome.expected, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_reply_is_counted_and_its_server_expected() {
    let server = NatsServer::builder().name("solo").config(ACCOUNTS).start();
    let survey = Survey::new(system_client(&server).await, 0).await.unwrap();
    // A responder in the system account that answers once, after the
    // survey has given up, as a server far away or overloaded would.
    let slow = system_client(&server).await;
    let mut requests = slow.subscribe("$SYS.REQ.SERVER.PING.VARZ").await.unwrap();
    // The server must know the subscription before the first survey: a
    // flush only empties the client's buffer, and a responder that missed
    // the first request would answer the second at once, not late.
    nats_test_server::app::sync_with_server(&slow).await;
    let (given_up, late) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        if let Some(request) = requests.next().await {
            let _ = late.await;
            let reply = r#"{"server":{"name":"far","id":"NFAR"},"data":{"server_name":"far"}}"#;
            let _ = slow.publish(request.reply.unwrap(), reply.into()).await;
            let _ = slow.flush().await;
        }
    });
    let waiting = Waiting {
        gap: Duration::from_millis(300),
        deadline: Duration::from_secs(1),
    };
    let first = survey
        .ask("VARZ", &serde_json::json!({}), waiting)
        .await
        .unwrap();
    assert_eq!(names(&first), ["solo"]);
    assert_eq!((first.expected, first.late_total), (1, 0));
    given_up.send(()).unwrap();
    // The late reply is counted when it arrives; on a loaded machine that
    // can be seconds after it was sent, so ask until it has been.
    Wait::secs("a late reply counted", 30)
        .every(Duration::from_millis(500))
        .until_async(async || {
            let next = survey
                .ask("VARZ", &serde_json::json!({}), waiting)
                .await
                .unwrap();
            assert_eq!(names(&next), ["solo"]);
            if next.late_total == 1 {
                return Ok(());
            }
            assert_eq!(next.late_total, 0);
            Err(next.late_total)
        })
        .await;
    // "far" is expected (and missing, as it does not answer again) from the
    // next survey on.
    let second = survey
        .ask("VARZ", &serde_json::json!({}), waiting)
        .await
        .unwrap();
    assert_eq!(names(&second), ["solo"]);
    assert_eq!((second.expected, second.late_total), (2, 1));
    let missing: Vec<_> = second.missing.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(missing, ["far"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_server_slow_to_answer_first_is_awaited_past_the_gap() {
    let server = NatsServer::builder().name("solo").config(ACCOUNTS).start();
    let survey = Survey::new(system_client(&server).await, 0).await.unwrap();
    let waiting = Waiting {
        gap: Duration::from_millis(300),
        deadline: Duration::from_secs(60),
    };
    let first = survey
        .ask("VARZ", &serde_json::json!({}), waiting)
        .await
        .unwrap();
    assert_eq!(names(&first), ["solo"]);
    // Stopped, the server reads the request only when resumed, well after
    // the gap: before any reply the gap does not run.
    server.signal("-STOP");
    let asked = Instant::now();
    let resume = async {
        while asked.elapsed() < waiting.gap * 4 {
            tokio::time::sleep(waiting.gap).await;
        }
        server.signal("-CONT");
    };
    let options = serde_json::json!({});
    let (second, ()) = tokio::join!(survey.ask("VARZ", &options, waiting), resume);
    let second = second.unwrap();
    assert_eq!(names(&second), ["solo"]);
    assert_eq!((second.missing.len(), second.late_total), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_busy_with_our_request_is_awaited_and_only_it() {
    let server = NatsServer::builder().name("solo").config(ACCOUNTS).start();
    let survey = Survey::new(system_client(&server).await, 0).await.unwrap();
    // A responder answering each survey a second after it, as a server
    // still handling another system request of ours would.
    let busy = system_client(&server).await;
    let mut requests = busy.subscribe("$SYS.REQ.SERVER.PING.VARZ").await.unwrap();
    nats_test_server::app::sync_with_server(&busy).await;
    tokio::spawn(async move {
        while let Some(request) = requests.next().await {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let reply = r#"{"server":{"name":"busy","id":"NBUSY"},"data":{"server_name":"busy"}}"#;
            let _ = busy.publish(request.reply.unwrap(), reply.into()).await;
            let _ = busy.flush().await;
        }
    });
    let waiting = Waiting {
        gap: Duration::from_millis(300),
        deadline: Duration::from_secs(60),
    };
    let options = serde_json::json!({});
    let awaited = ["busy".to_string()];
    let outcome = survey
        .ask_awaiting("VARZ", &options, waiting, &awaited)
        .await
        .unwrap();
    assert_eq!(names(&outcome), ["busy", "solo"]);
    assert_eq!((outcome.missing.len(), outcome.late_total), (0, 0));
    // Not awaited, it answers after the gap: missing from this survey.
    let outcome = survey.ask("VARZ", &options, waiting).await.unwrap();
    assert_eq!(names(&outcome), ["solo"]);
    let missing: Vec<_> = outcome.missing.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(missing, ["busy"]);
}
