//! The one reader of sample values in Prometheus text exposition (classic
//! text and OpenMetrics alike).
//!
//! A sample line is `name`, an optional `{label="value",...}` (values with
//! `\\`, `\"` and `\n` escapes, an optional trailing comma), a value and an
//! optional timestamp. Comment lines (`#`, `# EOF`) and blank lines are
//! skipped; a line whose name is another metric's is skipped whole, however
//! it is written. A line of the asked metric that cannot be read panics.
//!
//! Two ways to match labels, one rule each:
//! - **subset** ([`value`], [`samples`]): every asked pair is among the
//!   sample's labels; it may have others.
//! - **exact** ([`exact`]): the sample's labels are exactly the asked pairs,
//!   in any order.
//!
//! A test asking for one number ([`value`], [`exact`]) panics when several
//! samples match, rather than get an arbitrary one of them. [`label`] reads
//! one label out of the label text [`samples`] returns; [`all`] gives every
//! sample, for a test that compares whole expositions.

/// The value of the sample `name` whose labels include every pair in
/// `labels` (other labels may be present). `None` if there is no such sample;
/// panics if more than one sample matches.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    one(matching(text, name, labels, Rule::Subset), name, labels)
}

/// The value of the sample `name` whose labels are exactly `labels` (in any
/// order, no other label). `None` if there is no such sample; panics if more
/// than one sample matches.
pub fn exact(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    one(matching(text, name, labels, Rule::Exact), name, labels)
}

/// Every sample `name` whose labels include every pair in `labels`, as (label
/// text between the braces as written, value).
pub fn samples(text: &str, name: &str, labels: &[(&str, &str)]) -> Vec<(String, f64)> {
    matching(text, name, labels, Rule::Subset)
}

/// One sample line: its metric name, its labels (in the order written,
/// values unescaped) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The metric name (with `_total`, `_bucket`, ... as written).
    pub name: String,
    /// (label, value) pairs as written.
    pub labels: Vec<(String, String)>,
    /// The value.
    pub value: f64,
}

/// Every sample of the exposition, in order: for a test that compares whole
/// families rather than asks for one number.
pub fn all(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let end = line.find(['{', ' ', '\t']).unwrap_or(line.len());
        let name = &line[..end];
        let sample =
            read_line(line, name).unwrap_or_else(|| panic!("unreadable sample line: {line}"));
        out.push(Sample {
            name: name.to_string(),
            labels: (sample.labels.into_iter())
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            value: sample.value,
        });
    }
    out
}

/// The value of label `key` in `label_text` as [`samples`] gives it (the
/// text between the braces), unescaped; `None` without that label. Panics
/// on label text that cannot be read.
pub fn label(label_text: &str, key: &str) -> Option<String> {
    let closed = format!("{label_text}}}");
    let (labels, _) =
        read_labels(&closed).unwrap_or_else(|e| panic!("unreadable labels ({e}): {label_text}"));
    labels.into_iter().find(|(k, _)| *k == key).map(|(_, v)| v)
}

#[derive(Clone, Copy)]
enum Rule {
    Subset,
    Exact,
}

fn one(found: Vec<(String, f64)>, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    assert!(
        found.len() <= 1,
        "{name}{labels:?} matches {} samples: {found:?}",
        found.len()
    );
    found.first().map(|(_, v)| *v)
}

fn matching(text: &str, name: &str, labels: &[(&str, &str)], rule: Rule) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(sample) = read_line(line, name) else {
            continue;
        };
        let has = |(k, v): &(&str, &str)| sample.labels.iter().any(|(gk, gv)| gk == k && gv == v);
        let wanted = match rule {
            Rule::Subset => labels.iter().all(has),
            Rule::Exact => sample.labels.len() == labels.len() && labels.iter().all(has),
        };
        if wanted {
            out.push((sample.label_text.to_string(), sample.value));
        }
    }
    out
}

/// A sample's labels, as (name, unescaped value).
type Labels<'a> = Vec<(&'a str, String)>;

struct Line<'a> {
    label_text: &'a str,
    labels: Labels<'a>,
    value: f64,
}

