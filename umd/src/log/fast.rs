//! The typed front end: `umd::record!`, for the driver's hot log call sites (docs/logging.md,
//! "Two front ends").
//!
//! A `tracing` event reaches the subscriber through `tracing`'s own dispatch: a `ValueSet` of
//! `&dyn Value`s walked with a dynamic `Visit` call per field, and the message as
//! `fmt::Arguments` run through `core::fmt` even when it is a literal. Counted with callgrind
//! (docs/benchmarks.md, "Deferred formatting in per-thread lanes") that is about 500 of the
//! ~1 000 instructions of an enabled call, before this pipeline does anything. `record!` keeps
//! what `tracing` gives (the static call-site metadata, its cached interest, so every filter
//! and `umdLogSetLevel` work unchanged; the level checks) and replaces the dispatch: the values
//! are packed by their static types, straight into the calling thread's lane, with the same
//! bytes the `tracing` path writes (`record::put_u64` and the others), so the writer reads both
//! alike and the lines are identical.
//!
//! What the fast path does not handle goes through `tracing::event!` with the same fields, so
//! nothing changes for it: WARN and worse (the emergency ring formats them on the caller), a
//! thread's first record (it has no lane yet), a full lane (drop or block per
//! `UMD_LOG_OVERFLOW`), a record longer than a lane takes, the writer thread itself, a record
//! made while another is being packed on the same thread (a signal handler), a pipeline not
//! running yet, and a `tracing` dispatcher other than libumd's (another global subscriber, or a
//! scoped one such as `tracing::subscriber::with_default` in a test).

use super::lane;
use super::record;
use super::{Me, Pipeline, UmdSubscriber, BUSY, ME, READY, STATE, WRITER};
use std::sync::atomic::Ordering;
use tracing::subscriber::Interest;
use tracing::{Level, Metadata};

/// A field value `record!` packs by its type. Only plain values: what needs `Debug` or
/// `Display` to become text goes through `tracing`'s macros.
pub trait FieldValue: tracing::Value {
    /// Packs the value as field number `index` of the record.
    #[doc(hidden)]
    fn pack(&self, r: &mut Fast, index: usize);
}

macro_rules! unsigned {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            #[inline(always)]
            fn pack(&self, r: &mut Fast, index: usize) {
                record::put_u64(&mut r.w, index, *self as u64)
            }
        }
    )*};
}
macro_rules! signed {
    ($($t:ty),*) => {$(
        impl FieldValue for $t {
            #[inline(always)]
            fn pack(&self, r: &mut Fast, index: usize) {
                record::put_i64(&mut r.w, index, *self as i64)
            }
        }
    )*};
}
unsigned!(u8, u16, u32, u64, usize);
signed!(i8, i16, i32, i64, isize);

impl FieldValue for bool {
    #[inline(always)]
    fn pack(&self, r: &mut Fast, index: usize) {
        record::put_bool(&mut r.w, index, *self)
    }
}

impl FieldValue for f64 {
    #[inline(always)]
    fn pack(&self, r: &mut Fast, index: usize) {
        record::put_f64(&mut r.w, index, *self)
    }
}

impl FieldValue for str {
    #[inline(always)]
    fn pack(&self, r: &mut Fast, index: usize) {
        record::put_str(&mut r.w, index, self)
    }
}

impl<T: FieldValue + ?Sized> FieldValue for &T {
    #[inline(always)]
    fn pack(&self, r: &mut Fast, index: usize) {
        (**self).pack(r, index)
    }
}

/// One record being packed by `record!` into the calling thread's lane. Made only by
/// [`begin`]; [`Fast::commit`] publishes it. While it lives the thread is marked busy, so a
/// record made in between (a signal handler's) takes the `tracing` path and cannot interleave
/// its bytes with these.
pub struct Fast {
    w: lane::Writer<'static>,
    p: &'static Pipeline,
    me: *const Me,
    meta: &'static Metadata<'static>,
    stamp: u64,
}

