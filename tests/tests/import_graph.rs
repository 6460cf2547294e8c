//! No file of a library crate imports, through any chain of files, a file
//! that imports it back. A loop makes every file in it a prerequisite of
//! the others: none can be read, moved or tested alone. This test finds one
//! if it comes back, in each of the library crates.
//!
//! The graph is read from the source as text, one node per file. A file
//! leans on another when it names an item the other defines: through a
//! `use` (of `crate::`, `super::`, `self::` or a child module, groups and
//! renames included) or a path written in its code. A name is followed
//! through every re-export to the file that defines it, so `use
//! crate::Name` leans on the file where `Name` is written, not on `lib.rs`.
//! A `pub use` that only re-exports a name (the file never uses it) is a
//! module's front door, not a dependency, and is no edge. Comment lines and
//! a file's trailing `#[cfg(test)] mod tests` are left out.
//!
//! To see the graph of a crate, run this file's tests with
//! `TOLLGATE_PRINT_GRAPH=1` and `--nocapture`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module's path from the crate root: `[]` for `lib.rs`, `["store",
/// "memory"]` for `store/memory.rs`.
type ModPath = Vec<String>;

/// One `use` leaf: the path it names and the name it is known by here.
#[derive(Debug)]
struct UseLeaf {
    path: Vec<String>,
    local: String,
    reexport: bool,
}

/// What the graph needs of one file.
#[derive(Debug)]
struct SourceFile {
    path: PathBuf,
    /// The code without `use` declarations, comments or tests.
    body: String,
    uses: Vec<UseLeaf>,
    defines: BTreeSet<String>,
}

/// The files of one crate, by module path.
struct CrateSource {
    files: BTreeMap<ModPath, SourceFile>,
    /// `#[macro_export]` macros, which live at the crate root whatever file
    /// writes them.
    exported_macros: BTreeMap<String, ModPath>,
}

fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn take_name(text: &str) -> String {
    text.chars().take_while(|c| is_name(*c)).collect()
}

impl CrateSource {
    fn read(src: &Path) -> Self {
        let mut paths = Vec::new();
        collect(src, &mut paths);
        let mut files = BTreeMap::new();
        let mut exported_macros = BTreeMap::new();
        for path in paths {
            let Some(module) = module_path(src, &path) else {
                continue;
            };
            let text = std::fs::read_to_string(&path).expect("a source file");
            let file = parse(&path, &text);
            for name in macro_exports(&text) {
                exported_macros.insert(name, module.clone());
            }
            files.insert(module, file);
        }
        CrateSource {
            files,
            exported_macros,
        }
    }

    /// The file that defines what `path` names, seen from `from`; `None`
    /// for another crate's item (or one the reading cannot place).
    fn resolve(&self, from: &ModPath, path: &[String], depth: usize) -> Option<ModPath> {
        if depth > 16 || path.is_empty() {
            return None;
        }
        let (mut module, rest) = self.start(from, path)?;
        for (i, segment) in rest.iter().enumerate() {
            let mut child = module.clone();
            child.push(segment.clone());
            if self.files.contains_key(&child) {
                module = child;
                continue;
            }
            return self.resolve_item(&module, segment, depth).or_else(|| {
                // `Type::method` and the like: the type's file.
                (i > 0).then(|| module.clone())
            });
        }
        Some(module)
    }

