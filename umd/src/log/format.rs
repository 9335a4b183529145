//! The two record formats (docs/logging.md is the reference; `umd-log` parses both).
//!
//! Text, one record per line, fields separated by one space, in this fixed order:
//!
//! ```text
//! <wall UTC RFC3339 µs> <mono ns> <LEVEL> tid=<n> <module> <function|-> <file:line|-> ctx=<id|-> code=<name|-> "<message>" k=v k=v...
//! ```
//!
//! The message is always quoted; a value is quoted when it is empty, is `-`, or contains a
//! space, `"`, `=`, `\` or a control character. Quoting uses JSON string escapes, so one
//! unescaping routine serves both formats.
//!
//! JSON lines: one object per line with the keys `ts mono_ns level tid module function file
//! line ctx code msg fields` in that order (absent values are `null`), the call site's
//! key=value parameters in the `fields` object with their types (numbers, booleans, strings).

use super::record::{Record, Val};
use std::fmt::{self, Write};

/// Output format of a sink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Text lines for people.
    Text,
    /// JSON lines for machines.
    Json,
}

impl Format {
    /// "text" / "json".
    pub fn parse(s: &str) -> Option<Format> {
        match s.trim().to_ascii_lowercase().as_str() {
            "text" | "" => Some(Format::Text),
            "json" => Some(Format::Json),
            _ => None,
        }
    }
}

/// Where formatted bytes go: a `Vec<u8>` (the writer thread), a `String` (tests) or a
/// [`FixedLine`] (the emergency ring, no allocation). Integers are formatted by hand: the
/// writer thread formats about a million records a second and `core::fmt` is the slow part.
pub trait Out {
    /// Appends a string.
    fn s(&mut self, s: &str);
    /// Appends an ASCII byte.
    fn c(&mut self, c: u8) {
        let b = [c];
        self.s(std::str::from_utf8(&b).unwrap_or("?"));
    }
    /// Appends an unsigned integer.
    fn u(&mut self, v: u64) {
        let mut b = [0u8; 20];
        self.s(itoa(&mut b, v));
    }
    /// Appends a signed integer.
    fn i(&mut self, v: i64) {
        if v < 0 {
            self.c(b'-');
        }
        self.u(v.unsigned_abs());
    }
    /// Appends an f64 (`Display`, as Rust prints it).
    fn f(&mut self, v: f64) {
        let mut b = [0u8; 48];
        let mut w = FixedLine::new(&mut b);
        let _ = write!(w, "{v}");
        let n = w.len;
        self.s(std::str::from_utf8(&b[..n]).unwrap_or("NaN"));
    }
}

impl Out for Vec<u8> {
    #[inline]
    fn s(&mut self, s: &str) {
        self.extend_from_slice(s.as_bytes());
    }
    #[inline]
    fn c(&mut self, c: u8) {
        self.push(c);
    }
}

impl Out for String {
    fn s(&mut self, s: &str) {
        self.push_str(s);
    }
}

impl Out for FixedLine<'_> {
    fn s(&mut self, s: &str) {
        let _ = self.write_str(s);
    }
}

/// "00" to "99": two digits per division.
const DIGITS2: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

/// Decimal digits of `v` in `b`.
pub fn itoa(b: &mut [u8; 20], mut v: u64) -> &str {
    let mut i = 20;
    while v >= 100 {
        let r = (v % 100) as usize * 2;
        v /= 100;
        i -= 2;
        b[i] = DIGITS2[r];
        b[i + 1] = DIGITS2[r + 1];
    }
    if v >= 10 {
        let r = v as usize * 2;
        i -= 2;
        b[i] = DIGITS2[r];
        b[i + 1] = DIGITS2[r + 1];
    } else {
        i -= 1;
        b[i] = b'0' + v as u8;
    }
    // SAFETY: b[i..] holds ASCII digits only.
    unsafe { std::str::from_utf8_unchecked(&b[i..]) }
}