/// Whether `interest` (of a call site whose metadata is `meta`) lets the record be packed here,
/// and if so the lane room for it. None: the caller logs through `tracing::event!` instead.
#[doc(hidden)]
#[inline]
pub fn begin(meta: &'static Metadata<'static>, interest: Interest) -> Option<Fast> {
    if *meta.level() <= Level::WARN
        || !interest.is_always()
        || STATE.load(Ordering::Acquire) != READY
    {
        return None;
    }
    if !tracing::dispatcher::get_default(|d| d.is::<UmdSubscriber>()) {
        return None;
    }
    let me: *const Me = ME.try_with(|c| c as *const Me).ok()?;
    // SAFETY: `me` is this thread's `ME`, which outlives every call on this thread (`try_with`
    // succeeded, so its destructor has not run); `Fast` is not `Send`, so it stays here.
    let c = unsafe { &*me };
    let bits = c.bits.get();
    if bits & (BUSY | WRITER) != 0 || bits as u32 == 0 {
        return None;
    }
    // SAFETY: lanes are leaked, never freed.
    let l: &'static lane::Lane = unsafe { c.lane.get().as_ref() }?;
    let p = super::pipeline()?;
    let w = l.begin()?;
    c.bits.set(bits | BUSY);
    Some(Fast {
        w,
        p,
        me,
        meta,
        stamp: super::clock::stamp(),
    })
}

impl Fast {
    /// Packs the message (a literal) as field 0.
    #[doc(hidden)]
    #[inline(always)]
    pub fn message(&mut self, msg: &'static str) {
        record::put_str(&mut self.w, 0, msg)
    }

    /// Publishes the record; false when it was longer than a lane takes (nothing published:
    /// the caller logs it through `tracing::event!`).
    #[doc(hidden)]
    #[inline]
    pub fn commit(self) -> bool {
        let Fast {
            w,
            p,
            me,
            meta,
            stamp,
        } = self;
        let done = w.commit(meta, stamp, || p.writer.unpark());
        if done {
            super::wake(p, false);
        }
        // SAFETY: see `begin`; this is still the thread that made `me`.
        let c = unsafe { &*me };
        c.bits.set(c.bits.get() & !BUSY);
        done
    }
}

/// Logs a record of typed fields at `LEVEL` (`TRACE`, `DEBUG`, `INFO`, `WARN`, `ERROR`) with a
/// literal message, deferring all formatting to the writer thread:
///
/// ```
/// let (ctx, size) = (3u64, 4096u64);
/// umd::record!(INFO, "alloc", ctx, size, va = 0x20_0000u64, pool = "slab", hit = true);
/// ```
///
/// The line is the one `tracing::info!(ctx, size, va = ..., "alloc")` writes (same target, the
/// calling module; same fields in the same order). Values are `FieldValue`s: integers, `bool`,
/// `f64`, `&str`; each expression is evaluated once. The message comes first (not last as in
/// `tracing`) and is a literal, taken as it is (no `{}` formatting).
#[macro_export]
macro_rules! record {
    ($lvl:ident, $msg:literal $(, $k:ident $(= $v:expr)?)* $(,)?) => {{
        static __CALLSITE: ::tracing::callsite::DefaultCallsite =
            ::tracing::callsite::DefaultCallsite::new(&__META);
        static __META: ::tracing::Metadata<'static> = ::tracing::metadata! {
            name: ::core::concat!("event ", ::core::file!(), ":", ::core::line!()),
            target: ::core::module_path!(),
            level: ::tracing::Level::$lvl,
            fields: &["message" $(, ::core::stringify!($k))*],
            callsite: &__CALLSITE,
            kind: ::tracing::metadata::Kind::EVENT,
        };
        if ::tracing::level_enabled!(::tracing::Level::$lvl) {
            let __interest = __CALLSITE.interest();
            if !__interest.is_never() {
                match ($($crate::__record_value!($k $(= $v)?),)*) {
                    ($($k,)*) => {
                        let mut __done = false;
                        if let Some(mut __r) = $crate::log::fast::begin(&__META, __interest) {
                            __r.message($msg);
                            let mut __i = 0usize;
                            $(
                                __i += 1;
                                $crate::log::fast::FieldValue::pack(&$k, &mut __r, __i);
                            )*
                            let _ = __i;
                            __done = __r.commit();
                        }
                        if !__done {
                            ::tracing::event!(::tracing::Level::$lvl, $($k = $k,)* "{}", $msg);
                        }
                    }
                }
            }
        }
    }};
}

/// The value of a `record!` field: `name = expr`, or `name` alone for a variable of that name.
#[doc(hidden)]
#[macro_export]
macro_rules! __record_value {
    ($k:ident = $v:expr) => {
        &$v
    };
    ($k:ident) => {
        &$k
    };
}
