//! The rules the Kubernetes API server (and the kubelet and
//! prometheus-operator after it) apply to the objects and the Helm values
//! the project ships, beyond what the JSON schemas check: names, labels,
//! ports, probes and selectors. Every problem found is printed, one a line,
//! before the test fails.

use serde_norway::Value;

use super::validation::{
    config_map_key, dns1123_label, dns1123_subdomain, env_var_name, label_key, label_value,
    port_name,
};
use super::{shipped_objects, sidecar_container};

/// The pods of the NATS chart 2.14.2 as a release named `nats` makes them:
/// the labels of `nats.selectorLabels` (templates/_helpers.tpl), and the
/// containers with the port names of files/stateful-set/nats-container.yaml
/// (every optional listener on) and prom-exporter-container.yaml.
const CHART_POD_LABELS: [(&str, &str); 3] = [
    ("app.kubernetes.io/name", "nats"),
    ("app.kubernetes.io/instance", "nats"),
    ("app.kubernetes.io/component", "nats"),
];
const CHART_CONTAINERS: [(&str, &[&str]); 3] = [
    (
        "nats",
        &[
            "nats",
            "leafnodes",
            "websocket",
            "mqtt",
            "cluster",
            "gateway",
            "monitor",
            "profiling",
        ],
    ),
    ("reloader", &[]),
    ("prom-exporter", &["prom-metrics"]),
];

/// A pod the project's files make: its labels and containers.
struct Pod {
    from: String,
    labels: Vec<(String, String)>,
    containers: Vec<Value>,
    volumes: Vec<String>,
}

fn str_pairs(map: &Value) -> Vec<(String, String)> {
    map.as_mapping()
        .into_iter()
        .flatten()
        .map(|(k, v)| {
            let text = |v: &Value| v.as_str().map_or_else(|| format!("{v:?}"), str::to_string);
            (text(k), text(v))
        })
        .collect()
}

fn list(value: &Value) -> &[Value] {
    value.as_sequence().map_or(&[], Vec::as_slice)
}

/// The pods of the Deployments among `objects`.
fn pods_of(objects: &[(String, Value)]) -> Vec<Pod> {
    let mut out = Vec::new();
    for (from, object) in objects {
        if object["kind"] == "Deployment" {
            let template = &object["spec"]["template"];
            out.push(Pod {
                from: format!("{from}: its pod"),
                labels: str_pairs(&template["metadata"]["labels"]),
                containers: list(&template["spec"]["containers"]).to_vec(),
                volumes: list(&template["spec"]["volumes"])
                    .iter()
                    .map(|v| v["name"].as_str().unwrap_or("").to_string())
                    .collect(),
            });
        }
    }
    out
}

/// The pods: the cluster Deployment's template, and the chart's pod with the
/// sidecar added (its other containers reduced to their names and ports).
fn pods() -> Vec<Pod> {
    let mut out = pods_of(&shipped_objects());
    let mut containers: Vec<Value> = CHART_CONTAINERS
        .iter()
        .map(|(name, ports)| {
            let ports: Vec<String> = ports
                .iter()
                .map(|p| format!("{{name: {p}, containerPort: 1}}"))
                .collect();
            serde_norway::from_str(&format!("{{name: {name}, ports: [{}]}}", ports.join(", ")))
                .unwrap()
        })
        .collect();
    containers.push(sidecar_container());
    out.push(Pod {
        from: "the NATS chart's pod with nats-helm-values.yaml".into(),
        labels: CHART_POD_LABELS
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        containers,
        volumes: Vec::new(),
    });
    out
}

fn check(problems: &mut Vec<String>, at: &str, value: &str, rule: &str, errors: Vec<String>) {
    for e in errors {
        problems.push(format!("{at}: {value:?}: {e} ({rule})"));
    }
}

fn check_labels(problems: &mut Vec<String>, at: &str, labels: &[(String, String)]) {
    for (k, v) in labels {
        check(problems, at, k, "IsQualifiedName", label_key(k));
        check(
            problems,
            &format!("{at}[{k}]"),
            v,
            "IsValidLabelValue",
            label_value(v),
        );
    }
}

