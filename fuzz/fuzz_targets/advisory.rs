//! Any bytes as a JetStream advisory, on its own and on each advisory
//! subject: parsing may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::{parse_advisory, parse_advisory_on, ADVISORY_SUBJECTS};

fuzz_target!(|data: &[u8]| {
    let _ = parse_advisory(data);
    for subject in ADVISORY_SUBJECTS {
        let _ = parse_advisory_on(&subject.replace('>', "S.C"), data);
    }
});
