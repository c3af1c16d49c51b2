//! Any bytes as a `/healthz` reply: parsing may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::{Healthz, HEALTHZ_PROBLEM_KINDS};

fuzz_target!(|data: &[u8]| {
    if let Ok(reply) = serde_json::from_slice::<Healthz>(data) {
        let _ = reply.healthy();
        for kind in HEALTHZ_PROBLEM_KINDS {
            let _ = reply.problems(kind);
        }
    }
});