/// A probe's named port: a valid port name, and one of its container's.
fn check_probes(problems: &mut Vec<String>, at: &str, container: &Value, own_ports: &[&str]) {
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let handler = &container[probe];
        let port = &handler["httpGet"]["port"];
        let port = if port.is_null() {
            &handler["tcpSocket"]["port"]
        } else {
            port
        };
        if let Some(p) = port.as_str() {
            check(
                problems,
                &format!("{at}: {probe}"),
                p,
                "IsValidPortName, ValidatePortNumOrName",
                port_name(p),
            );
            if !own_ports.contains(&p) {
                problems.push(format!("{at}: {probe} names port {p:?}, which the container does not have (the kubelet's findPortByName fails the probe)"));
            }
        }
    }
}

/// Names, ports, environment and probes of one pod's containers.
fn check_pod(problems: &mut Vec<String>, pod: &Pod) {
    let from = &pod.from;
    check_labels(problems, &format!("{from}: pod labels"), &pod.labels);
    let mut container_names = Vec::new();
    let mut port_names = Vec::new();
    for c in &pod.containers {
        let name = c["name"].as_str().unwrap_or("");
        let at = format!("{from}: container {name}");
        check(
            problems,
            &at,
            name,
            "IsDNS1123Label, validateContainers",
            dns1123_label(name),
        );
        if container_names.contains(&name) {
            problems.push(format!(
                "{at}: a second container of that name (validateContainers)"
            ));
        }
        container_names.push(name);
        let own_ports: Vec<&str> = list(&c["ports"])
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        for p in &own_ports {
            check(
                problems,
                &format!("{at}: port"),
                p,
                "IsValidPortName, validateContainerPorts",
                port_name(p),
            );
            if port_names.contains(p) {
                problems.push(format!("{at}: port {p:?} is named twice in the pod (ContainerPort.name: unique within the pod)"));
            }
            port_names.push(p);
        }
        for e in list(&c["env"]) {
            let n = e["name"].as_str().unwrap_or("");
            check(
                problems,
                &format!("{at}: env"),
                n,
                "IsEnvVarName, ValidateEnv",
                env_var_name(n),
            );
        }
        check_probes(problems, &at, c, &own_ports);
        for m in list(&c["volumeMounts"]) {
            let v = m["name"].as_str().unwrap_or("");
            if !pod.volumes.iter().any(|n| n == v) {
                problems.push(format!(
                    "{at}: volumeMount {v:?} names no volume of the pod (validateVolumeMounts)"
                ));
            }
        }
    }
    for v in &pod.volumes {
        check(
            problems,
            &format!("{from}: volume"),
            v,
            "IsDNS1123Label, ValidateVolumes",
            dns1123_label(v),
        );
    }
}

/// True when every `matchLabels` pair is among `labels`.
fn selects(selector: &[(String, String)], labels: &[(String, String)]) -> bool {
    !selector.is_empty() && selector.iter().all(|pair| labels.contains(pair))
}

/// Object names, labels and data keys; selectors against the pods.
fn check_object(problems: &mut Vec<String>, from: &str, object: &Value, pods: &[Pod]) {
    let kind = object["kind"].as_str().unwrap_or("?");
    let name = object["metadata"]["name"].as_str().unwrap_or("");
    let at = format!("{from}: {kind} {name}");
    check(
        problems,
        &at,
        name,
        "IsDNS1123Subdomain, NameIsDNSSubdomain",
        dns1123_subdomain(name),
    );
    check_labels(
        problems,
        &format!("{at}: labels"),
        &str_pairs(&object["metadata"]["labels"]),
    );
    for (key, _) in str_pairs(&object["data"])
        .iter()
        .chain(&str_pairs(&object["stringData"]))
    {
        check(
            problems,
            &format!("{at}: data key"),
            key,
            "IsConfigMapKey",
            config_map_key(key),
        );
    }
    let selector = str_pairs(&object["spec"]["selector"]["matchLabels"]);
    check_labels(problems, &format!("{at}: selector"), &selector);
    match kind {
        "Deployment" => {
            let labels = str_pairs(&object["spec"]["template"]["metadata"]["labels"]);
            if !selects(&selector, &labels) {
                problems.push(format!(
                    "{at}: selector does not match template labels (ValidateDeploymentSpec)"
                ));
            }
        }
        "PodMonitor" => {
            let selected = selected_pods(problems, &at, &selector, pods);
            for endpoint in list(&object["spec"]["podMetricsEndpoints"]) {
                let port = endpoint["port"].as_str().unwrap_or("");
                check(
                    problems,
                    &format!("{at}: endpoint port"),
                    port,
                    "IsValidPortName",
                    port_name(port),
                );
                for pod in selected.iter().filter(|pod| !has_port(pod, port)) {
                    problems.push(format!("{at}: port {port:?} is no port of {} (PodMetricsEndpoint.port names a pod port)", pod.from));
                }
            }
        }
        "Service" => check_service(problems, &at, object, pods),
        _ => {}
    }
}

