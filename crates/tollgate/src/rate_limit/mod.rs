//! The rate-limit middleware, laid out as tower lays out each of its own:
//! the layer and its builder (`layer.rs`), the service (`service.rs`) and
//! its future (`future.rs`); and what they carry out: the decision of a
//! request in one place (`engine.rs`), which limits a request's route
//! gets (`routes.rs`), a request's charge given back or settled by its
//! outcome (`outcome.rs`), and what a handler can read of its decision
//! (`info.rs`); and each key's own limits, looked up at request time
//! (`quotas/`, public as `tollgate::quotas`).

pub(crate) mod engine;
pub(crate) mod future;
pub(crate) mod info;
pub(crate) mod layer;
pub(crate) mod outcome;
#[cfg(feature = "quotas")]
#[cfg_attr(docsrs, doc(cfg(feature = "quotas")))]
pub mod quotas;
pub(crate) mod routes;
pub(crate) mod service;
