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

/// Writes `ns` since the epoch as `2026-11-29T02:13:07.123456Z` (UTC, microseconds).
pub fn write_wall<W: Write + ?Sized>(w: &mut W, ns: u64) -> fmt::Result {
    let secs = ns / 1_000_000_000;
    let us = (ns / 1_000) % 1_000_000;
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = crate::util::civil_from_days(days as i64);
    write!(
        w,
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{us:06}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
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

/// Writes `s` as a JSON string literal (with quotes).
pub fn write_quoted<W: Write + ?Sized>(w: &mut W, s: &str) -> fmt::Result {
    w.write_char('"')?;
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let esc: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0..=0x1f | 0x7f => None,
            _ => continue,
        };
        w.write_str(&s[start..i])?;
        match esc {
            Some(e) => w.write_str(e)?,
            None => write!(w, "\\u{:04x}", b)?,
        }
        start = i + 1;
    }
    w.write_str(&s[start..])?;
    w.write_char('"')
}

fn write_token<W: Write + ?Sized>(w: &mut W, s: &str) -> fmt::Result {
    if needs_quote(s) {
        write_quoted(w, s)
    } else {
        w.write_str(s)
    }
}

fn write_val_text<W: Write + ?Sized, const N: usize>(
    w: &mut W,
    r: &Record<N>,
    v: Val,
) -> fmt::Result {
    match v {
        Val::U64(n) => write!(w, "{n}"),
        Val::I64(n) => write!(w, "{n}"),
        Val::F64(n) => write!(w, "{n}"),
        Val::Bool(b) => write!(w, "{b}"),
        Val::Str(..) => write_token(w, r.str_of(v).unwrap_or("")),
    }
}

fn write_val_json<W: Write + ?Sized, const N: usize>(
    w: &mut W,
    r: &Record<N>,
    v: Val,
) -> fmt::Result {
    match v {
        Val::U64(n) => write!(w, "{n}"),
        Val::I64(n) => write!(w, "{n}"),
        Val::F64(n) if n.is_finite() => write!(w, "{n}"),
        Val::F64(n) => write!(w, "\"{n}\""),
        Val::Bool(b) => write!(w, "{b}"),
        Val::Str(..) => write_quoted(w, r.str_of(v).unwrap_or("")),
    }
}

fn is_no_ctx(v: Option<Val>) -> bool {
    matches!(v, None | Some(Val::U64(0)) | Some(Val::I64(0)))
}

/// One text line (with the trailing newline) for record `r` whose wall time is `wall_ns`.
pub fn write_text<W: Write + ?Sized, const N: usize>(
    w: &mut W,
    r: &Record<N>,
    wall_ns: u64,
) -> fmt::Result {
    let m = r.meta;
    write_wall(w, wall_ns)?;
    write!(
        w,
        " {} {} tid={} {} ",
        r.mono_ns,
        level_name(m.level()),
        r.tid,
        m.target()
    )?;
    match r.function {
        Some(v) => write_val_text(w, r, v)?,
        None => w.write_char('-')?,
    }
    match (m.file(), m.line()) {
        (Some(f), Some(l)) => {
            w.write_char(' ')?;
            write_token(w, f)?;
            write!(w, ":{l}")?
        }
        _ => w.write_str(" -")?,
    }
    w.write_str(" ctx=")?;
    match r.ctx {
        Some(v) if !is_no_ctx(Some(v)) => write_val_text(w, r, v)?,
        _ => w.write_char('-')?,
    }
    w.write_str(" code=")?;
    match r.code {
        Some(v) => write_val_text(w, r, v)?,
        None => w.write_char('-')?,
    }
    w.write_char(' ')?;
    write_quoted(w, r.msg.and_then(|v| r.str_of(v)).unwrap_or(""))?;
    for &(k, v) in r.kvs() {
        write!(w, " {k}=")?;
        write_val_text(w, r, v)?;
    }
    if r.extra_fields > 0 {
        write!(w, " fields_dropped={}", r.extra_fields)?;
    }
    w.write_char('\n')
}

/// One JSON line (with the trailing newline).
pub fn write_json<W: Write + ?Sized, const N: usize>(
    w: &mut W,
    r: &Record<N>,
    wall_ns: u64,
) -> fmt::Result {
    let m = r.meta;
    w.write_str("{\"ts\":\"")?;
    write_wall(w, wall_ns)?;
    write!(
        w,
        "\",\"mono_ns\":{},\"level\":\"{}\",\"tid\":{},\"module\":",
        r.mono_ns,
        level_name(m.level()),
        r.tid
    )?;
    write_quoted(w, m.target())?;
    w.write_str(",\"function\":")?;
    match r.function {
        Some(v) => write_val_json(w, r, v)?,
        None => w.write_str("null")?,
    }
    w.write_str(",\"file\":")?;
    match m.file() {
        Some(f) => write_quoted(w, f)?,
        None => w.write_str("null")?,
    }
    match m.line() {
        Some(l) => write!(w, ",\"line\":{l}")?,
        None => w.write_str(",\"line\":null")?,
    }
    w.write_str(",\"ctx\":")?;
    match r.ctx {
        Some(v) if !is_no_ctx(Some(v)) => write_val_json(w, r, v)?,
        _ => w.write_str("null")?,
    }
    w.write_str(",\"code\":")?;
    match r.code {
        Some(v) => write_val_json(w, r, v)?,
        None => w.write_str("null")?,
    }
    w.write_str(",\"msg\":")?;
    write_quoted(w, r.msg.and_then(|v| r.str_of(v)).unwrap_or(""))?;
    w.write_str(",\"fields\":{")?;
    for (i, &(k, v)) in r.kvs().iter().enumerate() {
        if i > 0 {
            w.write_char(',')?;
        }
        write_quoted(w, k)?;
        w.write_char(':')?;
        write_val_json(w, r, v)?;
    }
    if r.extra_fields > 0 {
        if r.nfields > 0 {
            w.write_char(',')?;
        }
        write!(w, "\"fields_dropped\":{}", r.extra_fields)?;
    }
    w.write_str("}}\n")
}

/// Writes `r` in format `f`.
pub fn write_record<W: Write + ?Sized, const N: usize>(
    w: &mut W,
    f: Format,
    r: &Record<N>,
    wall_ns: u64,
) -> fmt::Result {
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
        if self.full {
            let tail = "…\n".as_bytes();
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
        write_wall(&mut s, 1_795_918_387_123_456_789).unwrap();
        assert_eq!(s, "2026-11-29T02:13:07.123456Z");
    }

    #[test]
    fn quoting() {
        let mut s = String::new();
        write_quoted(&mut s, "a \"b\"\n\\c\u{1}").unwrap();
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
