//! [`Quota`]: how many requests, per how long, with how much burst.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// The largest `limit` or `burst` a quota accepts: 2^40 (about 1.1 × 10^12).
///
/// The bound keeps every intermediate product of the algorithms inside 128-bit
/// integers with room to spare, so no check can overflow.
pub const MAX_LIMIT: u64 = 1 << 40;

/// The longest `period` a quota accepts: 366 days.
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// The largest burst tolerance, `burst × (period / limit)`, a quota accepts:
/// 2^61 ns, about 73 years. Beyond this a clock reading plus the tolerance
/// could leave the 64-bit nanosecond range.
pub const MAX_TOLERANCE_NANOS: u64 = 1 << 61;

/// A rate: `limit` requests per `period`, with an optional `burst`.
///
/// `burst` is the capacity of the bucket-shaped algorithms (GCRA, token bucket,
/// leaky bucket): how many requests may pass at once after a quiet spell. It
/// defaults to `limit`. The window algorithms (fixed window, sliding log,
/// sliding window) cap every window at `limit` and ignore `burst`.
///
/// ```
/// use std::time::Duration;
/// use tollgate_core::Quota;
///
/// // Constructors say what they mean: 100 requests per second.
/// let q = Quota::per_second(100);
/// assert_eq!(q.limit(), 100);
/// assert_eq!(q.period(), Duration::from_secs(1));
///
/// // Strings, as they appear in configuration files.
/// let q: Quota = "5/10s".parse().unwrap();
/// assert_eq!((q.limit(), q.period()), (5, Duration::from_secs(10)));
///
/// // A burst larger (or smaller) than the steady rate.
/// let q = Quota::per_minute(60).with_burst(10).unwrap();
/// assert_eq!(q.burst(), 10);
///
/// // Bad input is an error that says what is wrong, never a panic.
/// let err = "0/s".parse::<Quota>().unwrap_err();
/// assert!(err.to_string().contains("at least 1"));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    limit: u64,
    period_nanos: u64,
    burst: u64,
}

impl Quota {
    /// `limit` requests per `period`, burst equal to `limit`.
    ///
    /// Returns an error for a zero limit or period, a limit above
    /// [`MAX_LIMIT`], or a period above [`MAX_PERIOD`].
    pub fn new(limit: u64, period: Duration) -> Result<Self, QuotaError> {
        let period_nanos = validate_period(period)?;
        validate_count("limit", limit)?;
        Self::checked(limit, period_nanos, limit)
    }

    /// `n` requests per second (not one request every `n` seconds).
    ///
    /// # Panics
    ///
    /// If `n` is 0 or above [`MAX_LIMIT`]. Use [`Quota::new`] or parsing for
    /// values that come from outside the program.
    pub fn per_second(n: u64) -> Self {
        Self::expect_valid(n, Duration::from_secs(1))
    }

    /// `n` requests per minute. Panics like [`Quota::per_second`].
    pub fn per_minute(n: u64) -> Self {
        Self::expect_valid(n, Duration::from_secs(60))
    }

    /// `n` requests per hour. Panics like [`Quota::per_second`].
    pub fn per_hour(n: u64) -> Self {
        Self::expect_valid(n, Duration::from_secs(3600))
    }

    /// `n` requests per day. Panics like [`Quota::per_second`].
    pub fn per_day(n: u64) -> Self {
        Self::expect_valid(n, Duration::from_secs(86_400))
    }

    fn expect_valid(n: u64, period: Duration) -> Self {
        match Self::new(n, period) {
            Ok(quota) => quota,
            Err(err) => panic!("invalid quota: {err}"),
        }
    }

    /// The same rate with a different burst (bucket capacity).
    pub fn with_burst(self, burst: u64) -> Result<Self, QuotaError> {
        validate_count("burst", burst)?;
        Self::checked(self.limit, self.period_nanos, burst)
    }

    fn checked(limit: u64, period_nanos: u64, burst: u64) -> Result<Self, QuotaError> {
        let quota = Quota {
            limit,
            period_nanos,
            burst,
        };
        let tolerance = u128::from(burst) * u128::from(quota.emission_interval_nanos());
        if tolerance > u128::from(MAX_TOLERANCE_NANOS) {
            return Err(QuotaError::BurstTooLong);
        }
        Ok(quota)
    }

    /// Requests allowed per period.
    #[inline]
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// The period the limit applies to.
    pub fn period(&self) -> Duration {
        Duration::from_nanos(self.period_nanos)
    }

