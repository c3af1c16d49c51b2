//! Any bytes as a `/varz` reply: parsing may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::Varz;

fuzz_target!(|data: &[u8]| {
    if let Ok(varz) = serde_json::from_slice::<Varz>(data) {
        let _ = varz.server_label();
    }
});
