//! Per-thread record buffers ("lanes"): the queue between a logging thread and the writer.
//!
//! Each thread that logs owns one lane, a single-producer single-consumer ring of bytes: the
//! caller copies its packed record (`record::Packed`: call-site metadata pointer, time stamp,
//! field values, nothing formatted) into the lane and publishes it with one release store. No
//! lock, no compare-and-swap, no cache line shared with other producers; the writer thread
//! drains every lane and merges them in time-stamp order (records of one thread stay in their
//! order: a lane is read front to back). A thread's lane is given back when the thread exits
//! (a thread-local destructor marks it abandoned; once the writer has drained it, a new thread
//! may take it), so the number of lanes is the largest number of threads that logged at once.
//!
//! A record in the ring: `[u32 total bytes][u16 payload bytes][u16 0][u64 metadata][u64 stamp]`
//! then the payload, padded to 8 bytes. A header with `SKIP` set means "the rest of the ring up
//! to its end is unused, continue at its start" (a record is never split at the end).

#[cfg(test)]
use super::record::Packed;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, Ordering};
use tracing::Metadata;

/// Bytes of a record header.
pub(crate) const HEADER: usize = 24;
const SKIP: u32 = 1 << 31;
/// Lane size limits, bytes (a power of two).
pub(crate) const MIN_BYTES: usize = 4096;
const MAX_BYTES: usize = 64 << 20;
/// Bytes of lane per record of `UMD_LOG_QUEUE` (a typical record takes 40-100).
pub(crate) const BYTES_PER_RECORD: usize = 64;
/// The longest record a lane takes, header included. Longer ones (long messages: mostly the
/// failure path's WARN records) go through the shared queue, which holds `UMD_LOG_QUEUE` records
/// whatever their length, as it always did.
pub(crate) const LONGEST: usize = 256;

const FREE: u8 = 0;
const OWNED: u8 = 1;
const ABANDONED: u8 = 2;

/// Keeps its content on a cache line of its own.
#[repr(align(128))]
struct Own<T>(T);

/// One thread's ring.
pub(crate) struct Lane {
    /// Producer's line: bytes published, records published, the producer's last view of
    /// `tail` (read by the producer only).
    head: Own<(AtomicU64, AtomicU64, Cell<u64>)>,
    /// Consumer's line: bytes consumed, records consumed.
    tail: Own<(AtomicU64, AtomicU64)>,
    /// The ring's bytes (leaked with the lane; zeroed pages the kernel maps on first touch).
    buf: *mut u8,
    mask: u64,
    /// OS thread id of the owner (every record of the lane is the owner's).
    tid: AtomicU32,
    state: AtomicU8,
    /// Set by the producer when the lane passes half full and it woke the writer; cleared by
    /// the writer when it drains the lane (one wake-up per fill, not one per record).
    kicked: AtomicBool,
    next: AtomicPtr<Lane>,
}

// SAFETY: the ring bytes between `tail` and `head` belong to the consumer, the rest to the
// producer; `head`/`tail` are published with release and read with acquire, so each side only
// touches bytes the other has handed over. `head.2` is read and written by the owner only.
unsafe impl Sync for Lane {}
// SAFETY: see Sync; the lane is only ever shared as `&'static`.
unsafe impl Send for Lane {}

/// Lane size in bytes for a `UMD_LOG_QUEUE` of `records`.
pub(crate) fn bytes_for(records: usize) -> usize {
    records
        .saturating_mul(BYTES_PER_RECORD)
        .clamp(MIN_BYTES, MAX_BYTES)
        .next_power_of_two()
}

/// Every lane of this process (a push-only list; lanes are never freed).
static LANES: AtomicPtr<Lane> = AtomicPtr::new(std::ptr::null_mut());

/// The first lane of the list (the writer walks it with [`Lane::next`]).
pub(crate) fn first() -> Option<&'static Lane> {
    // SAFETY: lanes are leaked, never freed.
    unsafe { LANES.load(Ordering::Acquire).as_ref() }
}

/// In a child after `fork`: forget the parent's lanes (their records are the parent's to write).
pub(crate) fn forget_all() {
    LANES.store(std::ptr::null_mut(), Ordering::Release);
}

/// What `try_push` did.
#[cfg(test)]
pub(crate) enum Push {
    /// Published.
    Done,
    /// No room now.
    Full,
    /// Longer than [`LONGEST`] or a quarter of the lane: goes through the shared queue.
    TooLong,
}

