//! The writer thread: the only place that formats, writes and flushes.
//!
//! It drains the queue in batches, formats each record once per format in use, appends to the
//! console buffer and to the rotating file, writes the console after every batch, and writes
//! the file when its buffer is full, on the flush interval, at once for an ERROR, and on an
//! explicit flush (which also `fdatasync`s and is acknowledged). Nothing here ever reaches the
//! calling thread as an error: a failing sink is counted, reported once through the log
//! itself, and retried (file) on `retry`.
//!
//! The thread does not block on the queue: it polls with a 1 ms park while records arrive and
//! after a short idle spell sets `sleeping` and parks until the next flush is due; a producer
//! that sees `sleeping` unparks it. So a steady stream of records costs producers no system
//! call (a blocking receive would make every send wake a futex).

mod file;
mod filters;
mod merge;

pub use filters::Filters;

use super::config::Config;
use super::format::{write_record, Format};
use super::limit::{self, ConsoleLimiter};
use super::record::{unpack, Packed, Record};
use super::rotate::{FileConfig, RotatingFile, SystemClock};
use super::Stats;
use crossbeam_channel::{Receiver, Sender, TryRecvError};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the queue carries. Records travel inline (boxing them would cost every log call an
/// allocation); the control messages are rare.
#[allow(clippy::large_enum_variant)]
pub enum Msg {
    /// A record.
    Rec(Packed),
    /// Write everything queued before this (and `fdatasync` when `sync`), then acknowledge
    /// with the file sink's state.
    Flush {
        /// Acknowledgement.
        ack: Sender<Result<(), String>>,
        /// Also `fdatasync` the file.
        sync: bool,
    },
    /// Change the file sink (None: keep). Acknowledged with the open result.
    SetFile {
        /// New directory.
        dir: Option<std::path::PathBuf>,
        /// New size limit.
        max_bytes: Option<u64>,
        /// New file count.
        max_files: Option<u32>,
        /// Acknowledgement with the active file path or why it cannot be opened.
        ack: Sender<Result<String, String>>,
    },
    /// Change the format of the sinks (bit 0 console, bit 1 file).
    SetFormat(u32, Format),
    /// Flush, stop and acknowledge.
    Shutdown(Sender<()>),
}

/// Metadata of the reusable decoding record before its first use.
static DUMMY_META: tracing::Metadata<'static> = tracing::Metadata::new(
    "umd-log",
    "umd::log",
    tracing::Level::TRACE,
    None,
    None,
    None,
    tracing::field::FieldSet::new(&[], tracing::callsite::Identifier(&DUMMY_CS)),
    tracing::metadata::Kind::EVENT,
);
struct DummyCallsite;
impl tracing::callsite::Callsite for DummyCallsite {
    fn set_interest(&self, _: tracing::subscriber::Interest) {}
    fn metadata(&self) -> &tracing::Metadata<'_> {
        &DUMMY_META
    }
}
static DUMMY_CS: DummyCallsite = DummyCallsite;

thread_local! {
    static LOCAL: RefCell<Vec<Packed>> = const { RefCell::new(Vec::new()) };
}

/// Keeps a record the writer thread logged about itself, for the writer to write next.
pub fn push_local(r: Packed) {
    let _ = LOCAL.try_with(|l| {
        if let Ok(mut v) = l.try_borrow_mut() {
            if v.len() < 64 {
                v.push(r);
            }
        }
    });
}

enum FileState {
    Ok,
    /// Writing failed; retry at `retry_at`. `lost` records since it failed.
    Down {
        retry_at: Instant,
        lost: u64,
    },
}

pub(super) struct Writer {
    rx: Receiver<Msg>,
    sleeping: Arc<AtomicBool>,
    stats: &'static Stats,
    console_fmt: Format,
    file_fmt: Format,
    file: RotatingFile,
    file_state: FileState,
    dir_is_default: bool,
    max_runs: u32,
    filters: Arc<Filters>,
    filter_gen: u64,
    text: Vec<u8>,
    other: Vec<u8>,
    /// The decoded record being formatted (reused).
    rec: Record<512>,
    /// Per call site (metadata address, direct-mapped): bit 0 console, bit 1 file, for the
    /// current filters.
    route: Box<[(usize, u8); 512]>,
    console: Vec<u8>,
    console_failed: bool,
    /// Per-call-site console rate limit (the file gets every record).
    limiter: ConsoleLimiter,
    offset_ns: i64,
    clock: super::clock::Converter,
    flush_interval: Duration,
    retry: Duration,
    next_flush: Instant,
    drops_reported: u64,
    shutdown_ack: Option<Sender<()>>,
    /// "File sink down" was said and "back" not yet: say neither again until a write succeeds.
    down_announced: bool,
    /// Records lost since "down" was said.
    lost_since_announced: u64,
    /// Records taken from the shared queue, waiting to be merged with the lanes' records.
    pending: VecDeque<Packed>,
    /// The lanes being drained (kept for its allocation).
    srcs: Vec<merge::Src>,
}

