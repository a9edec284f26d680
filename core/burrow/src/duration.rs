//! Durations written by people, read the same way everywhere: the CLI's
//! flags, and the `burrow serve` configuration file and environment
//! variables. The grammar is on [`parse_duration`].

use std::time::Duration;

/// Accepted forms, for error messages.
const HINT: &str = "use e.g. 500ms, 1.5s, 30s, 5m, 1h30m, 2d or a number of seconds";

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// Fraction digits that can still matter: a tenth of a nanosecond of the
/// longest unit (a day) is reached well before 20 digits.
const MAX_FRACTION_DIGITS: usize = 20;

/// Why a text is not a duration. Every message quotes the text and says
/// what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseDurationError {
    /// The text is empty or only whitespace.
    #[error("empty duration; {HINT}")]
    Empty,
    /// The text starts with a minus sign.
    #[error("`{text}` is negative; a duration is zero or more")]
    Negative {
        /// The text as given.
        text: String,
    },
    /// The text has whitespace between its parts (`1h 30m`, `5 s`).
    #[error("`{text}` has a space inside; write it without spaces (e.g. 1h30m)")]
    Space {
        /// The text as given.
        text: String,
    },
    /// Something other than a number where a number is expected (`soon`,
    /// `nan`, `+5s`, `1.2.3s`).
    #[error("`{text}` is not a duration; {HINT}")]
    NotANumber {
        /// The text as given.
        text: String,
    },
    /// A number without a unit after another part (`1h30`).
    #[error("`{text}` ends with a number without a unit; {HINT}")]
    MissingUnit {
        /// The text as given.
        text: String,
    },
    /// A unit other than `ms`, `s`, `m`, `h` and `d`.
    #[error("unknown unit `{unit}` in `{text}`; units are ms, s, m, h and d")]
    UnknownUnit {
        /// The text as given.
        text: String,
        /// The unit as written.
        unit: String,
    },
    /// More than the largest [`Duration`].
    #[error("`{text}` is too large for a duration")]
    TooLarge {
        /// The text as given.
        text: String,
    },
}