impl Lane {
    fn new(bytes: usize) -> Lane {
        Lane {
            head: Own((AtomicU64::new(0), AtomicU64::new(0), Cell::new(0))),
            tail: Own((AtomicU64::new(0), AtomicU64::new(0))),
            buf: Box::leak(vec![0u8; bytes].into_boxed_slice()).as_mut_ptr(),
            mask: bytes as u64 - 1,
            tid: AtomicU32::new(0),
            state: AtomicU8::new(OWNED),
            kicked: AtomicBool::new(false),
            next: AtomicPtr::new(std::ptr::null_mut()),
        }
    }

    /// The next lane of the list.
    pub(crate) fn next(&self) -> Option<&'static Lane> {
        // SAFETY: lanes are leaked, never freed.
        unsafe { self.next.load(Ordering::Acquire).as_ref() }
    }

    fn cap(&self) -> u64 {
        self.mask + 1
    }

    fn base(&self) -> *mut u8 {
        self.buf
    }

    /// Owner thread only: room for one record of up to [`LONGEST`] bytes at the write
    /// position, for the caller to pack its fields into ([`Writer`]) and publish; None when the
    /// lane is full.
    #[inline]
    pub(crate) fn begin(&self) -> Option<Writer<'_>> {
        let cap = self.cap();
        let head = self.head.0 .0.load(Ordering::Relaxed);
        let off = head & self.mask;
        let to_end = cap - off;
        let skip = if to_end < LONGEST as u64 { to_end } else { 0 };
        let need = skip + LONGEST as u64;
        if head + need - self.head.0 .2.get() > cap {
            self.head.0 .2.set(self.tail.0 .0.load(Ordering::Acquire));
            if head + need - self.head.0 .2.get() > cap {
                return None;
            }
        }
        let at = if skip > 0 { 0 } else { off };
        Some(Writer {
            lane: self,
            head,
            skip,
            at,
            // SAFETY: [at, at + LONGEST) is the producer's (room checked above) and inside the
            // ring (a record never crosses its end).
            body: unsafe { self.base().add(at as usize + HEADER) },
            len: 0,
            over: false,
        })
    }

    /// Owner thread only: copies a packed record in and publishes it (tests; the logging path
    /// packs straight into the lane).
    #[cfg(test)]
    pub(crate) fn try_push<const N: usize>(&self, p: &Packed<N>, kick: impl FnOnce()) -> Push {
        use super::record::Sink;
        if p.bytes().len() > BODY_MAX {
            return Push::TooLong;
        }
        let Some(mut w) = self.begin() else {
            return Push::Full;
        };
        w.put(p.bytes());
        if w.commit(p.meta, p.mono_ns, kick) {
            Push::Done
        } else {
            Push::TooLong
        }
    }

    /// Asks for the ring's next lines ahead of the next record: they were last read by the
    /// writer thread on another core, and fetching them is most of what a record costs when
    /// several are logged back to back.
    #[inline(always)]
    fn prefetch(&self, pos: u64) {
        #[cfg(target_arch = "x86_64")]
        for ahead in [64u64, 128, 192] {
            let p = self
                .base()
                .wrapping_add(((pos + ahead) & self.mask) as usize);
            // SAFETY: a prefetch is a hint; the address lies inside the ring.
            unsafe {
                core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_ET0 }>(
                    p as *const i8,
                )
            };
        }
    }

    /// Records published and not yet consumed.
    pub(crate) fn queued(&self) -> u64 {
        let pushed = self.head.0 .1.load(Ordering::Relaxed);
        pushed.saturating_sub(self.tail.0 .1.load(Ordering::Relaxed))
    }

    /// Consumer: the readable span now (`tail`, `head`), and whether the owner has gone (read
    /// before `head`, so an abandoned lane's last records are in the span).
    pub(crate) fn span(&self) -> (u64, u64, bool) {
        let gone = self.state.load(Ordering::Acquire) == ABANDONED;
        let head = self.head.0 .0.load(Ordering::Acquire);
        (self.tail.0 .0.load(Ordering::Relaxed), head, gone)
    }

    /// Consumer: the record at position `pos` (< the `head` of a `span`), skipping a wrap
    /// marker: (position of the record, position after it, view). None at `end`.
    pub(crate) fn read(&self, mut pos: u64, end: u64) -> Option<(u64, RecView<'_>)> {
        if pos >= end {
            return None;
        }
        // SAFETY: [pos, end) was published by the producer (release store of head, acquire load
        // in `span`) and is not reused before the consumer moves `tail` past it.
        unsafe {
            let mut h = self.base().add((pos & self.mask) as usize);
            let mut total = (h as *const u32).read();
            if total & SKIP != 0 {
                pos += self.cap() - (pos & self.mask);
                if pos >= end {
                    return None;
                }
                h = self.base().add((pos & self.mask) as usize);
                total = (h as *const u32).read();
            }
            let len = (h.add(4) as *const u32).read() as usize;
            let meta = &*((h.add(8) as *const usize).read() as *const Metadata<'static>);
            let stamp = (h.add(16) as *const u64).read();
            let body = std::slice::from_raw_parts(h.add(HEADER) as *const u8, len);
            Some((
                pos + total as u64,
                RecView {
                    meta,
                    stamp,
                    tid: self.tid.load(Ordering::Relaxed),
                    body,
                },
            ))
        }
    }

    /// Consumer: everything before `pos` (and `records` more records) is consumed. An
    /// abandoned lane that is now empty becomes free for another thread.
    pub(crate) fn consumed(&self, pos: u64, records: u64, gone: bool) {
        self.tail.0 .0.store(pos, Ordering::Release);
        let n = self.tail.0 .1.load(Ordering::Relaxed);
        self.tail.0 .1.store(n + records, Ordering::Relaxed);
        self.kicked.store(false, Ordering::Relaxed);
        if gone && pos == self.head.0 .0.load(Ordering::Acquire) {
            let _ =
                self.state
                    .compare_exchange(ABANDONED, FREE, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// Bytes of a record's fields a lane takes.
const BODY_MAX: usize = LONGEST - HEADER;

/// One record being packed into a lane by its owner thread ([`Lane::begin`]): the fields are
/// written where the record will be read, so nothing is copied (and no freshly written bytes are
/// read back). Longer than [`LONGEST`]: `commit` refuses, and the caller uses the shared queue.
pub(crate) struct Writer<'a> {
    lane: &'a Lane,
    head: u64,
    /// Bytes skipped to the ring's end (a wrap marker is written there at commit).
    skip: u64,
    /// Ring offset of the record.
    at: u64,
    body: *mut u8,
    len: usize,
    over: bool,
}

impl Writer<'_> {
    /// Publishes the record; false when it did not fit (nothing was published).
    #[inline]
    pub(crate) fn commit(
        self,
        meta: &'static Metadata<'static>,
        stamp: u64,
        kick: impl FnOnce(),
    ) -> bool {
        if self.over {
            return false;
        }
        let l = self.lane;
        let total = (HEADER + self.len + 7) & !7;
        // SAFETY: the header and the wrap marker lie in the room `begin` checked; offsets are
        // 8-aligned (records are multiples of 8, the ring a power of two >= 4096).
        unsafe {
            if self.skip > 0 {
                (l.base().add((self.head & l.mask) as usize) as *mut u32).write(SKIP);
            }
            let d = l.base().add(self.at as usize);
            (d as *mut u32).write(total as u32);
            (d.add(4) as *mut u32).write(self.len as u32);
            (d.add(8) as *mut usize).write(meta as *const Metadata<'static> as usize);
            (d.add(16) as *mut u64).write(stamp);
        }
        let new_head = self.head + self.skip + total as u64;
        l.head.0 .0.store(new_head, Ordering::Release);
        let n = l.head.0 .1.load(Ordering::Relaxed);
        l.head.0 .1.store(n + 1, Ordering::Relaxed);
        l.prefetch(new_head);
        if new_head - l.head.0 .2.get() > l.cap() / 2 {
            // The producer's view of `tail` is refreshed only when it runs out of room, so it
            // is usually old: the writer may have drained the lane since. Look at the real
            // tail before waking the writer; otherwise the first record after every drain
            // would pay for a futex wake-up (microseconds: the benchmark's p99).
            l.head.0 .2.set(l.tail.0 .0.load(Ordering::Acquire));
            if new_head - l.head.0 .2.get() > l.cap() / 2 && !l.kicked.load(Ordering::Relaxed) {
                l.kicked.store(true, Ordering::Relaxed);
                kick();
            }
        }
        true
    }
}

impl super::record::Sink for Writer<'_> {
    #[inline(always)]
    fn pos(&self) -> usize {
        self.len
    }
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        if self.over || self.len + b.len() > BODY_MAX {
            self.over = true;
            return;
        }
        // SAFETY: len + b.len() <= BODY_MAX: inside the reserved room.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), self.body.add(self.len), b.len()) };
        self.len += b.len();
    }
    #[inline(always)]
    fn put_word(&mut self, w: u128, used: usize) {
        if !self.over && self.len + 16 <= BODY_MAX {
            // SAFETY: len + 16 <= BODY_MAX: inside the reserved room.
            unsafe {
                std::ptr::write_unaligned(self.body.add(self.len) as *mut [u8; 16], w.to_le_bytes())
            };
            self.len += used;
        } else {
            self.put(&w.to_le_bytes()[..used]);
        }
    }
    #[inline(always)]
    fn patch_len(&mut self, at: usize, n: u16) {
        if !self.over && at + 2 <= self.len {
            // SAFETY: at + 2 <= len: bytes already written in the reserved room.
            unsafe {
                std::ptr::write_unaligned(self.body.add(at) as *mut [u8; 2], n.to_le_bytes())
            };
        }
    }
}

/// A record in a lane, as the writer reads it.
pub(crate) struct RecView<'a> {
    pub meta: &'static Metadata<'static>,
    pub stamp: u64,
    pub tid: u32,
    pub body: &'a [u8],
}

