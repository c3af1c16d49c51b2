//! No import cycles between the modules of the exporter or of the link-in
//! crate: the layering ARCHITECTURE.md describes holds only if every arrow
//! points one way. The module graph is read from the sources themselves
//! (`mod` lines and `crate::`, `super::`, `self::` and child-module paths).
//! Modules with one parent are compared whole (everything under a folder
//! counts for that folder), so two folders that reach each other through
//! different files are a cycle too. A module using its own parent's items,
//! or a parent re-exporting its children, is not a cycle: only siblings are
//! ordered. The exporter's top-level modules are also held to the layer
//! order of ARCHITECTURE.md's table (`layers.rs`): every arrow of
//! production code points down it.

use std::collections::BTreeMap;
use std::path::Path;

mod file_walk;
mod graph;
mod layers;
mod tokens;

use graph::ModuleGraph;

/// Every `.rs` file under `dir`, keyed by its path relative to `dir`.
fn read_tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).expect("read the source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                walk(base, &path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(base).expect("under base");
                let text = std::fs::read_to_string(&path).expect("read a source file");
                out.insert(relative.to_string_lossy().replace('\\', "/"), text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn assert_acyclic(src: &str, root: &str) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(src);
    let graph = ModuleGraph::read(&read_tree(&dir), root);
    assert!(
        graph.files.len() > 10,
        "{src}: too few modules read: {:?}",
        graph.files
    );
    let cycles = graph.cycles();
    let text: Vec<String> = cycles.iter().map(|c| c.join("\n  ")).collect();
    assert!(
        cycles.is_empty(),
        "{src}: import cycles between modules (ARCHITECTURE.md says which way arrows point):\n  {}",
        text.join("\n\n  ")
    );
}

#[test]
fn the_exporter_has_no_module_cycles() {
    assert_acyclic("src", "lib.rs");
}

fn architecture() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("ARCHITECTURE.md");
    std::fs::read_to_string(path).expect("read ARCHITECTURE.md")
}

#[test]
fn every_import_of_the_exporter_points_down_the_written_layers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = ModuleGraph::read(&read_tree(&dir), "lib.rs");
    let layers = layers::layers(&architecture());
    assert!(layers.len() > 5, "too few layers read: {layers:?}");
    let wrong = layers::upward_imports(&graph, &layers);
    assert!(
        wrong.is_empty(),
        "imports against ARCHITECTURE.md's layer order:\n  {}",
        wrong.join("\n  ")
    );
}

#[test]
fn an_upward_import_or_an_unplaced_module_is_found() {
    let graph = synthetic(&[
        ("lib.rs", "mod top;\nmod low;\nmod stray;\n"),
        ("top/mod.rs", "use crate::low::L;\npub struct T;"),
        (
            "low/mod.rs",
            "pub struct L(crate::top::T);\n#[cfg(test)]\nmod tests { use crate::top::T; }",
        ),
        ("stray.rs", ""),
    ]);
    let doc = "## Folders, top to bottom\n\n| folder | what |\n|---|---|\n| `top/` | t |\n| `low/`, `x.rs` | l |\n\n## Next\n| `stray.rs` | no |";
    let layers = layers::layers(doc);
    assert_eq!(layers, [vec!["top"], vec!["low", "x"]]);
    assert_eq!(
        layers::upward_imports(&graph, &layers),
        [
            "module stray is in no row of ARCHITECTURE.md's table",
            "module low -> module top points up (or across) the layers (low/mod.rs uses crate::top::T)",
        ]
    );
}

#[test]
fn the_link_in_crate_has_no_module_cycles() {
    assert_acyclic("nats-delivery-metrics/src", "lib.rs");
}

fn synthetic(files: &[(&str, &str)]) -> ModuleGraph {
    let files: BTreeMap<String, String> = files
        .iter()
        .map(|(p, s)| (p.to_string(), s.to_string()))
        .collect();
    ModuleGraph::read(&files, "lib.rs")
}

#[test]
fn a_cycle_between_two_files_is_found_and_named() {
    let graph = synthetic(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::Thing;\npub struct Other;"),
        ("b.rs", "pub struct Thing(crate::a::Other);"),
    ]);
    let cycles = graph.cycles();
    assert_eq!(
        cycles,
        [[
            "module a -> module b (a.rs uses crate::b::Thing)",
            "module b -> module a (b.rs uses crate::a::Other)"
        ]],
    );
}

#[test]
fn a_cycle_between_folders_through_different_files_is_found() {
    let graph = synthetic(&[
        ("lib.rs", "mod top;\nmod low;\n"),
        ("top/mod.rs", "mod x;\nmod y;\n"),
        ("top/x.rs", "use crate::low::p::P;"),
        ("top/y.rs", "pub struct Y;"),
        ("low/mod.rs", "pub mod p;\npub mod q;\n"),
        ("low/p.rs", "pub struct P;"),
        ("low/q.rs", "use super::super::top::{y::Y};"),
    ]);
    let cycles = graph.cycles();
    assert_eq!(cycles.len(), 1, "{cycles:?}");
    assert!(
        cycles[0]
            .iter()
            .any(|a| a.starts_with("module top -> module low")),
        "{cycles:?}"
    );
    assert!(
        cycles[0]
            .iter()
            .any(|a| a.starts_with("module low -> module top")),
        "{cycles:?}"
    );
}

#[test]
fn paths_in_comments_strings_and_one_way_arrows_make_no_cycle() {
    let graph = synthetic(&[
        ("lib.rs", "pub mod a;\nmod b;\npub struct Root;"),
        (
            "a.rs",
            "// crate::b::X\nconst S: &str = \"crate::b::X\";\n/* crate::b::X */ use crate::Root;",
        ),
        (
            "b.rs",
            "use crate::a::{self as first, S};\nmod inner { use super::super::a::S; }\n",
        ),
    ]);
    assert!(graph.cycles().is_empty(), "{:?}", graph.cycles());
    let from_b = &graph.folder_edges[&vec!["b".to_string()]];
    assert_eq!(from_b.keys().collect::<Vec<_>>(), [&vec!["a".to_string()]]);
    assert!(!graph.folder_edges.contains_key(&vec!["a".to_string()]));
}

#[test]
fn child_module_paths_and_super_paths_count_as_arrows() {
    let graph = synthetic(&[
        ("lib.rs", "mod jsz;\n"),
        (
            "jsz/mod.rs",
            "mod split;\nmod de;\nfn f() { split::cut(); }\npub struct Row;",
        ),
        (
            "jsz/split.rs",
            "use super::*;\nmod inner { fn g() { super::super::de::read(); } }\npub fn cut() {}",
        ),
        ("jsz/de.rs", "pub fn read() { super::split::cut() }"),
    ]);
    let cycles = graph.cycles();
    assert_eq!(
        cycles,
        [[
            "module jsz::de -> module jsz::split (jsz/de.rs uses super::split::cut)",
            "module jsz::split -> module jsz::de (jsz/split.rs uses super::super::de::read)"
        ]],
    );
}

#[test]
fn test_only_modules_may_use_anything() {
    let graph = synthetic(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "pub struct A;\n#[cfg(test)]\nmod tests { use crate::b::B; }\n#[cfg(test)]\n#[path = \"a_tests.rs\"]\nmod more;"),
        ("a_tests.rs", "use crate::b::B;"),
        ("b.rs", "pub struct B(crate::a::A);"),
    ]);
    assert!(graph.cycles().is_empty(), "{:?}", graph.cycles());
}
