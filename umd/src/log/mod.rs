//! libumd's log: the pipeline behind the `tracing` macros and `umd::record!` that the whole
//! driver uses (docs/logging.md is the user's reference, "The pipeline" the design).
//!
//! ```text
//!  caller thread                                        writer thread ("umd-log")
//!  umd::record!(INFO, "alloc", ctx, size, ...)  /  tracing::warn!(ctx = id, code, "...")
//!   ├─ call-site filter (cached interest; a disabled call is one atomic load)
//!   ├─ WARN+: formatted into a stack buffer → emergency ring (no allocation, no queue)
//!   └─ packed (metadata ptr, stamp, typed fields) ─ the thread's lane ──▶ merged by stamp
//!      (long records: the shared bounded queue)                          ├▶ console (stderr)
//!      ERROR: wakes the writer (the caller never waits)                  └▶ rotating file
//! ```
//!
//! Where the parts live: `subscriber.rs` (the calling thread's side), `fast.rs` (the typed
//! front end), `lane.rs`, `record/` (the packed and the unpacked record), `writer/` (the
//! thread, its merge, its file sink), `format.rs`, `rotate.rs`, `ring.rs`, `signals.rs`.
//!
//! What comes from where: `tracing` gives the macros, call-site metadata and the per-call-site
//! interest cache that makes a disabled call nearly free; `tracing-subscriber` gives the
//! `RUST_LOG`-syntax filter (`filter::Targets`). The subscriber itself, the queue and writer
//! thread, size+date rotation and the emergency ring are written here, because
//! `tracing-subscriber`'s `fmt` layer formats on the calling thread and `tracing-appender`
//! (0.2.5) lacks what is required: its `non_blocking` writer takes already formatted bytes, is
//! lossy by default, its `flush()` does nothing, worker I/O errors are discarded and queued
//! lines are lost unless the `WorkerGuard` is dropped (never, for a static inside a cdylib);
//! `RollingFileAppender` rotates by time only, in UTC, and panics when the directory cannot be
//! created.

pub mod clock;
pub mod config;
mod console;
pub mod fast;
pub mod filter;
pub mod format;
mod lane;
pub mod limit;
pub mod record;
pub mod ring;
pub mod rotate;
mod signals;
pub mod story;
mod subscriber;
pub mod targets;
mod writer;

use config::{Config, Overflow};
use crossbeam_channel::{bounded, SendTimeoutError, TrySendError};
use filter::Filter;
use record::{Packed, Record};
use std::cell::Cell;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use tracing::span::{Attributes, Id, Record as SpanRecord};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::LevelFilter;
pub use writer::Filters;
use writer::{Msg, Writer};
// The subscriber's types and its hand-off to the writer, for `fast.rs` (the typed front end
// shares the lanes and the wake-up rule).
use subscriber::{wake, UmdSubscriber};

pub use format::Format;

const UNINIT: u8 = 0;
const INITING: u8 = 1;
const READY: u8 = 2;
const SHUTDOWN: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
static PIPE: AtomicPtr<Pipeline> = AtomicPtr::new(std::ptr::null_mut());
static SUBSCRIBER_SET: AtomicBool = AtomicBool::new(false);
static HOOKS_SET: AtomicBool = AtomicBool::new(false);
static FILTERS: RwLock<Option<Arc<Filters>>> = RwLock::new(None);
static FILTER_GEN: AtomicU64 = AtomicU64::new(0);
/// The active file's path. Not a mutex: a child forked while the writer thread held one (it
/// sets the path when it opens the file) would block its own writer on it forever, losing the
/// child's records and stalling its exit. Each path set is leaked (a reader may still clone
/// it); there are a handful per process (open, a re-open, `umdLogSetFile`).
static FILE_PATH: AtomicPtr<PathBuf> = AtomicPtr::new(std::ptr::null_mut());
static SPAN_IDS: AtomicU64 = AtomicU64::new(1);

/// Counters, readable through `umdLogGetStats`.
#[derive(Default)]
pub struct Stats {
    /// Records dropped because the queue was full (or the pipeline was not running).
    pub dropped: AtomicU64,
    /// Records the file sink could not write.
    pub failed_file: AtomicU64,
    /// Records the console could not write.
    pub failed_console: AtomicU64,
    /// Records written to the file.
    pub written_file: AtomicU64,
    /// Records written to the console.
    pub written_console: AtomicU64,
    /// File rotations.
    pub rotations: AtomicU64,
    /// The file sink is writing.
    pub file_ok: AtomicBool,
    /// Explicit or ERROR flushes that timed out.
    pub flush_timeouts: AtomicU64,
}

