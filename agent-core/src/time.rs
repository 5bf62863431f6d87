//! Wall-clock timestamps with a stable RFC 3339 JSON form.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A UTC instant with microsecond precision.
///
/// JSON form: RFC 3339 with six fractional digits and a `Z` suffix, e.g.
/// `"2026-11-29T08:00:00.123456Z"`. Parsing also accepts fewer fractional digits and numeric
/// offsets.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    micros: i64,
}

impl Timestamp {
    /// The current time.
    pub fn now() -> Self {
        let micros = match SystemTime::now().duration_since(UNIX_EPOCH) {
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

    /// Parses an RFC 3339 timestamp.
    pub fn parse(s: &str) -> Option<Self> {
        let b = s.as_bytes();
        if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
            return None;
        }
        if b[13] != b':' || b[16] != b':' {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let part = s.get(r)?;
            if !part.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            part.parse().ok()
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
            return None;
        }
        if second > 60 {
            return None;
        }
        let mut i = 19;
        let mut micros_frac = 0i64;
        if b.get(i) == Some(&b'.') {
            i += 1;
            let start = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if i == start {
                return None;
            }
            let digits = &s[start..i.min(start + 6)];
            micros_frac = digits.parse::<i64>().ok()? * 10i64.pow(6 - digits.len() as u32);
        }
        let offset_secs = match b.get(i) {
            Some(b'Z' | b'z') if i + 1 == b.len() => 0,
            Some(&sign @ (b'+' | b'-')) if i + 6 == b.len() && b[i + 3] == b':' => {
                let h = num(i + 1..i + 3)?;
                let m = num(i + 4..i + 6)?;
                let total = h * 3600 + m * 60;
                if sign == b'+' { total } else { -total }
            }
            _ => return None,
        };
        let days = days_from_civil(year, month, day);
        let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset_secs;
        Some(Self { micros: secs * 1_000_000 + micros_frac })
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.micros.div_euclid(1_000_000);
        let frac = self.micros.rem_euclid(1_000_000);
        let days = secs.div_euclid(86_400);
        let rem = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        write!(f, "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{frac:06}Z", rem / 3600, rem % 3600 / 60, rem % 60)
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
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("invalid RFC 3339 timestamp {s:?}")))
    }
}

// Howard Hinnant's days_from_civil / civil_from_days (proleptic Gregorian calendar).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
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
    fn parses_offsets_and_short_fractions() {
        let a = Timestamp::parse("2026-11-29T10:00:00.5+02:00").unwrap();
        let b = Timestamp::parse("2026-11-29T08:00:00.500000Z").unwrap();
        assert_eq!(a, b);
        for bad in ["", "2026-11-29", "2026-13-01T00:00:00Z", "2026-11-29T00:00:00", "x026-11-29T00:00:00Z"] {
            assert_eq!(Timestamp::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn json_roundtrip() {
        let now = Timestamp::now();
        let json = serde_json::to_string(&now).unwrap();
        let back: Timestamp = serde_json::from_str(&json).unwrap();
        assert_eq!(back, now);
    }
}
