//! Wall-clock timestamps with a stable RFC 3339 JSON form, and deadlines that never overflow.

use std::borrow::Cow;
use std::fmt;
use std::time::{Duration, SystemTime};

use jiff::SignedDuration;
use jiff::civil::DateTime;
use jiff::fmt::temporal::Pieces;
use jiff::tz::Offset;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// `start + after`, or a deadline no running program reaches (some thirty years on) when that
/// sum does not fit in an instant: a timeout of [`Duration::MAX`] means "no limit", never a panic.
///
/// ```
/// use std::time::Duration;
/// use agent_core::time::deadline_after;
///
/// let now = tokio::time::Instant::now();
/// assert_eq!(deadline_after(now, Duration::from_secs(5)), now + Duration::from_secs(5));
/// assert!(deadline_after(now, Duration::MAX) > now + Duration::from_secs(86_400 * 365 * 29));
/// ```
pub fn deadline_after(start: tokio::time::Instant, after: Duration) -> tokio::time::Instant {
    /// What Tokio itself takes for "never" when a sleep's deadline overflows.
    const FAR: Duration = Duration::from_secs(86_400 * 365 * 30);
    start.checked_add(after).unwrap_or_else(|| start + FAR)
}

/// A UTC instant with microsecond precision.
///
/// JSON form: RFC 3339 with six fractional digits and a `Z` suffix, e.g.
/// `"2026-11-29T08:00:00.123456Z"`. Parsing ([`Timestamp::parse`]) also accepts other fractional
/// precisions and numeric offsets.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    micros: i64,
}

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        let micros = match SystemTime::now().duration_since(SystemTime::UNIX_EPOCH) {
            Ok(d) => d.as_micros() as i64,
            Err(e) => -(e.duration().as_micros() as i64),
        };
        Self { micros }
    }

    /// A timestamp from microseconds since the Unix epoch.
    pub const fn from_unix_micros(micros: i64) -> Self {
        Self { micros }
    }

    /// Microseconds since the Unix epoch.
    pub const fn unix_micros(self) -> i64 {
        self.micros
    }

    /// Milliseconds since the Unix epoch.
    pub const fn unix_millis(self) -> i64 {
        self.micros.div_euclid(1000)
    }

    /// This instant plus a duration, saturating.
    pub fn saturating_add(self, d: Duration) -> Self {
        let add = i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
        Self { micros: self.micros.saturating_add(add) }
    }

    /// Parses an RFC 3339 timestamp: any number of fractional digits (read to the microsecond,
    /// truncated), `Z` or a numeric offset, `T`, `t` or a space between date and time. The other
    /// forms `jiff` reads are accepted too (`+02` or `+0200` offsets, a `[time zone]` annotation,
    /// which is ignored). A leap second (`:60`) reads as the second before it.
    pub fn parse(s: &str) -> Option<Self> {
        let s = at_most_nine_fraction_digits(s);
        let pieces = Pieces::parse(s.as_bytes()).ok()?;
        let offset = pieces.to_numeric_offset()?;
        let local = pieces.date().to_datetime(pieces.time()?);
        let since_epoch = local.duration_since(UNIX_EPOCH).checked_sub(offset.duration_since(Offset::UTC))?;
        Some(Self { micros: i64::try_from(since_epoch.as_nanos().div_euclid(1000)).ok()? })
    }

    /// This instant as a UTC date and time; an instant beyond the years -9999 to 9999 (which only
    /// [`Timestamp::from_unix_micros`] or [`Timestamp::saturating_add`] can make) is clamped to
    /// the nearest end of that range.
    fn to_utc(self) -> DateTime {
        UNIX_EPOCH.checked_add(SignedDuration::from_micros(self.micros)).unwrap_or(if self.micros < 0 {
            DateTime::MIN
        } else {
            DateTime::MAX
        })
    }
}

/// The Unix epoch as a UTC date and time.
const UNIX_EPOCH: DateTime = DateTime::constant(1970, 1, 1, 0, 0, 0, 0);