static STATS: Stats = Stats {
    dropped: AtomicU64::new(0),
    failed_file: AtomicU64::new(0),
    failed_console: AtomicU64::new(0),
    written_file: AtomicU64::new(0),
    written_console: AtomicU64::new(0),
    rotations: AtomicU64::new(0),
    file_ok: AtomicBool::new(false),
    flush_timeouts: AtomicU64::new(0),
};

/// The running pipeline. Leaked on purpose: never freed, so a pointer loaded by any thread
/// stays valid, and a child after `fork` can simply forget the parent's.
struct Pipeline {
    tx: crossbeam_channel::Sender<Msg>,
    writer: std::thread::Thread,
    /// Joined at shutdown once the writer acknowledged, so that a `dlclose` never unmaps code
    /// that the writer thread is still running.
    join: Mutex<Option<std::thread::JoinHandle<()>>>,
    sleeping: Arc<AtomicBool>,
    overflow: Overflow,
    error_flush: Duration,
    capacity: usize,
    /// Bytes of each thread's lane.
    lane_bytes: usize,
}

/// Per-thread state, one TLS access per log call (which matters in a cdylib, where TLS goes
/// through `__tls_get_addr`): `bits` holds bits 0..32 the cached OS thread id (0: not yet),
/// `BUSY` while this thread is inside the subscriber, `WRITER` on the writer thread; `lane` is
/// the thread's record buffer (null: none yet, or given back at thread exit).
struct Me {
    bits: Cell<u64>,
    lane: Cell<*const lane::Lane>,
}

thread_local! {
    static ME: Me = const {
        Me {
            bits: Cell::new(0),
            lane: Cell::new(std::ptr::null()),
        }
    };
}
const BUSY: u64 = 1 << 32;
const WRITER: u64 = 1 << 33;

/// Crash flushes a fatal-signal handler asked for, and the last one the writer thread finished
/// (`flush_from_signal`).
pub(crate) static CRASH_FLUSH_ASKED: AtomicU64 = AtomicU64::new(0);
pub(crate) static CRASH_FLUSH_DONE: AtomicU64 = AtomicU64::new(0);

/// From a fatal-signal handler (signals.rs): has the writer thread write out everything logged
/// so far to the file and the console, and waits for it at most `max_ms` milliseconds. Without
/// it the records still queued (the process's start record among them) die with the process,
/// and its log is empty exactly when it crashed. Async-signal-safe: atomics, the writer's
/// futex wake-up (`Thread::unpark`), `nanosleep`; nothing is allocated or locked here. False
/// when there is no writer, the handler runs on the writer thread itself, or it did not finish
/// in time (a writer blocked on a full disk: the black box is written anyway).
pub(crate) fn flush_from_signal(max_ms: u32) -> bool {
    let Some(p) = pipeline() else {
        return false;
    };
    if STATE.load(Ordering::Acquire) != READY {
        return false;
    }
    if ME.try_with(|c| c.bits.get() & WRITER != 0).unwrap_or(true) {
        return false;
    }
    let want = CRASH_FLUSH_ASKED.fetch_add(1, Ordering::SeqCst) + 1;
    p.writer.unpark();
    let ms = libc::timespec {
        tv_sec: 0,
        tv_nsec: 1_000_000,
    };
    for _ in 0..max_ms {
        if CRASH_FLUSH_DONE.load(Ordering::Acquire) >= want {
            return true;
        }
        // SAFETY: nanosleep with a valid request and no remainder pointer.
        unsafe { libc::nanosleep(&ms, std::ptr::null_mut()) };
    }
    CRASH_FLUSH_DONE.load(Ordering::Acquire) >= want
}

/// Marks the calling thread as the writer thread (its events are handled in place).
pub(crate) fn mark_writer_thread() {
    let _ = ME.try_with(|c| c.bits.set(c.bits.get() | WRITER));
}

/// The calling thread no longer has a lane (its thread-local destructor gave it back).
pub(crate) fn forget_lane() {
    let _ = ME.try_with(|c| c.lane.set(std::ptr::null()));
}

/// Enters the subscriber: (thread id, on the writer thread, the thread's lane), or None when
/// this thread is already inside it (a log call made while formatting a log call is dropped).
#[inline]
fn enter() -> Option<(u32, bool, *const lane::Lane)> {
    ME.try_with(|c| {
        let v = c.bits.get();
        if v & BUSY != 0 {
            return None;
        }
        let tid = match v as u32 {
            0 => crate::error::detail::thread_id() as u32,
            t => t,
        };
        c.bits.set((v & WRITER) | BUSY | tid as u64);
        Some((tid, v & WRITER != 0, c.lane.get()))
    })
    .ok()
    .flatten()
}

