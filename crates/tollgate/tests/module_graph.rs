//! The crate's modules import each other without a loop: the layer builds
//! the engine, the service and the future carry its decisions out, and no
//! module leans on one that leans back on it. A loop makes every module in
//! it a prerequisite of the others; this test finds one if it comes back.
//!
//! The graph is read from the source as text: an edge from module `a` to
//! `b` for every path `a`'s files name in `b` — `crate::b::…`, and a name
//! the crate root re-exports from `b` (`crate::Name`, or `Name` in a
//! `use crate::{…}` group), which would otherwise hide the edge — a module
//! being a top-level file of `src/`, or a folder with its files; comment
//! lines, and `#[cfg(test)]` blocks at the end of a file, left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → the modules it names, for the crate at `src`.
fn graph_of(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    collect(src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|path| module_of(src, path))
        .collect();
    let root = std::fs::read_to_string(src.join("lib.rs")).expect("lib.rs");
    let exported = reexports(&code_of(&root), &modules);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &files {
        let Some(from) = module_of(src, path) else {
            continue;
        };
        let text = std::fs::read_to_string(path).expect("a source file");
        let code = code_of(&text);
        let edges = graph.entry(from.clone()).or_default();
        for name in named(&code) {
            let to = match modules.contains(&name) {
                true => Some(&name),
                false => exported.get(&name),
            };
            if let Some(to) = to.filter(|to| **to != from) {
                edges.insert(to.clone());
            }
        }
    }
    graph
}

/// The crate's own graph.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    graph_of(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// A file's code: comment lines and a trailing test module left out.
fn code_of(text: &str) -> String {
    let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
    code.lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_name(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first segment of every path after `crate::`, and every name in a
/// `use crate::{…}` group (each item's first segment).
fn named(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for item in inner.split(',') {
                let first: String = item.trim().chars().take_while(|c| is_name(*c)).collect();
                if !first.is_empty() {
                    names.push(first);
                }
            }
        } else {
            names.push(rest.chars().take_while(|c| is_name(*c)).collect());
        }
    }
    names
}

/// Names the crate root re-exports (`pub use module::…::{A, B}` or
/// `pub use module::…::A;`), and the module each comes from.
fn reexports(root: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut exported = BTreeMap::new();
    for statement in root.split(';') {
        let Some(path) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module: String = path.chars().take_while(|c| is_name(*c)).collect();
        if !modules.contains(&module) {
            continue;
        }
        let items = match path.find('{') {
            Some(open) => path[open + 1..].trim_end_matches('}').to_owned(),
            None => path.rsplit("::").next().unwrap_or("").to_owned(),
        };
        for item in items.split(',') {
            // `A`, `a::B`, `A as B`: the name the root gives it.
            let item = item.trim();
            let given = item.rsplit(" as ").next().unwrap_or(item);
            let given = given.rsplit("::").next().unwrap_or(given).trim();
            if !given.is_empty() && given.chars().all(is_name) {
                exported.insert(given.to_owned(), module.clone());
            }
        }
    }
    exported
}

fn collect(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            collect(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

/// `src/engine.rs` → `engine`, `src/rules/file.rs` → `rules`; `lib.rs` is
/// the root, not a module.
fn module_of(src: &Path, path: &Path) -> Option<String> {
    let relative = path.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (name != "lib").then(|| name.to_owned())
}

/// A loop of modules, if the graph has one.
fn find_loop(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_leans_on_one_that_leans_back() {
    let graph = graph();
    // The reading works: the middleware's own edges are there.
    assert!(graph["service"].contains("engine"), "{graph:?}");
    assert!(graph["future"].contains("engine"), "{graph:?}");
    assert!(graph["layer"].contains("engine"), "{graph:?}");
    if let Some(cycle) = find_loop(&graph) {
        panic!("modules import each other in a loop: {}", cycle.join(" → "));
    }
}

#[test]
fn a_loop_is_found() {
    let graph: BTreeMap<String, BTreeSet<String>> = [
        ("a", vec!["b"]),
        ("b", vec!["c"]),
        ("c", vec!["a"]),
        ("d", vec![]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
    .collect();
    assert_eq!(
        find_loop(&graph),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
}

/// A loop through a name the crate root re-exports is found: `a` uses
/// `crate::Thing` (re-exported from `b`), `b` uses `crate::a::helper`.
#[test]
fn a_loop_through_a_reexport_is_found() {
    let src = std::env::temp_dir().join(format!("tollgate-graph-{}", std::process::id()));
    std::fs::create_dir_all(&src).unwrap();
    let write = |name: &str, text: &str| std::fs::write(src.join(name), text).unwrap();
    write("lib.rs", "mod a;\nmod b;\npub use b::{Other, Thing};\n");
    write(
        "a.rs",
        "use crate::Thing;\n// use crate::c; (a comment: no edge)\n",
    );
    write(
        "b.rs",
        "use crate::{a::helper, Other};\npub struct Thing;\n",
    );
    let graph = graph_of(&src);
    let _ = std::fs::remove_dir_all(&src);
    assert_eq!(graph["a"], BTreeSet::from(["b".to_owned()]), "{graph:?}");
    assert_eq!(
        find_loop(&graph),
        Some(vec!["a".into(), "b".into(), "a".into()])
    );
}
