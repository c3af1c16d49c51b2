//! What installing the Kubernetes files must not do: the sidecar must not
//! take its NATS server out of service, the NATS values must install on a
//! cluster without prometheus-operator, and applying the cluster exporter's
//! directory must not overwrite a Secret made beforehand.

use serde_norway::Value;

use super::{shipped_objects, sidecar_container, yaml};
use crate::read;

/// A pod is Ready only while every container is, and a container that is
/// restarting is not: a readiness probe of the sidecar, or a liveness probe
/// that restarts it, would take the NATS server out of its Service.
#[test]
fn the_sidecar_has_no_probe_and_reserves_what_it_was_measured_to_use() {
    let sidecar = sidecar_container();
    for probe in ["readinessProbe", "livenessProbe", "startupProbe"] {
        assert!(sidecar[probe].is_null(), "the sidecar has a {probe}");
    }
    let resources = &sidecar["resources"];
    for (kind, what) in [
        ("requests", "cpu"),
        ("requests", "memory"),
        ("limits", "memory"),
    ] {
        assert!(
            resources[kind][what].as_str().is_some(),
            "the sidecar sets no {kind}.{what}"
        );
    }
    // A CPU limit would throttle a scrape, never protect NATS: the request
    // already reserves the sidecar's share.
    assert!(resources["limits"]["cpu"].is_null(), "a CPU limit");
    let mib = |v: &Value| -> u64 {
        let text = v.as_str().unwrap();
        text.strip_suffix("Mi")
            .expect("memory in Mi")
            .parse()
            .unwrap()
    };
    let (request, limit) = (
        mib(&resources["requests"]["memory"]),
        mib(&resources["limits"]["memory"]),
    );
    // deploy/README.md's measurement: the peak at 100 x 100 consumers is
    // under the request, and the limit leaves room for 100,000 consumers.
    let readme = read("deploy/README.md");
    let peak_mb: f64 = readme
        .lines()
        .find_map(|l| l.strip_prefix("| resident memory, idle / peak | "))
        .and_then(|rest| rest.split(" / ").nth(1))
        .and_then(|peak| peak.strip_suffix(" MB |"))
        .expect("deploy/README.md's measured peak")
        .parse()
        .unwrap();
    assert!(
        peak_mb < request as f64,
        "the measured peak, {peak_mb} MB, is over the request of {request}Mi"
    );
    assert!(
        request < limit && limit >= 256,
        "request {request}Mi, limit {limit}Mi"
    );
}

/// The NATS values add the container and nothing else: no object whose
/// kind a cluster without prometheus-operator lacks, so `helm install`
/// cannot fail for it; the PodMonitor is a file of its own, one for every
/// release in the namespace, so a second release cannot collide with it.
#[test]
fn the_nats_values_add_only_the_sidecar() {
    let values = yaml("deploy/kubernetes/nats-helm-values.yaml");
    let keys: Vec<&str> = values
        .as_mapping()
        .unwrap()
        .keys()
        .map(|k| k.as_str().unwrap())
        .collect();
    assert_eq!(keys, ["podTemplate"], "values other than the sidecar");
    let patch = values["podTemplate"]["patch"].as_sequence().unwrap();
    assert_eq!(patch.len(), 1, "one patch: the container");
    assert_eq!(patch[0]["path"], "/spec/containers/-");

    let (from, monitor) = shipped_objects()
        .into_iter()
        .find(|(_, o)| {
            o["kind"] == "PodMonitor"
                && o["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "nats"
        })
        .expect("a PodMonitor of the sidecars");
    assert_eq!(from, "deploy/kubernetes/sidecar-podmonitor.yaml");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .unwrap();
    assert!(
        !selector.contains_key("app.kubernetes.io/instance"),
        "{from} must select every release's pods, not one release's"
    );
}

/// The `kubectl create secret generic NAME --from-literal=KEY=...` command
/// `text` gives: the name and the keys.
fn documented_secret(text: &str) -> (String, Vec<String>) {
    let start = text
        .find("kubectl create secret generic ")
        .expect("a kubectl create secret command");
    let mut command = String::new();
    for line in text[start..].lines() {
        let line = line.trim_start_matches(['#', ' ']).trim_end();
        command.push_str(line.trim_end_matches('\\'));
        command.push(' ');
        if !line.ends_with('\\') {
            break;
        }
    }
    let words: Vec<&str> = command.split_whitespace().collect();
    let name = words[4].to_string();
    let keys = words
        .iter()
        .filter_map(|w| {
            w.strip_prefix("--from-literal=")
                .or(w.strip_prefix("--from-file="))
        })
        .map(|w| w.split('=').next().unwrap().to_string())
        .collect();
    (name, keys)
}

/// `kubectl apply -f deploy/kubernetes/cluster/` holds no Secret, so it
/// cannot replace one made beforehand with the placeholder password; the
/// command the docs give makes the Secret the Deployment reads.
#[test]
fn applying_the_cluster_directory_never_overwrites_a_secret() {
    let cluster: Vec<_> = shipped_objects()
        .into_iter()
        .filter(|(f, _)| f.starts_with("deploy/kubernetes/cluster/"))
        .collect();
    assert!(!cluster.is_empty());
    for (from, object) in &cluster {
        assert_ne!(
            object["kind"], "Secret",
            "{from}: kubectl apply would overwrite it"
        );
    }
    let deployment = yaml("deploy/kubernetes/cluster/deployment.yaml");
    let spec = &deployment["spec"]["template"]["spec"];
    let mut read_keys = Vec::new();
    for c in spec["containers"].as_sequence().unwrap() {
        for e in c["env"].as_sequence().into_iter().flatten() {
            let secret = &e["valueFrom"]["secretKeyRef"];
            if !secret.is_null() {
                read_keys.push((
                    secret["name"].as_str().unwrap(),
                    secret["key"].as_str().unwrap(),
                ));
            }
        }
    }
    assert!(!read_keys.is_empty(), "the Deployment reads no Secret");
    for file in [
        "deploy/README.md",
        "deploy/kubernetes/cluster/deployment.yaml",
    ] {
        let (name, keys) = documented_secret(&read(file));
        for (secret, key) in &read_keys {
            assert_eq!(*secret, name, "{file}: the Secret the command makes");
            assert!(
                keys.iter().any(|k| k == key),
                "{file}: the command sets no {key}"
            );
        }
    }
}