/// Gives the lane back when its thread exits.
struct Owner(Cell<*const Lane>);

impl Drop for Owner {
    fn drop(&mut self) {
        // SAFETY: lanes are leaked, never freed.
        if let Some(l) = unsafe { self.0.get().as_ref() } {
            l.state.store(ABANDONED, Ordering::Release);
        }
        super::forget_lane();
    }
}

thread_local! {
    static OWNER: Owner = const { Owner(Cell::new(std::ptr::null())) };
}

/// A lane for the calling thread (`bytes` long), taking a free one or making one. None when the
/// thread's destructors have run (a log call from an `atexit` handler or a late destructor):
/// the caller then uses the shared queue.
#[cold]
#[inline(never)]
pub(crate) fn claim(bytes: usize, tid: u32) -> Option<&'static Lane> {
    claim_in(&LANES, bytes, tid)
}

fn claim_in(list: &AtomicPtr<Lane>, bytes: usize, tid: u32) -> Option<&'static Lane> {
    OWNER
        .try_with(|o| {
            let lane = take_free(list, bytes).unwrap_or_else(|| push_new(list, bytes));
            lane.tid.store(tid, Ordering::Relaxed);
            o.0.set(lane);
            lane
        })
        .ok()
}

fn take_free(list: &AtomicPtr<Lane>, bytes: usize) -> Option<&'static Lane> {
    // SAFETY: lanes are leaked, never freed.
    let mut l = unsafe { list.load(Ordering::Acquire).as_ref() };
    while let Some(lane) = l {
        if lane.cap() == bytes as u64
            && lane.state.load(Ordering::Relaxed) == FREE
            && lane
                .state
                .compare_exchange(FREE, OWNED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            // The writer freed it after consuming everything: the producer's view of `tail`
            // catches up at its first push.
            return Some(lane);
        }
        l = lane.next();
    }
    None
}

