//! One file's walk: which module each token is in (files and inline
//! modules, test-only code apart), and the child module files it declares.

use std::collections::BTreeMap;

use super::graph::{child_dir, child_file, ModPath, ModuleGraph, ParsedFile};
use super::tokens::{test_only, tokens, Token};

/// A file still to read: its path, its module, the folder of its children.
pub(super) type Pending = (String, ModPath, String);

/// The state of the walk through one file's tokens.
pub(super) struct FileWalk<'a> {
    files: &'a BTreeMap<String, String>,
    file: String,
    /// A `#[path = "..."]` seen, for the next `mod name;`.
    path_attr: Option<String>,
    /// The inline modules open around the walk: the module and folder
    /// outside each, and the brace depth it opened at.
    inline: Vec<(ModPath, String, usize)>,
    depth: usize,
    current: ModPath,
    current_dir: String,
    /// The module of each stretch of tokens; None for test-only code,
    /// which may use anything.
    contexts: Vec<Option<ModPath>>,
    /// How many inline modules deep the test-only code began, 0 outside it.
    in_test: usize,
    /// The index into `contexts` of each token.
    owners: Vec<usize>,
}

impl<'a> FileWalk<'a> {
    pub(super) fn new(
        files: &'a BTreeMap<String, String>,
        file: String,
        module: ModPath,
        dir: String,
    ) -> FileWalk<'a> {
        FileWalk {
            files,
            file,
            path_attr: None,
            inline: Vec::new(),
            depth: 0,
            contexts: vec![Some(module.clone())],
            current: module,
            current_dir: dir,
            in_test: 0,
            owners: Vec::new(),
        }
    }

    /// Walks the file: declared child files go to `queue`, inline modules
    /// into `graph`; returns the file's tokens with their modules.
    pub(super) fn run(mut self, graph: &mut ModuleGraph, queue: &mut Vec<Pending>) -> ParsedFile {
        let toks = tokens(&self.files[&self.file]);
        let mut i = 0;
        while i < toks.len() {
            self.owners.resize(i + 1, self.contexts.len() - 1);
            let is = |word: &str| matches!(&toks[i], Token::Ident(w) if w == word);
            i += if toks[i] == Token::Open {
                self.depth += 1;
                1
            } else if toks[i] == Token::Close {
                self.close();
                1
            } else if is("path")
                && i > 0
                && toks[i - 1] == Token::Other
                && toks.get(i + 1) == Some(&Token::Other)
            {
                self.path_attribute();
                1
            } else if is("mod") && test_only(&toks[..i]) {
                // A test-only file module is not read; an inline one is
                // entered, its code test-only.
                if toks.get(i + 2) == Some(&Token::Open) {
                    self.enter_test_module(toks.get(i + 1));
                    3
                } else {
                    1
                }
            } else if is("mod") {
                self.declared_module(&toks[i + 1..], graph, queue)
            } else {
                1
            };
        }
        self.owners.resize(toks.len(), self.contexts.len() - 1);
        (self.contexts, self.owners, toks)
    }

    /// A closing brace: the end of an inline module when it opened there.
    fn close(&mut self) {
        self.depth = self.depth.saturating_sub(1);
        if self.inline.last().is_some_and(|(_, _, d)| *d == self.depth) {
            let (_, d, _) = self.inline.pop().expect("checked");
            self.current.pop();
            self.current_dir = d;
            if self.in_test > self.inline.len() {
                self.in_test = 0;
            }
            let context = (self.in_test == 0).then(|| self.current.clone());
            self.contexts.push(context);
        }
    }

    /// `#[path = "..."]`: the file the next `mod name;` is in.
    fn path_attribute(&mut self) {
        let text = &self.files[&self.file];
        if let Some(at) = text.find("#[path = \"") {
            let rest = &text[at + 10..];
            self.path_attr = rest.find('"').map(|end| rest[..end].to_string());
        }
    }

    fn enter_test_module(&mut self, name: Option<&Token>) {
        let outside = (self.current.clone(), self.current_dir.clone(), self.depth);
        self.inline.push(outside);
        if let Some(Token::Ident(name)) = name {
            self.current.push(name.clone());
        }
        self.in_test = self.inline.len();
        self.contexts.push(None);
        self.depth += 1;
    }

    /// `mod name;` (a child file, queued) or `mod name {` (entered); the
    /// tokens it took.
    fn declared_module(
        &mut self,
        after: &[Token],
        graph: &mut ModuleGraph,
        queue: &mut Vec<Pending>,
    ) -> usize {
        let Some(Token::Ident(name)) = after.first() else {
            return 1;
        };
        match after.get(1) {
            Some(Token::Semi) => {
                let found = match self.path_attr.take() {
                    Some(p) => Some(format!("{}{p}", self.current_dir)),
                    None => child_file(self.files, &self.current_dir, name),
                };
                if let Some(child) = found.filter(|f| self.files.contains_key(f)) {
                    let mut m = self.current.clone();
                    m.push(name.clone());
                    let d = child_dir(&child, false);
                    queue.push((child, m, d));
                }
                1
            }
            Some(Token::Open) => {
                let outside = (self.current.clone(), self.current_dir.clone(), self.depth);
                self.inline.push(outside);
                self.current.push(name.clone());
                graph.files.insert(self.current.clone(), self.file.clone());
                self.current_dir = format!("{}{name}/", self.current_dir);
                let context = (self.in_test == 0).then(|| self.current.clone());
                self.contexts.push(context);
                self.depth += 1;
                3
            }
            _ => 1,
        }
    }
}
