//! Small helpers shared by the tools: UTC time formatting and parsing, byte sizes.

use std::time::{SystemTime, UNIX_EPOCH};

/// A wall-clock instant: seconds since the epoch and microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Wall {
    /// Seconds since 1970-01-01T00:00:00Z.
    pub secs: i64,
    /// Microseconds within the second.
    pub us: u32,
}

impl Wall {
    /// Now, from the system clock.
    pub fn now() -> Wall {
        let d = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Wall {
            secs: d.as_secs() as i64,
            us: d.subsec_micros(),
        }
    }

    /// Microseconds since the epoch.
    pub fn micros(&self) -> i128 {
        self.secs as i128 * 1_000_000 + self.us as i128
    }

    /// `2026-11-29T02:13:07.123456Z`.
    pub fn rfc3339(&self) -> String {
        let (y, mo, d, h, mi, s) = self.fields();
        format!(
            "{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{:06}Z",
            self.us
        )
    }

    /// `2026-11-29 02:13:07 UTC`.
    pub fn human(&self) -> String {
        let (y, mo, d, h, mi, s) = self.fields();
        format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02} UTC")
    }

    /// `02:13:07`.
    pub fn hms(&self) -> String {
        let (_, _, _, h, mi, s) = self.fields();
        format!("{h:02}:{mi:02}:{s:02}")
    }

    /// `02:13:07.123456`.
    pub fn hms_us(&self) -> String {
        format!("{}.{:06}", self.hms(), self.us)
    }

    /// `20261129T021307Z` (for file names).
    pub fn compact(&self) -> String {
        let (y, mo, d, h, mi, s) = self.fields();
        format!("{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z")
    }

    fn fields(&self) -> (i64, u32, u32, i64, i64, i64) {
        let days = self.secs.div_euclid(86_400);
        let rem = self.secs.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        (y, m, d, rem / 3600, (rem / 60) % 60, rem % 60)
    }

    /// Parses `2026-11-29T02:13:07.123456Z` (any number of fraction digits, or none; `Z` or
    /// `+00:00`; a space instead of `T` is accepted).
    pub fn parse(s: &str) -> Option<Wall> {
        let s = s.trim();
        let b = s.as_bytes();
        if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b'T' || b[10] == b' ') {
            return None;
        }
        let num = |r: std::ops::Range<usize>| -> Option<i64> {
            let t = s.get(r)?;
            if !t.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            t.parse().ok()
        };
        let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if b[13] != b':' || b[16] != b':' || !(1..=12).contains(&mo) || !(1..=31).contains(&d) {
            return None;
        }
        let mut rest = &s[19..];
        let mut us = 0u32;
        if let Some(frac) = rest.strip_prefix('.') {
            let n = frac.bytes().take_while(|c| c.is_ascii_digit()).count();
            if n == 0 {
                return None;
            }
            let digits = &frac[..n];
            let mut v: u32 = 0;
            for (i, c) in digits.bytes().take(6).enumerate() {
                v += (c - b'0') as u32 * 10u32.pow(5 - i as u32);
            }
            us = v;
            rest = &frac[n..];
        }
        let offset: i64 = match rest {
            "Z" | "z" | "" | " UTC" => 0,
            o if (o.starts_with('+') || o.starts_with('-')) && o.len() == 6 => {
                let sign = if o.starts_with('-') { -1 } else { 1 };
                let hh: i64 = o.get(1..3)?.parse().ok()?;
                let mm: i64 = o.get(4..6)?.parse().ok()?;
                sign * (hh * 3600 + mm * 60)
            }
            _ => return None,
        };
        let days = days_from_civil(y, mo as u32, d as u32);
        Some(Wall {
            secs: days * 86_400 + h * 3600 + mi * 60 + sec - offset,
            us,
        })
    }
}

/// (year, month, day) of `days` since 1970-01-01 (H. Hinnant's algorithm).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days since 1970-01-01 of a civil date.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `1.0 MiB`, `512 B`, `2.5 GiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// A duration in seconds as `3.2 s`, `4 min 10 s`, `2 h 5 min`.
pub fn age(us: i128) -> String {
    let s = us.max(0) / 1_000_000;
    if s < 60 {
        format!("{:.1} s", us.max(0) as f64 / 1e6)
    } else if s < 3600 {
        format!("{} min {} s", s / 60, s % 60)
    } else {
        format!("{} h {} min", s / 3600, (s / 60) % 60)
    }
}

/// Nanoseconds as `0.912 ms`, `1.250 s`.
pub fn ns(n: u64) -> String {
    if n < 1_000_000_000 {
        format!("{:.3} ms", n as f64 / 1e6)
    } else {
        format!("{:.3} s", n as f64 / 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let w = Wall::parse("2026-11-29T02:13:07.123456Z").unwrap();
        assert_eq!(w.rfc3339(), "2026-11-29T02:13:07.123456Z");
        assert_eq!(w.compact(), "20261129T021307Z");
        assert_eq!(w.hms(), "02:13:07");
        assert_eq!(w.secs, 1_795_918_387);
        assert_eq!(Wall::parse("2026-11-29T02:13:07Z").unwrap().us, 0);
        assert_eq!(
            Wall::parse("2026-11-29T03:13:07.5+01:00").unwrap(),
            Wall {
                secs: 1_795_918_387,
                us: 500_000
            }
        );
        assert_eq!(Wall::parse("2026-13-29T02:13:07Z"), None);
        assert_eq!(Wall::parse("nonsense"), None);
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1 << 20), "1.0 MiB");
        assert_eq!(bytes(268_435_456), "256.0 MiB");
        assert_eq!(ns(912_000), "0.912 ms");
        assert_eq!(age(3_200_000), "3.2 s");
        assert_eq!(age(250_000_000), "4 min 10 s");
    }
}