/// Makes sure the pipeline runs. The hot path (already running) is one atomic load; the first
/// call reads the environment, starts the writer thread and installs the subscriber. Never
/// fails: if something cannot be set up the driver runs with less logging.
#[inline]
pub fn ensure_init() {
    if STATE.load(Ordering::Acquire) != READY {
        init_slow();
    }
}

#[cold]
#[inline(never)]
fn init_slow() {
    match STATE.compare_exchange(UNINIT, INITING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(INITING) => {
            // Another thread is setting up; wait a bounded time.
            let until = Instant::now() + Duration::from_secs(2);
            while STATE.load(Ordering::Acquire) == INITING && Instant::now() < until {
                std::thread::yield_now();
            }
            return;
        }
        Err(_) => return,
    }
    let cfg = Config::from_env();
    let new_filters = start(&cfg);
    // The subscriber is installed before READY is published: the writer waits for the end of
    // INITING (READY, or SHUTDOWN when the process exits first) before it logs about itself, so
    // its own notices reach a subscriber, and nothing waits for a state that may never come.
    if !SUBSCRIBER_SET.swap(true, Ordering::AcqRel) {
        if tracing::dispatcher::set_global_default(tracing::Dispatch::new(UmdSubscriber)).is_err() {
            console::write_direct(
                b"umd: another tracing subscriber is installed; libumd's log pipeline stays idle\n",
            );
        }
    } else if new_filters {
        tracing::callsite::rebuild_interest_cache();
    }
    let _ = STATE.compare_exchange(INITING, READY, Ordering::AcqRel, Ordering::Acquire);
    for w in &cfg.warnings {
        tracing::warn!(variable = w.variable.as_str(), "{}", w.text);
    }
}

/// True once the pipeline's set-up is over (running, or already shut down): the writer thread
/// waits for this before its first look at the queue.
pub(crate) fn init_over() -> bool {
    STATE.load(Ordering::Acquire) != INITING
}

/// Starts the writer; true when the filters were (re)set from the environment (false after a
/// `fork`, where the child keeps the parent's run-time filters).
fn start(cfg: &Config) -> bool {
    clock::init(cfg.tsc);
    ring::init(cfg.ring);
    ring::set_dir(&cfg.file_cfg.dir);
    let keep = FILTERS
        .try_read()
        .ok()
        .and_then(|g| g.as_ref().cloned())
        .is_some();
    if !keep {
        if let Ok(mut g) = FILTERS.try_write() {
            *g = Some(Arc::new(Filters {
                console: cfg.console.clone(),
                file: cfg.file.clone(),
                since_ns: 0,
                before: None,
            }));
        }
        FILTER_GEN.fetch_add(1, Ordering::Release);
    }
    let (tx, rx) = bounded(cfg.queue);
    let sleeping = Arc::new(AtomicBool::new(false));
    let w = Writer::new(cfg, rx, sleeping.clone(), &STATS);
    match std::thread::Builder::new()
        .name("umd-log".into())
        .spawn(move || w.run())
    {
        Ok(h) => {
            let p = Box::new(Pipeline {
                tx,
                writer: h.thread().clone(),
                join: Mutex::new(None),
                sleeping,
                overflow: cfg.overflow,
                error_flush: cfg.error_flush,
                capacity: cfg.queue,
                lane_bytes: lane::bytes_for(cfg.queue),
            });
            if let Ok(mut j) = p.join.lock() {
                *j = Some(h);
            }
            PIPE.store(Box::into_raw(p), Ordering::Release);
        }
        Err(e) => {
            console::write_direct(
                format!("umd: cannot start the log writer thread ({e}); only the emergency ring records\n").as_bytes(),
            );
        }
    }
    if !HOOKS_SET.swap(true, Ordering::AcqRel) {
        // SAFETY: registering plain extern "C" functions without arguments.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
            libc::pthread_atfork(
                Some(rotate::tz_lock_before_fork),
                Some(rotate::tz_unlock_after_fork),
                Some(rotate::tz_unlock_after_fork),
            );
        }
        if cfg.signals {
            signals::install();
        }
    }
    !keep
}

/// In the child after `fork`: the writer thread does not exist there. Forget (leak) the
/// parent's pipeline without touching its locks; the next log call starts a new one writing
/// `umd-<child pid>.log`. Only atomics and thread-local cells are touched here.
extern "C" fn after_fork_child() {
    PIPE.store(std::ptr::null_mut(), Ordering::Release);
    lane::forget_all();
    let _ = ME.try_with(|c| {
        c.bits.set(0);
        c.lane.set(std::ptr::null());
    });
    if STATE.load(Ordering::Acquire) != SHUTDOWN {
        STATE.store(UNINIT, Ordering::Release);
    }
    STATS.file_ok.store(false, Ordering::Relaxed);
}

