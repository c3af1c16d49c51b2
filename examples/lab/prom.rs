//! Asking the lab's Prometheus, over its HTTP API, what it holds: instant
//! queries (`/api/v1/query`) and alerts (`/api/v1/alerts`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

/// Labels of one series or alert.
pub type Labels = BTreeMap<String, String>;

/// One alert as Prometheus reports it.
#[derive(Debug, Clone)]
pub struct Alert {
    /// `alertname`.
    pub name: String,
    /// `pending` or `firing`.
    pub state: String,
    /// Every label, `alertname` included.
    pub labels: Labels,
}

impl Alert {
    /// Whether this is alert `name` with at least the labels `want`.
    pub fn is(&self, name: &str, want: &[(&str, &str)]) -> bool {
        self.name == name
            && want
                .iter()
                .all(|(k, v)| self.labels.get(*k).map(String::as_str) == Some(*v))
    }
}

/// The lab's Prometheus.
pub struct Prometheus {
    http: reqwest::Client,
    base: String,
}

impl Prometheus {
    /// Prometheus at `http://127.0.0.1:<port>`.
    pub fn new(http: reqwest::Client, port: u16) -> Self {
        Prometheus {
            http,
            base: format!("http://127.0.0.1:{port}"),
        }
    }

    /// Base URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// The version Prometheus says it is (`/api/v1/status/buildinfo`).
    pub async fn version(&self) -> anyhow::Result<String> {
        let url = format!("{}/api/v1/status/buildinfo", self.base);
        let body: Value = self.http.get(url).send().await?.json().await?;
        let version = body["data"]["version"].as_str();
        Ok(version.context("buildinfo without a version")?.to_string())
    }

    /// An instant query: every sample it returns (a scalar result is one
    /// sample without labels).
    pub async fn query(&self, expr: &str) -> anyhow::Result<Vec<(Labels, f64)>> {
        let url =
            url::Url::parse_with_params(&format!("{}/api/v1/query", self.base), [("query", expr)])?;
        let body: Value = self.http.get(url).send().await?.json().await?;
        if body["status"] != "success" {
            bail!("query {expr} failed: {}", body["error"]);
        }
        let number = |v: &Value| -> f64 {
            v[1].as_str()
                .and_then(|s| s.parse().ok())
                .unwrap_or(f64::NAN)
        };
        let data = &body["data"];
        match data["resultType"].as_str() {
            Some("scalar") => Ok(vec![(Labels::new(), number(&data["result"]))]),
            Some("vector") => Ok(data["result"]
                .as_array()
                .context("vector result")?
                .iter()
                .map(|s| {
                    let labels = serde_json::from_value(s["metric"].clone()).unwrap_or_default();
                    (labels, number(&s["value"]))
                })
                .collect()),
            other => bail!("query {expr}: unexpected result type {other:?}"),
        }
    }

    /// The value of a query meant to return one sample; `None` when it
    /// returns none.
    pub async fn value(&self, expr: &str) -> anyhow::Result<Option<f64>> {
        let samples = self.query(expr).await?;
        if samples.len() > 1 {
            bail!("{expr} returned {} samples, expected one", samples.len());
        }
        Ok(samples.first().map(|s| s.1))
    }

    /// Waits up to `timeout` for `expr` to equal `want`, then reads it again
    /// two scrapes later (so that a count still rising past the truth is
    /// seen). Returns the last value read.
    pub async fn settle(
        &self,
        expr: &str,
        want: f64,
        timeout: Duration,
    ) -> anyhow::Result<Option<f64>> {
        let start = Instant::now();
        loop {
            let v = self.value(expr).await?;
            if v == Some(want) || start.elapsed() > timeout {
                if v == Some(want) {
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                    return self.value(expr).await;
                }
                return Ok(v);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// [`Self::settle`] for several queries at once: waits up to `timeout`
    /// until each `(expr, want)` holds, then reads them all again two
    /// scrapes later. Returns the last values read, in order.
    pub async fn settle_all(
        &self,
        pairs: &[(String, f64)],
        timeout: Duration,
    ) -> anyhow::Result<Vec<Option<f64>>> {
        let start = Instant::now();
        loop {
            let mut all = true;
            for (expr, want) in pairs {
                all &= self.value(expr).await? == Some(*want);
            }
            if all || start.elapsed() > timeout {
                if all {
                    tokio::time::sleep(Duration::from_millis(2500)).await;
                }
                let mut values = Vec::with_capacity(pairs.len());
                for (expr, _) in pairs {
                    values.push(self.value(expr).await?);
                }
                return Ok(values);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Every pending or firing alert.
    pub async fn alerts(&self) -> anyhow::Result<Vec<Alert>> {
        let body: Value = self
            .http
            .get(format!("{}/api/v1/alerts", self.base))
            .send()
            .await?
            .json()
            .await?;
        let list = body["data"]["alerts"].as_array().context("alerts")?;
        Ok(list
            .iter()
            .map(|a| {
                let labels: Labels =
                    serde_json::from_value(a["labels"].clone()).unwrap_or_default();
                Alert {
                    name: labels.get("alertname").cloned().unwrap_or_default(),
                    state: a["state"].as_str().unwrap_or("").to_string(),
                    labels,
                }
            })
            .collect())
    }

    /// Waits up to `timeout` for alert `name` to fire with at least the
    /// labels `want`; returns the firing alert.
    pub async fn wait_firing(
        &self,
        name: &str,
        want: &[(&str, &str)],
        timeout: Duration,
    ) -> anyhow::Result<Option<Alert>> {
        let start = Instant::now();
        loop {
            let found = self
                .alerts()
                .await?
                .into_iter()
                .find(|a| a.state == "firing" && a.is(name, want));
            if found.is_some() || start.elapsed() > timeout {
                return Ok(found);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits up to `timeout` until no alert `name` with the labels `want`
    /// is pending or firing; returns whether it stopped.
    pub async fn wait_resolved(
        &self,
        name: &str,
        want: &[(&str, &str)],
        timeout: Duration,
    ) -> anyhow::Result<bool> {
        let start = Instant::now();
        loop {
            let active = self.alerts().await?.iter().any(|a| a.is(name, want));
            if !active {
                return Ok(true);
            }
            if start.elapsed() > timeout {
                return Ok(false);
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Names of the alerts firing now.
    pub async fn firing(&self) -> anyhow::Result<Vec<Alert>> {
        Ok(self
            .alerts()
            .await?
            .into_iter()
            .filter(|a| a.state == "firing")
            .collect())
    }
}

/// `{a="x", b="y"}` for printing.
pub fn show(labels: &Labels) -> String {
    let inner: Vec<String> = labels
        .iter()
        .filter(|(k, _)| !matches!(k.as_str(), "alertname" | "severity"))
        .map(|(k, v)| format!("{k}=\"{v}\""))
        .collect();
    format!("{{{}}}", inner.join(","))
}
