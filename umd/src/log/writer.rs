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

use super::config::Config;
use super::filter::Filter;
use super::format::{write_record, Format};
use super::lane::Lane;
use super::limit::{self, ConsoleLimiter};
use super::record::{unpack, Packed, Record};
use super::rotate::{fallback_dir, FileConfig, RotatingFile, SystemClock};
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

/// Sink filters, swapped as a whole on change.
#[derive(Clone, Debug)]
pub struct Filters {
    /// Console filter.
    pub console: Filter,
    /// File filter.
    pub file: Filter,
    /// CLOCK_MONOTONIC ns from which these filters apply (0: from the start).
    pub since_ns: u64,
    /// The filters in force before `since_ns`. The writer judges a record by the filters of
    /// the time it was logged, not of the time it is written (a level switched off again right
    /// after a burst must not drop the burst); a few generations back are kept (`HISTORY`).
    pub before: Option<Arc<Filters>>,
}

/// Filter generations kept behind the current one ([`Filters::before`]).
pub(crate) const HISTORY: usize = 8;

impl Filters {
    /// The filters in force at `mono_ns` (the oldest kept, for a record older than all).
    pub fn at(&self, mono_ns: u64) -> &Filters {
        let mut f = self;
        while mono_ns < f.since_ns {
            match &f.before {
                Some(b) => f = b,
                None => break,
            }
        }
        f
    }

    /// `console` and `file` from `mono_ns` on, with `self` (cut to [`HISTORY`] generations)
    /// before.
    pub fn then(self: &Arc<Filters>, console: Filter, file: Filter, mono_ns: u64) -> Filters {
        Filters {
            console,
            file,
            since_ns: mono_ns,
            before: Some(trimmed(self, HISTORY - 1)),
        }
    }
}

/// `f` with at most `keep` generations behind it.
fn trimmed(f: &Arc<Filters>, keep: usize) -> Arc<Filters> {
    let before = match (&f.before, keep) {
        (None, _) => return f.clone(),
        (Some(_), 0) => None,
        (Some(b), k) => Some(trimmed(b, k - 1)),
    };
    Arc::new(Filters {
        console: f.console.clone(),
        file: f.file.clone(),
        since_ns: f.since_ns,
        before,
    })
}

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
    srcs: Vec<Src>,
}

/// A lane being drained: its readable span, the next record's position and time.
struct Src {
    lane: &'static Lane,
    pos: u64,
    end: u64,
    gone: bool,
    /// Records read and not yet handed back to the producer.
    unreleased: u64,
    /// The CLOCK_MONOTONIC ns of the record at `pos`, if there is one.
    next: Option<u64>,
}

/// Records per round above which the writer goes straight on to the next round.
const FULL_BATCH: usize = 256;

