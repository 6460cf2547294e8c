//! Which requests a rule applies to.

use crate::key::RequestView;
use http::{HeaderName, HeaderValue, Method};

/// One condition of a rule's `match` table.
#[derive(Clone, Debug)]
pub(crate) enum Condition {
    /// The method is one of these.
    Methods(Vec<Method>),
    /// The path is exactly this.
    Path(Box<str>),
    /// The path starts with this (written `"/api/*"` in the file).
    PathPrefix(Box<str>),
    /// axum matched this route template (`/users/{id}`).
    #[cfg_attr(not(feature = "axum"), allow(dead_code))]
    Route(Box<str>),
    /// The header is present, with this value if one is given.
    Header(HeaderName, Option<HeaderValue>),
}

impl Condition {
    /// `"/login"` (exact) or `"/api/*"` (prefix).
    pub(crate) fn path(text: &str) -> Result<Condition, String> {
        if !text.starts_with('/') {
            return Err(format!("{text:?} does not start with `/`"));
        }
        Ok(match text.strip_suffix('*') {
            Some(prefix) => Condition::PathPrefix(prefix.into()),
            None => Condition::Path(text.into()),
        })
    }

    /// An axum route template; needs the `axum` feature.
    pub(crate) fn route(text: &str) -> Result<Condition, String> {
        if !cfg!(feature = "axum") {
            return Err(
                "route conditions read axum's MatchedPath: enable tollgate's `axum` feature".into(),
            );
        }
        if !text.starts_with('/') {
            return Err(format!("{text:?} does not start with `/`"));
        }
        Ok(Condition::Route(text.into()))
    }

    /// `"package.Service/Method"` or `"/package.Service/Method"`.
    pub(crate) fn grpc_method(text: &str) -> Result<Condition, String> {
        let path = text.strip_prefix('/').unwrap_or(text);
        match path.split_once('/') {
            Some((service, method))
                if !service.is_empty() && !method.is_empty() && !method.contains('/') =>
            {
                Ok(Condition::Path(format!("/{path}").into()))
            }
            _ => Err(format!(
                "{text:?} is not a gRPC method; write \"package.Service/Method\""
            )),
        }
    }

    fn holds(&self, request: &RequestView<'_>) -> bool {
        match self {
            Condition::Methods(methods) => methods.contains(request.method),
            Condition::Path(path) => request.uri.path() == &**path,
            Condition::PathPrefix(prefix) => request.uri.path().starts_with(&**prefix),
            Condition::Route(template) => route_is(request, template),
            Condition::Header(name, value) => match (request.headers.get(name), value) {
                (Some(_), None) => true,
                (Some(found), Some(wanted)) => found == wanted,
                (None, _) => false,
            },
        }
    }
}

#[cfg(feature = "axum")]
fn route_is(request: &RequestView<'_>, template: &str) -> bool {
    request
        .extensions
        .get::<axum::extract::MatchedPath>()
        .is_some_and(|path| path.as_str() == template)
}

#[cfg(not(feature = "axum"))]
fn route_is(_: &RequestView<'_>, _: &str) -> bool {
    false
}

/// A rule's conditions, all of which must hold; none means every request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Matcher {
    conditions: Vec<Condition>,
}

impl Matcher {
    pub(crate) fn all(conditions: Vec<Condition>) -> Self {
        Matcher { conditions }
    }

    pub(crate) fn matches(&self, request: &RequestView<'_>) -> bool {
        self.conditions
            .iter()
            .all(|condition| condition.holds(request))
    }
}
