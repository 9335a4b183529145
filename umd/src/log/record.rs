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

/// Inline bytes of a [`Packed`] record (the whole record is 128 bytes: two cache lines).
pub(crate) const PACKED_INLINE: usize = 82;

const T_U64: u8 = 0;
const T_I64: u8 = 1;
const T_F64: u8 = 2;
const T_FALSE: u8 = 3;
const T_TRUE: u8 = 4;
/// String with a varint length.
const T_STR: u8 = 5;
/// String formatted in place (`Debug`/`Display`), with a fixed two-byte length.
const T_FMT: u8 = 6;

/// Where packed fields are written: a [`Packed`] record, or a caller's lane directly
/// (`lane::Writer`). The encoding (the [`Visit`] methods of [`Encoder`]) is the same for both.
pub(crate) trait Sink {
    /// Bytes written so far.
    fn pos(&self) -> usize;
    /// Appends `b`.
    fn put(&mut self, b: &[u8]);
    /// Appends the first `used` bytes of `w` (little-endian).
    fn put_word(&mut self, w: u128, used: usize);
    /// Overwrites the two bytes at `at` with `n` (a length written before its bytes).
    fn patch_len(&mut self, at: usize, n: u16);
}

/// The queued form of a record, as small as possible because the caller pays for every cache
/// line it writes into the queue slot (the slot was last touched by the writer thread on another
/// core). Fields are appended as `[field index][type][payload]` with varint integers; names, and
/// which field is the message / ctx / code / function, are looked up on the writer thread.
/// Strings longer than 65535 bytes are cut. The buffer moves to the heap only when the record
/// does not fit inline.
pub struct Packed<const N: usize = PACKED_INLINE> {
    /// Call-site metadata.
    pub meta: &'static Metadata<'static>,
    /// CLOCK_MONOTONIC at capture, ns.
    pub mono_ns: u64,
    /// OS thread id.
    pub tid: u32,
    len: u16,
    inline: [std::mem::MaybeUninit<u8>; N],
    spill: Vec<u8>,
}

/// A field's `[index][type]` bytes as the low 16 bits of a word.
#[inline(always)]
fn head_word(index: usize, tag: u8) -> u128 {
    index.min(255) as u128 | (tag as u128) << 8
}

/// `v` as a varint in the low bytes of a word, and its length (1..=10). Values below 2^56 (all
/// but hashes and sentinels) are assembled in a 64-bit register.
#[inline(always)]
fn varint_word(v: u64) -> (u128, usize) {
    if v < 1 << 56 {
        let (mut w, mut x, mut i) = (0u64, v, 0);
        while x >= 0x80 {
            w |= ((x & 0x7f) | 0x80) << (8 * i);
            x >>= 7;
            i += 1;
        }
        return ((w | x << (8 * i)) as u128, i + 1);
    }
    varint_word_wide(v)
}

#[cold]
fn varint_word_wide(mut v: u64) -> (u128, usize) {
    let mut w = 0u128;
    let mut i = 0;
    while v >= 0x80 {
        w |= (((v as u8) | 0x80) as u128) << (8 * i);
        v >>= 7;
        i += 1;
    }
    (w | (v as u128) << (8 * i), i + 1)
}

/// Up to 16 bytes as the low bytes of a word, read with at most two overlapping loads.
#[inline(always)]
fn short_bytes(b: &[u8]) -> u128 {
    let n = b.len();
    let word = |s: &[u8]| {
        let mut a = [0u8; 8];
        a[..s.len()].copy_from_slice(s);
        u64::from_le_bytes(a) as u128
    };
    if n >= 8 {
        word(&b[..8]) | word(&b[n - 8..]) << (8 * (n - 8))
    } else if n >= 4 {
        let lo = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as u128;
        let hi = u32::from_le_bytes([b[n - 4], b[n - 3], b[n - 2], b[n - 1]]) as u128;
        lo | hi << (8 * (n - 4))
    } else {
        word(b)
    }
}