/// The sample on `line` if it belongs to metric `name`; panics on a line of
/// that metric that cannot be read.
fn read_line<'a>(line: &'a str, name: &str) -> Option<Line<'a>> {
    let rest = line.strip_prefix(name)?;
    let (label_text, labels, after) = if let Some(body) = rest.strip_prefix('{') {
        let (labels, end) =
            read_labels(body).unwrap_or_else(|e| panic!("unreadable labels ({e}) in: {line}"));
        (&body[..end], labels, &body[end + 1..])
    } else if rest.starts_with([' ', '\t']) {
        ("", Vec::new(), rest)
    } else {
        return None; // another metric whose name starts with `name`
    };
    let value_text = after.split_whitespace().next().unwrap_or("");
    let value = value_text
        .parse()
        .unwrap_or_else(|_| panic!("bad sample value {value_text:?} in: {line}"));
    Some(Line {
        label_text,
        labels,
        value,
    })
}

/// The pairs in `body` (the text after `{`) and the index of the closing `}`.
fn read_labels(body: &str) -> Result<(Labels<'_>, usize), &'static str> {
    let mut labels = Vec::new();
    let mut i = 0;
    let bytes = body.as_bytes();
    loop {
        while i < bytes.len() && matches!(bytes[i], b' ' | b',') {
            i += 1;
        }
        match bytes.get(i) {
            None => return Err("no closing brace"),
            Some(b'}') => return Ok((labels, i)),
            Some(_) => {}
        }
        let eq = body[i..].find('=').ok_or("a label without '='")? + i;
        let key = body[i..eq].trim();
        if bytes.get(eq + 1) != Some(&b'"') {
            return Err("an unquoted label value");
        }
        let mut value = String::new();
        let mut chars = body[eq + 2..].char_indices();
        let end = loop {
            match chars.next().ok_or("an unterminated label value")? {
                (at, '"') => break eq + 2 + at,
                (_, '\\') => match chars.next().ok_or("a dangling escape")?.1 {
                    'n' => value.push('\n'),
                    other => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((key, value));
        i = end + 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_samples_by_label_subset() {
        let t = "# TYPE a counter\na_total{x=\"1\",y=\"2\"} 3\na_total{x=\"2\",y=\"2\"} 4.5\nab 9\na 7\n";
        assert_eq!(value(t, "a_total", &[("x", "2")]), Some(4.5));
        assert_eq!(value(t, "a", &[]), Some(7.0));
        assert_eq!(value(t, "a_total", &[("x", "3")]), None);
        assert_eq!(samples(t, "a_total", &[("y", "2")]).len(), 2);
    }

    #[test]
    fn exact_wants_every_label_and_no_other_in_any_order() {
        let t = "m{a=\"1\",b=\"2\"} 3\nm{a=\"1\"} 4\n";
        assert_eq!(exact(t, "m", &[("b", "2"), ("a", "1")]), Some(3.0));
        assert_eq!(exact(t, "m", &[("a", "1")]), Some(4.0));
        assert_eq!(exact(t, "m", &[]), None);
        assert_eq!(exact(t, "m", &[("b", "2")]), None);
    }

    #[test]
    fn lines_before_the_sample_never_end_the_search() {
        // A reader that split each line at its last space stopped at the first
        // line without one (a blank line, `# EOF` read as data) and found nothing.
        let t = "other 1\n\nnospace\n# EOF\nm{a=\"x\"} 2\n";
        assert_eq!(exact(t, "m", &[("a", "x")]), Some(2.0));
        assert_eq!(value(t, "m", &[("a", "x")]), Some(2.0));
    }

    #[test]
    fn label_values_are_read_with_their_escapes_and_commas() {
        let t = "m{reason=\"a \\\"b\\\", c\",path=\"x\\\\y\",} 5 1700000000\n";
        assert_eq!(
            exact(t, "m", &[("reason", "a \"b\", c"), ("path", "x\\y")]),
            Some(5.0)
        );
        assert_eq!(samples(t, "m", &[]).len(), 1);
        let (text, _) = &samples(t, "m", &[])[0];
        assert_eq!(label(text, "reason").as_deref(), Some("a \"b\", c"));
        assert_eq!(label(text, "path").as_deref(), Some("x\\y"));
        assert_eq!(label(text, "other"), None);
    }

    #[test]
    fn all_reads_every_sample_in_order() {
        let t = "# TYPE m gauge\nm{b=\"2\",a=\"1\"} 3\n\nn 4.5\n# EOF\n";
        let got = all(t);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].name, "m");
        assert_eq!(
            got[0].labels,
            [("b".to_string(), "2".to_string()), ("a".into(), "1".into())]
        );
        assert_eq!((got[1].name.as_str(), got[1].value), ("n", 4.5));
    }

    #[test]
    #[should_panic(expected = "matches 2 samples")]
    fn one_number_asked_of_two_samples_panics() {
        value("m{a=\"1\"} 1\nm{a=\"2\"} 2\n", "m", &[]);
    }
}
