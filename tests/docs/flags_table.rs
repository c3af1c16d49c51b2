//! docs/configuration.md's flag tables name every flag of the exporter's
//! `--help`, each with the environment variable it reads, and no flag the
//! binary lacks: an operator configures the exporter from those tables.
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// One long flag of `--help`: its environment variable and aliases.
#[derive(Debug, Default)]
struct HelpFlag {
    env: Option<String>,
    aliases: Vec<String>,
}

/// The long flags `--help` lists (not `--help` and `--version`).
fn help_flags() -> BTreeMap<String, HelpFlag> {
    let out = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut flags: BTreeMap<String, HelpFlag> = BTreeMap::new();
    let mut current = None;
    for line in text.lines() {
        let item = line.trim_start();
        // A flag's first line: `--name <VALUE>`, or `-n, --name` with a short form.
        let long = item.strip_prefix('-').and_then(|_| item.split(", ").last());
        let indent = line.len() - item.len();
        if let Some(flag) = long.filter(|f| f.starts_with("--") && (indent == 2 || indent == 6)) {
            let name = flag.split([' ', '<']).next().unwrap().to_string();
            flags.insert(name.clone(), HelpFlag::default());
            current = Some(name);
        } else if let (Some(name), Some(rest)) = (&current, item.strip_prefix("[env: ")) {
            let env = rest.split(['=', ']']).next().unwrap().to_string();
            flags.get_mut(name).unwrap().env = Some(env);
        } else if let (Some(name), Some(rest)) = (&current, item.strip_prefix("[alias: ")) {
            let alias = rest.trim_end_matches(']').to_string();
            flags.get_mut(name).unwrap().aliases.push(alias);
        }
    }
    // Both have a short form: read, they show that such lines are read.
    assert!(flags.remove("--help").is_some() && flags.remove("--version").is_some());
    assert!(flags.len() > 50, "{} flags read from --help", flags.len());
    flags
}

/// The backticked words of a table cell.
fn code_words(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// Whether an environment cell of the tables names `env`. `_CLUSTER` after
/// `NATS_DELIVERY_SYSTEM_SERVER_NAME` stands for
/// `NATS_DELIVERY_SYSTEM_CLUSTER`: the short form replaces the first
/// name's tail from one of its underscores.
fn names_env(cell: &str, env: &str) -> bool {
    let words = code_words(cell);
    let Some(first) = words.iter().find(|w| !w.starts_with('_')) else {
        return false;
    };
    words.contains(&env)
        || words.iter().filter(|w| w.starts_with('_')).any(|short| {
            first
                .match_indices('_')
                .any(|(i, _)| format!("{}{short}", &first[..i]) == env)
        })
}

#[test]
fn the_configuration_flag_tables_name_every_flag_with_its_environment_variable() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md"),
    )
    .unwrap();
    let help = help_flags();
    let mut rows: BTreeMap<&str, &str> = BTreeMap::new();
    for line in doc.lines().filter(|l| l.starts_with("| `--")) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        for flag in code_words(cells[1])
            .into_iter()
            .filter(|w| w.starts_with("--"))
        {
            rows.insert(flag, cells[2]);
        }
    }
    let aliases: Vec<&str> = help
        .values()
        .flat_map(|f| f.aliases.iter().map(String::as_str))
        .collect();
    for flag in rows.keys() {
        assert!(
            help.contains_key(*flag) || aliases.contains(flag),
            "docs/configuration.md's flag table names {flag}, which --help does not list"
        );
    }
    for (flag, about) in &help {
        let cell = rows.get(flag.as_str()).unwrap_or_else(|| {
            panic!("{flag} (--help) has no row in docs/configuration.md's flag tables")
        });
        if let Some(env) = &about.env {
            assert!(
                names_env(cell, env),
                "docs/configuration.md's row of {flag} does not name {env}: {cell}"
            );
        }
    }
}

/// The `--sources` values `--help` lists (from the exporter's source table).
fn help_sources() -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_nats-delivery-exporter"))
        .arg("--help")
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("--sources "));
    let values = lines
        .skip_while(|l| l.trim() != "Possible values:")
        .skip(1)
        .map_while(|l| l.trim().strip_prefix("- "));
    let names: Vec<String> = values
        .map(|v| v.split(':').next().unwrap().to_string())
        .collect();
    assert!(names.len() >= 7, "--help lists the sources {names:?}");
    names
}

/// A new source is one file, one table line and one field: its name
/// reaches `--help` from the table, and an operator reads of it in
/// docs/configuration.md's `--sources` row and METRICS.md's `source` label.
#[test]
fn every_source_has_its_row_in_the_configuration_and_metrics_docs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let configuration = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    let row = configuration
        .lines()
        .find(|l| l.starts_with("| `--sources` |"))
        .expect("docs/configuration.md has a --sources row");
    let metrics = std::fs::read_to_string(root.join("METRICS.md")).unwrap();
    let labels = metrics
        .lines()
        .find(|l| l.starts_with("Per monitoring URL") && l.contains("and source ("))
        .expect("METRICS.md names the source label's values");
    // The default, `varz,connz,...`, names each of its sources.
    let row_names: Vec<&str> = code_words(row)
        .into_iter()
        .flat_map(|w| w.split(','))
        .collect();
    for name in help_sources() {
        assert!(
            row_names.contains(&name.as_str()),
            "docs/configuration.md's --sources row does not name the source {name}: {row}"
        );
        assert!(
            code_words(labels).contains(&name.as_str()),
            "METRICS.md does not name {name} among the source label's values"
        );
    }
}

#[test]
fn a_short_environment_name_stands_for_the_first_names_prefix() {
    let cell = "`NATS_DELIVERY_SYSTEM_SERVER_NAME`, `_CLUSTER`, `_TAGS`";
    assert!(names_env(cell, "NATS_DELIVERY_SYSTEM_SERVER_NAME"));
    assert!(names_env(cell, "NATS_DELIVERY_SYSTEM_CLUSTER"));
    assert!(names_env(cell, "NATS_DELIVERY_SYSTEM_TAGS"));
    assert!(!names_env(cell, "NATS_DELIVERY_SYSTEM_DOMAIN"));
    assert!(!names_env(
        "`NATS_DELIVERY_LISTEN`",
        "NATS_DELIVERY_LISTEN_ADDRESS"
    ));
}
