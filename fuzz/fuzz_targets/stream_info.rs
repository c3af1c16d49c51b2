//! Any bytes as a STREAM.INFO reply read for lost data: may fail, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = nats_delivery_exporter::stream_lost::parse_info(data);
});
