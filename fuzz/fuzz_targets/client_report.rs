//! Any bytes as an application report: recorded or rejected, never a panic,
//! and the re-export still encodes.
#![no_main]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::ClientReports;
use prometheus_client::registry::Registry;

fn state() -> &'static (Arc<ClientReports>, Registry) {
    static STATE: OnceLock<(Arc<ClientReports>, Registry)> = OnceLock::new();
    STATE.get_or_init(|| {
        let reports = Arc::new(ClientReports::new(Duration::from_secs(600)));
        let mut registry = Registry::default();
        registry.register_collector(Box::new(reports.clone()));
        (reports, registry)
    })
}

fuzz_target!(|data: &[u8]| {
    let (reports, registry) = state();
    // Sent on the subject of the client it names, as an honest reporter does.
    let client = serde_json::from_slice::<serde_json::Value>(data)
        .ok()
        .and_then(|v| v.get("client").and_then(|c| c.as_str()).map(str::to_string));
    let _ = reports.record(client.as_deref(), data);
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, registry).expect("encodes");
});