/// Parses a duration written by a person.
///
/// The grammar, around optional leading and trailing whitespace:
///
/// - a bare decimal number of seconds: `30`, `0`, `1.5`, `.5`;
/// - or one or more `<number><unit>` parts with nothing between them, which
///   add up: `500ms`, `1.5s`, `2m`, `1h30m`, `1m30s500ms`, `1.5h`, `2d`.
///
/// Units are `ms`, `s`, `m` (minutes), `h` and `d` (24 hours), in lower
/// case. A number is decimal digits with at most one `.` (no sign, no
/// exponent); it is read exactly, and digits finer than a nanosecond are
/// dropped. Rejected, each with its own [`ParseDurationError`]: an empty
/// text, a negative one, a space inside (`1h 30m`), a number without a unit
/// after another part (`1h30`), an unknown unit (`5x`, `1y`, `5sec`),
/// anything that is not a number (`soon`, `nan`, `inf`, `1.2.3s`), and more
/// than [`Duration::MAX`]. Callers add their own bounds (`burrow serve`
/// takes at most 365 days).
///
/// ```
/// use std::time::Duration;
///
/// assert_eq!(burrow::parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
/// assert_eq!(burrow::parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
/// assert_eq!(burrow::parse_duration("30"), Ok(Duration::from_secs(30)));
/// assert!(burrow::parse_duration("1h 30m").is_err());
/// ```
pub fn parse_duration(text: &str) -> Result<Duration, ParseDurationError> {
    let s = text.trim();
    let owned = || text.to_owned();
    if s.is_empty() {
        return Err(ParseDurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(ParseDurationError::Negative { text: owned() });
    }
    if s.contains(char::is_whitespace) {
        return Err(ParseDurationError::Space { text: owned() });
    }
    let is_number = |c: char| c.is_ascii_digit() || c == '.';
    let mut total: u128 = 0;
    let mut rest = s;
    let mut first = true;
    while !rest.is_empty() {
        let (number, after) = rest.split_at(rest.find(|c| !is_number(c)).unwrap_or(rest.len()));
        if number.is_empty() {
            return Err(ParseDurationError::NotANumber { text: owned() });
        }
        let (unit, after) = after.split_at(after.find(is_number).unwrap_or(after.len()));
        let unit_nanos = match unit {
            "ms" => 1_000_000,
            "s" => NANOS_PER_SEC,
            "m" => 60 * NANOS_PER_SEC,
            "h" => 3600 * NANOS_PER_SEC,
            "d" => 86_400 * NANOS_PER_SEC,
            // A bare number is seconds, but only on its own.
            "" if first => NANOS_PER_SEC,
            "" => return Err(ParseDurationError::MissingUnit { text: owned() }),
            other => {
                return Err(ParseDurationError::UnknownUnit {
                    text: owned(),
                    unit: other.to_owned(),
                })
            }
        };
        let part = nanos(number, unit_nanos, text)?;
        total = total
            .checked_add(part)
            .ok_or_else(|| ParseDurationError::TooLarge { text: owned() })?;
        rest = after;
        first = false;
    }
    let secs = u64::try_from(total / NANOS_PER_SEC)
        .map_err(|_| ParseDurationError::TooLarge { text: owned() })?;
    // The remainder is below NANOS_PER_SEC, so it fits.
    let subsec = u32::try_from(total % NANOS_PER_SEC).unwrap_or(0);
    Ok(Duration::new(secs, subsec))
}

/// `number` (digits with at most one `.`) times `unit_nanos`, in
/// nanoseconds, exactly (no floating point); digits finer than a
/// nanosecond are dropped.
fn nanos(number: &str, unit_nanos: u128, text: &str) -> Result<u128, ParseDurationError> {
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if fraction.contains('.') || (whole.is_empty() && fraction.is_empty()) {
        return Err(ParseDurationError::NotANumber { text: text.into() });
    }
    let too_large = || ParseDurationError::TooLarge { text: text.into() };
    let mut n: u128 = 0;
    for digit in whole.bytes() {
        n = n
            .checked_mul(10)
            .and_then(|n| n.checked_add(u128::from(digit - b'0')))
            .ok_or_else(too_large)?;
    }
    let mut part = n.checked_mul(unit_nanos).ok_or_else(too_large)?;
    let (mut numerator, mut denominator) = (0u128, 1u128);
    for digit in fraction.bytes().take(MAX_FRACTION_DIGITS) {
        numerator = numerator * 10 + u128::from(digit - b'0');
        denominator *= 10;
    }
    // At most 10^20 * 86_400 * 10^9, far below u128::MAX.
    part = part
        .checked_add(numerator * unit_nanos / denominator)
        .ok_or_else(too_large)?;
    Ok(part)
}

/// A length of time as a builder takes it: a [`Duration`], or a plain
/// number of **seconds** (`.idle_timeout(300)` is five minutes, as
/// `.idle_timeout(Duration::from_secs(300))` is). A plain number is never
/// milliseconds.
///
/// A negative or non-finite number is not a length of time: the builder
/// that got one fails with [`crate::Error::InvalidArgument`] when it is used.
pub trait IntoDuration {
    /// The duration, or `None` when the value is not one (negative, NaN,
    /// infinite, too large).
    fn into_duration(self) -> Option<Duration>;
}

impl IntoDuration for Duration {
    fn into_duration(self) -> Option<Duration> {
        Some(self)
    }
}

macro_rules! whole_seconds {
    ($($t:ty),*) => {$(
        impl IntoDuration for $t {
            fn into_duration(self) -> Option<Duration> {
                u64::try_from(self).ok().map(Duration::from_secs)
            }
        }
    )*};
}
whole_seconds!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

impl IntoDuration for f64 {
    fn into_duration(self) -> Option<Duration> {
        Duration::try_from_secs_f64(self).ok()
    }
}

impl IntoDuration for f32 {
    fn into_duration(self) -> Option<Duration> {
        Duration::try_from_secs_f32(self).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn accepted() {
        let day = 86_400;
        let cases: &[(&str, Duration)] = &[
            // Bare numbers are seconds.
            ("0", Duration::ZERO),
            ("30", Duration::from_secs(30)),
            ("1.5", ms(1500)),
            (".5", ms(500)),
            ("5.", Duration::from_secs(5)),
            ("007", Duration::from_secs(7)),
            // One unit.
            ("500ms", ms(500)),
            ("0ms", Duration::ZERO),
            ("1.5ms", Duration::from_micros(1500)),
            ("30s", Duration::from_secs(30)),
            ("1.5s", ms(1500)),
            ("0s", Duration::ZERO),
            ("2m", Duration::from_secs(120)),
            ("0.5m", Duration::from_secs(30)),
            ("1h", Duration::from_secs(3600)),
            ("1.5h", Duration::from_secs(5400)),
            ("0.1h", Duration::from_secs(360)),
            ("1d", Duration::from_secs(day)),
            ("1.25d", Duration::from_secs(day + day / 4)),
            ("365d", Duration::from_secs(365 * day)),
            ("8760h", Duration::from_secs(365 * day)),
            // Parts add up, in any order.
            ("1h30m", Duration::from_secs(5400)),
            ("1m30s500ms", ms(90_500)),
            ("1d12h", Duration::from_secs(day + 12 * 3600)),
            ("30m1h", Duration::from_secs(5400)),
            ("1.5m30s", Duration::from_secs(120)),
            // Surrounding whitespace is ignored.
            (" 5s ", Duration::from_secs(5)),
            ("\t1h30m\n", Duration::from_secs(5400)),
            // Precision: exact to the nanosecond, finer digits dropped.
            ("0.000000001s", Duration::from_nanos(1)),
            ("0.0000000019s", Duration::from_nanos(1)),
            ("0.000000000999999999999999999999s", Duration::ZERO),
            (
                "0.333333333333333333333333333333h",
                Duration::from_nanos(1_199_999_999_999),
            ),
            // The largest duration there is.
            ("18446744073709551615", Duration::new(u64::MAX, 0)),
            (
                "18446744073709551615s1ms",
                Duration::new(u64::MAX, 1_000_000),
            ),
            (
                "18446744073709551615.999999999s",
                Duration::new(u64::MAX, 999_999_999),
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Ok(*want), "{text:?}");
        }
    }

    #[test]
    fn rejected() {
        use ParseDurationError as E;
        let t = |s: &str| s.to_owned();
        let cases: Vec<(&str, ParseDurationError)> = vec![
            ("", E::Empty),
            ("   ", E::Empty),
            ("-1", E::Negative { text: t("-1") }),
            ("-1s", E::Negative { text: t("-1s") }),
            ("-0", E::Negative { text: t("-0") }),
            ("1h 30m", E::Space { text: t("1h 30m") }),
            ("5 s", E::Space { text: t("5 s") }),
            ("s", E::NotANumber { text: t("s") }),
            ("ms5", E::NotANumber { text: t("ms5") }),
            ("soon", E::NotANumber { text: t("soon") }),
            ("nan", E::NotANumber { text: t("nan") }),
            ("NaN", E::NotANumber { text: t("NaN") }),
            ("inf", E::NotANumber { text: t("inf") }),
            ("+5s", E::NotANumber { text: t("+5s") }),
            (".", E::NotANumber { text: t(".") }),
            (".s", E::NotANumber { text: t(".s") }),
            ("1.2.3s", E::NotANumber { text: t("1.2.3s") }),
            ("1..5", E::NotANumber { text: t("1..5") }),
            ("1h30", E::MissingUnit { text: t("1h30") }),
            ("1s5", E::MissingUnit { text: t("1s5") }),
            (
                "5x",
                E::UnknownUnit {
                    text: t("5x"),
                    unit: t("x"),
                },
            ),
            (
                "5sec",
                E::UnknownUnit {
                    text: t("5sec"),
                    unit: t("sec"),
                },
            ),
            (
                "5min",
                E::UnknownUnit {
                    text: t("5min"),
                    unit: t("min"),
                },
            ),
            (
                "1y",
                E::UnknownUnit {
                    text: t("1y"),
                    unit: t("y"),
                },
            ),
            (
                "5S",
                E::UnknownUnit {
                    text: t("5S"),
                    unit: t("S"),
                },
            ),
            (
                "1e3",
                E::UnknownUnit {
                    text: t("1e3"),
                    unit: t("e"),
                },
            ),
            (
                "5µs",
                E::UnknownUnit {
                    text: t("5µs"),
                    unit: t("µs"),
                },
            ),
            (
                "1h-5m",
                E::UnknownUnit {
                    text: t("1h-5m"),
                    unit: t("h-"),
                },
            ),
            (
                "18446744073709551616",
                E::TooLarge {
                    text: t("18446744073709551616"),
                },
            ),
            (
                "18446744073709551615s1000ms",
                E::TooLarge {
                    text: t("18446744073709551615s1000ms"),
                },
            ),
            (
                "18446744073709551615h",
                E::TooLarge {
                    text: t("18446744073709551615h"),
                },
            ),
            (
                "999999999999999999999999999999999999999999d",
                E::TooLarge {
                    text: t("999999999999999999999999999999999999999999d"),
                },
            ),
        ];
        for (text, want) in cases {
            assert_eq!(parse_duration(text), Err(want), "{text:?}");
        }
    }

    #[test]
    fn messages_quote_the_text_and_say_what_is_accepted() {
        let msg = |s: &str| parse_duration(s).unwrap_err().to_string();
        assert_eq!(
            msg(""),
            "empty duration; use e.g. 500ms, 1.5s, 30s, 5m, 1h30m, 2d or a number of seconds"
        );
        assert_eq!(msg("-1s"), "`-1s` is negative; a duration is zero or more");
        assert!(msg("1h 30m").contains("write it without spaces"));
        assert!(msg("soon").starts_with("`soon` is not a duration; use e.g. 500ms"));
        assert!(msg("1h30").contains("without a unit"));
        assert_eq!(
            msg("5x"),
            "unknown unit `x` in `5x`; units are ms, s, m, h and d"
        );
        assert!(msg("99999999999999999999999h").contains("too large"));
    }

    #[test]
    fn plain_numbers_are_seconds() {
        assert_eq!(300.into_duration(), Some(Duration::from_secs(300)));
        assert_eq!(3600_u64.into_duration(), Some(Duration::from_secs(3600)));
        assert_eq!(1.5.into_duration(), Some(Duration::from_millis(1500)));
        assert_eq!(
            Duration::from_millis(5).into_duration(),
            Some(Duration::from_millis(5))
        );
        assert_eq!((-1).into_duration(), None);
        assert_eq!(f64::NAN.into_duration(), None);
        assert_eq!((-0.5_f64).into_duration(), None);
    }
}