/// Records per round above which the writer goes straight on to the next round.
const FULL_BATCH: usize = 256;

fn now_wall() -> u64 {
    crate::error::detail::wall_ns()
}

impl Writer {
    pub(super) fn new(
        cfg: &Config,
        rx: Receiver<Msg>,
        sleeping: Arc<AtomicBool>,
        stats: &'static Stats,
    ) -> Writer {
        Writer {
            rx,
            sleeping,
            stats,
            console_fmt: cfg.console_format,
            file_fmt: cfg.file_format,
            file: RotatingFile::new(cfg.file_cfg.clone(), Arc::new(SystemClock)),
            file_state: FileState::Ok,
            dir_is_default: cfg.dir_is_default,
            max_runs: cfg.max_runs,
            filters: super::filters(),
            filter_gen: super::filter_gen(),
            text: Vec::with_capacity(1024),
            other: Vec::with_capacity(1024),
            rec: Record::new(&DUMMY_META, true),
            route: Box::new([(0, 0); 512]),
            console: Vec::with_capacity(16 * 1024),
            console_failed: false,
            limiter: ConsoleLimiter::default(),
            offset_ns: 0,
            clock: super::clock::Converter::uncalibrated(),
            flush_interval: cfg.flush_interval,
            retry: cfg.retry,
            next_flush: Instant::now() + cfg.flush_interval,
            drops_reported: 0,
            shutdown_ack: None,
            down_announced: false,
            lost_since_announced: 0,
            pending: VecDeque::new(),
            srcs: Vec::new(),
        }
    }

    /// The thread body.
    pub(super) fn run(mut self) {
        super::mark_writer_thread();
        super::console::block_sigpipe_on_this_thread();
        // Set-up ends within microseconds of the spawn (the subscriber is installed); the bound
        // only guards against a set-up that never finishes. A process that exits first has moved
        // the state to SHUTDOWN, which ends the wait too, and its records are written below.
        let until = Instant::now() + Duration::from_secs(2);
        while !super::init_over() && Instant::now() < until {
            std::thread::park_timeout(Duration::from_micros(100));
        }
        self.clock = super::clock::Converter::calibrate();
        self.refresh_offset();
        self.open_file();
        let mut idle = 0u32;
        loop {
            self.refresh_offset();
            let mut n = 0;
            let mut stop = false;
            while n < 4096 {
                match self.rx.try_recv() {
                    Ok(Msg::Rec(r)) => {
                        n += 1;
                        self.pending.push_back(r);
                    }
                    Ok(m) => {
                        // Everything logged before the request is written before it is handled
                        // (a flush covers every lane).
                        n += 1 + self.drain_all();
                        if !self.handle(m) {
                            stop = true;
                            break;
                        }
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        stop = true;
                        break;
                    }
                }
            }
            n += self.drain_all();
            self.write_local();
            self.write_console();
            // A fatal signal's handler waits for everything logged so far (`flush_from_signal`).
            let crash = super::CRASH_FLUSH_ASKED.load(Ordering::Acquire);
            if crash > super::CRASH_FLUSH_DONE.load(Ordering::Relaxed) {
                n += self.drain_all();
                self.settle(false);
                super::CRASH_FLUSH_DONE.store(crash, Ordering::Release);
            }
            let now = Instant::now();
            if stop {
                self.report_drops();
                self.report_suppressed(true);
                self.settle(true);
                if let Some(a) = self.shutdown_ack.take() {
                    let _ = a.send(());
                }
                return;
            }
            if now >= self.next_flush {
                self.periodic(now);
                self.next_flush = now + self.flush_interval;
            }
            if n >= FULL_BATCH {
                idle = 0;
                continue;
            }
            if n > 0 {
                // A trickle: come back in a millisecond rather than at once. Draining a lane
                // right behind its producer moves the same cache lines (the record being
                // written, the lane's head) back and forth between the two cores for every
                // record, which costs the logging thread more than the records themselves; a
                // lane that passes half full, an ERROR and a flush wake the writer at once.
                idle = 0;
                std::thread::park_timeout(Duration::from_millis(1));
                continue;
            }
            idle += 1;
            if idle < 64 {
                std::thread::park_timeout(Duration::from_millis(1));
            } else {
                self.sleeping.store(true, Ordering::SeqCst);
                if self.rx.is_empty() && super::lane::queued() == 0 {
                    let wait = self.next_flush.saturating_duration_since(Instant::now());
                    std::thread::park_timeout(wait.max(Duration::from_millis(1)));
                }
                self.sleeping.store(false, Ordering::SeqCst);
            }
        }
    }

