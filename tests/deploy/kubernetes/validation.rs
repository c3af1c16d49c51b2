//! The API server's syntax rules for names, written out so that the tests
//! can apply them offline; the JSON schemas the manifests are checked
//! against leave strings unchecked. Each function says the function of
//! k8s.io/apimachinery `pkg/util/validation/validation.go` it follows (label
//! keys and values now live in `pkg/api/validate/content/kube.go`, which
//! that file re-exports). Each returns why a value is refused, or nothing.

/// `IsValidPortName`: an IANA_SVC_NAME, the rule for container port names
/// (`validateContainerPorts`) and for named probe and Service target ports.
pub fn port_name(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > 15 {
        errors.push("must be no more than 15 characters".to_string());
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        errors
            .push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".into());
    }
    if !name.chars().any(|c| c.is_ascii_lowercase()) {
        errors.push("must contain at least one letter (a-z)".into());
    }
    if name.contains("--") {
        errors.push("must not contain consecutive hyphens".into());
    }
    if name.starts_with('-') || name.ends_with('-') {
        errors.push("must not begin or end with a hyphen".into());
    }
    errors
}

/// `dns1123LabelFmt` without a length: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_label_text(label: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    label.starts_with(alnum)
        && label.ends_with(alnum)
        && label.chars().all(|c| alnum(c) || c == '-')
}

/// `IsDNS1123Label`: container, volume and port-less names (at most 63).
pub fn dns1123_label(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !is_dns_label_text(name) {
        errors.push("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character".into());
    }
    errors
}

/// `IsDNS1123Subdomain`: the names of most objects (`NameIsDNSSubdomain`:
/// Deployment, Secret, ConfigMap, and custom resources such as PodMonitor).
pub fn dns1123_subdomain(name: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if name.len() > 253 {
        errors.push("must be no more than 253 characters".to_string());
    }
    if !name.split('.').all(is_dns_label_text) {
        errors.push("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character".into());
    }
    errors
}

/// `labelKeyFmt` without a length: `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_qualified_text(text: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    text.starts_with(alnum)
        && text.ends_with(alnum)
        && text
            .chars()
            .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
}

/// `IsQualifiedName` (`IsLabelKey`): label keys and selector keys, an
/// optional DNS subdomain prefix and `/`, then a name of at most 63.
pub fn label_key(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    let name = match key.split('/').collect::<Vec<_>>()[..] {
        [name] => name,
        [prefix, name] => {
            if prefix.is_empty() {
                errors.push("prefix part must be non-empty".to_string());
            }
            for e in dns1123_subdomain(prefix) {
                errors.push(format!("prefix part {e}"));
            }
            name
        }
        _ => return vec!["a valid label key has at most one '/'".into()],
    };
    if name.len() > 63 {
        errors.push("name part must be no more than 63 characters".into());
    }
    if !is_qualified_text(name) {
        errors.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into());
    }
    errors
}

/// `IsValidLabelValue` (`IsLabelValue`): empty, or a name of at most 63.
pub fn label_value(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_string());
    }
    if !value.is_empty() && !is_qualified_text(value) {
        errors.push("a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character".into());
    }
    errors
}

/// `IsEnvVarName`: `[-._a-zA-Z][-._a-zA-Z0-9]*`.
pub fn env_var_name(name: &str) -> Vec<String> {
    let first = |c: char| c.is_ascii_alphabetic() || matches!(c, '-' | '.' | '_');
    if name.starts_with(first) && name.chars().all(|c| first(c) || c.is_ascii_digit()) {
        Vec::new()
    } else {
        vec!["a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit".into()]
    }
}

/// `IsConfigMapKey`: keys of a ConfigMap's or a Secret's data.
pub fn config_map_key(key: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if key.len() > 253 {
        errors.push("must be no more than 253 characters".to_string());
    }
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_');
    if key.is_empty() || !key.chars().all(allowed) {
        errors.push(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'".into(),
        );
    }
    if key == "." || key == ".." || key.starts_with("..") {
        errors.push("must not be '.' or '..' or start with '..'".into());
    }
    errors
}

#[test]
fn the_rules_refuse_what_the_api_server_refuses() {
    // Values each rule must accept and refuse, after the functions cited.
    for good in ["http", "dns-tcp", "p", "delivery-prom", "a1-b2"] {
        assert_eq!(port_name(good), Vec::<String>::new(), "{good}");
    }
    for bad in [
        "delivery-metrics",
        "",
        "1234",
        "-http",
        "http-",
        "a--b",
        "Http",
        "h_p",
    ] {
        assert!(!port_name(bad).is_empty(), "{bad}");
    }
    assert!(dns1123_label("exporter").is_empty());
    for bad in ["Exporter", "-a", "a.b", &"a".repeat(64)] {
        assert!(!dns1123_label(bad).is_empty(), "{bad}");
    }
    assert!(dns1123_subdomain("nats-delivery-exporter.v1").is_empty());
    for bad in ["a..b", "A", "a_b", ""] {
        assert!(!dns1123_subdomain(bad).is_empty(), "{bad}");
    }
    for good in [
        "app.kubernetes.io/name",
        "release",
        "grafana_dashboard",
        "a/B.c",
    ] {
        assert!(label_key(good).is_empty(), "{good}");
    }
    for bad in ["/name", "a/b/c", "Ex.com/n", "name-", &"a".repeat(64)] {
        assert!(!label_key(bad).is_empty(), "{bad}");
    }
    for good in ["", "1", "nats-delivery-exporter", "v1.2_3"] {
        assert!(label_value(good).is_empty(), "{good}");
    }
    for bad in ["-a", "a b", "é", &"a".repeat(64)] {
        assert!(!label_value(bad).is_empty(), "{bad}");
    }
    assert!(env_var_name("NATS_DELIVERY_MONITOR_URL").is_empty());
    assert!(!env_var_name("1ABC").is_empty());
    assert!(config_map_key("nats-delivery-overview.json").is_empty());
    assert!(!config_map_key("a/b").is_empty());
}
