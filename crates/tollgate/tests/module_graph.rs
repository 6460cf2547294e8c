//! The crate's modules import each other without a loop: the layer builds
//! the engine, the service and the future carry its decisions out, and no
//! module leans on one that leans back on it. A loop makes every module in
//! it a prerequisite of the others; this test finds one if it comes back.
//!
//! The graph is read from the source as text: an edge from module `a` to
//! `b` for every `crate::b` path in `a`'s files (a module being a top-level
//! file of `src/`, or a folder with its files), leaving out `#[cfg(test)]`
//! blocks at the end of a file and names re-exported at the crate root.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Module name → the modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &mut files);
    let modules: BTreeSet<String> = files
        .iter()
        .filter_map(|path| module_of(&src, path))
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &files {
        let Some(from) = module_of(&src, path) else {
            continue;
        };
        let text = std::fs::read_to_string(path).expect("a source file");
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        let edges = graph.entry(from.clone()).or_default();
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if name != from && modules.contains(&name) {
                edges.insert(name);
            }
        }
    }
    graph
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
