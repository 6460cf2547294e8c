//! What a store keeps of an admission to give its charge back: a
//! [`Receipt`].

/// What the store that charged an admission needs to give the charge back
/// exactly, in that store's own terms; opaque to everyone else.
///
/// A store hands one out with its admission
/// ([`PolicyDecision::with_receipt`](super::PolicyDecision::with_receipt)),
/// and gets it back, untouched, in the [`PolicyRefund`](super::PolicyRefund) of that
/// admission. Two kinds, so that no meaning hides in the other's bits:
///
/// - [`Receipt::at`]: when the store charged, in ns on its own clock (the
///   memory store, Redis, the compare-and-swap store). Any store may read
///   it ([`as_time`](Self::as_time)): a refund then needs no estimate of how
///   long ago the check was.
/// - [`Receipt::token`]: a number only the store that made it reads
///   ([`as_token`](Self::as_token)); local-first exact names the reservation
///   whose count in Redis holds the units. It says nothing of time, so a
///   store that gets a token it did not make goes by the refund's `ago`.
///
/// ```
/// use tollgate_store::Receipt;
///
/// let at = Receipt::at(1_000);
/// assert_eq!((at.as_time(), at.as_token()), (Some(1_000), None));
/// let token = Receipt::token(7);
/// assert_eq!((token.as_time(), token.as_token()), (None, Some(7)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Receipt(Kind);

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Kind {
    At(u64),
    Token(u64),
}

impl Receipt {
    /// A charge made at `at`, in ns on the charging store's own clock.
    #[inline]
    pub const fn at(at: u64) -> Self {
        Receipt(Kind::At(at))
    }

    /// A number whose meaning only the store that made it knows.
    #[inline]
    pub const fn token(token: u64) -> Self {
        Receipt(Kind::Token(token))
    }

    /// When the charge was made, on the charging store's clock, if this
    /// receipt says.
    #[inline]
    pub const fn as_time(self) -> Option<u64> {
        match self.0 {
            Kind::At(at) => Some(at),
            Kind::Token(_) => None,
        }
    }

    /// The store's own number, if this receipt is one.
    #[inline]
    pub const fn as_token(self) -> Option<u64> {
        match self.0 {
            Kind::At(_) => None,
            Kind::Token(token) => Some(token),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_is_no_bigger_than_the_time_it_replaced() {
        // A decision is moved on every request's path: the receipt in it
        // costs what `Option<u64>` cost.
        assert_eq!(
            std::mem::size_of::<Option<Receipt>>(),
            std::mem::size_of::<Option<u64>>()
        );
    }
}