    /// The period in nanoseconds.
    #[inline]
    pub fn period_nanos(&self) -> u64 {
        self.period_nanos
    }

    /// The bucket capacity: how many requests may pass at once.
    #[inline]
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// The time one unit of cost occupies: `period / limit`, rounded up to
    /// the next nanosecond so that rounding can only ever admit less, never
    /// more. At least 1 ns.
    pub fn emission_interval_nanos(&self) -> u64 {
        self.period_nanos.div_ceil(self.limit)
    }
}

impl fmt::Display for Quota {
    /// Writes the quota in the syntax [`FromStr`] reads, e.g. `100/s` or
    /// `5/10s`; a burst other than the limit is not part of that syntax.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u64); 5] = [
            ("d", 86_400_000_000_000),
            ("h", 3_600_000_000_000),
            ("min", 60_000_000_000),
            ("s", 1_000_000_000),
            ("ms", 1_000_000),
        ];
        let (unit, count) = UNITS
            .iter()
            .find(|(_, nanos)| self.period_nanos.is_multiple_of(*nanos))
            .map(|(unit, nanos)| (*unit, self.period_nanos / nanos))
            .unwrap_or(("ns", self.period_nanos));
        if count == 1 {
            write!(f, "{}/{unit}", self.limit)
        } else {
            write!(f, "{}/{count}{unit}", self.limit)
        }
    }
}

impl FromStr for Quota {
    type Err = QuotaError;

    /// Parses `LIMIT/PERIOD`: `"100/s"`, `"10/min"`, `"500/h"`, `"1000/d"`,
    /// `"5/10s"`, `"20/500ms"`. Units: `ms`, `s`/`sec`/`second`, `m`/`min`/
    /// `minute`, `h`/`hour`, `d`/`day` (plurals accepted). Spaces around the
    /// parts are ignored.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (limit, period) = text
            .split_once('/')
            .ok_or_else(|| QuotaError::Syntax(text.to_owned()))?;
        let limit = parse_integer(limit.trim(), text)?;
        let period = parse_period(period.trim(), text)?;
        Quota::new(limit, period)
    }
}

fn parse_integer(digits: &str, whole: &str) -> Result<u64, QuotaError> {
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(QuotaError::Syntax(whole.to_owned()));
    }
    digits.parse::<u64>().map_err(|_| QuotaError::Overflow)
}

fn parse_period(text: &str, whole: &str) -> Result<Duration, QuotaError> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| QuotaError::Syntax(whole.to_owned()))?;
    let (count, unit) = text.split_at(split);
    let count = if count.is_empty() {
        1
    } else {
        parse_integer(count, whole)?
    };
    let unit_nanos: u64 = match unit.trim() {
        "ms" | "millis" | "millisecond" | "milliseconds" => 1_000_000,
        "s" | "sec" | "secs" | "second" | "seconds" => 1_000_000_000,
        "m" | "min" | "mins" | "minute" | "minutes" => 60_000_000_000,
        "h" | "hr" | "hrs" | "hour" | "hours" => 3_600_000_000_000,
        "d" | "day" | "days" => 86_400_000_000_000,
        other => return Err(QuotaError::UnknownUnit(other.to_owned())),
    };
    count
        .checked_mul(unit_nanos)
        .map(Duration::from_nanos)
        .ok_or(QuotaError::Overflow)
}

fn validate_period(period: Duration) -> Result<u64, QuotaError> {
    if period.is_zero() {
        return Err(QuotaError::ZeroPeriod);
    }
    if period > MAX_PERIOD {
        return Err(QuotaError::PeriodTooLong);
    }
    // MAX_PERIOD is far below u64::MAX nanoseconds, so this cannot truncate.
    Ok(period.as_nanos() as u64)
}

fn validate_count(what: &'static str, value: u64) -> Result<(), QuotaError> {
    match value {
        0 => Err(QuotaError::Zero(what)),
        v if v > MAX_LIMIT => Err(QuotaError::TooLarge(what)),
        _ => Ok(()),
    }
}

