//! The rules in force: what the layer builds from a file and its services
//! read, each request.

use super::matcher::Matcher;
use crate::key::KeyExtractor;
use crate::rate_limit::engine::Engine;
use std::sync::Arc;

/// One rule, ready to apply: its predicate and its limiter.
pub(crate) struct BuiltRule<St, R> {
    pub name: String,
    pub matcher: Matcher,
    pub shared: Arc<Engine<Box<dyn KeyExtractor>, St, R>>,
}

/// The rules in force, in order.
pub(crate) type RuleSet<St, R> = Vec<BuiltRule<St, R>>;
