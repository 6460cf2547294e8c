//! Prometheus's text exposition in tests: its samples read for lookups,
//! and the whole run through a real parser (`promtool check metrics`, or
//! the official Python client's).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::process::{Command, Stdio};

/// One sample of a scrape: its metric name, labels and value.
#[derive(Debug)]
pub struct Sample {
    /// The metric's name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// Whether `sample` has each of `labels` (and maybe more).
pub fn has_labels(sample: &Sample, labels: &[(&str, &str)]) -> bool {
    labels
        .iter()
        .all(|(k, v)| sample.labels.get(*k).is_some_and(|value| value == v))
}

/// The samples of an exposition in Prometheus's text format, for a
/// test's lookups (its validity is the real parser's job: see
/// [`passes_a_real_parser`]).
pub fn samples(text: &str) -> Vec<Sample> {
    let mut samples = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
        let value: f64 = value.parse().expect("a number");
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => (name, labels(rest.trim_end_matches('}'))),
        };
        samples.push(Sample {
            name: name.to_owned(),
            labels,
            value,
        });
    }
    samples
}

/// The labels of `a="x",b="y"` (values with `\"`, `\\` and `\n` escapes).
pub fn labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((name, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => {}
                },
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(name.trim_start_matches(',').trim().to_owned(), value);
        rest = &after[end..];
    }
    labels
}

/// Runs `text` through a real parser of the exposition format: Prometheus's
/// `promtool check metrics` (parse and lint: help text, counter names) when
/// it is installed, else the official Python client's parser
/// (`prometheus_client`, installed with pip if missing), with the same
/// checks of help text and types. `false` (the test then skips this
/// check, saying so) only when neither can be had.
pub fn passes_a_real_parser(text: &str) -> bool {
    let mut promtool = Command::new("promtool");
    promtool.args(["check", "metrics"]);
    if let Some(passed) = parses(promtool, "promtool check metrics", text) {
        return passed;
    }
    if !python_parser_available() {
        eprintln!(
            "SKIPPED the exposition's check by a real parser: neither promtool nor the \
             Python prometheus_client could be had (install either: apt-get install \
             prometheus, or pip install prometheus-client)"
        );
        return false;
    }
    let mut python = Command::new("python3");
    python.args(["-c", PYTHON_CHECK]);
    parses(python, "prometheus_client's parser", text).expect("python3 runs")
}

/// Runs `parser` on `text` (its stdin) and asserts it succeeds, naming it
/// `name` and showing what it said if it does not; `None` when it cannot
/// be started.
fn parses(mut parser: Command, name: &str, text: &str) -> Option<bool> {
    let mut child = parser
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{name}: {}{}\n{text}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Some(true)
}

/// Parses stdin with `prometheus_client`'s text parser (it raises on a
/// malformed line), then asks of every family what promtool's lint asks:
/// help text, and a counter's samples named `…_total`.
const PYTHON_CHECK: &str = r#"
import sys
from prometheus_client.parser import text_string_to_metric_families
families = list(text_string_to_metric_families(sys.stdin.read()))
assert families, "no metric families"
for family in families:
    assert family.documentation, f"{family.name}: no help text"
    assert family.type in ("counter", "gauge"), f"{family.name}: type {family.type}"
    for sample in family.samples:
        if family.type == "counter" and not sample.name.endswith("_created"):
            assert sample.name.endswith("_total"), f"{sample.name}: a counter not named _total"
print(len(families), "families parsed")
"#;

/// Whether `python3` can import `prometheus_client`, installing it with
/// pip (quietly, for this user) if it cannot yet.
pub fn python_parser_available() -> bool {
    let imports = || {
        Command::new("python3")
            .args(["-c", "import prometheus_client.parser"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if imports() {
        return true;
    }
    let _ = Command::new("python3")
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "prometheus-client",
        ])
        .stdout(Stdio::null())
        .status();
    imports()
}
