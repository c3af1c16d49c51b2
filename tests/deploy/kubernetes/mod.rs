//! The Kubernetes objects under deploy/kubernetes: the generated ones hold
//! exactly the repository's rules and dashboards, the Helm values set only
//! keys the NATS chart defines, and every object names this version's image
//! and the job the alert rules select. (Their schemas are checked by
//! scripts/test-deploy.sh with check-jsonschema; `api_rules` applies the
//! API server's rules the schemas do not express; `install` what an install
//! must not do to the server watched or to what exists already.)

mod api_rules;
mod helm_chart;
mod install;
mod operator;
mod validation;

use serde_norway::Value;

use crate::{read, repo_files};

fn yaml(relative: &str) -> Value {
    serde_norway::from_str(&read(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// The groups of the rule files of alerts/ that `pick` selects.
fn groups_of(pick: impl Fn(&str) -> bool) -> Vec<Value> {
    let mut groups = Vec::new();
    for file in repo_files("alerts", ".rules.yml") {
        if pick(&file) {
            let rules = yaml(&format!("alerts/{file}"));
            groups.extend(rules["groups"].as_sequence().unwrap().iter().cloned());
        }
    }
    assert!(!groups.is_empty());
    groups
}

/// The default PrometheusRule holds every group but the opt-in one (alerts
/// only non-default flags can feed), which has a PrometheusRule of its own.
#[test]
fn the_prometheus_rule_holds_exactly_the_alert_rules() {
    for (object, opt_in) in [
        ("deploy/kubernetes/prometheus-rule.yaml", false),
        ("deploy/kubernetes/prometheus-rule-opt-in.yaml", true),
    ] {
        let rule = yaml(object);
        assert_eq!(rule["kind"], "PrometheusRule");
        assert_eq!(
            rule["spec"]["groups"].as_sequence().unwrap(),
            &groups_of(|f| (f == "opt-in.rules.yml") == opt_in),
            "{object} differs from alerts/: run scripts/generate-kubernetes.sh"
        );
    }
}

#[test]
fn the_dashboard_config_maps_hold_exactly_the_dashboards() {
    let dashboards = repo_files("dashboards", ".json");
    let config_maps = repo_files("deploy/kubernetes/dashboards", ".yaml");
    let names = |list: &[String], suffix: &str| -> Vec<String> {
        list.iter()
            .map(|n| n.trim_end_matches(suffix).to_string())
            .collect()
    };
    assert_eq!(
        names(&config_maps, ".yaml"),
        names(&dashboards, ".json"),
        "one ConfigMap per dashboard: run scripts/generate-kubernetes.sh"
    );
    for file in dashboards {
        let name = file.trim_end_matches(".json");
        let map = yaml(&format!("deploy/kubernetes/dashboards/{name}.yaml"));
        assert_eq!(map["kind"], "ConfigMap");
        assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
        assert_eq!(
            map["data"][file.as_str()].as_str(),
            Some(read(&format!("dashboards/{file}")).as_str()),
            "{file} differs from its ConfigMap: run scripts/generate-kubernetes.sh"
        );
    }
}

/// Every key `ours` sets is one the chart's values define, with a value of
/// the same shape; below a list or an empty map of the chart (its extension
/// points: `patch`, `extraResources`, `env`, ...) anything goes.
fn assert_keys_defined(ours: &Value, chart: &Value, path: &str) {
    let Value::Mapping(ours) = ours else { return };
    let Value::Mapping(chart) = chart else {
        panic!("{path} is not a map in the chart's values")
    };
    if chart.is_empty() {
        return;
    }
    for (key, value) in ours {
        let name = key.as_str().unwrap();
        let here = format!("{path}.{name}");
        let default = chart
            .get(key)
            .unwrap_or_else(|| panic!("{here} is not a value of the NATS chart"));
        let shape = |v: &Value| match v {
            Value::Mapping(_) => "map",
            Value::Sequence(_) => "list",
            _ => "scalar",
        };
        if !default.is_null() {
            assert_eq!(shape(value), shape(default), "{here}");
        }
        assert_keys_defined(value, default, &here);
    }
}

#[test]
fn the_helm_values_set_only_values_the_nats_chart_defines() {
    let chart = yaml("tests/deploy/fixtures/nats-chart-2.14.2-values.yaml");
    let ours = yaml("deploy/kubernetes/nats-helm-values.yaml");
    assert_keys_defined(&ours, &chart, "");
    // The schema check-jsonschema applies to the values allows no other key.
    let schema: serde_json::Value =
        serde_json::from_str(&read("tests/deploy/schemas/nats-chart-values.schema.json")).unwrap();
    let top: Vec<&String> = schema["properties"].as_object().unwrap().keys().collect();
    for key in top {
        assert!(
            chart.get(key.as_str()).is_some(),
            "{key} is not a value of the chart"
        );
    }
    // The sidecar polls its own server.
    let container = sidecar_container();
    let env = container["env"].as_sequence().unwrap();
    assert!(
        env.iter()
            .any(|e| e["name"] == "NATS_DELIVERY_MONITOR_URL"
                && e["value"] == "http://localhost:8222")
    );
}

/// The Kubernetes objects shipped (everything under deploy/kubernetes but
/// the Helm values and the plain Prometheus configuration), each with the
/// file it came from.
fn shipped_objects() -> Vec<(String, Value)> {
    let mut files: Vec<String> = repo_files("deploy/kubernetes/cluster", ".yaml")
        .into_iter()
        .map(|f| format!("deploy/kubernetes/cluster/{f}"))
        .collect();
    files.extend(
        repo_files("deploy/kubernetes/dashboards", ".yaml")
            .into_iter()
            .map(|f| format!("deploy/kubernetes/dashboards/{f}")),
    );
    for f in repo_files("deploy/kubernetes", ".yaml") {
        if f != "nats-helm-values.yaml" && f != "prometheus-scrape-config.yaml" {
            files.push(format!("deploy/kubernetes/{f}"));
        }
    }
    files.into_iter().map(|f| (f.clone(), yaml(&f))).collect()
}

/// The container the Helm values add to the NATS chart's pods.
fn sidecar_container() -> Value {
    let values = yaml("deploy/kubernetes/nats-helm-values.yaml");
    values["podTemplate"]["patch"][0]["value"].clone()
}

#[test]
fn every_container_runs_this_version_of_the_image() {
    let script = read("scripts/generate-kubernetes.sh");
    let repository = script
        .lines()
        .find_map(|l| l.strip_prefix("image_repository=${IMAGE_REPOSITORY:-"))
        .and_then(|rest| rest.strip_suffix('}'))
        .expect("image_repository=${IMAGE_REPOSITORY:-...} in scripts/generate-kubernetes.sh");
    // Fully qualified: a registry host (with a dot) before the first '/'.
    let host = repository.split('/').next().unwrap();
    assert!(
        host.contains('.') && repository.contains('/'),
        "{repository}"
    );
    let image = format!("{repository}:{}", env!("CARGO_PKG_VERSION"));
    let sidecar = sidecar_container();
    assert_eq!(sidecar["image"], image.as_str(), "the sidecar");
    let deployment = yaml("deploy/kubernetes/cluster/deployment.yaml");
    for c in deployment["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .unwrap()
    {
        assert_eq!(c["image"], image.as_str(), "the cluster exporter");
    }
}

#[test]
fn every_pod_monitor_gives_the_job_the_alert_rules_select() {
    let rules = read("alerts/exporter.rules.yml");
    assert!(rules.contains("up{job=\"nats-delivery-exporter\"}"));
    let monitors: Vec<_> = shipped_objects()
        .into_iter()
        .filter(|(_, o)| o["kind"] == "PodMonitor")
        .collect();
    assert_eq!(
        monitors.len(),
        2,
        "the sidecars' and the cluster exporter's"
    );
    for (from, monitor) in monitors {
        for endpoint in monitor["spec"]["podMetricsEndpoints"]
            .as_sequence()
            .unwrap()
        {
            let sets_job = endpoint["relabelings"]
                .as_sequence()
                .into_iter()
                .flatten()
                .any(|r| r["targetLabel"] == "job" && r["replacement"] == "nats-delivery-exporter");
            assert!(sets_job, "{from}: the job must be nats-delivery-exporter");
        }
    }
}
