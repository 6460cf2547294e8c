//! Per-key quotas: where they come from ([`QuotaSource`]) and what a
//! source answers ([`QuotaAnswer`]). tollgate's `KeyQuotas` caches the
//! answers in front of a source and its layer applies them; a source (the
//! Redis store's `RedisQuotas`, a table, a closure) needs only this.

mod changes;
mod source;

pub use changes::ChangedQuotas;
#[doc(hidden)]
pub use changes::{Caches, Forget, forget_in};
pub use source::{
    AsyncFnQuotas, FnQuotas, QuotaLookup, QuotaSource, StaticQuotas, quota_fn, quota_fn_async,
};

use std::fmt;
use std::str::FromStr;
use tollgate_core::{Quota, QuotaError};

/// What a [`QuotaSource`] says about a key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum QuotaAnswer {
    /// The layer's own limits.
    Default,
    /// No limit at all.
    Unlimited,
    /// These quotas, all of which a request must pass (at least one).
    Quotas(Vec<Quota>),
}

impl FromStr for QuotaAnswer {
    type Err = QuotaError;

    /// Reads `"5/s"`, several quotas separated by `;` (`"5/s;500/h"`),
    /// `"unlimited"`, or `"default"` (also the empty string).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "" | "default" => Ok(QuotaAnswer::Default),
            "unlimited" => Ok(QuotaAnswer::Unlimited),
            quotas => quotas
                .split(';')
                .map(|quota| quota.trim().parse())
                .collect::<Result<Vec<Quota>, _>>()
                .map(QuotaAnswer::Quotas),
        }
    }
}

impl fmt::Display for QuotaAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaAnswer::Default => f.write_str("default"),
            QuotaAnswer::Unlimited => f.write_str("unlimited"),
            QuotaAnswer::Quotas(quotas) => {
                for (i, quota) in quotas.iter().enumerate() {
                    if i > 0 {
                        f.write_str(";")?;
                    }
                    write!(f, "{quota}")?;
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_from_the_text_a_config_store_holds() {
        assert_eq!("".parse(), Ok(QuotaAnswer::Default));
        assert_eq!(" default ".parse(), Ok(QuotaAnswer::Default));
        assert_eq!("unlimited".parse(), Ok(QuotaAnswer::Unlimited));
        assert_eq!(
            "5/s; 500/h".parse(),
            Ok(QuotaAnswer::Quotas(vec![
                Quota::per_second(5),
                Quota::per_hour(500)
            ]))
        );
        assert!("5/s;".parse::<QuotaAnswer>().is_err());
        assert!("five per second".parse::<QuotaAnswer>().is_err());
        let answer: QuotaAnswer = "5/s;500/h".parse().unwrap();
        assert_eq!(answer.to_string(), "5/s;500/h");
    }
}