    fn refresh_offset(&mut self) {
        self.clock.refresh();
        let wall = now_wall() as i64;
        let mono = crate::error::detail::mono_ns() as i64;
        self.offset_ns = wall - mono;
    }

    /// Returns false to stop.
    fn handle(&mut self, m: Msg) -> bool {
        match m {
            Msg::Rec(r) => self.write_one(r.meta, r.mono_ns, r.tid, r.bytes()),
            Msg::Flush { ack, sync } => {
                self.settle(sync);
                let res = match &self.file_state {
                    FileState::Ok if self.file.is_open() => Ok(()),
                    FileState::Ok => Err("the log file is not open".to_string()),
                    FileState::Down { lost, .. } => Err(format!(
                        "the log file sink is down ({lost} records lost so far); console only"
                    )),
                };
                let _ = ack.send(res);
            }
            Msg::SetFile {
                dir,
                max_bytes,
                max_files,
                ack,
            } => {
                self.flush_file(false);
                let old = self.file.config().clone();
                let cfg = FileConfig {
                    dir: dir.clone().unwrap_or(old.dir.clone()),
                    stem: old.stem.clone(),
                    max_bytes: max_bytes.unwrap_or(old.max_bytes),
                    max_files: max_files.unwrap_or(old.max_files),
                };
                if dir.is_some() {
                    self.dir_is_default = false;
                }
                self.file.close();
                self.file = RotatingFile::new(cfg, Arc::new(SystemClock));
                self.file_state = FileState::Ok;
                let res = match self.file.open(now_wall()) {
                    Ok(()) => {
                        super::ring::set_dir(&self.file.config().dir);
                        super::set_file_path(Some(self.file.path_of(0)));
                        Ok(self.file.path_of(0).display().to_string())
                    }
                    Err(e) => {
                        let msg = format!(
                            "cannot open log file {}: {e}",
                            self.file.path_of(0).display()
                        );
                        self.file_down(&msg, 0);
                        Err(msg)
                    }
                };
                let _ = ack.send(res);
            }
            Msg::SetFormat(sinks, f) => {
                if sinks & 1 != 0 {
                    self.console_fmt = f;
                }
                if sinks & 2 != 0 {
                    self.file_fmt = f;
                }
            }
            Msg::Shutdown(ack) => {
                self.shutdown_ack = Some(ack);
                return false;
            }
        }
        true
    }

    /// Writes one record; an ERROR reaches the file at once.
    fn write_one(
        &mut self,
        meta: &'static tracing::Metadata<'static>,
        stamp: u64,
        tid: u32,
        body: &[u8],
    ) {
        self.write_record(meta, stamp, tid, body);
        if *meta.level() == tracing::Level::ERROR {
            self.flush_file(false);
        }
    }

    fn write_record(
        &mut self,
        meta: &'static tracing::Metadata<'static>,
        stamp: u64,
        tid: u32,
        body: &[u8],
    ) {
        let g = super::filter_gen();
        if g != self.filter_gen {
            self.filters = super::filters();
            self.filter_gen = g;
            self.route.fill((0, 0));
        }
        let mono = self.clock.mono_ns(stamp);
        let key = meta as *const _ as usize;
        let slot = (key >> 4) % self.route.len();
        let bits = if mono < self.filters.since_ns {
            // Logged before the last filter change: judged by the filters of its time.
            let (l, t) = (meta.level(), meta.target());
            let f = self.filters.at(mono);
            f.console.enabled(t, l) as u8 | (f.file.enabled(t, l) as u8) << 1
        } else if self.route[slot].0 == key {
            self.route[slot].1
        } else {
            let (l, t) = (meta.level(), meta.target());
            let b = self.filters.console.enabled(t, l) as u8
                | (self.filters.file.enabled(t, l) as u8) << 1;
            self.route[slot] = (key, b);
            b
        };
        let (mut to_console, to_file) = (bits & 1 != 0, bits & 2 != 0);
        if to_console {
            to_console = self.console_admit(meta);
        }
        if !to_console && !to_file {
            return;
        }
        let wall = (mono as i64).saturating_add(self.offset_ns).max(0) as u64;
        self.rec.reset(meta);
        unpack(meta, stamp, tid, body, &mut self.rec);
        self.rec.mono_ns = mono;
        self.text.clear();
        let first = if to_file {
            self.file_fmt
        } else {
            self.console_fmt
        };
        write_record(&mut self.text, first, &self.rec, wall);
        if to_console {
            if self.console_fmt == first {
                self.console.extend_from_slice(&self.text);
            } else {
                self.other.clear();
                write_record(&mut self.other, self.console_fmt, &self.rec, wall);
                self.console.extend_from_slice(&self.other);
            }
            if self.console.len() > 64 * 1024 {
                self.write_console();
            }
        }
        if to_file {
            self.file_append(wall);
        }
    }

