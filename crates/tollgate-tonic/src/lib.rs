//! tollgate for tonic.
