//! The six consumers of the consumer-health scenario and the application
//! behaviour that puts each into one status. Each has its own stream
//! (`HEALTH_<STATUS>`, subject `health.<status>`) and is named `app`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull, consumer::PullConsumer, stream, Context};
use futures::StreamExt;
use tokio::task::JoinSet;

use crate::jetstream::{err, fetch};

/// The consumer's name in every health stream.
pub const CONSUMER: &str = "app";

/// The stream driven into `status`.
pub fn stream_of(status: &str) -> String {
    format!("HEALTH_{}", status.to_uppercase())
}

/// Creates the stream for `status` and its consumer `app` (pull, explicit
/// acks, a long ack wait so that nothing is redelivered during the lab).
pub async fn create(js: &Context, status: &str, paused: bool) -> anyhow::Result<PullConsumer> {
    create_with_backlog(js, status, paused, 0).await
}

/// As [`create`], with `backlog` messages stored before the consumer
/// exists: it has never had nothing pending, at any scrape.
pub async fn create_with_backlog(
    js: &Context,
    status: &str,
    paused: bool,
    backlog: u64,
) -> anyhow::Result<PullConsumer> {
    let name = stream_of(status);
    let stream = js
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![format!("health.{status}")],
            ..Default::default()
        })
        .await
        .map_err(err)?;
    publish(js, status, backlog).await?;
    let pause_until = paused.then(|| time::OffsetDateTime::now_utc() + Duration::from_secs(3600));
    stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.into()),
            ack_wait: Duration::from_secs(600),
            pause_until,
            ..Default::default()
        })
        .await
        .map_err(err)
}

/// Publishes `n` messages to `health.<status>`, each stored before the next.
pub async fn publish(js: &Context, status: &str, n: u64) -> anyhow::Result<()> {
    for i in 0..n {
        js.publish(format!("health.{status}"), i.to_string().into())
            .await
            .map_err(err)?
            .await
            .map_err(err)?;
    }
    Ok(())
}

/// The applications behind the consumers, running until [`Drive::stop`].
pub struct Drive {
    tasks: JoinSet<anyhow::Result<()>>,
    running: Arc<AtomicBool>,
    /// Cleared to make the lagging application stop taking messages (its
    /// delivered position then stays put, so that the lab can read the true
    /// lag at one moment).
    pub lagging_consumes: Arc<AtomicBool>,
}

