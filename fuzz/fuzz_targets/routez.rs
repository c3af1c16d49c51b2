//! Any bytes as a `/routez` reply: parsing may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::{RoutePending, Routez};

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = serde_json::from_slice::<Routez>(data) {
        let _: Vec<RoutePending> = reply.routes.into_iter().map(RoutePending::from).collect();
    }
});