/// At exit and at library unload (`.fini_array` runs for both): flush, stop the writer thread
/// and wait for it a bounded time. Records logged later only reach the emergency ring.
extern "C" fn at_fini() {
    shutdown(Duration::from_secs(1));
}

#[used]
#[link_section = ".fini_array"]
static FINI: extern "C" fn() = at_fini;

/// Flushes and stops the writer (exit / unload). Idempotent.
pub fn shutdown(timeout: Duration) {
    if STATE.swap(SHUTDOWN, Ordering::AcqRel) != READY {
        return;
    }
    let Some(p) = pipeline() else { return };
    let (ack, done) = bounded(1);
    if p.tx.send_timeout(Msg::Shutdown(ack), timeout).is_ok() {
        p.writer.unpark();
        if done.recv_timeout(timeout).is_ok() {
            // The writer has nothing left to do but return: the join is immediate.
            let h = p.join.lock().ok().and_then(|mut j| j.take());
            if let Some(h) = h {
                let _ = h.join();
            }
        }
    }
}

fn pipeline() -> Option<&'static Pipeline> {
    let p = PIPE.load(Ordering::Acquire);
    // SAFETY: a published pipeline is never freed.
    unsafe { p.as_ref() }
}

pub(crate) fn filters() -> Arc<Filters> {
    FILTERS
        .read()
        .ok()
        .and_then(|g| g.as_ref().cloned())
        .unwrap_or_else(filters_default)
}

/// The filters before the environment was read: WARN to the console, INFO to the file.
fn filters_default() -> Arc<Filters> {
    Arc::new(Filters {
        console: Filter::level(LevelFilter::WARN),
        file: Filter::level(LevelFilter::INFO),
        since_ns: 0,
        before: None,
    })
}

pub(crate) fn filter_gen() -> u64 {
    FILTER_GEN.load(Ordering::Acquire)
}

fn set_file_path(p: Option<PathBuf>) {
    let new = p.map_or(std::ptr::null_mut(), |p| Box::into_raw(Box::new(p)));
    // The old one is leaked on purpose (see FILE_PATH).
    let _ = FILE_PATH.swap(new, Ordering::AcqRel);
}

/// Which sinks (bit mask).
pub(crate) const SINK_CONSOLE: u32 = 1;
/// The file sink.
pub(crate) const SINK_FILE: u32 = 2;

fn update_filters(sinks: u32, f: impl Fn(&Filter) -> Filter) {
    ensure_init();
    // Read and replaced under one lock: two threads changing filters at once both count.
    if let Ok(mut g) = FILTERS.write() {
        let cur = g.clone().unwrap_or_else(filters_default);
        let console = if sinks & SINK_CONSOLE != 0 {
            f(&cur.console)
        } else {
            cur.console.clone()
        };
        let file = if sinks & SINK_FILE != 0 {
            f(&cur.file)
        } else {
            cur.file.clone()
        };
        // Records logged from now on are judged by the new filters; those logged before, still
        // waiting for the writer, by the old ones (`Filters::at`).
        *g = Some(Arc::new(cur.then(
            console,
            file,
            crate::error::detail::mono_ns(),
        )));
    }
    FILTER_GEN.fetch_add(1, Ordering::AcqRel);
    tracing::callsite::rebuild_interest_cache();
}

/// Sets the level of `module` (None or "": the default level) on the given sinks.
pub fn set_level(module: Option<&str>, level: LevelFilter, sinks: u32) {
    update_filters(sinks, |f| f.with_module(module, level));
}

/// Replaces the whole filter of the given sinks (`RUST_LOG` syntax).
pub fn set_filter(sinks: u32, spec: &str) -> Result<(), String> {
    let parsed = Filter::parse(spec)?;
    update_filters(sinks, |_| parsed.clone());
    Ok(())
}

/// The current filter of one sink, in canonical form.
pub fn get_filter(sink: u32) -> String {
    let f = filters();
    if sink == SINK_CONSOLE {
        f.console.to_string()
    } else {
        f.file.to_string()
    }
}

/// Changes the output format of the given sinks.
pub fn set_format(sinks: u32, format: Format) {
    ensure_init();
    if let Some(p) = pipeline() {
        let _ =
            p.tx.send_timeout(Msg::SetFormat(sinks, format), Duration::from_millis(100));
        p.writer.unpark();
    }
}

