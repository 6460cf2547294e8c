//! What stores prepare from a policy, kept with the policy.
//!
//! A store turns a [`Policy`](crate::Policy) into the form it checks
//! against (the memory store: whether the state fits one atomic; the Redis
//! store: the script and its arguments) once, on the policy's first request,
//! and keeps it in the policy itself: no cache keyed by policy id, nothing
//! to bound or evict, and the form is dropped with the policy.

use std::any::Any;
use std::ops::Deref;
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

/// An `Arc<T>` for some form type `T`, erased.
type Erased = Box<dyn Any + Send + Sync>;

/// The prepared forms of one policy, one per type.
///
/// The first store to prepare the policy (in practice the only one) gets
/// a slot read with one atomic load and no reference count; others (a
/// fallback store behind it) share a small locked list.
#[derive(Default)]
pub(crate) struct PreparedForms {
    first: OnceLock<Erased>,
    others: RwLock<Vec<Erased>>,
}

impl std::fmt::Debug for PreparedForms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedForms").finish_non_exhaustive()
    }
}

impl PreparedForms {
    /// The form of type `T`, made by `prepare` the first time it is asked
    /// for. Two threads asking at once may both prepare it; one form is
    /// kept, and every call returns that one.
    pub(crate) fn get_or_prepare<T: Any + Send + Sync>(
        &self,
        prepare: impl FnOnce() -> T,
    ) -> Prepared<'_, T> {
        if let Some(first) = self.first.get() {
            return match first.downcast_ref::<Arc<T>>() {
                Some(form) => Prepared::Kept(form),
                None => Prepared::Shared(self.other(|| Arc::new(prepare()))),
            };
        }
        let form = Arc::new(prepare());
        // Claim the first slot; if another thread did meanwhile, its form
        // is kept when it is a `T`, and ours goes to the list when not.
        let _ = self.first.set(Box::new(form.clone()));
        match self.first.get().and_then(|f| f.downcast_ref::<Arc<T>>()) {
            Some(kept) => Prepared::Kept(kept),
            None => Prepared::Shared(self.other(|| form)),
        }
    }

    /// The form of type `T` in the list of others, added if absent.
    fn other<T: Any + Send + Sync>(&self, prepare: impl FnOnce() -> Arc<T>) -> Arc<T> {
        let found = |list: &[Erased]| {
            list.iter()
                .find_map(|e| e.downcast_ref::<Arc<T>>())
                .cloned()
        };
        if let Some(form) = found(&self.others.read().unwrap_or_else(PoisonError::into_inner)) {
            return form;
        }
        let mut others = self.others.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(form) = found(&others) {
            return form;
        }
        let form = prepare();
        others.push(Box::new(form.clone()));
        form
    }
}

/// A prepared form, borrowed from its policy; see
/// [`Policy::prepared`](crate::Policy::prepared).
#[derive(Debug)]
pub enum Prepared<'a, T> {
    /// The policy's first form: no reference count touched.
    Kept(&'a Arc<T>),
    /// A form from the policy's list of others.
    Shared(Arc<T>),
}

impl<T> Deref for Prepared<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Prepared::Kept(form) => form,
            Prepared::Shared(form) => form,
        }
    }
}

impl<T> Prepared<'_, T> {
    /// The form as an `Arc`, to keep beyond the policy's borrow (in a
    /// future that outlives the call).
    pub fn into_arc(self) -> Arc<T> {
        match self {
            Prepared::Kept(form) => form.clone(),
            Prepared::Shared(form) => form,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_type_is_prepared_once_the_first_kept_the_others_shared() {
        let forms = PreparedForms::default();
        let mut made = 0;
        let first = forms.get_or_prepare(|| {
            made += 1;
            1u32
        });
        assert!(matches!(first, Prepared::Kept(_)));
        let again = forms.get_or_prepare(|| 2u32);
        assert_eq!(*again, 1);
        let other = forms.get_or_prepare(|| String::from("fallback"));
        assert!(matches!(other, Prepared::Shared(_)));
        let other_again = forms.get_or_prepare(|| String::from("not used"));
        assert_eq!(*other_again, "fallback");
        assert!(Arc::ptr_eq(&other.into_arc(), &other_again.into_arc()));
        assert_eq!(made, 1);
    }
}
