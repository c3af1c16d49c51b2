//! A stream's or consumer's `metadata` (2.10+, string keys and values set
//! by whoever creates it): the exporter keeps only what it reads, the lag
//! threshold a team gives a consumer and the values of the keys
//! `--jsz-metadata-labels` names, so that metadata costs nothing unless
//! it holds one of them.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::OnceLock;

use serde::de::{IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;

/// The metadata key whose value, whole seconds from 1, is the delivery lag
/// the consumer may have before `NatsJetStreamConsumerDeliveryLagHigh`
/// fires (docs/runbook.md); without it the alert's default applies.
pub const LAG_THRESHOLD_KEY: &str = "nats-delivery-exporter.lag_threshold_seconds";

/// The longest metadata value copied into a label, in bytes; a longer one
/// is cut at the last whole character before it.
pub const MAX_LABEL_VALUE_BYTES: usize = 128;

/// The most keys `--jsz-metadata-labels` may name.
pub const MAX_LABEL_KEYS: usize = 16;

/// What the exporter keeps of one stream's or consumer's metadata; `None`
/// in its place when it holds none of it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Metadata {
    /// A consumer's lag threshold ([`LAG_THRESHOLD_KEY`]); never a stream's.
    pub(crate) lag_threshold: Option<NonZeroU32>,
    /// The value of each named key, in the flag's order; `None` where the
    /// metadata lacks it. Empty when no key is named.
    pub(crate) values: Box<[Option<Box<str>>]>,
}

impl Metadata {
    /// Whether it holds a value of a named key (its `_info` series exists).
    pub(crate) fn has_labels(&self) -> bool {
        self.values.iter().any(Option::is_some)
    }

    /// (label name, value) of each named key it holds.
    pub(crate) fn labels(&self) -> impl Iterator<Item = (&'static str, &str)> {
        let names = named().map_or(&[][..], |n| &n.labels[..]);
        (names.iter().zip(self.values.iter()))
            .filter_map(|(name, v)| Some((name.as_str(), v.as_deref()?)))
    }
}

/// The keys `--jsz-metadata-labels` names and the label each becomes.
#[derive(Debug)]
struct Named {
    keys: Box<[Box<str>]>,
    labels: Box<[String]>,
}

/// Set once at start from the flag: the replies are parsed by serde's
/// derived code, which takes no settings, and the flag holds for the
/// whole process.
static NAMED: OnceLock<Named> = OnceLock::new();

fn named() -> Option<&'static Named> {
    NAMED.get()
}

/// The label a metadata key becomes: `metadata_` and the key lower-cased,
/// each character other than `a`-`z`, `0`-`9` and `_` made `_`
/// (`Team.Owner` gives `metadata_team_owner`).
pub fn metadata_label_name(key: &str) -> String {
    let mut name = String::from("metadata_");
    name.extend(key.chars().map(|c| match c.to_ascii_lowercase() {
        c @ ('a'..='z' | '0'..='9' | '_') => c,
        _ => '_',
    }));
    name
}

/// Names the metadata keys copied as labels (`--jsz-metadata-labels`), for
/// the rest of the process; call it once, before the first poll. Refuses
/// an empty key, more than [`MAX_LABEL_KEYS`], and two keys that become one
/// label.
pub fn name_metadata_labels(keys: &[String]) -> Result<(), String> {
    if keys.len() > MAX_LABEL_KEYS {
        return Err(format!("at most {MAX_LABEL_KEYS} keys, not {}", keys.len()));
    }
    let mut labels: Vec<String> = Vec::with_capacity(keys.len());
    for key in keys {
        if key.trim().is_empty() {
            return Err("a metadata key is empty".into());
        }
        let label = metadata_label_name(key);
        if let Some(i) = labels.iter().position(|l| *l == label) {
            let other = &keys[i];
            return Err(format!(
                "{other:?} and {key:?} both become the label {label}"
            ));
        }
        labels.push(label);
    }
    let named = Named {
        keys: keys.iter().map(|k| Box::from(k.as_str())).collect(),
        labels: labels.into(),
    };
    NAMED
        .set(named)
        .map_err(|_| "the metadata keys were named already".to_string())
}

/// `value` cut to at most [`MAX_LABEL_VALUE_BYTES`], at a character's start.
fn bounded(value: &str) -> Box<str> {
    let mut end = value.len().min(MAX_LABEL_VALUE_BYTES);
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    Box::from(&value[..end])
}

/// A consumer's `metadata`: its lag threshold and the named keys' values.
pub(crate) fn consumer<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<Metadata>>, D::Error> {
    let keys = named().map_or(&[][..], |n| &n.keys[..]);
    read(d, keys, true)
}

/// A stream's `metadata`: the named keys' values (no lag threshold).
pub(crate) fn stream<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<Metadata>>, D::Error> {
    let keys = named().map_or(&[][..], |n| &n.keys[..]);
    read(d, keys, false)
}

