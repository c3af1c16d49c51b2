//! Any bytes as a `/connz` reply (open or closed connections): parsing may
//! fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::Connz;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<Connz>(data);
});
