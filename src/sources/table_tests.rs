//! Unit tests of the source table and the helpers beside it.
use super::shape::NatsValue;
use super::*;

#[test]
fn endpoint_urls_keep_base_paths() {
    let base = Url::parse("https://h:8222/nats/").unwrap();
    let u = endpoint_url(
        &base,
        "jsz",
        &[("offset", "2".into()), ("acc", "A B".into())],
    );
    assert_eq!(u.as_str(), "https://h:8222/nats/jsz?offset=2&acc=A+B");
    let base = Url::parse("http://h:8222").unwrap();
    assert_eq!(
        endpoint_url(&base, "varz", &[]).as_str(),
        "http://h:8222/varz"
    );
}

/// The kinds of the sources `per_target` makes with `enabled` on.
fn made(enabled: Vec<Source>) -> Vec<Source> {
    let settings = SourceSettings {
        enabled,
        connz_top: 1,
        max_client_names: 1,
        jsz_page_size: 1,
        jsz_filter: Default::default(),
        jsz_config_interval: Default::default(),
        jsz_removal_check: None,
        jsz_poll_timeout: None,
        jsz_config_timeout: std::time::Duration::from_secs(60),
        jsz_fill_span: std::time::Duration::ZERO,
    };
    per_target(&settings).iter().map(|s| s.kind()).collect()
}

#[test]
fn per_target_keeps_the_enabled_sources_in_report_order() {
    let kinds = made(vec![Source::Gatewayz, Source::Jsz, Source::Varz]);
    assert_eq!(kinds, [Source::Varz, Source::Jsz, Source::Gatewayz]);
}

/// A source is its file, its table line and its snapshot field: the
/// line makes the source of its own variant, and the file gives the help
/// line `--help` shows and a system-account form for every option.
#[test]
fn every_table_line_makes_its_source_with_help_and_options() {
    use clap::ValueEnum;
    assert_eq!(made(Source::ALL.to_vec()), Source::ALL);
    let help_names: Vec<&str> = SOURCES_HELP
        .rsplit(':')
        .next()
        .unwrap()
        .split_whitespace()
        .collect();
    let names: Vec<&str> = Source::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(help_names, names, "{SOURCES_HELP}");
    for source in Source::ALL {
        let name = source.as_str();
        assert_eq!(Source::from_str(name, false), Ok(source));
        let value = source.to_possible_value().unwrap();
        assert_eq!(
            value.get_help().map(ToString::to_string).as_deref(),
            Some(source.help())
        );
        assert!(
            source.help().starts_with(&format!("`/{name}`: ")),
            "{name}: {}",
            source.help()
        );
        let options = source.nats_options();
        for (i, option) in options.iter().enumerate() {
            assert!(
                options[..i].iter().all(|o| o.http != option.http),
                "{name} {}",
                option.http
            );
            let sample = match option.value {
                NatsValue::Flag => "true",
                NatsValue::Number => "7",
                NatsValue::Text => "x",
                NatsValue::Choice(words) => words[0].0,
            };
            let json = link::nats_options(source, &[(option.http, sample.to_string())]);
            let json = json.unwrap_or_else(|e| panic!("{name} {}: {e}", option.http));
            assert!(
                json.get(option.nats).is_some(),
                "{name} {}: {json}",
                option.http
            );
        }
    }
}

#[test]
fn versions_compare_by_number() {
    for (v, want) in [
        ("2.9.10", false),
        ("2.10.25", false),
        ("2.10.26", true),
        ("2.11.0", true),
        ("2.12.0-beta.1", true),
        ("3", false),
        ("", false),
    ] {
        assert_eq!(version_at_least(v, (2, 10, 26)), want, "{v}");
    }
}

#[test]
fn timestamps() {
    assert_eq!(unix_seconds("1970-01-01T00:00:01.5Z"), Some(1.5));
    assert_eq!(
        unix_seconds("2026-11-29T21:00:00.123456789Z").map(|s| s.floor()),
        Some(1_795_986_000.0)
    );
    assert_eq!(unix_seconds("0001-01-01T00:00:00Z"), None);
    assert_eq!(unix_seconds("yesterday"), None);
}