fn read_varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    let mut shift = 0;
    loop {
        let x = *b.get(*i)?;
        *i += 1;
        v |= ((x & 0x7f) as u64) << shift;
        if x & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

impl<const N: usize> Packed<N> {
    /// An empty record (no allocation, no zeroing of the buffer).
    #[inline]
    pub fn new(meta: &'static Metadata<'static>, mono_ns: u64, tid: u32) -> Self {
        Packed {
            meta,
            mono_ns,
            tid,
            len: 0,
            inline: [std::mem::MaybeUninit::uninit(); N],
            spill: Vec::new(),
        }
    }

    #[inline]
    fn pos(&self) -> usize {
        if self.spill.is_empty() {
            self.len as usize
        } else {
            self.spill.len()
        }
    }

    #[inline]
    fn put(&mut self, b: &[u8]) {
        if !self.spill.is_empty() {
            self.spill.extend_from_slice(b);
            return;
        }
        let at = self.len as usize;
        if at + b.len() <= N {
            // SAFETY: in bounds; MaybeUninit<u8> has the layout of u8.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    b.as_ptr(),
                    self.inline.as_mut_ptr().add(at).cast::<u8>(),
                    b.len(),
                );
            }
            self.len += b.len() as u16;
        } else {
            let mut v = Vec::with_capacity((at + b.len()).max(4 * N));
            v.extend_from_slice(self.bytes());
            v.extend_from_slice(b);
            self.spill = v;
        }
    }

    /// Appends the first `used` bytes of `w` (little-endian). The value is built in registers
    /// and stored with one 16-byte write: assembling it byte by byte in memory and copying it
    /// would make the copy wait for the byte stores (a store-forwarding stall per field).
    #[inline(always)]
    fn put_word(&mut self, w: u128, used: usize) {
        let at = self.len as usize;
        if self.spill.is_empty() && at + 16 <= N {
            // SAFETY: at + 16 <= N, so the 16-byte store is in bounds; MaybeUninit<u8> has the
            // layout of u8.
            unsafe {
                std::ptr::write_unaligned(
                    self.inline.as_mut_ptr().add(at).cast::<[u8; 16]>(),
                    w.to_le_bytes(),
                );
            }
            self.len += used as u16;
        } else {
            self.put(&w.to_le_bytes()[..used]);
        }
    }

    /// The encoded fields.
    pub fn bytes(&self) -> &[u8] {
        if self.spill.is_empty() {
            // SAFETY: the first `len` bytes were written.
            unsafe {
                std::slice::from_raw_parts(self.inline.as_ptr().cast::<u8>(), self.len as usize)
            }
        } else {
            &self.spill
        }
    }

    fn patch_len(&mut self, at: usize, n: u16) {
        let b = n.to_le_bytes();
        if self.spill.is_empty() {
            self.inline[at] = std::mem::MaybeUninit::new(b[0]);
            self.inline[at + 1] = std::mem::MaybeUninit::new(b[1]);
        } else {
            self.spill[at..at + 2].copy_from_slice(&b);
        }
    }

    /// Decodes into a typed record (writer thread).
    pub fn unpack<const M: usize>(&self, out: &mut Record<M>) {
        unpack(self.meta, self.mono_ns, self.tid, self.bytes(), out);
    }

    /// The same record in the shared queue's form.
    pub fn to_queued(&self) -> Packed {
        let mut q = Packed::new(self.meta, self.mono_ns, self.tid);
        q.put(self.bytes());
        q
    }
}

/// Decodes the packed fields `b` of an event with metadata `meta` into a typed record (writer
/// thread): names from the metadata, the special fields (`message`, `ctx`, `code`, `function`)
/// picked out.
pub fn unpack<const N: usize>(
    meta: &'static Metadata<'static>,
    stamp: u64,
    tid: u32,
    b: &[u8],
    out: &mut Record<N>,
) {
    out.mono_ns = stamp;
    out.tid = tid;
    let fields = meta.fields();
    let mut i = 0;
    while i + 2 <= b.len() {
        let (idx, tag) = (b[i] as usize, b[i + 1]);
        i += 2;
        let Some(field) = fields.iter().nth(idx) else {
            return;
        };
        let v = match tag {
            T_U64 => match read_varint(b, &mut i) {
                Some(v) => Val::U64(v),
                None => return,
            },
            T_I64 => match read_varint(b, &mut i) {
                Some(z) => Val::I64(((z >> 1) as i64) ^ -((z & 1) as i64)),
                None => return,
            },
            T_F64 => {
                let Some(raw) = b.get(i..i + 8) else { return };
                let mut a = [0u8; 8];
                a.copy_from_slice(raw);
                i += 8;
                Val::F64(f64::from_le_bytes(a))
            }
            T_FALSE => Val::Bool(false),
            T_TRUE => Val::Bool(true),
            T_STR | T_FMT => {
                let n = if tag == T_STR {
                    match read_varint(b, &mut i) {
                        Some(n) => n as usize,
                        None => return,
                    }
                } else {
                    let Some(l) = b.get(i..i + 2) else { return };
                    i += 2;
                    u16::from_le_bytes([l[0], l[1]]) as usize
                };
                let Some(sb) = b.get(i..i + n) else { return };
                i += n;
                let start = out.text.len();
                // SAFETY: the packed bytes of a string are a `&str` (or a prefix of one cut
                // at a char boundary) copied verbatim by `record_str` / `PackedWriter`.
                out.text.push(unsafe { std::str::from_utf8_unchecked(sb) });
                Val::Str(start, out.text.len())
            }
            _ => return,
        };
        out.put(&field, v);
    }
}