/// The pods `selector` selects; a problem when it selects none.
fn selected_pods<'a>(
    problems: &mut Vec<String>,
    at: &str,
    selector: &[(String, String)],
    pods: &'a [Pod],
) -> Vec<&'a Pod> {
    let selected: Vec<&Pod> = pods
        .iter()
        .filter(|p| selects(selector, &p.labels))
        .collect();
    if selected.is_empty() {
        problems.push(format!(
            "{at}: its selector matches no pod the project makes"
        ));
    }
    selected
}

/// True when a container of `pod` has a port named `name`.
fn has_port(pod: &Pod, name: &str) -> bool {
    let named = |c: &Value| list(&c["ports"]).iter().any(|p| p["name"] == name);
    pod.containers.iter().any(named)
}

/// A Service selects a pod the project makes, and each of its named target
/// ports is a port of that pod.
fn check_service(problems: &mut Vec<String>, at: &str, service: &Value, pods: &[Pod]) {
    let selector = str_pairs(&service["spec"]["selector"]);
    check_labels(problems, &format!("{at}: selector"), &selector);
    let selected = selected_pods(problems, at, &selector, pods);
    for port in list(&service["spec"]["ports"]) {
        if let Some(name) = port["name"].as_str() {
            check(
                problems,
                &format!("{at}: port"),
                name,
                "ValidateServicePort",
                dns1123_label(name),
            );
        }
        let Some(target) = port["targetPort"].as_str() else {
            continue;
        };
        check(
            problems,
            &format!("{at}: targetPort"),
            target,
            "IsValidPortName",
            port_name(target),
        );
        for pod in selected.iter().filter(|pod| !has_port(pod, target)) {
            problems.push(format!(
                "{at}: targetPort {target:?} is no port of {}",
                pod.from
            ));
        }
    }
}

/// Every rule applied to every object and pod shipped: the problems found,
/// and what was checked.
pub fn problems() -> (Vec<String>, Vec<String>) {
    problems_of(&pods(), &shipped_objects())
}

/// Every rule applied to `objects` (a rendering of the Helm chart) and the
/// pods of their Deployments: the problems found, and what was checked.
pub fn problems_in(objects: &[(String, Value)]) -> (Vec<String>, Vec<String>) {
    problems_of(&pods_of(objects), objects)
}

fn problems_of(pods: &[Pod], objects: &[(String, Value)]) -> (Vec<String>, Vec<String>) {
    let mut problems = Vec::new();
    let mut checked = Vec::new();
    for pod in pods {
        check_pod(&mut problems, pod);
        let names: Vec<&str> = pod
            .containers
            .iter()
            .filter_map(|c| c["name"].as_str())
            .collect();
        checked.push(format!("{}: containers {}", pod.from, names.join(", ")));
    }
    for (from, object) in objects {
        check_object(&mut problems, from, object, pods);
        let (kind, name) = (&object["kind"], &object["metadata"]["name"]);
        checked.push(format!(
            "{from}: {} {}",
            kind.as_str().unwrap_or("?"),
            name.as_str().unwrap_or("?")
        ));
    }
    (problems, checked)
}

#[test]
fn every_object_and_the_sidecar_pass_the_api_server_s_rules() {
    let (problems, checked) = problems();
    for c in &checked {
        println!("checked {c}");
    }
    for p in &problems {
        println!("{p}");
    }
    println!(
        "{} objects and pods checked, {} problems",
        checked.len(),
        problems.len()
    );
    assert!(
        problems.is_empty(),
        "{} problems, listed above",
        problems.len()
    );
}
