//! The totals bucket of durable mode: a JetStream key-value bucket in the
//! account, created by the exporter and replicated like its advisory stream.
//!
//! Writes are compare-and-set on each key's revision, so replicas sharing
//! the advisory consumer never overwrite each other: a write that lost the
//! race is reported as a conflict, the key is read again and the batch is
//! applied anew. All writes of a batch are sent at once and their
//! acknowledgements awaited together, so a batch costs one round trip.

use std::collections::HashMap;

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures::StreamExt;

use super::totals::Totals;
use crate::nats::retry::ListenerError;

/// Writes no stream answered are sent again this many times, this far apart.
const UNHEARD_RETRIES: usize = 10;
const UNHEARD_PAUSE: std::time::Duration = std::time::Duration::from_millis(200);

/// Longest wait for the next stored key while loading the bucket.
const LOAD_STALL: std::time::Duration = std::time::Duration::from_secs(10);

/// One key's stored totals and the revision they were read or written at
/// (0: not in the bucket yet).
#[derive(Clone, Debug, Default)]
pub struct Stored {
    /// The totals as the bucket holds them.
    pub totals: Totals,
    /// The key's revision.
    pub revision: u64,
}

/// The bucket and what this process knows of it.
#[derive(Debug)]
pub struct TotalsStore {
    js: jetstream::Context,
    kv: kv::Store,
    subject_prefix: String,
    /// Creation time of the bucket's stream (Unix ns): a different value
    /// later means the bucket was emptied and made again.
    pub(crate) created: i64,
    /// Every key read or written, by key.
    pub entries: HashMap<String, Stored>,
}

impl TotalsStore {
    /// Opens the bucket, creating it if missing, and reads every key.
    /// Returns the store and a watch of every change stored after the load
    /// (other replicas' writes, and this process's own).
    pub async fn open(
        js: &jetstream::Context,
        bucket: &str,
        replicas: usize,
    ) -> Result<(TotalsStore, kv::Watch), ListenerError> {
        ensure_bucket(js, bucket, replicas).await?;
        let kv = js
            .get_key_value(bucket)
            .await
            .map_err(|e| ListenerError::request(&format!("bucket {bucket:?}"), &e))?;
        let mut stream = js
            .get_stream(format!("KV_{bucket}"))
            .await
            .map_err(|e| ListenerError::store(format!("bucket {bucket:?}: {e}")))?;
        let info = stream
            .info()
            .await
            .map_err(|e| ListenerError::store(format!("bucket {bucket:?}: {e}")))?;
        let created = i64::try_from(info.created.unix_timestamp_nanos()).unwrap_or(0);
        // The newest value of every key, then every later change: the first
        // part loads this process, the rest is what other replicas store.
        let mut watch = kv
            .watch_with_history(">")
            .await
            .map_err(|e| ListenerError::store(format!("read totals: {e}")))?;
        let keys = stream
            .info()
            .await
            .map_err(|e| ListenerError::store(format!("bucket {bucket:?}: {e}")))?
            .state
            .messages;
        let mut store = TotalsStore {
            js: js.clone(),
            kv,
            subject_prefix: format!("$KV.{bucket}."),
            created,
            entries: HashMap::new(),
        };
        if keys > 0 {
            store.load(&mut watch).await?;
        }
        Ok((store, watch))
    }

    /// Reads the newest value of every key from the start of `watch`.
    ///
    /// The watch is an ordered consumer: after a leader change it may
    /// stall until it notices and starts again. A load that makes no
    /// progress for a while fails and setup starts over.
    async fn load(&mut self, watch: &mut kv::Watch) -> Result<(), ListenerError> {
        loop {
            let entry = match tokio::time::timeout(LOAD_STALL, watch.next()).await {
                Ok(Some(entry)) => entry,
                Ok(None) => return Err(ListenerError::store("read totals: the watch ended")),
                Err(_) => {
                    return Err(ListenerError::new(
                        crate::nats::retry::ErrorKind::Timeout,
                        format!(
                            "read totals: nothing arrived for {} s",
                            LOAD_STALL.as_secs()
                        ),
                    ))
                }
            };
            let entry = entry.map_err(|e| ListenerError::store(format!("read totals: {e}")))?;
            let caught_up = entry.delta == 0;
            self.absorb(&entry);
            if caught_up {
                break;
            }
        }
        Ok(())
    }

    /// Takes one entry read from the bucket into memory; returns its totals.
    pub(crate) fn absorb(&mut self, entry: &kv::Entry) -> Option<&Totals> {
        if entry.operation != kv::Operation::Put {
            return None;
        }
        let known = self.entries.get(&entry.key).map_or(0, |s| s.revision);
        if entry.revision <= known {
            return None;
        }
        let totals = decode(&entry.key, &entry.value);
        let stored = Stored {
            totals,
            revision: entry.revision,
        };
        self.entries.insert(entry.key.clone(), stored);
        self.entries.get(&entry.key).map(|s| &s.totals)
    }

    /// Reads one key again (after a conflict).
    pub(crate) async fn reload(&mut self, key: &str) -> Result<(), ListenerError> {
        match self.kv.entry(key).await {
            Ok(Some(entry)) if entry.operation == kv::Operation::Put => {
                let totals = decode(key, &entry.value);
                self.entries.insert(
                    key.to_string(),
                    Stored {
                        totals,
                        revision: entry.revision,
                    },
                );
                Ok(())
            }
            Ok(_) => {
                self.entries.remove(key);
                Ok(())
            }
            Err(e) => Err(ListenerError::store(format!("read {key:?}: {e}"))),
        }
    }

