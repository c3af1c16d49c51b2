//! The Helm chart of the cluster exporter (deploy/helm/nats-delivery-exporter)
//! with the real helm (`.tools/helm`, helm 4 built by scripts/install-deps.sh):
//! `helm lint --strict` and `helm template` with its defaults and with each
//! values file of its `ci/` folder. Every rendering passes the API server's
//! rules (`api_rules`), its Deployment is the cluster directory's, its
//! PrometheusRule holds exactly the alert rules and its PodMonitor gives the
//! job they select, with the labels kube-prometheus-stack selects on.

use std::process::Command;

use serde::Deserialize;
use serde_norway::Value;

use super::api_rules::problems_in;
use super::yaml;
use crate::{repo, repo_files};

const CHART: &str = "deploy/helm/nats-delivery-exporter";

fn helm(args: &[&str]) -> String {
    let helm = repo().join(".tools/helm/bin/helm");
    assert!(
        helm.is_file(),
        "{} is missing: run scripts/install-deps.sh",
        helm.display()
    );
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(&helm)
        .args(args)
        .current_dir(repo())
        // No repository or plugin of the machine's user.
        .env("HELM_CONFIG_HOME", home.path())
        .env("HELM_CACHE_HOME", home.path())
        .env("HELM_DATA_HOME", home.path())
        .output()
        .expect("helm runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "helm {}:\n{text}", args.join(" "));
    text
}

/// The values files tried: none (the defaults), then each of `ci/`.
fn values_files() -> Vec<Option<String>> {
    let mut files = vec![None];
    let ci = repo_files(&format!("{CHART}/ci"), "-values.yaml");
    assert!(ci.len() >= 2, "{ci:?}");
    files.extend(ci.into_iter().map(|f| Some(format!("{CHART}/ci/{f}"))));
    files
}

/// `helm template` of release `release` with `values`: each object, named
/// by the command and its kind.
fn render(release: &str, values: Option<&str>) -> Vec<(String, Value)> {
    let mut args = vec!["template", release, CHART];
    if let Some(v) = values {
        args.extend(["-f", v]);
    }
    let text = helm(&args);
    let command = format!("helm {}", args.join(" "));
    println!("{command}:\n{text}");
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{command}: {e}")))
        .filter(|v| !v.is_null())
        .map(|v| {
            (
                format!("{command}: {}", v["kind"].as_str().unwrap_or("?")),
                v,
            )
        })
        .collect()
}

fn kind<'a>(objects: &'a [(String, Value)], kind: &str) -> Vec<&'a Value> {
    objects
        .iter()
        .filter(|(_, o)| o["kind"] == kind)
        .map(|(_, o)| o)
        .collect()
}

#[test]
fn the_chart_lints_and_every_rendering_passes_the_api_server_s_rules() {
    for values in values_files() {
        let mut lint = vec!["lint", "--strict", CHART];
        if let Some(v) = &values {
            lint.extend(["-f", v.as_str()]);
        }
        let said = helm(&lint);
        println!("helm {}:\n{said}", lint.join(" "));
        assert!(
            said.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{said}"
        );
        // A release name that holds the chart's, and one that does not.
        for release in ["nats-delivery-exporter", "eu-west"] {
            let objects = render(release, values.as_deref());
            let (problems, checked) = problems_in(&objects);
            for c in &checked {
                println!("checked {c}");
            }
            assert!(problems.is_empty(), "{values:?}:\n{}", problems.join("\n"));
            assert_eq!(kind(&objects, "Deployment").len(), 1, "{values:?}");
            assert_eq!(kind(&objects, "Service").len(), 1, "{values:?}");
            // The login stays the operator's: the chart makes no Secret.
            assert_eq!(kind(&objects, "Secret").len(), 0, "{values:?}");
        }
    }
}

