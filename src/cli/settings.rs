//! The plain settings the parts below the command line take, each built
//! from the flags here and nowhere else.

use crate::cli::config::Config;
use crate::scrape::settings::ScrapeSettings;
use crate::sources::{Source, SourceSettings};
use crate::system::poll::PollSettings;

impl Config {
    /// What polling through the system account takes from these flags.
    pub fn system_poll_settings(&self) -> PollSettings<'_> {
        PollSettings {
            nats: &self.nats,
            auth: self.advisories.system_account.as_ref(),
            expected_servers: self.system_expected_servers as usize,
            timeout: self.timeout,
            max_reply_size: self.max_reply_size,
            survey_gap: self.system_survey_gap,
            filter: self.system_filter.options(),
        }
    }

    /// What the exporter and its poller take from these flags.
    pub fn scrape_settings(&self) -> ScrapeSettings {
        let enabled = Source::ALL.into_iter().filter(|s| self.polls(*s));
        ScrapeSettings {
            monitor_urls: self.monitor_urls.clone(),
            monitor_tls_ca: self.monitor_tls_ca.clone(),
            timeout: self.timeout,
            max_reply_size: self.max_reply_size,
            max_kept_size: self.max_kept_size,
            reuse_poll_for: self.server_cost.reuse_poll_for,
            sources: SourceSettings {
                enabled: enabled.collect(),
                connz_top: self.connz_top,
                max_client_names: self.max_client_names,
                jsz_page_size: self.jsz_page_size,
                jsz_filter: self.cardinality.filter(),
                jsz_config_interval: self.server_cost.jsz_config_interval,
                jsz_config_timeout: self.server_cost.jsz_config_timeout,
                jsz_removal_check: None,
                jsz_poll_timeout: None,
                // As the consumers' removal forecast measures its rates.
                jsz_fill_span: self.consumer_status_window / 8,
            },
            consumer_status_window: self.consumer_status_window,
            consumer_timestamp_reads: self.consumer_timestamp_reads,
            consumer_series: self.cardinality.consumer_series(),
            keep_ephemeral_consumers: self.cardinality.keep_ephemeral_consumers,
            max_jetstream_series: self.cardinality.max_jetstream_series,
        }
    }
}