    /// Where a path starts: its first module, and the segments after it.
    fn start<'p>(&self, from: &ModPath, path: &'p [String]) -> Option<(ModPath, &'p [String])> {
        let mut module = from.clone();
        let mut at = 0;
        match path[0].as_str() {
            "crate" => {
                module.clear();
                at = 1;
            }
            "self" => at = 1,
            "super" => {
                while path.get(at).is_some_and(|s| s == "super") {
                    module.pop()?;
                    at += 1;
                }
            }
            first => {
                let mut child = from.clone();
                child.push(first.to_owned());
                if !self.files.contains_key(&child) {
                    // A name this file defines or imports, or another crate.
                    return None;
                }
            }
        }
        Some((module, &path[at..]))
    }

    /// The file that defines `name`, an item of `module` (defined there or
    /// imported there and so visible through it).
    fn resolve_item(&self, module: &ModPath, name: &str, depth: usize) -> Option<ModPath> {
        let file = self.files.get(module)?;
        // An import first: a module cannot both import and define a name,
        // but `definitions` also holds methods, which may share one.
        let through = file.uses.iter().find(|leaf| leaf.local == name);
        if let Some(leaf) = through {
            return self.resolve(module, &leaf.path, depth + 1);
        }
        if file.defines.contains(name) {
            return Some(module.clone());
        }
        if module.is_empty()
            && let Some(home) = self.exported_macros.get(name)
        {
            return Some(home.clone());
        }
        // A glob: `pub use inner::*`.
        file.uses
            .iter()
            .filter(|leaf| leaf.local == "*")
            .find_map(|leaf| {
                let mut path = leaf.path.clone();
                path.push(name.to_owned());
                self.resolve(module, &path, depth + 1)
                    .filter(|found| self.files[found].defines.contains(name))
            })
    }

    /// File → the files it leans on.
    fn graph(&self) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
        let mut graph = BTreeMap::new();
        for (module, file) in &self.files {
            let mut edges = BTreeSet::new();
            for leaf in &file.uses {
                if leaf.reexport && !mentions(&file.body, &leaf.local) {
                    continue;
                }
                if let Some(to) = self.resolve(module, &leaf.path, 0) {
                    edges.insert(to);
                }
            }
            for path in self.written_paths(module, &file.body) {
                if let Some(to) = self.resolve(module, &path, 0) {
                    edges.insert(to);
                }
            }
            edges.remove(module);
            graph.insert(module.clone(), edges);
        }
        graph
    }

    /// Paths written in code: `crate::…`, `super::…`, `self::…` and
    /// `child::…` for a child module of `module`.
    fn written_paths(&self, module: &ModPath, body: &str) -> Vec<Vec<String>> {
        let children: BTreeSet<&str> = self
            .files
            .keys()
            .filter(|m| m.len() == module.len() + 1 && m.starts_with(module))
            .map(|m| m[module.len()].as_str())
            .collect();
        let mut paths = Vec::new();
        let bytes = body.as_bytes();
        let mut at = 0;
        while at < body.len() {
            let starts_name = is_name(body[at..].chars().next().unwrap_or(' '))
                && (at == 0 || !is_name(bytes[at - 1] as char) && bytes[at - 1] != b':');
            if !starts_name {
                at += body[at..].chars().next().map_or(1, char::len_utf8);
                continue;
            }
            let path = path_at(&body[at..]);
            let length: usize = path.iter().map(|s| s.len() + 2).sum::<usize>() - 2;
            let first = path[0].as_str();
            if path.len() > 1
                && (matches!(first, "crate" | "super" | "self") || children.contains(first))
            {
                paths.push(path);
            }
            at += length.max(1);
        }
        paths
    }
}

/// The `a::b::C` written at the start of `text`.
fn path_at(text: &str) -> Vec<String> {
    let mut path = Vec::new();
    let mut rest = text;
    loop {
        let name = take_name(rest);
        if name.is_empty() {
            break;
        }
        rest = &rest[name.len()..];
        path.push(name);
        match rest.strip_prefix("::") {
            Some(after) if after.starts_with(|c: char| is_name(c)) => rest = after,
            _ => break,
        }
    }
    path
}

/// Whether `name` appears in `body` as a whole word.
fn mentions(body: &str, name: &str) -> bool {
    body.match_indices(name).any(|(at, _)| {
        let before = body[..at].chars().next_back().is_none_or(|c| !is_name(c));
        let after = body[at + name.len()..]
            .chars()
            .next()
            .is_none_or(|c| !is_name(c));
        before && after
    })
}

fn collect(dir: &Path, files: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `src/store/memory.rs` → `["store", "memory"]`; `mod.rs` names its
/// folder; `lib.rs` is the root. Binaries (`main.rs`, `bin/`) are left out.
fn module_path(src: &Path, path: &Path) -> Option<ModPath> {
    let relative = path.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_str().unwrap_or("").to_owned())
        .collect();
    let last = parts.pop()?;
    if parts.first().is_some_and(|p| p == "bin") || last == "main.rs" {
        return None;
    }
    match last.strip_suffix(".rs")? {
        "mod" => {}
        "lib" if parts.is_empty() => {}
        stem => parts.push(stem.to_owned()),
    }
    Some(parts)
}