impl Drive {
    /// Starts the applications: `ok` takes and acknowledges everything as it
    /// comes; `lagging` gets 10 messages a second and takes 2; `stalled`
    /// holds 10 messages unacknowledged and keeps asking for more (none
    /// come); `stopped` has 10 messages waiting and nobody asking. The
    /// rewound and paused consumers need no application.
    pub async fn start(js: &Context, consumers: &Consumers) -> anyhow::Result<Drive> {
        let running = Arc::new(AtomicBool::new(true));
        let lagging_consumes = Arc::new(AtomicBool::new(true));
        let mut tasks = JoinSet::new();

        let (js1, c, run) = (js.clone(), consumers.ok.clone(), running.clone());
        tasks.spawn(async move {
            while run.load(Ordering::Relaxed) {
                publish(&js1, "ok", 1).await?;
                for m in fetch(&c, 10).await? {
                    m.ack().await.map_err(err)?;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(())
        });

        // A backlog from the start, so that it is above zero at every scrape.
        publish(js, "lagging", 20).await?;
        let (js2, run) = (js.clone(), running.clone());
        tasks.spawn(async move {
            while run.load(Ordering::Relaxed) {
                publish(&js2, "lagging", 1).await?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(())
        });
        let (c, run, consumes) = (
            consumers.lagging.clone(),
            running.clone(),
            lagging_consumes.clone(),
        );
        tasks.spawn(async move {
            while run.load(Ordering::Relaxed) {
                if consumes.load(Ordering::Relaxed) {
                    for m in fetch(&c, 1).await? {
                        m.ack().await.map_err(err)?;
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Ok(())
        });

        publish(js, "stalled", 10).await?;
        let (c, run) = (consumers.stalled.clone(), running.clone());
        tasks.spawn(async move {
            let mut held = fetch(&c, 10).await?;
            anyhow::ensure!(held.len() == 10, "stalled: took {} of 10", held.len());
            while run.load(Ordering::Relaxed) {
                // Long pulls: one is waiting at (almost) every scrape.
                let mut batch = c
                    .fetch()
                    .max_messages(1)
                    .expires(Duration::from_secs(2))
                    .messages()
                    .await
                    .map_err(err)?;
                while let Some(m) = batch.next().await {
                    held.push(m.map_err(err)?);
                }
            }
            drop(held);
            Ok(())
        });

        publish(js, "paused", 5).await?;
        Ok(Drive {
            tasks,
            running,
            lagging_consumes,
        })
    }

    /// Stops every application and reports the first error one of them met.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        self.running.store(false, Ordering::Relaxed);
        while let Some(r) = self.tasks.join_next().await {
            r??;
        }
        Ok(())
    }
}

/// The consumers the applications use.
pub struct Consumers {
    /// Keeps up.
    pub ok: PullConsumer,
    /// Falls behind at a known rate.
    pub lagging: PullConsumer,
    /// Holds messages without acknowledging.
    pub stalled: PullConsumer,
}

/// Creates every health stream and consumer (the paused one paused for an
/// hour) and returns the ones an application drives.
pub async fn create_all(js: &Context) -> anyhow::Result<Consumers> {
    let out = Consumers {
        ok: create(js, "ok", false).await?,
        lagging: create(js, "lagging", false).await?,
        stalled: create(js, "stalled", false).await?,
    };
    // Its application is gone: nobody ever asks. Its backlog is there
    // before it is: a scrape that saw nothing pending would rightly rule
    // `stopped` out for a window (and say `ok`).
    create_with_backlog(js, "stopped", false, 10).await?;
    create(js, "rewound", false).await?;
    create(js, "paused", true).await?;
    Ok(out)
}

/// The rewound consumer's application takes and acknowledges 30 messages.
pub async fn consume_rewound(js: &Context) -> anyhow::Result<()> {
    publish(js, "rewound", 30).await?;
    let c = stream_consumer(js, "rewound").await?;
    let mut taken = 0;
    while taken < 30 {
        for m in fetch(&c, 30).await? {
            m.ack().await.map_err(err)?;
            taken += 1;
        }
    }
    Ok(())
}

/// Replaces the rewound consumer with one of the same name that starts at
/// stream sequence 10: its delivered position goes from 30 back to 9.
pub async fn rewind(js: &Context) -> anyhow::Result<()> {
    let stream = js.get_stream(stream_of("rewound")).await.map_err(err)?;
    stream.delete_consumer(CONSUMER).await.map_err(err)?;
    stream
        .create_consumer(pull::Config {
            durable_name: Some(CONSUMER.into()),
            ack_wait: Duration::from_secs(600),
            deliver_policy: jetstream::consumer::DeliverPolicy::ByStartSequence {
                start_sequence: 10,
            },
            ..Default::default()
        })
        .await
        .map_err(err)?;
    Ok(())
}

/// The consumer `app` of the stream for `status`.
pub async fn stream_consumer(js: &Context, status: &str) -> anyhow::Result<PullConsumer> {
    js.get_stream(stream_of(status))
        .await
        .map_err(err)?
        .get_consumer(CONSUMER)
        .await
        .map_err(err)
}

/// JetStream in account OTHER, as user `other`.
pub async fn connect_other(lab: &crate::Lab) -> anyhow::Result<Context> {
    let client = async_nats::ConnectOptions::new()
        .user_and_password("other".into(), "other-secret".into())
        .connect(lab.nats.client_url())
        .await?;
    Ok(jetstream::new(client))
}

/// Deletes every health stream of account APP (and so its consumer and its
/// series).
pub async fn delete_all(js: &Context) -> anyhow::Result<()> {
    for status in super::health::STATUSES {
        js.delete_stream(stream_of(status)).await.map_err(err)?;
    }
    Ok(())
}
