//! Any bytes as a system-account reply (a survey's answer or one server's):
//! reading the envelope, then its data as `/varz`, may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::Varz;

fuzz_target!(|data: &[u8]| {
    if let Ok(answer) = nats_delivery_exporter::parse_survey_reply(data) {
        if let Ok(body) = answer.data {
            let _ = serde_json::from_slice::<Varz>(&body);
        }
    }
});
