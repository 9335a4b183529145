//! The packed form of a record: what the calling thread writes into its lane (or a queue slot)
//! and the writer thread reads back. Fields are appended as `[field index][type][payload]` with
//! varint integers, by the `tracing` visitor ([`Encoder`]) and the typed front end (`log::fast`)
//! through the same encoders (`put_*`); [`unpack`] turns the bytes into a [`Record`].

use super::{Record, Val};
use std::fmt::{self, Write as _};
use tracing::field::{Field, Visit};
use tracing::Metadata;

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