/// `v` as `0x` and lower-case hex digits in `b` (as `{:#x}` writes it).
pub fn hex(b: &mut [u8; 18], mut v: u64) -> &str {
    let mut i = 18;
    loop {
        i -= 1;
        b[i] = b"0123456789abcdef"[(v & 15) as usize];
        v >>= 4;
        if v == 0 {
            break;
        }
    }
    i -= 2;
    b[i] = b'0';
    b[i + 1] = b'x';
    // SAFETY: b[i..] holds ASCII only.
    unsafe { std::str::from_utf8_unchecked(&b[i..]) }
}

fn pad(o: &mut (impl Out + ?Sized), v: u64, width: usize) {
    let mut b = [0u8; 20];
    let d = itoa(&mut b, v);
    for _ in d.len()..width {
        o.c(b'0');
    }
    o.s(d);
}

thread_local! {
    /// The formatted "YYYY-MM-DDTHH:MM:SS." of the last second seen by this thread.
    static WALL_PREFIX: std::cell::Cell<(u64, [u8; 20])> = const { std::cell::Cell::new((u64::MAX, [0; 20])) };
}

/// Writes `ns` since the epoch as `2026-11-29T02:13:07.123456Z` (UTC, microseconds).
pub fn write_wall(o: &mut (impl Out + ?Sized), ns: u64) {
    let secs = ns / 1_000_000_000;
    let us = (ns / 1_000) % 1_000_000;
    let cached = WALL_PREFIX
        .try_with(|c| c.get())
        .ok()
        .filter(|c| c.0 == secs);
    let prefix = match cached {
        Some((_, p)) => p,
        None => {
            let (days, rem) = (secs / 86_400, secs % 86_400);
            let (y, m, d) = crate::util::civil_from_days(days as i64);
            let mut p = [0u8; 20];
            let mut w = FixedLine::new(&mut p);
            let _ = write!(
                w,
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.",
                rem / 3600,
                (rem / 60) % 60,
                rem % 60
            );
            let _ = WALL_PREFIX.try_with(|c| c.set((secs, p)));
            p
        }
    };
    // SAFETY: the prefix is ASCII written by `write!` above (or a copy of it).
    o.s(unsafe { std::str::from_utf8_unchecked(&prefix) });
    pad(o, us, 6);
    o.c(b'Z');
}

/// Level name as printed.
pub fn level_name(l: &tracing::Level) -> &'static str {
    match *l {
        tracing::Level::ERROR => "ERROR",
        tracing::Level::WARN => "WARN",
        tracing::Level::INFO => "INFO",
        tracing::Level::DEBUG => "DEBUG",
        tracing::Level::TRACE => "TRACE",
    }
}

fn needs_quote(s: &str) -> bool {
    s.is_empty()
        || s == "-"
        || s.bytes()
            .any(|b| b <= b' ' || b == b'"' || b == b'=' || b == b'\\' || b == 0x7f)
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes `s` as a JSON string literal (with quotes).
pub fn write_quoted(w: &mut (impl Out + ?Sized), s: &str) {
    w.c(b'"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: &str = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0..=0x1f | 0x7f => "",
            _ => continue,
        };
        w.s(&s[start..i]);
        if esc.is_empty() {
            w.s("\\u00");
            w.c(HEX[(b >> 4) as usize]);
            w.c(HEX[(b & 15) as usize]);
        } else {
            w.s(esc);
        }
        start = i + 1;
    }
    w.s(&s[start..]);
    w.c(b'"');
}

fn write_token(w: &mut (impl Out + ?Sized), s: &str) {
    if needs_quote(s) {
        write_quoted(w, s)
    } else {
        w.s(s)
    }
}

fn write_val_text<const N: usize>(w: &mut (impl Out + ?Sized), r: &Record<N>, v: Val) {
    match v {
        Val::U64(n) => w.u(n),
        Val::I64(n) => w.i(n),
        Val::F64(n) => w.f(n),
        Val::Bool(b) => w.s(if b { "true" } else { "false" }),
        Val::Str(..) => write_token(w, r.str_of(v).unwrap_or("")),
    }
}

