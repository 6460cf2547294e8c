//! The README and the guide (`docs/guide/`): every guide page's examples
//! compiled as doctests, the README short and naming the two commands, and
//! every relative link pointing at a file that exists.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn guide_pages() -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root().join("docs/guide"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "md"))
        .collect();
    pages.sort();
    pages
}

#[test]
fn every_guide_page_is_compiled_as_doctests() {
    let lib = std::fs::read_to_string(root().join("tests/src/lib.rs")).unwrap();
    let pages = guide_pages();
    assert!(pages.len() > 10, "{pages:?}");
    for page in pages {
        let name = page.file_name().unwrap().to_str().unwrap();
        let include = format!("include_str!(\"../../docs/guide/{name}\")");
        assert!(lib.contains(&include), "tests/src/lib.rs lacks {include}");
    }
}

#[test]
fn the_readme_fits_a_screen_and_names_the_two_commands() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.lines().count() < 200,
        "{} lines",
        readme.lines().count()
    );
    assert!(readme.contains("\ncargo run --release -p tollgate-demo\n"));
    assert!(readme.contains("\nscripts/test.sh\n"));
}

/// The targets of `[text](target)` outside code, less URLs and anchors.
fn relative_links(text: &str) -> Vec<String> {
    let mut links = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        let mut rest = line;
        while let Some(start) = rest.find("](") {
            rest = &rest[start + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split('#').next().unwrap();
            if !in_code && !target.is_empty() && !target.contains(':') {
                links.push(target.to_owned());
            }
            rest = &rest[end..];
        }
    }
    links
}

#[test]
fn the_readme_and_guide_links_point_at_files() {
    let mut files = guide_pages();
    files.push(root().join("README.md"));
    let mut checked = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for link in relative_links(&text) {
            let target = file.parent().unwrap().join(&link);
            assert!(target.exists(), "{}: {link} does not exist", file.display());
            checked += 1;
        }
    }
    assert!(checked > 50, "{checked} links");
}

/// The algorithms table of the guide names every algorithm of the
/// registry by its configuration name, and no other.
#[test]
fn the_algorithms_table_names_every_algorithm_of_the_registry() {
    let text = std::fs::read_to_string(root().join("docs/guide/algorithms.md")).unwrap();
    let mut named = Vec::new();
    let rows = text
        .lines()
        .skip_while(|line| !line.starts_with("| algorithm |"))
        .skip(2)
        .take_while(|line| line.starts_with('|'));
    for row in rows {
        let first = row.split('|').nth(1).unwrap_or("");
        named.extend(first.split('`').skip(1).step_by(2).map(str::to_owned));
    }
    named.sort();
    let mut registry: Vec<String> = tollgate_core::Algorithm::ALL
        .iter()
        .map(|a| a.name().to_owned())
        .collect();
    registry.sort();
    assert_eq!(named, registry);
}