/// Why a flush did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlushError {
    /// The writer did not answer in time.
    Timeout,
    /// Written as far as possible, but the file sink is down (the message says why).
    Io(String),
}

/// Writes everything logged before this call to the sinks (and `fdatasync`s the file when
/// `sync`); returns when done or after `timeout`.
pub fn flush(timeout: Duration, sync: bool) -> Result<(), FlushError> {
    ensure_init();
    let Some(p) = pipeline() else {
        return Ok(());
    };
    if STATE.load(Ordering::Acquire) != READY {
        return Ok(());
    }
    let until = Instant::now() + timeout;
    let (ack, done) = bounded(1);
    p.writer.unpark();
    if p.tx
        .send_timeout(Msg::Flush { ack, sync }, timeout)
        .is_err()
    {
        STATS.flush_timeouts.fetch_add(1, Ordering::Relaxed);
        return Err(FlushError::Timeout);
    }
    p.writer.unpark();
    match done.recv_timeout(until.saturating_duration_since(Instant::now())) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(FlushError::Io(e)),
        Err(_) => {
            STATS.flush_timeouts.fetch_add(1, Ordering::Relaxed);
            Err(FlushError::Timeout)
        }
    }
}

/// Reconfigures the file sink (None: keep the current value); returns the active file path.
pub fn set_file(
    dir: Option<PathBuf>,
    max_bytes: Option<u64>,
    max_files: Option<u32>,
    timeout: Duration,
) -> Result<String, String> {
    ensure_init();
    let Some(p) = pipeline() else {
        return Err("the log pipeline is not running".into());
    };
    let (ack, done) = bounded(1);
    p.tx.send_timeout(
        Msg::SetFile {
            dir,
            max_bytes,
            max_files,
            ack,
        },
        timeout,
    )
    .map_err(|_| "the log writer did not take the request in time".to_string())?;
    p.writer.unpark();
    done.recv_timeout(timeout)
        .map_err(|_| "the log writer did not answer in time".to_string())?
}

/// The active log file, if the file sink has one open.
pub fn file_path() -> Option<PathBuf> {
    let p = FILE_PATH.load(Ordering::Acquire);
    // SAFETY: a published path is never freed (see FILE_PATH).
    unsafe { p.as_ref() }.cloned()
}

/// The active log file, waiting up to `timeout` for the writer to open it (right after start-up
/// the writer thread may not have run yet). None when the file sink is down.
pub fn file_path_wait(timeout: Duration) -> Option<PathBuf> {
    ensure_init();
    if let Some(p) = file_path() {
        return Some(p);
    }
    // The writer opens the file before it takes its first message: once a flush is answered,
    // the path is set unless opening failed.
    let _ = flush(timeout, false);
    file_path()
}

/// Writes the emergency ring to `umd-blackbox-<pid>-<time>.log`; the path or why not.
pub fn dump_blackbox(reason: &str) -> Result<String, String> {
    ensure_init();
    ring::dump(reason)
}

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Dropped because the queue was full.
    pub dropped: u64,
    /// Not written to the file (sink down).
    pub failed_file: u64,
    /// Not written to the console.
    pub failed_console: u64,
    /// Written to the file.
    pub written_file: u64,
    /// Written to the console.
    pub written_console: u64,
    /// File rotations.
    pub rotations: u64,
    /// Flushes that timed out.
    pub flush_timeouts: u64,
    /// Records stored in the emergency ring since start.
    pub ring_records: u64,
    /// Black boxes written.
    pub blackbox_dumps: u64,
    /// Records waiting in the queue.
    pub queued: u64,
    /// Queue capacity.
    pub queue_capacity: u64,
    /// The file sink is writing.
    pub file_ok: bool,
}

/// The counters now.
pub fn stats() -> StatsSnapshot {
    let p = pipeline();
    StatsSnapshot {
        dropped: STATS.dropped.load(Ordering::Relaxed),
        failed_file: STATS.failed_file.load(Ordering::Relaxed),
        failed_console: STATS.failed_console.load(Ordering::Relaxed),
        written_file: STATS.written_file.load(Ordering::Relaxed),
        written_console: STATS.written_console.load(Ordering::Relaxed),
        rotations: STATS.rotations.load(Ordering::Relaxed),
        flush_timeouts: STATS.flush_timeouts.load(Ordering::Relaxed),
        ring_records: ring::records_written(),
        blackbox_dumps: ring::dumps(),
        queued: p.map(|p| p.tx.len() as u64 + lane::queued()).unwrap_or(0),
        queue_capacity: p.map(|p| p.capacity as u64).unwrap_or(0),
        file_ok: STATS.file_ok.load(Ordering::Relaxed),
    }
}
