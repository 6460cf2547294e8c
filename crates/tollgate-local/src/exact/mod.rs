//! Exact mode: an instance admits only capacity it reserved from Redis.
//! A key's reservations and their calls live in `slot`; the store's
//! operations on them, behind the mode seam, in `mode`.

mod mode;
mod reserve;
mod slot;

pub(crate) use mode::Exact;
