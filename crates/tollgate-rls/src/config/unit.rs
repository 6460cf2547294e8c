//! A rule's unit of time, as envoyproxy/ratelimit names and counts them.

use std::fmt;

/// The period a rule's `requests_per_unit` is counted over. Windows are
/// aligned to the Unix epoch, as envoyproxy/ratelimit aligns them: a minute
/// window starts on the minute. A week is 7 days from the epoch (a
/// Thursday), a month 30 days and a year 365 days, as that server counts
/// them: not calendar months or years.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One second.
    Second,
    /// 60 seconds.
    Minute,
    /// 3,600 seconds.
    Hour,
    /// 86,400 seconds.
    Day,
    /// 7 days.
    Week,
    /// 30 days.
    Month,
    /// 365 days.
    Year,
}

impl Unit {
    /// Every unit, shortest first.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// The unit a file names, in any case (`minute`, `MINUTE`), as
    /// envoyproxy/ratelimit reads it; `None` for anything else (its
    /// `unknown` included).
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|unit| unit.name().eq_ignore_ascii_case(name))
    }

    /// The unit's name as the files write it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The unit's length in seconds.
    pub fn seconds(self) -> u64 {
        const DAY: u64 = 86_400;
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => DAY,
            Unit::Week => 7 * DAY,
            Unit::Month => 30 * DAY,
            Unit::Year => 365 * DAY,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_read_in_any_case_and_count_as_that_server_counts() {
        assert_eq!(Unit::parse("MINUTE"), Some(Unit::Minute));
        assert_eq!(Unit::parse("Week"), Some(Unit::Week));
        assert_eq!(Unit::parse("unknown"), None);
        assert_eq!(Unit::parse("minutes"), None);
        assert_eq!(Unit::parse(""), None);
        assert_eq!(Unit::Month.seconds(), 2_592_000);
        assert_eq!(Unit::Year.seconds(), 31_536_000);
        for unit in Unit::ALL {
            assert_eq!(Unit::parse(unit.name()), Some(unit));
        }
    }
}
