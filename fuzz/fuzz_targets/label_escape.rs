//! Any string as a label value comes back exactly when the exposition line
//! is read back (`\\`, `\"` and `\n` unescaped), in both formats the
//! exporter serves (Prometheus text and OpenMetrics).
#![no_main]

use std::fmt;

use libfuzzer_sys::fuzz_target;
use nats_delivery_exporter::gauge_family;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::registry::Registry;

#[derive(Debug)]
struct OneValue(String);

impl Collector for OneValue {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        gauge_family(
            &mut enc,
            "fuzz",
            "Fuzzed label.",
            [([("name", self.0.as_str())], 1u64)],
        )
    }
}

/// The label value of `fuzz{name="..."} 1`, unescaped.
fn read_back(text: &str) -> String {
    let start = text.find("fuzz{name=\"").expect("sample line") + "fuzz{name=\"".len();
    let mut out = String::new();
    let mut chars = text[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some(c @ ('\\' | '"')) => out.push(c),
                other => panic!("unknown escape {other:?}"),
            },
            '"' => return out,
            '\n' => panic!("raw newline in a label value"),
            c => out.push(c),
        }
    }
    panic!("unterminated label value");
}

fuzz_target!(|data: &[u8]| {
    let value = String::from_utf8_lossy(data).into_owned();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(OneValue(value.clone())));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry).expect("encodes");
    assert_eq!(read_back(&text), value);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    assert_eq!(read_back(&text), value);
});
