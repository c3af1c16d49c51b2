//! Any bytes as a `/gatewayz` reply: parsing may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::Gatewayz;

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = serde_json::from_slice::<Gatewayz>(data) {
        let _ = reply.connections();
    }
});
