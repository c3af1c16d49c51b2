//! Any bytes as a `/jsz` page: parsing may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::Jsz;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<Jsz>(data);
});
