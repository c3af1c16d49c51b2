//! A consumer's `metadata` (2.10+, string keys and values set by whoever
//! creates it): the exporter keeps only what it reads, the lag threshold a
//! team gives the consumer, so that a consumer with metadata costs no
//! more memory than one without.

use std::fmt;
use std::num::NonZeroU32;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;

/// The metadata key whose value, whole seconds from 1, is the delivery lag
/// the consumer may have before `NatsJetStreamConsumerDeliveryLagHigh`
/// fires (docs/runbook.md); without it the alert's default applies.
pub const LAG_THRESHOLD_KEY: &str = "nats-delivery-exporter.lag_threshold_seconds";

/// `metadata`: the value of [`LAG_THRESHOLD_KEY`] when it is a whole
/// number of seconds from 1 to 2^32 - 1. Any other value of it, and every
/// other key, is left out: the alert then uses its default, which METRICS.md
/// says (a series absent, never a wrong threshold).
pub(crate) fn lag_threshold<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<NonZeroU32>, D::Error> {
    struct Keys;
    impl<'de> Visitor<'de> for Keys {
        type Value = Option<NonZeroU32>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a metadata object")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        // Anything but an object holds no threshold, and must not fail the
        // whole reply: the metadata was never read before it held one.
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<String>()? {
                if key == LAG_THRESHOLD_KEY {
                    let value: serde_json::Value = map.next_value()?;
                    found = value
                        .as_str()
                        .and_then(|s| s.trim().parse::<u32>().ok())
                        .and_then(NonZeroU32::new);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    d.deserialize_any(Keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(metadata: &str) -> Option<u32> {
        let mut d = serde_json::Deserializer::from_str(metadata);
        lag_threshold(&mut d).unwrap().map(NonZeroU32::get)
    }

    #[test]
    fn only_a_whole_number_of_seconds_under_the_key_counts() {
        let key = LAG_THRESHOLD_KEY;
        assert_eq!(
            read(&format!(r#"{{"team":"pay","{key}":"900"}}"#)),
            Some(900)
        );
        assert_eq!(read(&format!(r#"{{"{key}":" 60 "}}"#)), Some(60));
        for bad in [
            r#""0""#, r#""5m""#, r#""-3""#, "900", r#""""#, "null", "[1]",
        ] {
            assert_eq!(read(&format!(r#"{{"{key}":{bad}}}"#)), None, "{bad}");
        }
        assert_eq!(read(r#"{"team":"pay"}"#), None);
        // Not an object at all: no threshold, and no failed reply.
        for other in ["null", r#""x""#, "7", "-7", "1.5", "true", r#"[{"a":1}]"#] {
            assert_eq!(read(other), None, "{other}");
        }
    }
}