/// `metadata` read for `keys` (and the lag threshold when `threshold`):
/// the value of [`LAG_THRESHOLD_KEY`] when it is a whole number of seconds
/// from 1 to 2^32 - 1, and the named keys' string values. Any other value,
/// and every other key, is left out: the alert then uses its default, which
/// METRICS.md says (a series absent, never a wrong threshold).
fn read<'de, D: Deserializer<'de>>(
    d: D,
    keys: &[Box<str>],
    threshold: bool,
) -> Result<Option<Box<Metadata>>, D::Error> {
    struct Keys<'k> {
        keys: &'k [Box<str>],
        threshold: bool,
    }
    impl<'de> Visitor<'de> for Keys<'_> {
        type Value = Option<Box<Metadata>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a metadata object")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        // Anything but an object holds nothing kept, and must not fail the
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
            let mut lag_threshold = None;
            let mut values: Box<[Option<Box<str>>]> = vec![None; self.keys.len()].into();
            while let Some(key) = map.next_key::<String>()? {
                let named = self.keys.iter().position(|k| **k == *key);
                if self.threshold && key == LAG_THRESHOLD_KEY {
                    let value: serde_json::Value = map.next_value()?;
                    lag_threshold = value
                        .as_str()
                        .and_then(|s| s.trim().parse::<u32>().ok())
                        .and_then(NonZeroU32::new);
                } else if let Some(i) = named {
                    let value: serde_json::Value = map.next_value()?;
                    values[i] = value.as_str().map(bounded);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            let metadata = Metadata {
                lag_threshold,
                values,
            };
            let kept = metadata.lag_threshold.is_some() || metadata.has_labels();
            Ok(kept.then(|| Box::new(metadata)))
        }
    }
    d.deserialize_any(Keys { keys, threshold })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(metadata: &str, keys: &[&str]) -> Option<Box<Metadata>> {
        let keys: Vec<Box<str>> = keys.iter().map(|k| Box::from(*k)).collect();
        let mut d = serde_json::Deserializer::from_str(metadata);
        read(&mut d, &keys, true).unwrap()
    }

    fn threshold(metadata: &str) -> Option<u32> {
        kept(metadata, &[])?.lag_threshold.map(NonZeroU32::get)
    }

    #[test]
    fn only_a_whole_number_of_seconds_under_the_key_counts() {
        let key = LAG_THRESHOLD_KEY;
        assert_eq!(
            threshold(&format!(r#"{{"team":"pay","{key}":"900"}}"#)),
            Some(900)
        );
        assert_eq!(threshold(&format!(r#"{{"{key}":" 60 "}}"#)), Some(60));
        for bad in [
            r#""0""#, r#""5m""#, r#""-3""#, "900", r#""""#, "null", "[1]",
        ] {
            assert_eq!(threshold(&format!(r#"{{"{key}":{bad}}}"#)), None, "{bad}");
        }
        assert_eq!(threshold(r#"{"team":"pay"}"#), None);
        // Not an object at all: nothing kept, and no failed reply.
        for other in ["null", r#""x""#, "7", "-7", "1.5", "true", r#"[{"a":1}]"#] {
            assert!(kept(other, &["team"]).is_none(), "{other}");
        }
    }

    #[test]
    fn only_the_named_keys_are_kept_with_bounded_values() {
        let long = "é".repeat(100);
        let metadata = format!(r#"{{"owner":"{long}","team":"pay","other":"x","n":"7"}}"#);
        let m = kept(&metadata, &["team", "owner", "missing"]).unwrap();
        let owner = m.values[1].as_deref().unwrap();
        assert_eq!(owner.len(), MAX_LABEL_VALUE_BYTES);
        assert!(long.starts_with(owner));
        assert_eq!(m.values[0].as_deref(), Some("pay"));
        assert_eq!(m.values[2], None);
        // Nothing named present (and no threshold): nothing kept at all.
        assert!(kept(r#"{"other":"x"}"#, &["team"]).is_none());
        assert!(kept(r#"{"team":7}"#, &["team"]).is_none());
    }

    /// The metadata's pointer takes the room the lag threshold had plus
    /// what `ack_wait` gave up: a consumer's configuration, kept once per
    /// distinct one, is no bigger than before it was read.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_consumers_configuration_stays_88_bytes() {
        assert_eq!(std::mem::size_of::<super::super::ConsumerConfig>(), 88);
    }

    #[test]
    fn keys_become_label_names_or_are_refused() {
        assert_eq!(metadata_label_name("Team.Owner-1"), "metadata_team_owner_1");
        assert_eq!(metadata_label_name("ünï"), "metadata__n_");
        let twice = ["team".to_string(), "Team".to_string()];
        let refused = name_metadata_labels(&twice).unwrap_err();
        assert!(refused.contains("metadata_team"), "{refused}");
        assert!(name_metadata_labels(&[" ".to_string()]).is_err());
        let many: Vec<String> = (0..=MAX_LABEL_KEYS).map(|i| format!("k{i}")).collect();
        assert!(name_metadata_labels(&many).is_err());
        assert!(named().is_none(), "a refused list is not kept");
    }
}