/// RFC 3339 allows any number of fractional digits and `jiff` reads nine (nanoseconds); digits
/// past the sixth never change a `Timestamp`, so those past the ninth are dropped.
fn at_most_nine_fraction_digits(s: &str) -> Cow<'_, str> {
    let Some(point) = s.find(['.', ',']) else { return Cow::Borrowed(s) };
    let digits = s[point + 1..].bytes().take_while(u8::is_ascii_digit).count();
    if digits <= 9 {
        return Cow::Borrowed(s);
    }
    Cow::Owned(format!("{}{}", &s[..point + 10], &s[point + 1 + digits..]))
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.6}Z", self.to_utc())
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("invalid RFC 3339 timestamp {s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(micros: i64, text: &str) {
        let ts = Timestamp::from_unix_micros(micros);
        assert_eq!(ts.to_string(), text);
        assert_eq!(Timestamp::parse(text), Some(ts));
    }

    #[test]
    fn formats_and_parses_known_instants() {
        check(0, "1970-01-01T00:00:00.000000Z");
        check(951_782_400_000_000, "2000-02-29T00:00:00.000000Z");
        check(1_795_934_659_134_001, "2026-11-29T06:44:19.134001Z");
        check(-1, "1969-12-31T23:59:59.999999Z");
    }

    #[test]
    fn formats_and_parses_the_ends_of_four_digit_years() {
        check(-62_167_219_200_000_000, "0000-01-01T00:00:00.000000Z");
        // Past jiff's own `Timestamp` range, still within its civil one.
        check(253_402_300_799_999_999, "9999-12-31T23:59:59.999999Z");
        // Only arithmetic reaches further; such instants print as the end of the range.
        assert_eq!(Timestamp::from_unix_micros(i64::MAX).to_string(), "9999-12-31T23:59:59.999999Z");
        assert_eq!(
            Timestamp::from_unix_micros(0).saturating_add(Duration::MAX).to_string(),
            "9999-12-31T23:59:59.999999Z"
        );
        assert_eq!(Timestamp::from_unix_micros(i64::MIN).to_string(), "-009999-01-01T00:00:00.000000Z");
    }

    #[test]
    fn parses_offsets_and_short_fractions() {
        let a = Timestamp::parse("2026-11-29T10:00:00.5+02:00").unwrap();
        let b = Timestamp::parse("2026-11-29T08:00:00.500000Z").unwrap();
        assert_eq!(a, b);
        for bad in ["", "2026-11-29", "2026-13-01T00:00:00Z", "2026-11-29T00:00:00", "x026-11-29T00:00:00Z"] {
            assert_eq!(Timestamp::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn parses_every_rfc_3339_spelling() {
        let at = |text: &str| Timestamp::parse(text).unwrap_or_else(|| panic!("{text:?} did not parse")).unix_micros();
        let eight = 1_795_939_200_000_000;
        for same in
            ["2026-11-29t08:00:00z", "2026-11-29 08:00:00Z", "2026-11-29T08:00:00-00:00", "2026-11-29T09:30:00+01:30"]
        {
            assert_eq!(at(same), eight, "{same:?}");
        }
        assert_eq!(at("2026-11-29T08:00:00.123456789Z"), eight + 123_456);
        assert_eq!(at("2026-11-29T08:00:00.1234567891234Z"), eight + 123_456, "any number of digits");
        assert_eq!(at("2026-11-29T06:00:00.1234567891234-02:00"), eight + 123_456);
        assert_eq!(at("1969-12-31T23:59:59.9999995Z"), -1, "truncated towards the past");
        assert_eq!(at("2026-11-29T07:59:60Z"), eight - 1_000_000, "a leap second reads as the one before");
        for bad in
            ["2026-11-29T08:00:00.Z", "2026-11-29T24:00:00Z", "2026-11-29T08:60:00Z", "2026-11-29T08:00:00+02:60"]
        {
            assert_eq!(Timestamp::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn json_roundtrip() {
        let now = Timestamp::now();
        let json = serde_json::to_string(&now).unwrap();
        let back: Timestamp = serde_json::from_str(&json).unwrap();
        assert_eq!(back, now);
        assert_eq!(serde_json::to_string(&Timestamp::from_unix_micros(1)).unwrap(), r#""1970-01-01T00:00:00.000001Z""#);
    }
}
