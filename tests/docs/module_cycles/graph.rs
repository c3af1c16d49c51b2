//! The module graph of a crate, read from its source text.

use std::collections::{BTreeMap, BTreeSet};

use super::file_walk::FileWalk;
use super::tokens::{paths_at, Token};

/// A module path from the crate root (`["scrape", "poller"]`).
pub(super) type ModPath = Vec<String>;

/// One file's tokens, the modules around them (`None`: test-only code) and
/// which of those each token is in.
pub(super) type ParsedFile = (Vec<Option<ModPath>>, Vec<usize>, Vec<Token>);

/// The crate read as text: every module, the file it lives in, the modules
/// each file names.
pub(super) struct ModuleGraph {
    /// Module path -> file (inline modules map to the file around them).
    pub(super) files: BTreeMap<ModPath, String>,
    /// Module -> sibling modules it reaches (children of one parent).
    pub(super) folder_edges: BTreeMap<ModPath, BTreeMap<ModPath, String>>,
}

/// Where a module's file is: `name.rs` or `name/mod.rs` beside the parent's
/// folder.
pub(super) fn child_file(
    files: &BTreeMap<String, String>,
    parent_dir: &str,
    name: &str,
) -> Option<String> {
    [
        format!("{parent_dir}{name}.rs"),
        format!("{parent_dir}{name}/mod.rs"),
    ]
    .into_iter()
    .find(|f| files.contains_key(f))
}

/// The folder a file's child modules live in.
pub(super) fn child_dir(file: &str, is_root: bool) -> String {
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
    pub(super) fn read(files: &BTreeMap<String, String>, root: &str) -> ModuleGraph {
        let mut graph = ModuleGraph {
            files: BTreeMap::new(),
            folder_edges: BTreeMap::new(),
        };
        // Modules first (a path can name a module declared later), then paths.
        let mut parsed: Vec<ParsedFile> = Vec::new();
        let mut queue = vec![(root.to_string(), ModPath::new(), child_dir(root, true))];
        while let Some((file, module, dir)) = queue.pop() {
            graph.files.insert(module.clone(), file.clone());
            let walk = FileWalk::new(files, file, module, dir);
            parsed.push(walk.run(&mut graph, &mut queue));
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
    pub(super) fn cycles(&self) -> Vec<Vec<String>> {
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
