//! A captured log record: what the calling thread takes from a `tracing` event before handing
//! it to the writer thread. Capturing is the only work the caller does: the metadata is a
//! `&'static` pointer, timestamps and thread id are integers, and the message and string values
//! are copied into an inline buffer (a heap buffer only when they do not fit). Formatting into
//! text or JSON happens later, on the writer thread (see [`super::format`]).

use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing::Metadata;

/// Fields beyond the message, `ctx`, `code` and `function` kept per record; more are counted
/// in `Record::extra_fields` and reported as `fields_dropped=<n>`.
pub(crate) const MAX_FIELDS: usize = 10;

/// A field value as captured. Strings live in the record's text buffer (`Str(start, end)`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Val {
    /// Unsigned integer.
    U64(u64),
    /// Signed integer.
    I64(i64),
    /// Floating point.
    F64(f64),
    /// Boolean.
    Bool(bool),
    /// A string (from `Display`, `Debug` or `&str`), as a byte range of the text buffer.
    Str(u32, u32),
}

/// Growable text storage with `N` bytes inline. With `heap == false` it never allocates and
/// truncates instead (the emergency-ring path).
pub struct TextBuf<const N: usize> {
    inline: [u8; N],
    len: u32,
    spill: Vec<u8>,
    heap: bool,
    /// Bytes were cut because the buffer was full and the heap was not allowed.
    pub truncated: bool,
}

impl<const N: usize> TextBuf<N> {
    /// An empty buffer (no allocation).
    pub fn new(heap: bool) -> Self {
        TextBuf {
            inline: [0; N],
            len: 0,
            spill: Vec::new(),
            heap,
            truncated: false,
        }
    }
    /// Current length in bytes.
    #[inline]
    pub fn len(&self) -> u32 {
        if self.spill.is_empty() {
            self.len
        } else {
            self.spill.len() as u32
        }
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// All bytes written so far (always valid UTF-8: only `&str` is ever appended).
    pub fn as_str(&self) -> &str {
        let b = if self.spill.is_empty() {
            &self.inline[..self.len as usize]
        } else {
            &self.spill[..]
        };
        // Only whole `&str`s or prefixes cut at char boundaries are appended.
        std::str::from_utf8(b).unwrap_or("")
    }
    /// The string in `start..end`.
    pub fn slice(&self, start: u32, end: u32) -> &str {
        self.as_str()
            .get(start as usize..end as usize)
            .unwrap_or("")
    }
    fn push(&mut self, s: &str) {
        if !self.spill.is_empty() {
            self.spill.extend_from_slice(s.as_bytes());
            return;
        }
        let len = self.len as usize;
        if len + s.len() <= N {
            self.inline[len..len + s.len()].copy_from_slice(s.as_bytes());
            self.len += s.len() as u32;
        } else if self.heap {
            let mut v = Vec::with_capacity((len + s.len()).max(2 * N));
            v.extend_from_slice(&self.inline[..len]);
            v.extend_from_slice(s.as_bytes());
            self.spill = v;
        } else {
            let mut n = N - len;
            while n > 0 && !s.is_char_boundary(n) {
                n -= 1;
            }
            self.inline[len..len + n].copy_from_slice(&s.as_bytes()[..n]);
            self.len += n as u32;
            self.truncated = true;
        }
    }
}

impl<const N: usize> fmt::Write for TextBuf<N> {
    #[inline]
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.push(s);
        Ok(())
    }
}

/// One captured event. `N` is the inline text capacity.
pub struct Record<const N: usize> {
    /// Level, target (module), file, line and field names.
    pub meta: &'static Metadata<'static>,
    /// CLOCK_MONOTONIC at capture, ns.
    pub mono_ns: u64,
    /// Wall clock at capture, ns since the epoch; 0 means "derive from `mono_ns`" (the writer
    /// thread adds its current wall−monotonic offset, which saves the caller a clock read).
    pub wall_ns: u64,
    /// OS thread id of the logging thread.
    pub tid: u32,
    /// Fields beyond `MAX_FIELDS` that were not kept.
    pub extra_fields: u16,
    /// Number of valid entries in `fields`.
    pub nfields: u8,
    /// The `message` field.
    pub msg: Option<Val>,
    /// The `ctx` field (context id; numeric 0 means none).
    pub ctx: Option<Val>,
    /// The `code` field (a result-code name).
    pub code: Option<Val>,
    /// The `function` field (the API function).
    pub function: Option<Val>,
    /// The other fields, in call-site order.
    pub fields: [(&'static str, Val); MAX_FIELDS],
    /// Storage of every string value.
    pub text: TextBuf<N>,
}

impl<const N: usize> Record<N> {
    /// An empty record for an event with metadata `meta`.
    #[inline]
    pub fn new(meta: &'static Metadata<'static>, heap: bool) -> Self {
        Record {
            meta,
            mono_ns: 0,
            wall_ns: 0,
            tid: 0,
            extra_fields: 0,
            nfields: 0,
            msg: None,
            ctx: None,
            code: None,
            function: None,
            fields: [("", Val::U64(0)); MAX_FIELDS],
            text: TextBuf::new(heap),
        }
    }

    /// The kept key=value fields.
    pub fn kvs(&self) -> &[(&'static str, Val)] {
        &self.fields[..self.nfields as usize]
    }

    /// A string value's text.
    pub fn str_of(&self, v: Val) -> Option<&str> {
        match v {
            Val::Str(s, e) => Some(self.text.slice(s, e)),
            _ => None,
        }
    }

    #[inline]
    fn put(&mut self, field: &Field, v: Val) {
        match field.name() {
            "message" => self.msg = Some(v),
            "ctx" => self.ctx = Some(v),
            "code" => self.code = Some(v),
            "function" => self.function = Some(v),
            name => {
                if (self.nfields as usize) < MAX_FIELDS {
                    self.fields[self.nfields as usize] = (name, v);
                    self.nfields += 1;
                } else {
                    self.extra_fields = self.extra_fields.saturating_add(1);
                }
            }
        }
    }
}

impl<const N: usize> Visit for Record<N> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let start = self.text.len();
        let _ = write!(self.text, "{value:?}");
        let end = self.text.len();
        self.put(field, Val::Str(start, end));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let start = self.text.len();
        self.text.push(value);
        let end = self.text.len();
        self.put(field, Val::Str(start, end));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Val::U64(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Val::I64(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Val::F64(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Val::Bool(value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn textbuf_spills_or_truncates_on_char_boundary() {
        let mut t = TextBuf::<4>::new(true);
        t.push("ab");
        t.push("cdé");
        assert_eq!(t.as_str(), "abcdé");
        let mut t = TextBuf::<4>::new(false);
        t.push("abcé");
        assert_eq!(t.as_str(), "abc");
        assert!(t.truncated);
    }
}
