//! The text written here against what prometheus-client writes for the same
//! families, in both formats.

use super::*;
use crate::sources::jsz::{ConsumerInfo, ConsumerRow};
use crate::text::families::{counter_family, gauge_family};

/// Label values that need escaping, and plain ones.
const NAMES: [(&str, &str, &str); 3] = [
    ("$G", "S1", "C1"),
    ("acc \"quoted\"", "back\\slash", "new\nline"),
    ("ünïcode", "", "a,b=c}"),
];

/// Values whose formatting differs between the formats or is easy to get wrong.
const VALUES: [Num; 14] = [
    Num::U(0),
    Num::U(u64::MAX),
    Num::I(-1),
    Num::I(i64::MIN),
    Num::F(0.0),
    Num::F(-0.0),
    Num::F(0.1),
    Num::F(1.5e-7),
    Num::F(1e21),
    Num::F(123456789.125),
    Num::F(3.0),
    Num::F(f64::NAN),
    Num::F(f64::INFINITY),
    Num::F(f64::NEG_INFINITY),
];

/// prometheus-client's text for rows of (labels, value) as one family.
#[derive(Debug)]
struct Reference {
    rows: Vec<([(&'static str, String); 4], Num)>,
    counter: bool,
}

impl Collector for Reference {
    fn encode(&self, mut enc: DescriptorEncoder) -> fmt::Result {
        let rows = self.rows.iter().map(|(labels, v)| {
            let labels: Vec<(&str, &str)> = labels
                .iter()
                .filter(|(_, v)| v != "-")
                .map(|(k, v)| (*k, v.as_str()))
                .collect();
            (labels, *v)
        });
        if self.counter {
            let counts = rows.map(|(l, v)| match v {
                Num::U(n) => (l, n),
                _ => unreachable!("counters are counts"),
            });
            counter_family(&mut enc, "fam", "Help with \\ and\nnewline.", counts)
        } else {
            gauge_family(&mut enc, "fam", "Help with \\ and\nnewline.", rows)
        }
    }
}

fn reference(format: Format, rows: &[(usize, &str, Num)], counter: bool) -> String {
    let rows = rows
        .iter()
        .map(|&(i, status, v)| {
            let (a, s, c) = NAMES[i];
            let labels = [
                ("account", a.to_string()),
                ("stream", s.to_string()),
                ("consumer", c.to_string()),
                ("status", status.to_string()),
            ];
            (labels, v)
        })
        .collect();
    let mut registry = Registry::default();
    registry.register_collector(Box::new(Reference { rows, counter }));
    encode_registry(&registry, format, 0)
}

fn fast(format: Format, rows: &[(usize, &str, Num)], counter: bool) -> String {
    let infos: Vec<ConsumerInfo> = NAMES
        .iter()
        .map(|(_, _, c)| ConsumerInfo {
            name: (*c).into(),
            ..ConsumerInfo::default()
        })
        .collect();
    let consumers: Vec<ConsumerRow> = NAMES
        .iter()
        .zip(&infos)
        .map(|((a, s, _), info)| (*a, *s, info, None))
        .collect();
    let labels = ConsumerLabelText::new(consumers.iter().map(|(a, s, c, _)| (*a, *s, &c.name[..])));
    let more: Vec<String> = rows
        .iter()
        .map(|(_, status, _)| match *status {
            "-" => String::new(),
            status => {
                let mut s = ",".to_string();
                push_label(&mut s, "status", status);
                s
            }
        })
        .collect();
    let series = rows
        .iter()
        .zip(&more)
        .map(|(&(i, _, v), more)| (labels.get(i), more.as_str(), v));
    let metric_type = if counter {
        MetricType::Counter
    } else {
        MetricType::Gauge
    };
    let mut out = String::new();
    let family = ("fam", "Help with \\ and\nnewline.");
    write_family(&mut out, format, metric_type, family, series);
    out
}

#[test]
fn gauges_are_written_as_prometheus_client_writes_them() {
    let rows: Vec<(usize, &str, Num)> = VALUES
        .iter()
        .enumerate()
        .map(|(n, v)| (n % NAMES.len(), ["-", "ok", "a\"b"][n % 3], *v))
        .collect();
    for format in [Format::Classic, Format::OpenMetrics] {
        let expected = reference(format, &rows, false);
        assert!(expected.contains("# TYPE fam gauge"), "{expected}");
        assert_eq!(fast(format, &rows, false), expected, "{format:?}");
    }
}

#[test]
fn counters_are_written_as_prometheus_client_writes_them() {
    let rows = [
        (0, "-", Num::U(0)),
        (1, "-", Num::U(7)),
        (2, "x", Num::U(u64::MAX)),
    ];
    for format in [Format::Classic, Format::OpenMetrics] {
        let expected = reference(format, &rows, true);
        assert!(expected.contains("fam_total{"), "{expected}");
        assert_eq!(fast(format, &rows, true), expected, "{format:?}");
    }
}

#[test]
fn a_family_without_series_is_not_written() {
    for format in [Format::Classic, Format::OpenMetrics] {
        assert_eq!(reference(format, &[], false), "");
        assert_eq!(fast(format, &[], false), "");
    }
}

#[test]
fn each_consumer_has_its_own_labels() {
    let infos: Vec<ConsumerInfo> = ["x", "y\"z"]
        .iter()
        .map(|n| ConsumerInfo {
            name: (*n).into(),
            ..ConsumerInfo::default()
        })
        .collect();
    let rows: Vec<ConsumerRow> = infos.iter().map(|c| ("A", "S", c, None)).collect();
    let labels = ConsumerLabelText::new(rows.iter().map(|(a, s, c, _)| (*a, *s, &c.name[..])));
    assert_eq!(labels.get(0), r#"account="A",stream="S",consumer="x""#);
    assert_eq!(labels.get(1), r#"account="A",stream="S",consumer="y\"z""#);
}
