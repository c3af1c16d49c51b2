//! Any bytes as an `/accstatz` reply: parsing may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::Accstatz;

fuzz_target!(|data: &[u8]| {
    let _ = serde_json::from_slice::<Accstatz>(data);
});
