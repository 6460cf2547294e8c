//! Periodic mode: instances count locally and report every interval.
//! A key's counts and their syncs live in `slot`; the mode's keys in
//! `keys`, synced by the tick in `tick`; the store's operations on them,
//! behind the mode seam, in `mode`.

mod keys;
mod mode;
mod slot;
mod sync;
mod tick;

pub(crate) use mode::Periodic;
