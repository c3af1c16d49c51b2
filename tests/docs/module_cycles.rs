//! No import cycles between the modules of the exporter or of the link-in
//! crate: the layering ARCHITECTURE.md describes holds only if every arrow
//! points one way. The module graph is read from the sources themselves
//! (`mod` lines and `crate::`, `super::`, `self::` and child-module paths).
//! Modules with one parent are compared whole (everything under a folder
//! counts for that folder), so two folders that reach each other through
//! different files are a cycle too. A module using its own parent's items,
//! or a parent re-exporting its children, is not a cycle: only siblings are
//! ordered.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A module path from the crate root (`["scrape", "poller"]`).
type ModPath = Vec<String>;

/// One file's tokens, the modules around them (`None`: test-only code) and
/// which of those each token is in.
type ParsedFile = (Vec<Option<ModPath>>, Vec<usize>, Vec<Token>);

/// The crate read as text: every module, the file it lives in, the modules
/// each file names.
struct ModuleGraph {
    /// Module path -> file (inline modules map to the file around them).
    files: BTreeMap<ModPath, String>,
    /// Module -> sibling modules it reaches (children of one parent).
    folder_edges: BTreeMap<ModPath, BTreeMap<ModPath, String>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    PathSep,
    Open,
    Close,
    Comma,
    Star,
    Semi,
    Other,
}

/// The code's tokens, comments and literals left out.
fn tokens(source: &str) -> Vec<Token> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_string_at(&chars, i) {
            i = skip_raw_string(&chars, i);
        } else if c == 'b' && next == Some('"') {
            i = skip_string(&chars, i + 1);
        } else if c == '"' {
            i = skip_string(&chars, i);
        } else if c == '\'' {
            // A char literal ('a', '\n', '\u{1F600}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else {
            out.push(match c {
                '{' => Token::Open,
                '}' => Token::Close,
                ',' => Token::Comma,
                '*' => Token::Star,
                ';' => Token::Semi,
                c if c.is_whitespace() => {
                    i += 1;
                    continue;
                }
                _ => Token::Other,
            });
            i += 1;
        }
    }
    out
}

fn raw_string_at(chars: &[char], i: usize) -> bool {
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    chars.get(j) == Some(&'"')
        && (i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_'))
}

fn skip_raw_string(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    let mut hashes = 0;
    while chars[j] == '#' {
        hashes += 1;
        j += 1;
    }
    j += 1;
    while j < chars.len() {
        if chars[j] == '"' && (0..hashes).all(|h| chars.get(j + 1 + h) == Some(&'#')) {
            return j + 1 + hashes;
        }
        j += 1;
    }
    j
}

fn skip_string(chars: &[char], i: usize) -> usize {
    let mut j = i + 1;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 2,
            '"' => return j + 1,
            _ => j += 1,
        }
    }
    j
}

/// The paths of a use tree or expression path starting at `at`, expanded
/// (`a::{b, c::d}` gives `a::b` and `a::c::d`), and the index after it.
fn paths_at(tokens: &[Token], at: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    let mut i = at;
    loop {
        match tokens.get(i) {
            Some(Token::Ident(name)) => {
                if name != "self" || path.is_empty() {
                    path.push(name.clone());
                }
                i += 1;
            }
            Some(Token::Open) => {
                i += 1;
                loop {
                    match tokens.get(i) {
                        Some(Token::Close) => return i + 1,
                        Some(Token::Comma) => i += 1,
                        None => return i,
                        _ => i = paths_at(tokens, i, &path, out),
                    }
                }
            }
            Some(Token::Star) => {
                out.push(path);
                return i + 1;
            }
            _ => {
                out.push(path);
                return i;
            }
        }
        if tokens.get(i) == Some(&Token::PathSep) {
            i += 1;
        } else {
            if let Some(Token::Ident(word)) = tokens.get(i) {
                if word == "as" {
                    i += 2;
                }
            }
            out.push(path);
            return i;
        }
    }
}

/// True if the item ending `before` carries `#[cfg(test)]`: test code may
/// use any module.
fn test_only(before: &[Token]) -> bool {
    let item_start = before
        .iter()
        .rposition(|t| matches!(t, Token::Semi | Token::Open | Token::Close))
        .map_or(0, |p| p + 1);
    before[item_start..].windows(3).any(|w| {
        w[0] == Token::Ident("cfg".into())
            && w[1] == Token::Other
            && w[2] == Token::Ident("test".into())
    })
}

