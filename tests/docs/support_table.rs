//! docs/server-versions.md and METRICS.md carry one server support table: the same rows in
//! both, and one column for each server version the golden files cover.
use std::path::Path;

/// The lines of the table under `## Server versions` in `file`.
fn table(file: &str) -> Vec<String> {
    let text = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(file)).unwrap();
    let section = text
        .split("\n## ")
        .find(|s| s.starts_with("Server versions\n"))
        .unwrap_or_else(|| panic!("{file} has no Server versions section"));
    section
        .lines()
        .filter(|l| l.starts_with('|'))
        .map(str::to_string)
        .collect()
}

#[test]
fn the_versions_doc_and_metrics_carry_the_same_table_for_every_fixture_version() {
    let doc = table("docs/server-versions.md");
    assert_eq!(doc, table("METRICS.md"));
    let header: Vec<&str> = doc[0]
        .trim_matches('|')
        .split('|')
        .map(str::trim)
        .skip(1)
        .collect();
    let mut fixtures: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
    fixtures.sort_by_key(|v| nats_test_server::version_numbers(v));
    assert_eq!(header, fixtures);
    for row in &doc[2..] {
        assert_eq!(row.matches('|').count(), header.len() + 2, "{row}");
    }
}