fn write_val_json<const N: usize>(w: &mut (impl Out + ?Sized), r: &Record<N>, v: Val) {
    match v {
        Val::U64(n) => w.u(n),
        Val::I64(n) => w.i(n),
        Val::F64(n) if n.is_finite() => w.f(n),
        Val::F64(n) => {
            w.c(b'"');
            w.f(n);
            w.c(b'"');
        }
        Val::Bool(b) => w.s(if b { "true" } else { "false" }),
        Val::Str(..) => write_quoted(w, r.str_of(v).unwrap_or("")),
    }
}

fn is_no_ctx(v: Option<Val>) -> bool {
    matches!(v, None | Some(Val::U64(0)) | Some(Val::I64(0)))
}

/// One text line (with the trailing newline) for record `r` whose wall time is `wall_ns`.
pub fn write_text<const N: usize>(w: &mut (impl Out + ?Sized), r: &Record<N>, wall_ns: u64) {
    let m = r.meta;
    write_wall(w, wall_ns);
    w.c(b' ');
    w.u(r.mono_ns);
    w.c(b' ');
    w.s(level_name(m.level()));
    w.s(" tid=");
    w.u(r.tid as u64);
    w.c(b' ');
    w.s(m.target());
    w.c(b' ');
    match r.function {
        Some(v) => write_val_text(w, r, v),
        None => w.c(b'-'),
    }
    match (m.file(), m.line()) {
        (Some(f), Some(l)) => {
            w.c(b' ');
            write_token(w, f);
            w.c(b':');
            w.u(l as u64);
        }
        _ => w.s(" -"),
    }
    w.s(" ctx=");
    match r.ctx {
        Some(v) if !is_no_ctx(Some(v)) => write_val_text(w, r, v),
        _ => w.c(b'-'),
    }
    w.s(" code=");
    match r.code {
        Some(v) => write_val_text(w, r, v),
        None => w.c(b'-'),
    }
    w.c(b' ');
    write_quoted(w, r.msg.and_then(|v| r.str_of(v)).unwrap_or(""));
    for &(k, v) in r.kvs() {
        w.c(b' ');
        w.s(k);
        w.c(b'=');
        write_val_text(w, r, v);
    }
    if r.extra_fields > 0 {
        w.s(" fields_dropped=");
        w.u(r.extra_fields as u64);
    }
    w.c(b'\n');
}

/// One JSON line (with the trailing newline).
pub fn write_json<const N: usize>(w: &mut (impl Out + ?Sized), r: &Record<N>, wall_ns: u64) {
    let m = r.meta;
    w.s("{\"ts\":\"");
    write_wall(w, wall_ns);
    w.s("\",\"mono_ns\":");
    w.u(r.mono_ns);
    w.s(",\"level\":\"");
    w.s(level_name(m.level()));
    w.s("\",\"tid\":");
    w.u(r.tid as u64);
    w.s(",\"module\":");
    write_quoted(w, m.target());
    w.s(",\"function\":");
    match r.function {
        Some(v) => write_val_json(w, r, v),
        None => w.s("null"),
    }
    w.s(",\"file\":");
    match m.file() {
        Some(f) => write_quoted(w, f),
        None => w.s("null"),
    }
    w.s(",\"line\":");
    match m.line() {
        Some(l) => w.u(l as u64),
        None => w.s("null"),
    }
    w.s(",\"ctx\":");
    match r.ctx {
        Some(v) if !is_no_ctx(Some(v)) => write_val_json(w, r, v),
        _ => w.s("null"),
    }
    w.s(",\"code\":");
    match r.code {
        Some(v) => write_val_json(w, r, v),
        None => w.s("null"),
    }
    w.s(",\"msg\":");
    write_quoted(w, r.msg.and_then(|v| r.str_of(v)).unwrap_or(""));
    w.s(",\"fields\":{");
    for (i, &(k, v)) in r.kvs().iter().enumerate() {
        if i > 0 {
            w.c(b',');
        }
        write_quoted(w, k);
        w.c(b':');
        write_val_json(w, r, v);
    }
    if r.extra_fields > 0 {
        if r.nfields > 0 {
            w.c(b',');
        }
        w.s("\"fields_dropped\":");
        w.u(r.extra_fields as u64);
    }
    w.s("}}\n");
}