/// A file's code: comment lines, attributes (`#[cfg(feature = "quotas")]`
/// names a feature, not a module) and a trailing test module left out.
fn code_of(text: &str) -> String {
    // The test module: `mod tests` under attributes one of which is
    // `#[cfg(test)]` (`#[cfg(feature = …)]` may come beside it).
    let lines: Vec<&str> = text.lines().collect();
    let tests = lines.iter().enumerate().position(|(at, line)| {
        line.starts_with("mod tests")
            && lines[..at]
                .iter()
                .rev()
                .take_while(|line| line.starts_with("#["))
                .any(|line| *line == "#[cfg(test)]")
    });
    let attributes = |at: usize| {
        let above = lines[..at].iter().rev();
        at - above.take_while(|line| line.starts_with("#[")).count()
    };
    let code = &lines[..tests.map_or(lines.len(), attributes)];
    code.iter()
        .copied()
        .filter(|line| {
            let line = line.trim_start();
            let attribute = line.starts_with("#[") && line.ends_with(']');
            !(line.starts_with("//") || attribute)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The `macro_rules!` that `#[macro_export]` puts at the crate root.
fn macro_exports(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    lines
        .windows(2)
        .filter(|pair| pair[0] == "#[macro_export]")
        .filter_map(|pair| pair[1].strip_prefix("macro_rules!"))
        .map(|rest| take_name(rest.trim_start()))
        .collect()
}

fn parse(path: &Path, text: &str) -> SourceFile {
    let code = code_of(text);
    let mut body = String::new();
    let mut uses = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = next_use(rest) {
        body.push_str(&rest[..at.start]);
        let end = rest[at.tree..]
            .find(';')
            .map_or(rest.len(), |e| at.tree + e);
        expand(&mut Vec::new(), &rest[at.tree..end], at.reexport, &mut uses);
        rest = &rest[(end + 1).min(rest.len())..];
    }
    body.push_str(rest);
    let defines = definitions(&body);
    SourceFile {
        path: path.to_owned(),
        body,
        uses,
        defines,
    }
}

/// Where a `use` declaration starts, where its tree starts, and whether it
/// is a `pub` re-export.
struct UseAt {
    start: usize,
    tree: usize,
    reexport: bool,
}

fn next_use(code: &str) -> Option<UseAt> {
    let mut line_start = 0;
    for line in code.split_inclusive('\n') {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let (reexport, after_vis) = match trimmed.strip_prefix("pub") {
            Some(rest) if rest.starts_with(' ') || rest.starts_with('(') => {
                let rest = match rest.strip_prefix('(') {
                    Some(inner) => inner.split_once(')').map_or("", |(_, r)| r),
                    None => rest,
                };
                (true, rest.trim_start())
            }
            _ => (false, trimmed),
        };
        if let Some(tree) = after_vis.strip_prefix("use ") {
            let tree_at = line_start + line.len() - tree.len();
            return Some(UseAt {
                start: line_start + indent,
                tree: tree_at,
                reexport,
            });
        }
        line_start += line.len();
    }
    None
}

/// The leaves of a use tree (`a::{b, c::{D as E, self}}`), each under
/// `prefix`.
fn expand(prefix: &mut Vec<String>, tree: &str, reexport: bool, out: &mut Vec<UseLeaf>) {
    let tree = tree.trim().trim_start_matches("::");
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim_end_matches("::").trim();
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let pushed = push_segments(prefix, head);
        for part in split_top_level(inner) {
            expand(prefix, part, reexport, out);
        }
        prefix.truncate(prefix.len() - pushed);
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path.trim(), Some(alias.trim())),
        None => (tree, None),
    };
    if path.is_empty() {
        return;
    }
    let pushed = push_segments(prefix, path);
    let mut full = prefix.clone();
    prefix.truncate(prefix.len() - pushed);
    if full.last().is_some_and(|s| s == "self") {
        full.pop();
    }
    let Some(last) = full.last().cloned() else {
        return;
    };
    let local = alias.map_or(last, str::to_owned);
    out.push(UseLeaf {
        path: full,
        local,
        reexport,
    });
}

fn push_segments(prefix: &mut Vec<String>, path: &str) -> usize {
    let segments: Vec<String> = path
        .split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let count = segments.len();
    prefix.extend(segments);
    count
}

/// `a, b::{c, d}, e` → its three parts.
fn split_top_level(list: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let (mut depth, mut from) = (0, 0);
    for (at, c) in list.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[from..at]);
                from = at + 1;
            }
            _ => {}
        }
    }
    parts.push(&list[from..]);
    parts
}

