//! Values with `*` in them: each `*` stands for any run of characters
//! (none included), at the end (`foo*`), in the middle (`bar*b`) or
//! several times (`foo*bar*baz`), as envoyproxy/ratelimit matches them.

/// A pattern, split on its `*`s when the file is loaded, so that a
/// request's match allocates nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Wildcard {
    /// The literal runs between the `*`s: at least two.
    parts: Vec<String>,
}

impl Wildcard {
    /// The pattern of `text`, or `None` when it has no `*`.
    pub(crate) fn new(text: &str) -> Option<Wildcard> {
        text.contains('*').then(|| Wildcard {
            parts: text.split('*').map(str::to_owned).collect(),
        })
    }

    /// Whether `value` matches: it starts with the first run, ends with
    /// the last, and holds the middle ones in order between them, none
    /// overlapping.
    pub(crate) fn matches(&self, value: &str) -> bool {
        let (Some((first, rest)), Some(last)) = (self.parts.split_first(), self.parts.last())
        else {
            return false;
        };
        let fixed: usize = self.parts.iter().map(String::len).sum();
        if value.len() < fixed || !value.starts_with(first.as_str()) {
            return false;
        }
        if !value.ends_with(last.as_str()) {
            return false;
        }
        // What lies between the first run and the last, searched in order.
        let mut between = &value[first.len()..value.len() - last.len()];
        for middle in &rest[..rest.len() - 1] {
            match between.find(middle.as_str()) {
                Some(at) => between = &between[at + middle.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, value: &str) -> bool {
        Wildcard::new(pattern).unwrap().matches(value)
    }

    #[test]
    fn a_star_stands_for_any_run_anywhere() {
        assert!(Wildcard::new("foo").is_none());
        // Trailing.
        assert!(matches("foo*", "foo"));
        assert!(matches("foo*", "foobar"));
        assert!(!matches("foo*", "fo"));
        assert!(!matches("foo*", "xfoo"));
        // In the middle.
        assert!(matches("bar*b", "barb"));
        assert!(matches("bar*b", "bar-anything-b"));
        assert!(!matches("bar*b", "bar-anything-c"));
        // The first and last runs may not overlap.
        assert!(!matches("ab*ba", "aba"));
        // Several.
        assert!(matches("foo*bar*baz", "foobarbaz"));
        assert!(matches("foo*bar*baz", "foo-1-bar-2-baz"));
        assert!(!matches("foo*bar*baz", "foo-baz-bar"));
        assert!(!matches("foo*bar*baz", "foobaz"));
        // Leading, and a lone star.
        assert!(matches("*baz", "anything-baz"));
        assert!(matches("*", ""));
        assert!(matches("a**b", "ab"));
    }
}
