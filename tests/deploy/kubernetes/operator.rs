//! The shipped manifests as an operator runs them: nothing a restricted
//! admission policy refuses, no anonymous NATS connection, one scrape
//! interval everywhere, a plain-Prometheus scrape beside the PodMonitors,
//! and the warnings an operator needs before the first command.

use serde_norway::Value;

use super::{sidecar_container, yaml};
use crate::{read, repo_files};

/// Every manifest under deploy/kubernetes (generated ones included).
fn manifests() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for dir in ["deploy/kubernetes", "deploy/kubernetes/cluster"] {
        for f in repo_files(dir, ".yaml") {
            let path = format!("{dir}/{f}");
            out.push((path.clone(), yaml(&path)));
        }
    }
    assert!(out.len() >= 6, "{} manifests", out.len());
    out
}

/// The keys of a YAML tree, at any depth.
fn keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Mapping(m) => {
            for (k, v) in m {
                out.extend(k.as_str().map(str::to_string));
                keys(v, out);
            }
        }
        Value::Sequence(s) => s.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

/// OpenShift's restricted-v2 SCC assigns a user from the namespace's range
/// and refuses a pod that names one (its `MustRunAsRange` strategy); the
/// image's own `USER 65534:65534` already keeps it off root.
#[test]
fn no_manifest_fixes_the_user_or_group() {
    for (path, doc) in manifests() {
        let mut found = Vec::new();
        keys(&doc, &mut found);
        for key in ["runAsUser", "runAsGroup"] {
            assert!(!found.iter().any(|k| k == key), "{path} sets {key}");
        }
    }
    assert!(read("Dockerfile").contains("USER 65534:65534"));
}

fn env_of(container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_sequence()
        .into_iter()
        .flatten()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_string();
            (
                name,
                e["value"].as_str().unwrap_or("(from a secret)").to_string(),
            )
        })
        .collect()
}

/// With only the system account's credentials, the connection to
/// `--nats-servers` for message data would be anonymous: the cluster
/// Deployment turns those reads off (the exporter then opens no such
/// connection), and its commented advisories block asks for 3 replicas.
#[test]
fn the_cluster_deployment_opens_no_anonymous_connection() {
    let deployment = yaml("deploy/kubernetes/cluster/deployment.yaml");
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    let env = env_of(container);
    let get = |n: &str| env.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
    assert!(get("NATS_DELIVERY_NATS_SERVERS").is_some());
    let credentials = [
        "NATS_DELIVERY_NATS_ACCOUNTS",
        "NATS_DELIVERY_NATS_CREDS_FILE",
        "NATS_DELIVERY_NATS_NKEY_SEED_FILE",
        "NATS_DELIVERY_NATS_USER",
        "NATS_DELIVERY_NATS_TOKEN",
    ];
    if !credentials.iter().any(|c| get(c).is_some()) {
        assert_eq!(get("NATS_DELIVERY_CONSUMER_TIMESTAMP_READS"), Some("0"));
        assert!(matches!(
            get("NATS_DELIVERY_STREAM_LOST_READS"),
            None | Some("0")
        ));
    }
    let text = read("deploy/kubernetes/cluster/deployment.yaml");
    let replicas = text
        .lines()
        .skip_while(|l| !l.contains("# - name: NATS_DELIVERY_ADVISORIES_REPLICAS"))
        .nth(1)
        .expect("a commented NATS_DELIVERY_ADVISORIES_REPLICAS");
    assert!(replicas.contains("value: \"3\""), "{replicas}");
}

/// The `scrape_interval` and `scrape_timeout` of the exporter's job in a
/// Markdown file's or a YAML file's scrape configuration.
fn scrape_times(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut interval = None;
    let mut in_job = false;
    for line in text.lines() {
        let l = line.trim().split(" #").next().unwrap_or_default();
        if let Some(name) = l.strip_prefix("- job_name:") {
            in_job = name.contains("nats-delivery-exporter");
        } else if let (true, Some(v)) = (in_job, l.strip_prefix("scrape_interval:")) {
            interval = Some(v.trim().to_string());
        } else if let (true, Some(v)) = (in_job, l.strip_prefix("scrape_timeout:")) {
            out.extend(interval.take().map(|i| (i, v.trim().to_string())));
        }
    }
    out
}

#[test]
fn one_scrape_interval_and_timeout_everywhere_and_a_plain_prometheus_example() {
    let mut monitors = Vec::new();
    for path in [
        "deploy/kubernetes/sidecar-podmonitor.yaml",
        "deploy/kubernetes/cluster/podmonitor.yaml",
    ] {
        let endpoint = &yaml(path)["spec"]["podMetricsEndpoints"][0];
        monitors.push((
            endpoint["interval"].as_str().unwrap().to_string(),
            endpoint["scrapeTimeout"].as_str().unwrap().to_string(),
        ));
    }
    let want = monitors[0].clone();
    assert_eq!(monitors[1], want, "the two PodMonitors");
    let plain = yaml("deploy/kubernetes/prometheus-scrape-config.yaml");
    let job = &plain["scrape_configs"][0];
    assert_eq!(job["job_name"], "nats-delivery-exporter");
    assert_eq!(job["kubernetes_sd_configs"][0]["role"], "pod");
    assert_eq!(job["honor_labels"], true);
    let relabelled: Vec<&str> = job["relabel_configs"]
        .as_sequence()
        .unwrap()
        .iter()
        .filter_map(|r| r["target_label"].as_str())
        .collect();
    assert!(relabelled.contains(&"namespace"), "{relabelled:?}");
    for path in [
        "README.md",
        "docs/operators.md",
        "deploy/kubernetes/prometheus-scrape-config.yaml",
    ] {
        let times = scrape_times(&read(path));
        assert!(!times.is_empty(), "{path}: no scrape of the exporter");
        for t in times {
            assert_eq!(t, want, "{path}: scrape interval and timeout");
        }
    }
}

#[test]
fn the_readmes_warn_before_the_first_command() {
    let words = |path: &str| read(path).split_whitespace().collect::<Vec<_>>().join(" ");
    let deploy = words("deploy/README.md");
    let helm = deploy
        .find("helm upgrade --install")
        .expect("the Helm command");
    let warning = deploy
        .find("adding the sidecar rolls every NATS pod")
        .expect("the rolling-restart warning");
    assert!(
        warning < helm,
        "the warning must come before the Helm command"
    );
    assert!(deploy[warning..helm].contains("nats stream report"));
    let readme = words("README.md");
    assert!(
        readme.contains("Set `server_name` on every server"),
        "README.md must say to set server_name"
    );
    let image = sidecar_container()["image"].as_str().unwrap().to_string();
    assert!(deploy.contains(&image), "deploy/README.md names {image}");
}
