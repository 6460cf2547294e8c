//! What every call of a [`MessageLimitLayer`](super::MessageLimitLayer)'s
//! services shares: the key, the limits, which messages count.

use super::gate::{Limits, Tally};
use http::Request;
use std::sync::Arc;
use tollgate::{KeyExtractor, OnMissingKey, Store, key::RequestView};

/// Which messages of a call count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Direction {
    /// The messages the client sends: a client stream (and the one message
    /// of a unary or server-streaming call).
    Requests,
    /// The messages the server sends: a server stream (and the one message
    /// of a unary or client-streaming call).
    Responses,
    /// Both, against one budget (the default).
    #[default]
    Both,
}

/// What every call of a layer's services shares.
pub(crate) struct Shared<K, St> {
    pub(super) key: K,
    pub(super) limits: Arc<Limits<St>>,
    pub(super) direction: Direction,
    /// The method paths whose messages count; empty: every method's.
    pub(super) methods: Box<[Box<str>]>,
    pub(super) missing_key: OnMissingKey,
}

impl<K: KeyExtractor, St: Store> Shared<K, St> {
    /// The accounts of `request`'s messages: the request's, the
    /// response's (either `None` where nothing counts).
    pub(crate) fn tallies<B>(
        &self,
        request: &Request<B>,
    ) -> (Option<Tally<St>>, Option<Tally<St>>) {
        let path = request.uri().path();
        if !self.methods.is_empty() && !self.methods.iter().any(|m| &**m == path) {
            return (None, None);
        }
        let key = match self.key.extract(&RequestView::new(request)) {
            Some(key) => key,
            None => match &self.missing_key {
                OnMissingKey::Shared(key) => key.clone(),
                // `Reject` is refused when the layer is built.
                _ => return (None, None),
            },
        };
        let tally = Tally::new(self.limits.clone(), key);
        match self.direction {
            Direction::Requests => (Some(tally), None),
            Direction::Responses => (None, Some(tally)),
            Direction::Both => (Some(tally.clone()), Some(tally)),
        }
    }
}