/// Writes `r` in format `f`.
pub fn write_record<const N: usize>(
    w: &mut (impl Out + ?Sized),
    f: Format,
    r: &Record<N>,
    wall_ns: u64,
) {
    match f {
        Format::Text => write_text(w, r, wall_ns),
        Format::Json => write_json(w, r, wall_ns),
    }
}

/// A `fmt::Write` into a fixed byte array that never allocates: once full it keeps the prefix
/// (cut on a character boundary) and ends the line with `…\n`.
pub struct FixedLine<'a> {
    buf: &'a mut [u8],
    len: usize,
    full: bool,
}

impl<'a> FixedLine<'a> {
    /// Writes into `buf` (keep at least 8 bytes).
    pub fn new(buf: &'a mut [u8]) -> Self {
        FixedLine {
            buf,
            len: 0,
            full: false,
        }
    }
    /// Length so far; if the line was cut, ends it with `…\n` first.
    pub fn finish(mut self) -> usize {
        let tail = "…\n".as_bytes();
        if self.full && self.buf.len() >= tail.len() {
            let keep = self.buf.len() - tail.len();
            let mut n = self.len.min(keep);
            // Back off to a char boundary: continuation bytes are 0b10xxxxxx.
            while n > 0 && n < self.len && (self.buf[n] & 0xc0) == 0x80 {
                n -= 1;
            }
            self.buf[n..n + tail.len()].copy_from_slice(tail);
            self.len = n + tail.len();
        }
        self.len
    }
}

impl Write for FixedLine<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        if s.len() <= room {
            self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
            self.len += s.len();
            Ok(())
        } else {
            self.buf[self.len..].copy_from_slice(&s.as_bytes()[..room]);
            self.len = self.buf.len();
            self.full = true;
            Err(fmt::Error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_is_rfc3339_with_micros() {
        let mut s = String::new();
        write_wall(&mut s, 1_795_918_387_123_456_789);
        write_wall(&mut s, 1_795_918_387_000_001_000);
        write_wall(&mut s, 1_795_918_388_999_999_999);
        assert_eq!(
            s,
            "2026-11-29T02:13:07.123456Z2026-11-29T02:13:07.000001Z2026-11-29T02:13:08.999999Z"
        );
    }

    #[test]
    fn integers() {
        let mut s = String::new();
        s.u(0);
        s.c(b' ');
        s.u(u64::MAX);
        s.c(b' ');
        s.i(i64::MIN);
        s.c(b' ');
        s.f(0.5);
        assert_eq!(s, "0 18446744073709551615 -9223372036854775808 0.5");
        for v in [0u64, 9, 10, 0xff, 0x20_0000, u64::MAX] {
            let mut b = [0u8; 18];
            assert_eq!(hex(&mut b, v), format!("{v:#x}"));
        }
        // Every length, and every two-digit pair at every position, as core::fmt writes them.
        for k in 0..20u32 {
            for v in [
                10u64.pow(k),
                10u64.pow(k) - 1,
                10u64.pow(k).wrapping_mul(7) / 3,
            ] {
                let mut b = [0u8; 20];
                assert_eq!(itoa(&mut b, v), v.to_string());
            }
        }
        for v in 0..10_000u64 {
            let mut b = [0u8; 20];
            assert_eq!(itoa(&mut b, v * 1_000_003), (v * 1_000_003).to_string());
        }
    }

    #[test]
    fn quoting() {
        let mut s = String::new();
        write_quoted(&mut s, "a \"b\"\n\\c\u{1}");
        assert_eq!(s, r#""a \"b\"\n\\c\u0001""#);
        assert!(needs_quote(""));
        assert!(needs_quote("-"));
        assert!(needs_quote("a b"));
        assert!(needs_quote("a=b"));
        assert!(!needs_quote("/dev/dri/renderD128"));
    }

    #[test]
    fn fixed_line_cuts_and_terminates() {
        let mut b = [0u8; 16];
        let mut w = FixedLine::new(&mut b);
        let _ = w.write_str("0123456789abcdefghij");
        let n = w.finish();
        assert_eq!(std::str::from_utf8(&b[..n]).unwrap(), "0123456789ab…\n");
    }
}
