//! What a layer may need of a store beyond its checks
//! ([`Capability`]), and the answer of a store that lacks it
//! ([`MissingCapability`]), which names the store.

use std::fmt;

/// An operation a layer's feature needs of its store, asked with
/// [`Store::can`](super::Store::can) when the layer is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// [`Store::refund`](super::Store::refund) gives a charge back:
    /// `charge_when` and `pay_after` need it.
    Refund,
    /// [`Store::debit`](super::Store::debit) charges into debt:
    /// `pay_after` needs it.
    Debit,
}

impl Capability {
    /// The method of [`Store`](super::Store) that does it.
    pub fn method(self) -> &'static str {
        match self {
            Capability::Refund => "Store::refund",
            Capability::Debit => "Store::debit",
        }
    }

    /// What it does, in a few words.
    pub fn does(self) -> &'static str {
        match self {
            Capability::Refund => "gives charges back",
            Capability::Debit => "charges into debt",
        }
    }
}

/// A store of a composition lacks a [`Capability`]: the answer of
/// [`Store::can`](super::Store::can), naming the store that lacks it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingCapability {
    /// What is missing.
    pub capability: Capability,
    /// The store that lacks it, by its type's name without module paths
    /// (`Counting<MemoryStore>`).
    pub store: String,
}

impl MissingCapability {
    /// `capability` is missing from the store of type `St`.
    pub fn of<St: ?Sized>(capability: Capability) -> Self {
        MissingCapability {
            capability,
            store: short_type_name::<St>(),
        }
    }
}

impl fmt::Display for MissingCapability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "`{}` does not say that it {} (`{}`)",
            self.store,
            self.capability.does(),
            self.capability.method()
        )
    }
}

impl std::error::Error for MissingCapability {}

/// `T`'s name with every module path left out:
/// `Fallback<Timeout<RedisStore>, MemoryStore>` rather than
/// `tollgate_store::fallback::Fallback<…>`.
pub fn short_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let mut short = String::with_capacity(full.len());
    let mut segment_start = 0;
    for (at, c) in full.char_indices() {
        let in_path = c.is_alphanumeric() || c == '_' || c == ':';
        if in_path {
            continue;
        }
        short.push_str(last_segment(&full[segment_start..at]));
        short.push(c);
        segment_start = at + c.len_utf8();
    }
    short.push_str(last_segment(&full[segment_start..]));
    short
}

/// `b` of a path `a::b`.
fn last_segment(path: &str) -> &str {
    path.rsplit("::").next().unwrap_or(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use crate::{Fallback, Timeout};

    #[test]
    fn a_store_is_named_without_module_paths() {
        assert_eq!(
            short_type_name::<Fallback<Timeout<MemoryStore>, MemoryStore>>(),
            "Fallback<Timeout<MemoryStore>, MemoryStore>"
        );
        assert_eq!(short_type_name::<u32>(), "u32");
        assert_eq!(
            short_type_name::<(MemoryStore, Vec<u8>)>(),
            "(MemoryStore, Vec<u8>)"
        );
    }

    #[test]
    fn a_missing_capability_names_the_store_and_the_method() {
        let missing = MissingCapability::of::<Timeout<MemoryStore>>(Capability::Debit);
        assert_eq!(
            missing.to_string(),
            "`Timeout<MemoryStore>` does not say that it charges into debt \
             (`Store::debit`)"
        );
    }
}
