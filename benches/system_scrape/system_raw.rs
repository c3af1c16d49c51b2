//! The JSZ request the exporter makes of each server through the system
//! account, made here alone: what the servers and the NATS connection cost
//! without the exporter.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use nats_test_server::NatsServer;

/// A system-account connection and the IDs and names of the servers to ask.
pub struct SystemRaw {
    client: async_nats::Client,
    ids: Vec<String>,
    names: Vec<String>,
}

impl SystemRaw {
    /// Connects to `servers[0]` as the system user and reads every server's
    /// ID and name from its /varz.
    pub async fn connect(servers: &[NatsServer], http: &reqwest::Client) -> SystemRaw {
        let client =
            async_nats::ConnectOptions::with_user_and_password("sys".into(), "sys-secret".into())
                .request_timeout(Some(Duration::from_secs(60)))
                .connect(servers[0].client_url())
                .await
                .unwrap();
        let (mut ids, mut names) = (Vec::new(), Vec::new());
        for server in servers {
            let varz: serde_json::Value = http
                .get(format!("{}/varz", server.monitor_url()))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            ids.push(varz["server_id"].as_str().unwrap().to_string());
            names.push(varz["server_name"].as_str().unwrap().to_string());
        }
        SystemRaw { client, ids, names }
    }

    /// The exporter's JSZ request of server `n`: the seconds it took and
    /// the reply (the server's envelope around the /jsz data).
    #[allow(dead_code, reason = "the server cost benchmark asks through `ask`")]
    pub async fn jsz(&self, n: usize) -> (f64, Bytes) {
        let options = r#"{"accounts":true,"streams":true,"consumer":true,"config":true,"offset":0,"limit":1024}"#;
        self.ask(n, "JSZ", options).await
    }

    /// The request `kind` (`VARZ`, `JSZ`, ...; `ACCSTATZ` is the account
    /// ping filtered by the server's name, as the exporter asks it) of
    /// server `n` with the JSON `options`: the seconds it took and the
    /// reply.
    pub async fn ask(&self, n: usize, kind: &str, options: &str) -> (f64, Bytes) {
        let (subject, options) = match kind {
            "ACCSTATZ" => {
                let mut o: serde_json::Value = serde_json::from_str(options).unwrap();
                o["server_name"] = self.names[n].clone().into();
                ("$SYS.REQ.ACCOUNT.PING.STATZ".to_string(), o.to_string())
            }
            _ => (
                format!("$SYS.REQ.SERVER.{}.{kind}", self.ids[n]),
                options.to_string(),
            ),
        };
        let start = Instant::now();
        let reply = self.client.request(subject, options.into()).await.unwrap();
        (start.elapsed().as_secs_f64(), reply.payload)
    }

    /// A VARZ survey as the exporter starts each poll with: the seconds
    /// until every server has answered.
    #[allow(dead_code, reason = "only the system scrape benchmark surveys")]
    pub async fn survey(&self) -> f64 {
        let inbox = self.client.new_inbox();
        let mut replies = self.client.subscribe(inbox.clone()).await.unwrap();
        self.client.flush().await.unwrap();
        let start = Instant::now();
        self.client
            .publish_with_reply("$SYS.REQ.SERVER.PING.VARZ", inbox, "{}".into())
            .await
            .unwrap();
        for _ in &self.ids {
            replies.next().await.unwrap();
        }
        start.elapsed().as_secs_f64()
    }
}
