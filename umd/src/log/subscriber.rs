//! The `tracing` subscriber: which call sites are wanted, and what happens to an event on the
//! calling thread (WARN and worse into the emergency ring, every record packed into the thread's
//! lane or the shared queue, the writer woken only when it sleeps, a full lane dropped or waited
//! for per `UMD_LOG_OVERFLOW`).

use super::*;

/// The subscriber: decides per call site, captures, rings and enqueues.
pub(super) struct UmdSubscriber;

impl UmdSubscriber {
    fn wants(meta: &Metadata<'_>) -> bool {
        if !meta.is_event() {
            return false;
        }
        let l = meta.level();
        if *l <= Level::WARN {
            return true; // the emergency ring keeps every WARN-and-worse record
        }
        let f = filters();
        f.console.enabled(meta.target(), l) || f.file.enabled(meta.target(), l)
    }
}

struct Busy;
impl Drop for Busy {
    fn drop(&mut self) {
        let _ = ME.try_with(|c| c.bits.set(c.bits.get() & !BUSY));
    }
}

impl Subscriber for UmdSubscriber {
    fn register_callsite(&self, meta: &'static Metadata<'static>) -> Interest {
        if Self::wants(meta) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, meta: &Metadata<'_>) -> bool {
        Self::wants(meta)
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        let f = filters();
        Some(
            LevelFilter::WARN
                .max(f.console.max_level())
                .max(f.file.max_level()),
        )
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        Id::from_u64(SPAN_IDS.fetch_add(1, Ordering::Relaxed))
    }
    fn record(&self, _: &Id, _: &SpanRecord<'_>) {}
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        // A log call made while formatting a log call (a Debug impl that logs) is dropped.
        let Some((tid, writer, lane)) = enter() else {
            return;
        };
        let _busy = Busy;
        on_event(event, tid, writer, lane);
    }
}

/// Formats a WARN-or-worse event into a stack buffer and stores it in the ring. No allocation.
#[inline(never)]
fn ring_event(event: &Event<'_>, mono_ns: u64, tid: u32) {
    let mut r: Record<{ ring::SLOT_BYTES }> = Record::new(event.metadata(), false);
    r.mono_ns = mono_ns;
    r.tid = tid;
    event.record(&mut r);
    let mut line = [0u8; ring::SLOT_BYTES];
    let mut w = format::FixedLine::new(&mut line);
    format::write_text(&mut w, &r, crate::error::detail::wall_ns());
    let n = w.finish();
    ring::push(&line[..n]);
}

#[inline]
fn on_event(event: &Event<'_>, tid: u32, on_writer: bool, lane: *const lane::Lane) {
    let meta = event.metadata();
    let level = *meta.level();
    // WARN and worse read CLOCK_MONOTONIC so the ring and the sinks show the same mono ns;
    // the rest take the cheaper stamp the writer converts (see `clock`).
    let stamp = if level <= Level::WARN {
        let mono_ns = crate::error::detail::mono_ns();
        ring_event(event, mono_ns, tid);
        mono_ns
    } else {
        clock::stamp()
    };
    if on_writer {
        writer::push_local(packed(event, stamp, tid));
        return;
    }
    let p = match pipeline() {
        Some(p) => p,
        None => {
            // After fork (child) or before the first ABI call: start (or restart) here.
            ensure_init();
            match pipeline() {
                Some(p) if STATE.load(Ordering::Acquire) == READY => p,
                _ => {
                    STATS.dropped.fetch_add(1, Ordering::Relaxed);
                    return;
                }
            }
        }
    };
    let error = level == Level::ERROR;
    // SAFETY: lanes are leaked, never freed.
    let lane = match unsafe { lane.as_ref() } {
        Some(l) => Some(l),
        None => new_lane(p, tid),
    };
    match lane {
        Some(l) => match l.begin() {
            Some(w) => publish(p, w, event, stamp, tid, error),
            None => lane_full(p, l, event, stamp, tid, error),
        },
        None => enqueue(p, packed(event, stamp, tid), error),
    }
    if error && !p.error_flush.is_zero() {
        let _ = flush(p.error_flush, false);
    }
}

