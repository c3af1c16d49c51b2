//! Any bytes as a STREAM.INFO reply read for lost data: may fail, never
//! panic; a record read twice counts its sequences once.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    use nats_delivery_exporter::{parse_stream_info, Found};
    if let Ok(record) = parse_stream_info(data) {
        let mut found = Found::default();
        found.absorb(&record);
        let once = found.counted();
        assert_eq!(once.0, record.sequences.len() as u64);
        found.absorb(&record);
        assert_eq!(found.counted(), once);
    }
});