fn push_new(list: &AtomicPtr<Lane>, bytes: usize) -> &'static Lane {
    let lane: &'static Lane = Box::leak(Box::new(Lane::new(bytes)));
    let mut head = list.load(Ordering::Acquire);
    loop {
        lane.next.store(head, Ordering::Relaxed);
        match list.compare_exchange_weak(
            head,
            lane as *const Lane as *mut Lane,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => return lane,
            Err(h) => head = h,
        }
    }
}

/// Records waiting in every lane.
pub(crate) fn queued() -> u64 {
    let mut n = 0;
    let mut l = first();
    while let Some(lane) = l {
        n += lane.queued();
        l = lane.next();
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::record::{unpack, Record, Val};

    crate::test_event_meta!(META, &["n"]);

    fn rec(n: u64) -> Packed {
        use tracing::field::Visit;
        let mut p = Packed::new(&META, n, 0);
        p.record_u64(&META.fields().field("n").expect("n"), n);
        p
    }

    /// Wraps many times: every record comes out once, in order, with its stamp; a full lane
    /// refuses; a record longer than a quarter of the lane is sent elsewhere.
    #[test]
    fn wraps_in_order_and_refuses_when_full() {
        let lane = Lane::new(MIN_BYTES);
        let mut next = 0u64;
        let mut seen = 0u64;
        for _ in 0..100 {
            let mut pushed = 0;
            while let Push::Done = lane.try_push(&rec(next), || {}) {
                next += 1;
                pushed += 1;
            }
            assert!(pushed > 0);
            assert_eq!(lane.queued(), pushed);
            let (mut pos, end, gone) = lane.span();
            assert!(!gone);
            let mut k = 0;
            while let Some((after, v)) = lane.read(pos, end) {
                assert_eq!(v.stamp, seen);
                let mut r = Record::<64>::new(&META, true);
                unpack(v.meta, v.stamp, v.tid, v.body, &mut r);
                assert_eq!(r.kvs(), [("n", Val::U64(seen))]);
                seen += 1;
                k += 1;
                pos = after;
            }
            lane.consumed(pos, k, false);
            assert_eq!(lane.queued(), 0);
        }
        assert_eq!(seen, next);
        let mut long: Packed = Packed::new(&META, 0, 0);
        use tracing::field::Visit;
        long.record_str(&META.fields().field("n").expect("n"), &"x".repeat(2000));
        assert!(matches!(lane.try_push(&long, || {}), Push::TooLong));
    }

    /// The producer wakes the writer once when its lane passes half full, and not again after
    /// the writer has drained it: the producer's cached view of the tail is old then, and
    /// judging by it would cost the next record a futex wake-up (docs/logging.md, "The
    /// pipeline").
    #[test]
    fn the_writer_is_woken_once_per_fill_not_after_a_drain() {
        use std::cell::Cell;
        let lane = Lane::new(MIN_BYTES);
        let kicks = Cell::new(0u32);
        let kick = || kicks.set(kicks.get() + 1);
        let mut n = 0u64;
        while lane.head.0 .0.load(Ordering::Relaxed) <= lane.cap() / 2 {
            assert!(matches!(lane.try_push(&rec(n), kick), Push::Done));
            n += 1;
        }
        assert_eq!(kicks.get(), 1, "woken when the lane passed half full");
        for _ in 0..4 {
            assert!(matches!(lane.try_push(&rec(n), kick), Push::Done));
            n += 1;
        }
        assert_eq!(kicks.get(), 1, "one wake-up per fill");
        let (mut pos, end, _) = lane.span();
        let mut k = 0;
        while let Some((after, _)) = lane.read(pos, end) {
            pos = after;
            k += 1;
        }
        lane.consumed(pos, k, false);
        assert_eq!(k, n);
        for _ in 0..8 {
            assert!(matches!(lane.try_push(&rec(n), kick), Push::Done));
            n += 1;
        }
        assert_eq!(kicks.get(), 1, "no wake-up for records after a drain");
    }

    /// A thread that exits gives its lane back; once the writer has drained it, the next new
    /// thread takes the same lane (lanes are as many as threads logging at once).
    #[test]
    fn an_exited_threads_lane_is_reused_once_drained() {
        // A list of its own: the writer thread of a pipeline another test started drains (and
        // frees) the process's lanes.
        static LIST: AtomicPtr<Lane> = AtomicPtr::new(std::ptr::null_mut());
        const BYTES: usize = MIN_BYTES;
        let first = std::thread::spawn(|| {
            let l = claim_in(&LIST, BYTES, 11).expect("lane");
            assert!(matches!(l.try_push(&rec(1), || {}), Push::Done));
            l as *const Lane as usize
        })
        .join()
        .expect("thread");
        // SAFETY: lanes are never freed.
        let lane = unsafe { &*(first as *const Lane) };
        let (pos, end, gone) = lane.span();
        assert!(gone, "the exited thread's destructor gave the lane back");
        let (after, v) = lane.read(pos, end).expect("its record");
        assert_eq!((v.stamp, v.tid), (1, 11));
        // Not reusable before it is drained.
        let other =
            std::thread::spawn(|| claim_in(&LIST, BYTES, 12).map(|l| l as *const Lane as usize))
                .join()
                .expect("thread");
        assert_ne!(other, Some(first));
        lane.consumed(after, 1, true);
        let again =
            std::thread::spawn(|| claim_in(&LIST, BYTES, 13).map(|l| l as *const Lane as usize))
                .join()
                .expect("thread");
        // The second lane is abandoned too, but no writer has looked at it: not free yet.
        assert_eq!(again, Some(first), "the drained lane is taken again");
    }
}