/// The event in the shared queue's form.
fn packed(event: &Event<'_>, stamp: u64, tid: u32) -> Packed {
    let mut r = Packed::new(event.metadata(), stamp, tid);
    event.record(&mut r);
    r
}

#[cold]
#[inline(never)]
fn new_lane(p: &Pipeline, tid: u32) -> Option<&'static lane::Lane> {
    let l = lane::claim(p.lane_bytes, tid)?;
    let _ = ME.try_with(|c| c.lane.set(l));
    Some(l)
}

/// Packs the event into the lane room `w` and publishes it; a record too long for a lane goes
/// through the shared queue.
#[inline]
fn publish(
    p: &Pipeline,
    mut w: lane::Writer<'_>,
    event: &Event<'_>,
    stamp: u64,
    tid: u32,
    error: bool,
) {
    event.record(&mut record::Encoder(&mut w));
    if w.commit(event.metadata(), stamp, || p.writer.unpark()) {
        wake(p, error);
    } else {
        enqueue(p, packed(event, stamp, tid), error);
    }
}

/// The writer parks when idle; wake it only then (no system call on a busy stream). A wake-up
/// lost to a race costs at most one flush interval of delay, except for an ERROR, which always
/// wakes it: the caller does not wait for its record, so the writer must write it to the file
/// at once (docs/logging.md, "ERROR").
#[inline]
pub(super) fn wake(p: &Pipeline, error: bool) {
    if error || (p.sleeping.load(Ordering::Relaxed) && p.sleeping.swap(false, Ordering::AcqRel)) {
        p.writer.unpark();
    }
}

#[cold]
#[inline(never)]
fn lane_full(p: &Pipeline, l: &lane::Lane, event: &Event<'_>, stamp: u64, tid: u32, error: bool) {
    p.writer.unpark();
    // In the default drop mode nothing waits, an ERROR neither: it is already in the emergency
    // ring (and so in any black box), and the drop is counted and said.
    let wait = match p.overflow {
        Overflow::Block(t) => t,
        Overflow::Drop => Duration::ZERO,
    };
    if !wait.is_zero() {
        let until = Instant::now() + wait;
        let mut spins = 0u32;
        loop {
            spins += 1;
            if spins < 64 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
            if let Some(w) = l.begin() {
                return publish(p, w, event, stamp, tid, error);
            }
            if STATE.load(Ordering::Acquire) != READY || Instant::now() >= until {
                break;
            }
            p.writer.unpark();
        }
    }
    STATS.dropped.fetch_add(1, Ordering::Relaxed);
}

#[inline]
fn enqueue(p: &Pipeline, r: Packed, error: bool) {
    let m = match p.tx.try_send(Msg::Rec(r)) {
        Ok(()) => {
            // The writer parks when idle; wake it only then (no system call on a busy stream).
            // A wake-up lost to a race costs at most one flush interval of delay, except for an
            // ERROR, which always wakes it: the caller does not wait for its record, so the
            // writer must write it to the file at once (docs/logging.md, "ERROR").
            if error
                || (p.sleeping.load(Ordering::Relaxed) && p.sleeping.swap(false, Ordering::AcqRel))
            {
                p.writer.unpark();
            }
            return;
        }
        Err(TrySendError::Disconnected(_)) => {
            STATS.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Err(TrySendError::Full(m)) => m,
    };
    p.writer.unpark();
    // In the default drop mode nothing waits, an ERROR neither: it is already in the emergency
    // ring (and so in any black box), and the drop is counted and said.
    let wait = match p.overflow {
        Overflow::Block(t) => t,
        Overflow::Drop => Duration::ZERO,
    };
    if wait.is_zero() {
        STATS.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    match p.tx.send_timeout(m, wait) {
        Ok(()) => {}
        Err(SendTimeoutError::Timeout(_)) | Err(SendTimeoutError::Disconnected(_)) => {
            STATS.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
