//! Any bytes as a JetStream advisory, on its own and on each advisory
//! subject: parsing may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::listeners::advisories::parse::{parse, parse_on, SUBJECTS};

fuzz_target!(|data: &[u8]| {
    let _ = parse(data);
    for subject in SUBJECTS {
        let _ = parse_on(&subject.replace('>', "S.C"), data);
    }
});
