//! Reads sample values out of Prometheus text exposition.

/// The value of the sample `name` whose labels include every pair in
/// `labels` (other labels may be present). `None` if there is no such sample;
/// panics if more than one sample matches, because a test asking for one
/// number must not get an arbitrary one of several.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matches = samples(text, name, labels);
    assert!(
        matches.len() <= 1,
        "{name}{labels:?} matches {} samples: {matches:?}",
        matches.len()
    );
    matches.first().map(|(_, v)| *v)
}

/// Every sample `name` whose labels include every pair in `labels`, as (label text, value).
pub fn samples(text: &str, name: &str, labels: &[(&str, &str)]) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let (label_text, value_text) = if let Some(body) = rest.strip_prefix('{') {
            let Some(end) = body.rfind('}') else { continue };
            (&body[..end], body[end + 1..].trim())
        } else if rest.starts_with(' ') {
            ("", rest.trim())
        } else {
            continue;
        };
        let wanted = labels.iter().all(|(k, v)| {
            label_text
                .split("\",")
                .any(|pair| pair.trim_end_matches('"') == format!("{k}=\"{v}"))
        });
        if wanted {
            let v = value_text.split_whitespace().next().unwrap_or("");
            let v: f64 = v
                .parse()
                .unwrap_or_else(|_| panic!("bad sample value in: {line}"));
            out.push((label_text.to_string(), v));
        }
    }
    out
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
}