/// Where a module's file is: `name.rs` or `name/mod.rs` beside the parent's
/// folder.
fn child_file(files: &BTreeMap<String, String>, parent_dir: &str, name: &str) -> Option<String> {
    [
        format!("{parent_dir}{name}.rs"),
        format!("{parent_dir}{name}/mod.rs"),
    ]
    .into_iter()
    .find(|f| files.contains_key(f))
}

/// The folder a file's child modules live in.
fn child_dir(file: &str, is_root: bool) -> String {
    let stem = file.strip_suffix(".rs").unwrap_or(file);
    if is_root || file.ends_with("/mod.rs") || !file.contains('/') && stem == "mod" {
        match file.rfind('/') {
            Some(slash) => file[..=slash].to_string(),
            None => String::new(),
        }
    } else {
        format!("{stem}/")
    }
}

impl ModuleGraph {
    /// Reads the crate whose root file is `root` out of `files` (relative
    /// path -> source text).
    fn read(files: &BTreeMap<String, String>, root: &str) -> ModuleGraph {
        let mut graph = ModuleGraph {
            files: BTreeMap::new(),
            folder_edges: BTreeMap::new(),
        };
        // Modules first (a path can name a module declared later), then paths.
        // Each file's tokens, with the module (file or inline) around each.
        let mut parsed: Vec<ParsedFile> = Vec::new();
        let mut queue = vec![(root.to_string(), ModPath::new(), child_dir(root, true))];
        while let Some((file, module, dir)) = queue.pop() {
            let toks = tokens(&files[&file]);
            graph.files.insert(module.clone(), file.clone());
            let mut path_attr: Option<String> = None;
            let mut inline: Vec<(ModPath, String, usize)> = Vec::new();
            let mut depth = 0usize;
            let mut current = module.clone();
            let mut current_dir = dir.clone();
            // None for test-only code, which may use anything.
            let mut contexts = vec![Some(current.clone())];
            let mut in_test = 0usize;
            let mut owners: Vec<usize> = Vec::new();
            let mut i = 0;
            while i < toks.len() {
                owners.resize(i + 1, contexts.len() - 1);
                match &toks[i] {
                    Token::Open => depth += 1,
                    Token::Close => {
                        depth = depth.saturating_sub(1);
                        if inline.last().is_some_and(|(_, _, d)| *d == depth) {
                            let (_, d, _) = inline.pop().expect("checked");
                            current.pop();
                            current_dir = d;
                            if in_test > inline.len() {
                                in_test = 0;
                            }
                            contexts.push((in_test == 0).then(|| current.clone()));
                        }
                    }
                    Token::Ident(word)
                        if word == "path"
                            && i > 0
                            && toks[i - 1] == Token::Other
                            && toks.get(i + 1) == Some(&Token::Other) =>
                    {
                        if let Some(at) = files[&file].find("#[path = \"") {
                            let rest = &files[&file][at + 10..];
                            path_attr = rest.find('"').map(|end| rest[..end].to_string());
                        }
                    }
                    Token::Ident(word)
                        if word == "mod"
                            && test_only(&toks[..i])
                            && toks.get(i + 2) == Some(&Token::Open) =>
                    {
                        inline.push((current.clone(), current_dir.clone(), depth));
                        if let Some(Token::Ident(name)) = toks.get(i + 1) {
                            current.push(name.clone());
                        }
                        in_test = inline.len();
                        contexts.push(None);
                        depth += 1;
                        i += 3;
                        continue;
                    }
                    // A test-only file module is not read.
                    Token::Ident(word) if word == "mod" && test_only(&toks[..i]) => {}
                    Token::Ident(word) if word == "mod" => {
                        if let Some(Token::Ident(name)) = toks.get(i + 1) {
                            match toks.get(i + 2) {
                                Some(Token::Semi) => {
                                    let found = match path_attr.take() {
                                        Some(p) => Some(format!("{current_dir}{p}")),
                                        None => child_file(files, &current_dir, name),
                                    };
                                    if let Some(child) = found.filter(|f| files.contains_key(f)) {
                                        let mut m = current.clone();
                                        m.push(name.clone());
                                        let d = child_dir(&child, false);
                                        queue.push((child, m, d));
                                    }
                                }
                                Some(Token::Open) => {
                                    inline.push((current.clone(), current_dir.clone(), depth));
                                    current.push(name.clone());
                                    graph.files.insert(current.clone(), file.clone());
                                    current_dir = format!("{current_dir}{name}/");
                                    contexts.push((in_test == 0).then(|| current.clone()));
                                    depth += 1;
                                    i += 3;
                                    continue;
                                }
                                _ => {}
                            }
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            owners.resize(toks.len(), contexts.len() - 1);
            parsed.push((contexts, owners, toks));
        }
        for (contexts, owners, toks) in &parsed {
            graph.add_paths(contexts, owners, toks);
        }
        graph
    }

    /// The arrows of one file: every path that names a module of the crate.
    fn add_paths(&mut self, contexts: &[Option<ModPath>], owners: &[usize], toks: &[Token]) {
        let mut i = 0;
        while i < toks.len() {
            let starts_path = matches!(toks[i], Token::Ident(_))
                && toks.get(i + 1) == Some(&Token::PathSep)
                && (i == 0 || toks[i - 1] != Token::PathSep);
            if !starts_path {
                i += 1;
                continue;
            }
            let mut found = Vec::new();
            let end = paths_at(toks, i, &[], &mut found);
            for path in found {
                let Some(module) = &contexts[owners[i]] else {
                    continue;
                };
                if let Some(absolute) = self.absolute(module, &path) {
                    self.add_edge(module, &absolute, &path.join("::"));
                }
            }
            i = end.max(i + 1);
        }
    }

    /// A path made absolute, or None when it names no module of the crate.
    fn absolute(&self, module: &ModPath, path: &[String]) -> Option<ModPath> {
        let (mut base, rest) = match path.first()?.as_str() {
            "crate" => (ModPath::new(), &path[1..]),
            "self" => (module.clone(), &path[1..]),
            "super" => {
                let mut base = module.clone();
                let mut rest = path;
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                (base, rest)
            }
            _ => {
                let mut child = module.clone();
                child.push(path[0].clone());
                if !self.files.contains_key(&child) {
                    return None;
                }
                (module.clone(), path)
            }
        };
        base.extend(rest.iter().cloned());
        // The deepest module the path names.
        while !self.files.contains_key(&base) {
            base.pop();
        }
        Some(base)
    }

    fn add_edge(&mut self, from: &ModPath, to: &ModPath, seen: &str) {
        let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
        if common < from.len() && common < to.len() {
            let (a, b) = (from[..=common].to_vec(), to[..=common].to_vec());
            self.folder_edges
                .entry(a)
                .or_default()
                .entry(b)
                .or_insert_with(|| format!("{} uses {seen}", self.files[from]));
        }
    }

    /// Every cycle, each as its arrows `module a -> module b (file uses path)`.
    fn cycles(&self) -> Vec<Vec<String>> {
        components(&self.folder_edges)
            .iter()
            .map(|scc| {
                describe(scc, &self.folder_edges, |m| {
                    format!("module {}", m.join("::"))
                })
            })
            .collect()
    }
}

fn describe<N: Ord + Clone>(
    scc: &BTreeSet<N>,
    edges: &BTreeMap<N, BTreeMap<N, String>>,
    name: impl Fn(&N) -> String,
) -> Vec<String> {
    let mut arrows = Vec::new();
    for from in scc {
        for (to, seen) in edges.get(from).into_iter().flatten() {
            if scc.contains(to) {
                arrows.push(format!("{} -> {} ({seen})", name(from), name(to)));
            }
        }
    }
    arrows
}

/// Strongly connected components of more than one node (Tarjan).
fn components<N: Ord + Clone>(edges: &BTreeMap<N, BTreeMap<N, String>>) -> Vec<BTreeSet<N>> {
    struct State<N> {
        index: BTreeMap<N, usize>,
        low: BTreeMap<N, usize>,
        stack: Vec<N>,
        on_stack: BTreeSet<N>,
        out: Vec<BTreeSet<N>>,
    }
    fn visit<N: Ord + Clone>(n: &N, edges: &BTreeMap<N, BTreeMap<N, String>>, s: &mut State<N>) {
        let i = s.index.len();
        s.index.insert(n.clone(), i);
        s.low.insert(n.clone(), i);
        s.stack.push(n.clone());
        s.on_stack.insert(n.clone());
        for m in edges.get(n).into_iter().flat_map(|e| e.keys()) {
            if !s.index.contains_key(m) {
                visit(m, edges, s);
                let low = s.low[n].min(s.low[m]);
                s.low.insert(n.clone(), low);
            } else if s.on_stack.contains(m) {
                let low = s.low[n].min(s.index[m]);
                s.low.insert(n.clone(), low);
            }
        }
        if s.low[n] == s.index[n] {
            let mut scc = BTreeSet::new();
            while let Some(m) = s.stack.pop() {
                s.on_stack.remove(&m);
                let done = &m == n;
                scc.insert(m);
                if done {
                    break;
                }
            }
            if scc.len() > 1 {
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for n in edges.keys() {
        if !s.index.contains_key(n) {
            visit(n, edges, &mut s);
        }
    }
    s.out
}

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
