//! Small helpers shared by the tools: UTC time formatting and parsing (jiff), byte sizes
//! (bytesize), durations.
//!
//! Kept by hand here: `Wall` itself (seconds and microseconds, the resolution libumd logs and
//! the kernel's crash dumps write; a plain `Copy` value the views and tests compare), `age` and
//! `ns` (two one-line formats of this tool's own screen output, nothing a crate would agree
//! on). libumd's own RFC 3339 writer and byte-size parsers (`umd/src/util.rs`,
//! `umd/src/log/config.rs`, `umd/src/memory/pool/config.rs`) are libumd's and not shared with
//! the tools.

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

    /// From milliseconds since the epoch.
    pub fn from_unix_ms(ms: u64) -> Wall {
        Wall {
            secs: (ms / 1000) as i64,
            us: ((ms % 1000) * 1000) as u32,
        }
    }

    /// `2026-11-29T02:13:07.123456Z`.
    pub fn rfc3339(&self) -> String {
        let t = self.civil();
        format!("{}.{:06}Z", t.strftime("%Y-%m-%dT%H:%M:%S"), self.us)
    }

    /// `2026-11-29 02:13:07 UTC`.
    pub fn human(&self) -> String {
        self.civil().strftime("%Y-%m-%d %H:%M:%S UTC").to_string()
    }

    /// `02:13:07`.
    pub fn hms(&self) -> String {
        self.civil().strftime("%H:%M:%S").to_string()
    }

    /// `02:13:07.123456`.
    pub fn hms_us(&self) -> String {
        format!("{}.{:06}", self.hms(), self.us)
    }

    /// `20261129T021307Z` (for file names).
    pub fn compact(&self) -> String {
        self.civil().strftime("%Y%m%dT%H%M%SZ").to_string()
    }

    /// The civil time in UTC (jiff; out of its range, -9999..=9999, the nearest end).
    fn civil(&self) -> jiff::civil::DateTime {
        let ts = jiff::Timestamp::new(self.secs, 0).unwrap_or(if self.secs < 0 {
            jiff::Timestamp::MIN
        } else {
            jiff::Timestamp::MAX
        });
        jiff::tz::Offset::UTC.to_datetime(ts)
    }

    /// Parses RFC 3339 (`2026-11-29T02:13:07.123456Z`: any number of fraction digits, or none;
    /// `Z` or an offset such as `+01:00`). Also accepted, because libumd's text and the
    /// tools' own screen output write them: a space instead of `T`, and no offset or ` UTC`
    /// meaning UTC. The parsing itself is jiff's.
    pub fn parse(s: &str) -> Option<Wall> {
        let s = s.trim();
        let b = s.as_bytes();
        // jiff also reads ISO 8601 forms that are not RFC 3339 (basic format, no seconds):
        // keep to the extended form with seconds.
        if b.len() < 19 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
            return None;
        }
        let s = s.strip_suffix(" UTC").unwrap_or(s);
        let tail = &s[19..];
        let tail = tail
            .strip_prefix('.')
            .map(|f| f.trim_start_matches(|c: char| c.is_ascii_digit()))
            .unwrap_or(tail);
        let ts: jiff::Timestamp = if tail.is_empty() {
            format!("{s}Z").parse().ok()?
        } else {
            s.parse().ok()?
        };
        let (mut secs, mut ns) = (ts.as_second(), ts.subsec_nanosecond());
        if ns < 0 {
            // Before 1970 jiff's fraction is negative; Wall's is not.
            secs -= 1;
            ns += 1_000_000_000;
        }
        Some(Wall {
            secs,
            us: (ns / 1000) as u32,
        })
    }
}

/// `1.0 MiB`, `512 B`, `2.5 GiB`.
pub fn bytes(n: u64) -> String {
    bytesize::ByteSize::b(n).display().iec().to_string()
}

/// Parses a byte size as people write it: `4096`, `64KiB`, `1.5 MiB`, `2G` (bytesize: `K`,
/// `M`, `G` are powers of 1000, `KiB`, `MiB`, `GiB` of 1024).
pub fn parse_bytes(s: &str) -> Option<u64> {
    s.trim()
        .parse::<bytesize::ByteSize>()
        .ok()
        .map(|b| b.as_u64())
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
        assert_eq!(bytes(1023), "1023 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(parse_bytes("64KiB"), Some(65_536));
        assert_eq!(parse_bytes("1.5 MiB"), Some(1_572_864));
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(ns(912_000), "0.912 ms");
        assert_eq!(age(3_200_000), "3.2 s");
        assert_eq!(age(250_000_000), "4 min 10 s");
    }
}
