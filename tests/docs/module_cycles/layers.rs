//! The layer order of ARCHITECTURE.md ("Folders, top to bottom"), read from
//! its table, and the imports of production code that point up it.

use std::collections::BTreeMap;

use super::graph::ModuleGraph;

/// The heading of the section whose table gives the order.
const SECTION: &str = "## Folders, top to bottom";

/// The crate's top-level modules, layer by layer from the top: the
/// backquoted names in the first cell of each row of the section's table
/// (`http/` and `lock.rs` name the modules `http` and `lock`); `main.rs`,
/// the binary, is no module of the library.
pub(super) fn layers(architecture: &str) -> Vec<Vec<String>> {
    let section = architecture
        .split_once(SECTION)
        .map(|(_, after)| after)
        .unwrap_or_else(|| panic!("ARCHITECTURE.md has no section {SECTION:?}"));
    let section = section.split("\n## ").next().unwrap_or_default();
    let rows = section
        .lines()
        .filter(|l| l.starts_with('|'))
        // The header and its separator.
        .skip(2);
    rows.map(|row| {
        let first = row.split('|').nth(1).unwrap_or_default();
        first
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|name| *name != "main.rs")
            .map(|name| {
                let name = name.trim_end_matches('/');
                name.strip_suffix(".rs").unwrap_or(name).to_string()
            })
            .collect::<Vec<_>>()
    })
    .filter(|names| !names.is_empty())
    .collect()
}

/// Every arrow between top-level modules that does not point down
/// `layers` (one within a layer too), and every top-level module the
/// table does not place, each said in a line.
pub(super) fn upward_imports(graph: &ModuleGraph, layers: &[Vec<String>]) -> Vec<String> {
    let rank: BTreeMap<&str, usize> = layers
        .iter()
        .enumerate()
        .flat_map(|(i, names)| names.iter().map(move |n| (n.as_str(), i)))
        .collect();
    let mut out = Vec::new();
    for module in graph.files.keys().filter(|m| m.len() == 1) {
        if !rank.contains_key(module[0].as_str()) {
            out.push(format!(
                "module {} is in no row of ARCHITECTURE.md's table",
                module[0]
            ));
        }
    }
    for (from, to) in graph
        .folder_edges
        .iter()
        .filter(|(from, _)| from.len() == 1)
    {
        for (target, seen) in to {
            let (Some(a), Some(b)) = (rank.get(from[0].as_str()), rank.get(target[0].as_str()))
            else {
                continue;
            };
            if a >= b {
                out.push(format!(
                    "module {} -> module {} points up (or across) the layers ({seen})",
                    from[0], target[0]
                ));
            }
        }
    }
    out
}