/// Records read from a lane before its space is handed back to the producer (so a long drain
/// does not keep a blocked producer waiting until its end).
const RELEASE_EVERY: u64 = 256;

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

    /// Writes every record the lanes and the shared queue hold now, merged by time stamp (each
    /// source is read in order, so a thread's records keep their order). Returns how many.
    fn drain_all(&mut self) -> usize {
        let mut src = std::mem::take(&mut self.srcs);
        src.clear();
        let mut l = super::lane::first();
        while let Some(lane) = l {
            let (pos, end, gone) = lane.span();
            if pos != end || gone {
                let next = lane
                    .read(pos, end)
                    .map(|(_, v)| self.clock.mono_ns(v.stamp));
                src.push(Src {
                    lane,
                    pos,
                    end,
                    gone,
                    unreleased: 0,
                    next,
                });
            }
            l = lane.next();
        }
        let mut n = 0;
        loop {
            let mut best: Option<(usize, u64)> = None;
            for (i, s) in src.iter().enumerate() {
                if let Some(t) = s.next {
                    if best.is_none_or(|(_, b)| t < b) {
                        best = Some((i, t));
                    }
                }
            }
            if let Some(q) = self.pending.front() {
                let t = self.clock.mono_ns(q.mono_ns);
                if best.is_none_or(|(_, b)| t < b) {
                    best = Some((usize::MAX, t));
                }
            }
            match best {
                None => break,
                Some((usize::MAX, _)) => {
                    if let Some(q) = self.pending.pop_front() {
                        self.write_one(q.meta, q.mono_ns, q.tid, q.bytes());
                    }
                }
                Some((i, _)) => {
                    let s = &mut src[i];
                    let lane = s.lane;
                    let Some((after, v)) = lane.read(s.pos, s.end) else {
                        s.next = None;
                        continue;
                    };
                    s.pos = after;
                    s.unreleased += 1;
                    s.next = lane
                        .read(after, s.end)
                        .map(|(_, w)| self.clock.mono_ns(w.stamp));
                    let (release, pos, k, gone) =
                        (s.unreleased >= RELEASE_EVERY, s.pos, s.unreleased, s.gone);
                    self.write_one(v.meta, v.stamp, v.tid, v.body);
                    if release {
                        lane.consumed(pos, k, gone);
                        src[i].unreleased = 0;
                    }
                }
            }
            n += 1;
        }
        for s in &src {
            s.lane.consumed(s.pos, s.unreleased, s.gone);
        }
        self.srcs = src;
        n
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

    /// Appends `self.text` to the file sink.
    fn file_append(&mut self, wall: u64) {
        match self.file_state {
            FileState::Down { ref mut lost, .. } => {
                *lost += 1;
                self.lost_since_announced += 1;
                self.stats.failed_file.fetch_add(1, Ordering::Relaxed);
            }
            FileState::Ok if !self.file.is_open() => {
                self.stats.failed_file.fetch_add(1, Ordering::Relaxed);
            }
            FileState::Ok => {
                let before = self.file.rotations;
                let buffered = self.file.buffered_records();
                match self.file.append(&self.text, wall) {
                    Ok(()) => {
                        // Records that left the buffer were written.
                        let now_buf = self.file.buffered_records();
                        let written = (buffered + 1).saturating_sub(now_buf);
                        self.stats
                            .written_file
                            .fetch_add(written, Ordering::Relaxed);
                        if written > 0 {
                            self.file_wrote();
                        }
                        if self.file.rotations != before {
                            self.stats.rotations.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => {
                        // `append` leaves the new record in the buffer on failure.
                        let remaining = self.file.buffered_records();
                        self.stats
                            .written_file
                            .fetch_add((buffered + 1).saturating_sub(remaining), Ordering::Relaxed);
                        let lost = self.file.take_failed();
                        let msg = format!(
                            "writing log file {} failed: {e}",
                            self.file.path_of(0).display()
                        );
                        self.file_down(&msg, lost);
                    }
                }
            }
        }
    }

    fn file_down(&mut self, why: &str, lost: u64) {
        self.stats.failed_file.fetch_add(lost, Ordering::Relaxed);
        self.stats.file_ok.store(false, Ordering::Relaxed);
        self.file.close();
        self.file_state = FileState::Down {
            retry_at: Instant::now() + self.retry,
            lost,
        };
        self.lost_since_announced += lost;
        if !self.down_announced {
            self.down_announced = true;
            tracing::warn!(
                retry_ms = self.retry.as_millis() as u64,
                "log file sink down: {why}; logging to the console only, retrying later (lost records are counted: umdLogGetStats)"
            );
        }
    }

    /// A write reached the file: if the sink had been announced down, say it is back, once.
    fn file_wrote(&mut self) {
        if self.down_announced {
            self.down_announced = false;
            let lost = std::mem::take(&mut self.lost_since_announced);
            tracing::warn!(
                lost,
                "log file sink back: {} ({lost} records were lost while it was down)",
                self.file.path_of(0).display()
            );
        }
    }

    fn open_file(&mut self) {
        let now = now_wall();
        match self.file.open(now) {
            Ok(()) => {}
            Err(e) if self.dir_is_default => {
                let first = self.file.path_of(0);
                let mut cfg = self.file.config().clone();
                cfg.dir = fallback_dir();
                self.file = RotatingFile::new(cfg, Arc::new(SystemClock));
                if let Err(e2) = self.file.open(now) {
                    let msg = format!(
                        "cannot open {} ({e}) nor {} ({e2})",
                        first.display(),
                        self.file.path_of(0).display()
                    );
                    self.file_down(&msg, 0);
                    return;
                }
                tracing::warn!(
                    "cannot open log file {} ({e}); using {}",
                    first.display(),
                    self.file.path_of(0).display()
                );
            }
            Err(e) => {
                let msg = format!("cannot open {}: {e}", self.file.path_of(0).display());
                self.file_down(&msg, 0);
                return;
            }
        }
        self.stats.file_ok.store(true, Ordering::Relaxed);
        super::ring::set_dir(&self.file.config().dir);
        super::set_file_path(Some(self.file.path_of(0)));
        // SAFETY: getpid has no preconditions.
        let me = unsafe { libc::getpid() } as u32;
        let n = super::rotate::prune_runs(&self.file.config().dir, self.max_runs, me);
        if n > 0 {
            tracing::info!(
                deleted = n,
                keep_runs = self.max_runs,
                "deleted the log files of older runs (UMD_LOG_MAX_RUNS)"
            );
        }
    }

    /// Writes the file buffer out; `sync` also fdatasyncs.
    fn flush_file(&mut self, sync: bool) {
        if !matches!(self.file_state, FileState::Ok) || !self.file.is_open() {
            return;
        }
        let n = self.file.buffered_records();
        match self.file.flush() {
            Ok(()) => {
                self.stats.written_file.fetch_add(n, Ordering::Relaxed);
                if n > 0 {
                    self.file_wrote();
                }
                if sync {
                    let _ = self.file.sync();
                }
            }
            Err(e) => {
                let remaining = self.file.buffered_records();
                self.stats
                    .written_file
                    .fetch_add(n.saturating_sub(remaining), Ordering::Relaxed);
                let lost = self.file.take_failed();
                let msg = format!(
                    "writing log file {} failed: {e}",
                    self.file.path_of(0).display()
                );
                self.file_down(&msg, lost);
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    fn level(l: tracing_subscriber::filter::LevelFilter) -> Filter {
        Filter::level(l)
    }

    /// A record is judged by the filters of the time it was logged; the history is cut to
    /// `HISTORY` generations, and a record older than all of them gets the oldest kept.
    #[test]
    fn filters_of_the_time_a_record_was_logged() {
        use tracing_subscriber::filter::LevelFilter as L;
        let mut f = Arc::new(Filters {
            console: level(L::WARN),
            file: level(L::INFO),
            since_ns: 0,
            before: None,
        });
        // Generation k (from k * 100 ns on) lets DEBUG into the file when k is odd.
        for k in 1..=20u64 {
            let file = if k % 2 == 1 { L::DEBUG } else { L::INFO };
            f = Arc::new(f.then(level(L::WARN), level(file), k * 100));
        }
        let debug_in_file = |ns: u64| f.at(ns).file.enabled("t", &Level::DEBUG);
        assert!(!debug_in_file(2000), "generation 20");
        assert!(debug_in_file(1999), "generation 19");
        assert!(debug_in_file(1950));
        assert!(!debug_in_file(1899), "generation 18");
        let mut depth = 0;
        let mut g: &Filters = &f;
        while let Some(b) = &g.before {
            depth += 1;
            g = b;
        }
        assert_eq!(depth, HISTORY);
        // Older than the oldest generation kept (12, from 1200 ns): that one.
        assert_eq!(g.since_ns, 1200);
        assert!(!debug_in_file(5));
    }
}