/// Why a quota was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum QuotaError {
    /// The text is not `LIMIT/PERIOD`.
    Syntax(String),
    /// The period's unit is not one of the known units.
    UnknownUnit(String),
    /// A limit or burst of zero.
    Zero(&'static str),
    /// A limit or burst above [`MAX_LIMIT`].
    TooLarge(&'static str),
    /// A number too large to represent.
    Overflow,
    /// A zero-length period.
    ZeroPeriod,
    /// A period above [`MAX_PERIOD`].
    PeriodTooLong,
    /// `burst × period / limit` above [`MAX_TOLERANCE_NANOS`].
    BurstTooLong,
}

impl fmt::Display for QuotaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuotaError::Syntax(text) => write!(
                f,
                "invalid quota {text:?}: write LIMIT/PERIOD, for example \"100/s\", \"10/min\" or \"5/10s\""
            ),
            QuotaError::UnknownUnit(unit) => {
                write!(f, "unknown time unit {unit:?}: use ms, s, min, h or d")
            }
            QuotaError::Zero(what) => write!(f, "the {what} must be at least 1"),
            QuotaError::TooLarge(what) => {
                write!(f, "the {what} must be at most 2^40 ({MAX_LIMIT})")
            }
            QuotaError::Overflow => write!(f, "a number in the quota is too large"),
            QuotaError::ZeroPeriod => write!(f, "the period must be longer than zero"),
            QuotaError::PeriodTooLong => write!(f, "the period must be at most 366 days"),
            QuotaError::BurstTooLong => write!(
                f,
                "burst × period / limit is longer than 73 years: lower the burst or raise the limit"
            ),
        }
    }
}

impl std::error::Error for QuotaError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(u64, Duration), QuotaError> {
        text.parse::<Quota>().map(|q| (q.limit(), q.period()))
    }

    #[test]
    fn parses_the_documented_forms() {
        let secs = Duration::from_secs;
        assert_eq!(parse("100/s"), Ok((100, secs(1))));
        assert_eq!(parse("10/min"), Ok((10, secs(60))));
        assert_eq!(parse("500/h"), Ok((500, secs(3600))));
        assert_eq!(parse("1000/d"), Ok((1000, secs(86_400))));
        assert_eq!(parse("5/10s"), Ok((5, secs(10))));
        assert_eq!(parse(" 20 / 500ms "), Ok((20, Duration::from_millis(500))));
        assert_eq!(parse("3/2 minutes"), Ok((3, secs(120))));
    }

    #[test]
    fn per_second_means_n_per_second() {
        let q = Quota::per_second(10);
        assert_eq!((q.limit(), q.period()), (10, Duration::from_secs(1)));
        assert_eq!(q.emission_interval_nanos(), 100_000_000);
        assert_eq!(q.burst(), 10);
    }

    #[test]
    fn rejects_bad_input_with_clear_errors() {
        assert_eq!(parse("0/s"), Err(QuotaError::Zero("limit")));
        assert_eq!(parse("5/0s"), Err(QuotaError::ZeroPeriod));
        assert!(matches!(parse("abc"), Err(QuotaError::Syntax(_))));
        assert!(matches!(parse("/s"), Err(QuotaError::Syntax(_))));
        assert!(matches!(parse("-1/s"), Err(QuotaError::Syntax(_))));
        assert!(matches!(parse("10/"), Err(QuotaError::Syntax(_))));
        assert!(matches!(parse("10/5"), Err(QuotaError::Syntax(_))));
        assert!(matches!(
            parse("10/fortnight"),
            Err(QuotaError::UnknownUnit(_))
        ));
        assert_eq!(
            parse("99999999999999999999999/s"),
            Err(QuotaError::Overflow)
        );
        assert_eq!(parse("1/99999999999999d"), Err(QuotaError::Overflow));
        assert_eq!(parse("1/367d"), Err(QuotaError::PeriodTooLong));
        assert_eq!(parse("1099511627777/s"), Err(QuotaError::TooLarge("limit")));
        let q = Quota::per_day(1);
        assert_eq!(q.with_burst(0), Err(QuotaError::Zero("burst")));
        assert_eq!(
            Quota::new(1, MAX_PERIOD).unwrap().with_burst(MAX_LIMIT),
            Err(QuotaError::BurstTooLong)
        );
        for err in [QuotaError::Overflow, QuotaError::Syntax("x".into())] {
            assert!(!err.to_string().is_empty());
        }
    }

    #[test]
    fn accepts_the_extremes() {
        let q = Quota::new(MAX_LIMIT, Duration::from_nanos(1)).unwrap();
        assert_eq!(q.emission_interval_nanos(), 1);
        let q = Quota::new(1, MAX_PERIOD).unwrap().with_burst(70).unwrap();
        assert_eq!(q.burst(), 70);
    }

    #[test]
    fn display_round_trips() {
        for text in ["100/s", "10/min", "500/h", "1000/d", "5/10s", "20/500ms"] {
            let q: Quota = text.parse().unwrap();
            assert_eq!(q.to_string(), text);
            assert_eq!(q.to_string().parse::<Quota>().unwrap(), q);
        }
    }
}