#[test]
fn by_default_the_chart_makes_the_cluster_directory_s_deployment() {
    let objects = render("nats-delivery-exporter", None);
    let deployment = kind(&objects, "Deployment")[0];
    let file = yaml("deploy/kubernetes/cluster/deployment.yaml");
    assert_eq!(
        deployment["spec"]["template"]["spec"], file["spec"]["template"]["spec"],
        "the chart's pod (left) and deploy/kubernetes/cluster/deployment.yaml's (right)"
    );
    let image = format!(
        "ghcr.io/nats-delivery-exporter/nats-delivery-exporter:{}",
        env!("CARGO_PKG_VERSION")
    );
    let container = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], image.as_str());
    // Nothing that needs prometheus-operator unless asked for.
    assert!(kind(&objects, "PodMonitor").is_empty());
    assert!(kind(&objects, "PrometheusRule").is_empty());
    // The chart's version is the exporter's.
    let chart = yaml(&format!("{CHART}/Chart.yaml"));
    assert_eq!(chart["version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(chart["appVersion"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn with_kube_prometheus_stack_its_selectors_find_the_monitor_and_the_rules() {
    let values = format!("{CHART}/ci/kube-prometheus-stack-values.yaml");
    let objects = render("nats-delivery-exporter", Some(&values));
    let monitor = kind(&objects, "PodMonitor")[0];
    let rule = kind(&objects, "PrometheusRule")[0];
    for object in [monitor, rule] {
        assert_eq!(
            object["metadata"]["labels"]["release"],
            "kube-prometheus-stack"
        );
    }
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["relabelings"][0]["targetLabel"], "job");
    assert_eq!(
        endpoint["relabelings"][0]["replacement"],
        "nats-delivery-exporter"
    );
    assert_eq!(endpoint["honorLabels"], true);
    // Exactly the repository's default rules, in file name order (the
    // opt-in group only when asked for).
    let mut groups = Vec::new();
    for file in repo_files("alerts", ".rules.yml") {
        if file == "opt-in.rules.yml" {
            continue;
        }
        let rules = yaml(&format!("alerts/{file}"));
        groups.extend(rules["groups"].as_sequence().unwrap().iter().cloned());
    }
    assert!(!groups.is_empty());
    assert_eq!(
        rule["spec"]["groups"].as_sequence().unwrap(),
        &groups,
        "the chart's rules differ from alerts/: run scripts/generate-kubernetes.sh"
    );
}

#[test]
fn every_value_set_reaches_the_objects() {
    let values_file = format!("{CHART}/ci/everything-values.yaml");
    let values = yaml(&values_file);
    let objects = render("eu-west", Some(&values_file));
    let deployment = kind(&objects, "Deployment")[0];
    assert_eq!(deployment["metadata"]["name"], "delivery-exporter-eu");
    let pod = &deployment["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        "registry.example.com/nats/nats-delivery-exporter:0.1.0"
    );
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(container["resources"], values["resources"]);
    let env = |name: &str| -> Value {
        let entries = container["env"].as_sequence().unwrap();
        let entry = entries.iter().find(|e| e["name"] == name);
        entry
            .unwrap_or_else(|| panic!("{name} in {entries:?}"))
            .clone()
    };
    assert_eq!(
        env("NATS_DELIVERY_NATS_SERVERS")["value"],
        values["natsServers"]
    );
    assert_eq!(
        env("NATS_DELIVERY_SOURCES")["value"],
        "varz,connz,jsz,accstatz,routez,gatewayz,healthz"
    );
    let secret = &env("NATS_DELIVERY_SYSTEM_ACCOUNT")["valueFrom"]["secretKeyRef"];
    assert_eq!(secret["name"], "delivery-exporter-login");
    assert_eq!(secret["key"], "sys-creds");
    assert_eq!(env("NATS_DELIVERY_ADVISORIES")["value"], "true");
    assert_eq!(
        pod["spec"]["volumes"][0]["secret"]["secretName"],
        "delivery-exporter-login"
    );
    assert_eq!(
        container["volumeMounts"][0]["mountPath"],
        "/etc/delivery-login"
    );
    assert_eq!(pod["metadata"]["labels"]["team"], "messaging");
    assert_eq!(pod["metadata"]["annotations"], values["podAnnotations"]);
    for key in ["imagePullSecrets", "nodeSelector", "tolerations"] {
        assert_eq!(pod["spec"][key], values[key], "{key}");
    }
    let service = kind(&objects, "Service")[0];
    assert_eq!(service["spec"]["ports"][0]["port"], 9778);
    let rule = kind(&objects, "PrometheusRule")[0];
    assert_eq!(rule["metadata"]["labels"]["role"], "alert-rules");
    let group_names: Vec<_> = rule["spec"]["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        group_names.iter().any(|n| n == "nats-delivery-opt-in"),
        "prometheusRule.optIn adds the opt-in group: {group_names:?}"
    );
    let monitor = kind(&objects, "PodMonitor")[0];
    assert_eq!(monitor["spec"]["podMetricsEndpoints"][0]["interval"], "15s");
    // Without the values file the chart names none of these.
    let defaults = render("eu-west", None);
    let text = format!("{defaults:?}");
    for set in [
        "registry-login",
        "delivery-exporter-login",
        "messaging",
        "9778",
    ] {
        assert!(!text.contains(set), "{set} without the values file");
    }
}