    /// Writes out everything, including what writing itself logged (notices), so a flush
    /// acknowledgement covers them too.
    /// The console is written inside the loop, before the file: its failure notice ("console
    /// sink down", e.g. for the suppressed-records summary a closed pipe refuses at exit) is
    /// itself a record that must reach the file.
    fn settle(&mut self, sync: bool) {
        for _ in 0..4 {
            self.write_local();
            self.write_console();
            self.flush_file(sync);
            let more = LOCAL
                .try_with(|l| l.try_borrow().map(|v| !v.is_empty()).unwrap_or(false))
                .unwrap_or(false);
            if !more {
                break;
            }
        }
    }

    fn write_console(&mut self) {
        if self.console.is_empty() {
            return;
        }
        let res = super::console::write_blocked(&self.console);
        let lines = self.console.iter().filter(|&&c| c == b'\n').count() as u64;
        match res {
            Ok(()) => {
                self.stats
                    .written_console
                    .fetch_add(lines, Ordering::Relaxed);
            }
            Err(e) => {
                self.stats
                    .failed_console
                    .fetch_add(lines, Ordering::Relaxed);
                if !self.console_failed {
                    self.console_failed = true;
                    let errno = e.raw_os_error().unwrap_or(0);
                    tracing::warn!(
                        errno,
                        "console sink down: writing stderr failed: {e}; console records are dropped and counted (umdLogStats.failed_console), the file keeps them"
                    );
                }
            }
        }
        self.console.clear();
    }

    /// Writes what the writer thread logged about itself (notices), to the sinks and the ring.
    fn write_local(&mut self) {
        loop {
            let batch: Vec<Packed> = LOCAL
                .try_with(|l| l.try_borrow_mut().map(|mut v| std::mem::take(&mut *v)))
                .ok()
                .and_then(Result::ok)
                .unwrap_or_default();
            if batch.is_empty() {
                return;
            }
            for r in &batch {
                self.write_record(r.meta, r.mono_ns, r.tid, r.bytes());
            }
        }
    }

    /// The console rate limit for one record (out of line: the file-only records that make up a
    /// busy stream never pay for it).
    #[cold]
    #[inline(never)]
    fn console_admit(&mut self, meta: &'static tracing::Metadata<'static>) -> bool {
        let mut ended = Vec::new();
        let admit = self.limiter.admit(meta, Instant::now(), &mut ended);
        self.say_suppressed(&ended);
        admit
    }

    /// Says, once per ended window, how many console records a call site had suppressed.
    fn say_suppressed(&self, ended: &[limit::Suppressed]) {
        if ended.is_empty() {
            return;
        }
        let file = self.file.path_of(0).display().to_string();
        for s in ended {
            limit::say(s, &file);
        }
    }

    /// The summaries of windows that ended by now (all of them when `all`: exit).
    fn report_suppressed(&mut self, all: bool) {
        let ended = self.limiter.take_ended(Instant::now(), all);
        self.say_suppressed(&ended);
    }

    fn report_drops(&mut self) {
        let d = self.stats.dropped.load(Ordering::Relaxed);
        if d > self.drops_reported {
            let first = self.drops_reported == 0;
            self.drops_reported = d;
            tracing::warn!(
                dropped = d,
                "log queue full: {} records dropped in total{}",
                d,
                if first {
                    " (UMD_LOG_OVERFLOW, UMD_LOG_QUEUE; counters: umdLogGetStats)"
                } else {
                    ""
                }
            );
        }
    }

    fn periodic(&mut self, now: Instant) {
        self.report_drops();
        self.report_suppressed(false);
        self.write_local();
        self.flush_file(false);
        match self.file_state {
            FileState::Down { retry_at, lost } if now >= retry_at => {
                match self.file.open(now_wall()) {
                    Ok(()) => {
                        // "Back" is said once a write succeeds (file_wrote).
                        self.file_state = FileState::Ok;
                        self.stats.file_ok.store(true, Ordering::Relaxed);
                        super::ring::set_dir(&self.file.config().dir);
                        super::set_file_path(Some(self.file.path_of(0)));
                    }
                    Err(_) => {
                        self.file_state = FileState::Down {
                            retry_at: now + self.retry,
                            lost,
                        };
                    }
                }
            }
            FileState::Ok if self.file.is_open() && self.file.replaced() => {
                let path = self.file.path_of(0);
                match self.file.reopen(now_wall()) {
                    Ok(()) => tracing::warn!(
                        "log file {} was deleted or replaced; reopened it",
                        path.display()
                    ),
                    Err(e) => {
                        let msg = format!(
                            "log file {} was deleted and cannot be recreated: {e}",
                            path.display()
                        );
                        self.file_down(&msg, 0);
                    }
                }
            }
            _ => {}
        }
        self.settle(false);
    }
}
