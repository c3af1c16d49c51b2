//! Which servers a system-account survey asks: the filters every server
//! applies to `$SYS.REQ.SERVER.PING.*` requests itself, so that a server
//! left out never answers and is never expected.

use serde_json::{Map, Value};

/// The survey's server filters, as flags.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SurveyFilter {
    /// Only servers whose name contains this.
    #[arg(
        long = "system-server-name",
        env = "NATS_DELIVERY_SYSTEM_SERVER_NAME",
        value_name = "TEXT"
    )]
    pub(crate) server_name: Option<String>,
    /// Only servers whose cluster's name contains this.
    #[arg(
        long = "system-cluster",
        env = "NATS_DELIVERY_SYSTEM_CLUSTER",
        value_name = "TEXT"
    )]
    pub(crate) cluster: Option<String>,
    /// Only servers with every one of these tags (comma-separated).
    #[arg(
        long = "system-tags",
        env = "NATS_DELIVERY_SYSTEM_TAGS",
        value_name = "TAG,...",
        value_delimiter = ','
    )]
    pub(crate) tags: Vec<String>,
    /// Only servers of this JetStream domain.
    #[arg(
        long = "system-domain",
        env = "NATS_DELIVERY_SYSTEM_DOMAIN",
        value_name = "DOMAIN"
    )]
    pub(crate) domain: Option<String>,
}

impl SurveyFilter {
    /// The filters as the JSON options of a survey request (nats-server's
    /// `EventFilterOptions`); `{}` asks every server.
    pub(crate) fn options(&self) -> Value {
        let mut options = Map::new();
        let mut text = |key: &str, value: &Option<String>| {
            if let Some(v) = value.as_deref().filter(|v| !v.is_empty()) {
                options.insert(key.to_string(), Value::String(v.to_string()));
            }
        };
        text("server_name", &self.server_name);
        text("cluster", &self.cluster);
        text("domain", &self.domain);
        let tags: Vec<Value> = self
            .tags
            .iter()
            .filter(|t| !t.is_empty())
            .map(|t| Value::String(t.clone()))
            .collect();
        if !tags.is_empty() {
            options.insert("tags".into(), Value::Array(tags));
        }
        Value::Object(options)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_become_the_servers_filter_options() {
        assert_eq!(SurveyFilter::default().options(), serde_json::json!({}));
        let filter: SurveyFilter = crate::flags::args::parse_args([
            "--system-server-name",
            "n1",
            "--system-cluster",
            "east",
            "--system-tags",
            "az:1,ssd",
            "--system-domain",
            "hub",
        ])
        .unwrap();
        assert_eq!(
            filter.options(),
            serde_json::json!({"server_name": "n1", "cluster": "east", "tags": ["az:1", "ssd"], "domain": "hub"})
        );
    }
}