/// The names of the items a file writes (types, traits, functions,
/// constants, macros, modules), at any depth.
fn definitions(body: &str) -> BTreeSet<String> {
    const KINDS: [&str; 10] = [
        "struct",
        "enum",
        "trait",
        "type",
        "fn",
        "const",
        "static",
        "union",
        "mod",
        "macro_rules!",
    ];
    let mut names = BTreeSet::new();
    for line in body.lines() {
        let mut words = line.split_whitespace().peekable();
        while let Some(word) = words.peek() {
            let skip = word.starts_with("pub")
                || word.starts_with("#[")
                || matches!(*word, "async" | "unsafe" | "extern" | "\"C\"" | "default");
            let const_fn = *word == "const" && line.contains("const fn");
            if skip || const_fn {
                words.next();
            } else {
                break;
            }
        }
        let (Some(kind), Some(name)) = (words.next(), words.next()) else {
            continue;
        };
        if KINDS.contains(&kind) {
            let name = take_name(name);
            if !name.is_empty() {
                names.insert(name);
            }
        }
    }
    names
}

/// Every loop of files: the strongly connected components of more than one
/// file (Tarjan's algorithm), each sorted.
fn loops(graph: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<ModPath, BTreeSet<ModPath>>,
        index: BTreeMap<&'g ModPath, usize>,
        low: BTreeMap<&'g ModPath, usize>,
        stack: Vec<&'g ModPath>,
        on_stack: BTreeSet<&'g ModPath>,
        found: Vec<Vec<ModPath>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g ModPath) {
            let at = self.index.len();
            self.index.insert(node, at);
            self.low.insert(node, at);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let Some((next, _)) = self.graph.get_key_value(next) else {
                    continue;
                };
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.clone());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.found
}

fn name_of(module: &ModPath) -> String {
    if module.is_empty() {
        "crate".to_owned()
    } else {
        module.join("::")
    }
}

/// The loops of the crate at `src`, each as its files' names and the edges
/// that tie them.
fn describe_loops(src: &Path) -> Vec<String> {
    let source = CrateSource::read(src);
    let graph = source.graph();
    if std::env::var_os("TOLLGATE_PRINT_GRAPH").is_some() {
        for (from, to) in &graph {
            let to: Vec<String> = to.iter().map(name_of).collect();
            println!("{} → {}", name_of(from), to.join(", "));
        }
    }
    loops(&graph)
        .into_iter()
        .map(|component| {
            let files: Vec<String> = component
                .iter()
                .map(|m| source.files[m].path.display().to_string())
                .collect();
            let members: BTreeSet<&ModPath> = component.iter().collect();
            let edges: Vec<String> = component
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|to| members.contains(to))
                        .map(move |to| format!("{} → {}", name_of(from), name_of(to)))
                })
                .collect();
            format!("{}\n    edges: {}", files.join(", "), edges.join("; "))
        })
        .collect()
}

const LIBRARY_CRATES: [&str; 12] = [
    "tollgate-core",
    "tollgate-internal",
    "tollgate-store",
    "tollgate",
    "tollgate-redis",
    "tollgate-postgres",
    "tollgate-axum",
    "tollgate-tonic",
    "tollgate-cas",
    "tollgate-conformance",
    "tollgate-local",
    "tollgate-rls",
];

fn crate_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../crates")
        .join(name)
        .join("src")
}

