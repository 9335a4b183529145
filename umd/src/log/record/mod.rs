//! A captured log record: what the calling thread takes from a `tracing` event before handing
//! it to the writer thread. Capturing is the only work the caller does: the metadata is a
//! `&'static` pointer, timestamps and thread id are integers, and the message and string values
//! are copied into an inline buffer (a heap buffer only when they do not fit). Formatting into
//! text or JSON happens later, on the writer thread (see [`super::format`]).

mod packed;

pub use packed::*;

use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing::Metadata;

/// Fields beyond the message, `ctx`, `code` and `function` kept per record; more are counted
/// in `Record::extra_fields` and reported as `fields_dropped=<n>`.
/// (16: the simulator's job-timeout record has 15, `umd::backend::sim::recovery`.)
pub(crate) const MAX_FIELDS: usize = 16;

/// The field whose integer value is a GPU address, written as `0x...` in text and JSON.
pub const ADDRESS_FIELD: &str = "va";

/// The field whose integer value is an application's return address (src/caller.rs): written
/// as `caller=<module path>+0x<offset>` followed by `caller_fn=<symbol>+0x<offset>`, symbolized
/// when the record is formatted (docs/logging.md, "Call sites").
pub const CALLER_FIELD: &str = "caller";
/// The field written after [`CALLER_FIELD`]: the exported function covering the address.
pub const CALLER_FN_FIELD: &str = "caller_fn";

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
    /// Empties the buffer (keeps a heap allocation for reuse).
    pub fn clear(&mut self) {
        self.len = 0;
        self.spill.clear();
        self.truncated = false;
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
        // SAFETY: only whole `&str`s, or prefixes of them cut at char boundaries, are ever
        // appended (`push`), so the bytes are valid UTF-8.
        unsafe { std::str::from_utf8_unchecked(b) }
    }
    /// The string in `start..end`.
    pub fn slice(&self, start: u32, end: u32) -> &str {
        self.as_str()
            .get(start as usize..end as usize)
            .unwrap_or("")
    }
    pub(crate) fn push(&mut self, s: &str) {
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

    /// Empties the record for reuse with `meta` (keeps the text buffer's allocation).
    pub fn reset(&mut self, meta: &'static Metadata<'static>) {
        self.meta = meta;
        self.mono_ns = 0;
        self.wall_ns = 0;
        self.tid = 0;
        self.extra_fields = 0;
        self.nfields = 0;
        self.msg = None;
        self.ctx = None;
        self.code = None;
        self.function = None;
        self.text.clear();
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
    pub(crate) fn put(&mut self, field: &Field, v: Val) {
        match field.name() {
            "message" => self.msg = Some(v),
            "ctx" => self.ctx = Some(v),
            "code" => self.code = Some(v),
            "function" => self.function = Some(v),
            name => {
                let v = match (name, v) {
                    // A GPU address given as an integer is written in hex, as the call sites
                    // that format it themselves (`va = format_args!("{:#x}", ..)`) write it, so
                    // a caller can hand over the integer and leave the formatting to the writer
                    // (docs/logging.md, "Record format").
                    (ADDRESS_FIELD, Val::U64(a)) => {
                        let start = self.text.len();
                        self.text.push(super::format::hex(&mut [0u8; 18], a));
                        Val::Str(start, self.text.len())
                    }
                    (CALLER_FIELD, Val::U64(a)) => {
                        let r = crate::caller::Caller(a as usize).fields();
                        let v = self.text_val(&r.caller);
                        self.push_field(name, v);
                        let f = self.text_val(&r.caller_fn);
                        self.push_field(CALLER_FN_FIELD, f);
                        return;
                    }
                    _ => v,
                };
                self.push_field(name, v);
            }
        }
    }

    fn text_val(&mut self, s: &str) -> Val {
        let start = self.text.len();
        self.text.push(s);
        Val::Str(start, self.text.len())
    }

    fn push_field(&mut self, name: &'static str, v: Val) {
        if (self.nfields as usize) < MAX_FIELDS {
            self.fields[self.nfields as usize] = (name, v);
            self.nfields += 1;
        } else {
            self.extra_fields = self.extra_fields.saturating_add(1);
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

/// Declares `static $name: Metadata` for an INFO event of target `t` with the given field
/// names, and its call site (unit tests of the packing and of the lanes).
#[cfg(test)]
#[macro_export]
macro_rules! test_event_meta {
    ($name:ident, $fields:expr) => {
        static CS: tracing::callsite::DefaultCallsite =
            tracing::callsite::DefaultCallsite::new(&$name);
        static $name: tracing::Metadata<'static> = tracing::metadata!(
            name: "t",
            target: "t",
            level: tracing::Level::INFO,
            fields: $fields,
            callsite: &CS,
            kind: tracing::metadata::Kind::EVENT,
        );
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_round_trip() {
        use tracing::field::Value;
        crate::test_event_meta!(META, &["message", "ctx", "s", "f", "b", "long"]);
        let fs = META.fields();
        let f = |n: &str| fs.field(n).unwrap();
        let long = "x".repeat(300);
        let mut p: Packed = Packed::new(&META, 5, 6);
        format_args!("hi {}", 1).record(&f("message"), &mut p);
        p.record_i64(&f("ctx"), -7);
        p.record_str(&f("s"), "é");
        p.record_f64(&f("f"), 0.5);
        p.record_bool(&f("b"), true);
        p.record_str(&f("long"), &long);
        assert_eq!(std::mem::size_of::<Packed>(), 128);
        let mut r = Record::<8>::new(&META, true);
        p.unpack(&mut r);
        assert_eq!(r.str_of(r.msg.unwrap()), Some("hi 1"));
        assert_eq!(r.ctx, Some(Val::I64(-7)));
        assert_eq!(r.kvs().len(), 4);
        assert_eq!(r.str_of(r.kvs()[0].1), Some("é"));
        assert_eq!(r.kvs()[1], ("f", Val::F64(0.5)));
        assert_eq!(r.kvs()[2], ("b", Val::Bool(true)));
        assert_eq!(r.str_of(r.kvs()[3].1), Some(long.as_str()));
        assert_eq!((r.mono_ns, r.tid), (5, 6));
    }

    /// A `va` given as an integer is written exactly as a `va` the call site formatted in hex,
    /// in text and in JSON.
    #[test]
    fn an_integer_va_is_written_as_the_hex_call_sites_write_it() {
        use tracing::field::Value;
        crate::test_event_meta!(META, &["message", "va", "size"]);
        let f = |n: &str| META.fields().field(n).unwrap();
        let line = |p: &Packed, json: bool| {
            let mut r = Record::<256>::new(&META, true);
            p.unpack(&mut r);
            let mut out = Vec::new();
            if json {
                crate::log::format::write_json(&mut out, &r, 0);
            } else {
                crate::log::format::write_text(&mut out, &r, 0);
            }
            String::from_utf8(out).unwrap()
        };
        let mut int: Packed = Packed::new(&META, 1, 2);
        let mut hex: Packed = Packed::new(&META, 1, 2);
        for p in [&mut int, &mut hex] {
            format_args!("alloc").record(&f("message"), p);
        }
        int.record_u64(&f("va"), 0x20_0000);
        format_args!("{:#x}", 0x20_0000u64).record(&f("va"), &mut hex);
        for p in [&mut int, &mut hex] {
            p.record_u64(&f("size"), 4096);
        }
        for json in [false, true] {
            assert_eq!(line(&int, json), line(&hex, json));
        }
        assert!(line(&int, false).ends_with("\"alloc\" va=0x200000 size=4096\n"));
        assert!(line(&int, true).contains("\"fields\":{\"va\":\"0x200000\",\"size\":4096}"));
    }

    #[test]
    fn integers_of_every_length_round_trip() {
        crate::test_event_meta!(META, &["u", "i"]);
        let f = |n: &str| META.fields().field(n).unwrap();
        for k in 0..64 {
            for (u, i) in [
                (1u64 << k, (1i64 << k).wrapping_neg()),
                ((1u64 << k) - 1, (1i64 << k).wrapping_sub(1)),
            ] {
                for (u, i) in [(u, i), (u64::MAX, i64::MIN), (0, i64::MAX)] {
                    let mut p: Packed = Packed::new(&META, 0, 0);
                    p.record_u64(&f("u"), u);
                    p.record_i64(&f("i"), i);
                    let mut r = Record::<64>::new(&META, true);
                    p.unpack(&mut r);
                    assert_eq!(r.kvs(), [("u", Val::U64(u)), ("i", Val::I64(i))]);
                }
            }
        }
    }

    #[test]
    fn short_strings_of_every_length_round_trip() {
        crate::test_event_meta!(META, &["s"]);
        let all = "0123456789abcdefghij";
        for n in 0..=all.len() {
            let mut p: Packed = Packed::new(&META, 0, 0);
            p.record_str(&META.fields().field("s").unwrap(), &all[..n]);
            let mut r = Record::<64>::new(&META, true);
            p.unpack(&mut r);
            assert_eq!(r.str_of(r.kvs()[0].1), Some(&all[..n]));
        }
    }

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