    /// Writes every changed key, each only if nobody wrote it since it was
    /// read. Returns the keys that lost that race (read them again and
    /// retry); the others are stored and their revisions updated.
    ///
    /// A write nobody answered (no responders: right after the bucket is
    /// created in a cluster, the server we are connected to may not yet know
    /// where the bucket's stream lives) reached no stream, so it is sent
    /// again, a few times, before the commit fails.
    pub async fn commit(
        &mut self,
        changed: HashMap<String, Totals>,
    ) -> Result<Vec<String>, ListenerError> {
        // The account key last: replicas following the bucket then never see
        // an advisory received before its series' count.
        let mut writes: Vec<(String, Totals)> = changed.into_iter().collect();
        writes.sort_by_key(|(k, _)| k == super::totals::ACCOUNT_KEY);
        let mut conflicts = Vec::new();
        for attempt in 0.. {
            let unheard = self.write(writes, &mut conflicts).await?;
            if unheard.is_empty() {
                break;
            }
            if attempt == UNHEARD_RETRIES {
                return Err(ListenerError::store(format!(
                    "write {:?}: no stream answered {} attempts (is the bucket's stream there?)",
                    unheard[0].0,
                    UNHEARD_RETRIES + 1
                )));
            }
            tokio::time::sleep(UNHEARD_PAUSE).await;
            writes = unheard;
        }
        Ok(conflicts)
    }

    /// Sends `writes` at once and awaits their acknowledgements: stored keys
    /// are taken into memory, lost races added to `conflicts`; returns the
    /// writes no stream answered.
    async fn write(
        &mut self,
        writes: Vec<(String, Totals)>,
        conflicts: &mut Vec<String>,
    ) -> Result<Vec<(String, Totals)>, ListenerError> {
        let mut pending = Vec::with_capacity(writes.len());
        for (key, totals) in writes {
            let revision = self.entries.get(&key).map_or(0, |s| s.revision);
            let mut headers = async_nats::HeaderMap::new();
            headers.insert(
                async_nats::header::NATS_EXPECTED_LAST_SUBJECT_SEQUENCE,
                revision.to_string().as_str(),
            );
            let body = Bytes::from(serde_json::to_vec(&totals).expect("totals serialise"));
            let ack = self
                .js
                .publish_with_headers(format!("{}{key}", self.subject_prefix), headers, body)
                .await
                .map_err(|e| ListenerError::store(format!("write {key:?}: {e}")))?;
            pending.push((key, totals, ack));
        }
        let mut unheard = Vec::new();
        let mut failure = None;
        for (key, totals, ack) in pending {
            match ack.await {
                Ok(ack) => {
                    self.entries.insert(
                        key,
                        Stored {
                            totals,
                            revision: ack.sequence,
                        },
                    );
                }
                Err(e) if super::api_errors::is_wrong_last_sequence(&e) => conflicts.push(key),
                Err(e) if e.kind() == jetstream::context::PublishErrorKind::StreamNotFound => {
                    unheard.push((key, totals))
                }
                Err(e) => failure = Some(ListenerError::store(format!("write {key:?}: {e}"))),
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(unheard),
        }
    }

    /// The (stream, consumer) of every series key known.
    pub(crate) fn series(&self) -> Vec<(String, String)> {
        self.entries
            .values()
            .filter(|s| !s.totals.stream.is_empty())
            .map(|s| (s.totals.stream.clone(), s.totals.consumer.clone()))
            .collect()
    }
}

/// Creates the bucket's stream unless it exists.
async fn ensure_bucket(
    js: &jetstream::Context,
    bucket: &str,
    replicas: usize,
) -> Result<(), ListenerError> {
    let exists = match js.get_stream(format!("KV_{bucket}")).await {
        Ok(_) => true,
        Err(e) if super::api_errors::is_stream_not_found(&e) => false,
        Err(e) => return Err(ListenerError::request(&format!("bucket {bucket:?}"), &e)),
    };
    if !exists {
        // The bucket's stream made directly, as a key-value bucket with
        // history 1: async-nats' own bucket creation cannot read the
        // answer of servers before 2.10.
        js.create_stream(jetstream::stream::Config {
            name: format!("KV_{bucket}"),
            description: Some("nats-delivery-exporter: advisory totals (commit before ack)".into()),
            subjects: vec![format!("$KV.{bucket}.>")],
            max_messages_per_subject: 1,
            discard: jetstream::stream::DiscardPolicy::New,
            allow_rollup: true,
            deny_delete: true,
            allow_direct: true,
            storage: jetstream::stream::StorageType::File,
            num_replicas: replicas,
            ..Default::default()
        })
        .await
        .map_err(|e| ListenerError::request(&format!("create bucket {bucket:?}"), &e))?;
        tracing::info!(bucket, replicas, "created the advisory totals bucket");
    }
    Ok(())
}

/// A stored value that is not valid totals (written by someone else) is
/// logged and counted from zero: its revision is still taken so the next
/// write replaces it instead of failing forever.
fn decode(key: &str, value: &[u8]) -> Totals {
    serde_json::from_slice(value).unwrap_or_else(|e| {
        tracing::error!(
            key,
            "stored totals are not valid, counting this key from zero: {e}"
        );
        Totals::default()
    })
}