#[test]
fn no_file_of_a_library_crate_leans_on_one_that_leans_back() {
    let mut report = Vec::new();
    for name in LIBRARY_CRATES {
        for found in describe_loops(&crate_src(name)) {
            report.push(format!("{name}: {found}"));
        }
    }
    assert!(
        report.is_empty(),
        "files import each other in a loop:\n{}",
        report.join("\n")
    );
}

/// The `tollgate` crate's top-level modules (a file of `src/`, or a folder
/// with its files: `rate_limit/`, `store/`, `in_flight/`...) import each
/// other without a loop either: no module leans on one that leans back on
/// it.
#[test]
fn no_top_level_module_of_tollgate_leans_on_one_that_leans_back() {
    let files = CrateSource::read(&crate_src("tollgate")).graph();
    let mut modules: BTreeMap<ModPath, BTreeSet<ModPath>> = BTreeMap::new();
    let top = |file: &ModPath| file.first().map(|name| vec![name.clone()]);
    for (from, to) in &files {
        let Some(from) = top(from) else { continue };
        let edges = modules.entry(from.clone()).or_default();
        edges.extend(to.iter().filter_map(top).filter(|to| *to != from));
    }
    let edge =
        |from: &str, to: &str| modules[&vec![from.to_owned()]].contains(&vec![to.to_owned()]);
    // The reading works: the middleware's own edges are there.
    assert!(
        edge("rate_limit", "headers") && edge("rate_limit", "key") && edge("rate_limit", "access")
    );
    let found: Vec<String> = loops(&modules)
        .iter()
        .map(|component| component.iter().map(name_of).collect::<Vec<_>>().join(", "))
        .collect();
    assert!(
        found.is_empty(),
        "modules import each other in a loop: {found:?}"
    );
}

/// The reading sees the edges it must: through a crate-root re-export, a
/// folder's re-export, a group, a rename, `super::`, and a path written in
/// code; and not through a re-export the file never uses.
#[test]
fn the_reading_follows_names_to_the_file_that_defines_them() {
    let edge_in = |krate: &str, from: &[&str], to: &[&str]| {
        let graph = CrateSource::read(&crate_src(krate)).graph();
        let from: ModPath = from.iter().map(|s| s.to_string()).collect();
        let to: ModPath = to.iter().map(|s| s.to_string()).collect();
        graph[&from].contains(&to)
    };
    // `use crate::policy::Policy`: the file defining Policy.
    assert!(edge_in("tollgate-store", &["memory"], &["policy"]));
    // `use super::{PolicyDecision, Store, …}` in memory/mod.rs: lib.rs,
    // where `Store` is defined (and `PolicyDecision` re-exported).
    assert!(edge_in("tollgate-store", &["memory"], &[]));
    // `crate::Key` through the root's re-export.
    assert!(edge_in("tollgate-store", &["slots", "memory"], &["key"]));
    assert!(edge_in("tollgate", &["rate_limit", "engine"], &["key"]));
    // tollgate's lib.rs re-exports, and uses nothing of what it re-exports.
    let graph = CrateSource::read(&crate_src("tollgate")).graph();
    assert!(graph[&Vec::new()].is_empty(), "{:?}", graph[&Vec::new()]);
}

/// A planted loop through re-exports is found: `a` uses `crate::Thing`,
/// which the root re-exports from `b::inner`, whose folder re-exports it;
/// `b::inner` uses `super::super::a::helper` by a path in its code.
#[test]
fn a_loop_through_a_reexport_is_found() {
    let src = std::env::temp_dir().join(format!("tollgate-import-graph-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&src);
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).unwrap();
    write(
        "lib.rs",
        "mod a;\nmod b;\npub use b::{Other, Thing as Renamed};\n",
    );
    write(
        "a.rs",
        "use crate::{Renamed, c::D};\n// use crate::b; (a comment: no edge)\npub fn helper() {}\n",
    );
    write(
        "b/mod.rs",
        "mod inner;\npub use inner::*;\npub struct Other;\n",
    );
    write(
        "b/inner.rs",
        "pub struct Thing;\nfn f() { super::super::a::helper() }\n",
    );
    let found = describe_loops(&src);
    let _ = std::fs::remove_dir_all(&src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("a → b::inner") && found[0].contains("b::inner → a"),
        "{found:?}"
    );
}