impl<const N: usize> Sink for Packed<N> {
    #[inline(always)]
    fn pos(&self) -> usize {
        Packed::pos(self)
    }
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        Packed::put(self, b)
    }
    #[inline(always)]
    fn put_word(&mut self, w: u128, used: usize) {
        Packed::put_word(self, w, used)
    }
    #[inline(always)]
    fn patch_len(&mut self, at: usize, n: u16) {
        Packed::patch_len(self, at, n)
    }
}

/// `fmt::Write` into a [`Sink`] (Debug / Display values).
struct SinkWriter<'a, S: Sink>(&'a mut S, usize);

impl<S: Sink> fmt::Write for SinkWriter<'_, S> {
    #[inline]
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = (u16::MAX as usize).saturating_sub(self.1);
        let mut n = s.len().min(room);
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.0.put(&s.as_bytes()[..n]);
        self.1 += n;
        Ok(())
    }
}

/// Packs the fields of an event into a [`Sink`] (`[field index][type][payload]`).
pub(crate) struct Encoder<'a, S: Sink>(pub &'a mut S);

impl<S: Sink> Visit for Encoder<'_, S> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.put_word(head_word(field.index(), T_FMT), 4);
        let at = self.0.pos() - 2;
        let mut w = SinkWriter(&mut *self.0, 0);
        let _ = write!(w, "{value:?}");
        let n = w.1 as u16;
        self.0.patch_len(at, n);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        put_str(self.0, field.index(), value)
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        put_u64(self.0, field.index(), value)
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        put_i64(self.0, field.index(), value)
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        put_f64(self.0, field.index(), value)
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        put_bool(self.0, field.index(), value)
    }
}

// The typed encoders, by field index: the `tracing` visitor above and the typed front end
// (`log::fast`, the `record!` macro) write the same bytes through these.

/// Packs the string field number `index` (cut to 65535 bytes at a char boundary).
#[inline(always)]
pub(crate) fn put_str<S: Sink>(s: &mut S, index: usize, value: &str) {
    let mut n = value.len().min(u16::MAX as usize);
    while !value.is_char_boundary(n) {
        n -= 1;
    }
    if n <= 13 {
        // Short strings (codes, names): header, length and bytes in one 16-byte store.
        let w =
            head_word(index, T_STR) | (n as u128) << 16 | short_bytes(&value.as_bytes()[..n]) << 24;
        s.put_word(w, 3 + n);
        return;
    }
    let (v, k) = varint_word(n as u64);
    s.put_word(head_word(index, T_STR) | v << 16, 2 + k);
    s.put(&value.as_bytes()[..n]);
}

/// Packs the unsigned integer field number `index`.
#[inline(always)]
pub(crate) fn put_u64<S: Sink>(s: &mut S, index: usize, value: u64) {
    let (v, k) = varint_word(value);
    s.put_word(head_word(index, T_U64) | v << 16, 2 + k);
}

/// Packs the signed integer field number `index` (zig-zag).
#[inline(always)]
pub(crate) fn put_i64<S: Sink>(s: &mut S, index: usize, value: i64) {
    let (v, k) = varint_word(((value << 1) ^ (value >> 63)) as u64);
    s.put_word(head_word(index, T_I64) | v << 16, 2 + k);
}

/// Packs the floating-point field number `index`.
#[inline(always)]
pub(crate) fn put_f64<S: Sink>(s: &mut S, index: usize, value: f64) {
    s.put_word(
        head_word(index, T_F64) | (value.to_bits() as u128) << 16,
        10,
    );
}

/// Packs the boolean field number `index`.
#[inline(always)]
pub(crate) fn put_bool<S: Sink>(s: &mut S, index: usize, value: bool) {
    s.put_word(head_word(index, if value { T_TRUE } else { T_FALSE }), 2);
}

impl<const N: usize> Visit for Packed<N> {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        Encoder(self).record_debug(field, value)
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        Encoder(self).record_str(field, value)
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        Encoder(self).record_u64(field, value)
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        Encoder(self).record_i64(field, value)
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        Encoder(self).record_f64(field, value)
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        Encoder(self).record_bool(field, value)
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
