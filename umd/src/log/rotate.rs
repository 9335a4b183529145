//! The file sink: size- and date-rotating log files, written by hand.
//!
//! `tracing-appender`'s `RollingFileAppender` (0.2.5) rotates by time only (size-based rotation
//! is an upstream pull request open since 2024), names by UTC date, and its `new` and
//! `rolling::daily`-style constructors panic when the directory cannot be created. libumd needs
//! size *and* local-date rotation, a fixed number of kept files and no panic, so this part is
//! written here on top of plain `std::fs`.
//!
//! Naming (stable for a log reader): the active file is `<dir>/umd-<pid>.log`; on rotation it
//! becomes `umd-<pid>.1.log`, the previous `.1` becomes `.2`, and so on. At most `max_files`
//! files exist per process (the active one included); the oldest is deleted.
//!
//! A rotation happens before a record is appended when the active file is not empty and
//! (a) the record would take it past `max_bytes`, or (b) the record's local date differs from
//! the date the active file was opened on. Records are never split across files.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the local date comes from (injected in tests).
pub trait Clock: Send + Sync {
    /// Local time's offset from UTC at `wall_ns`, seconds (east positive).
    fn utc_offset_s(&self, wall_ns: u64) -> i64;
}

/// The system's local time zone (`localtime_r`).
pub struct SystemClock;

/// glibc's `localtime_r` holds a process-wide lock (its time-zone state) that `fork()` does not
/// reset: a child forked while the writer thread was inside it would block its own writer on it
/// forever, losing the child's records and stalling its exit. libumd's calls hold this mutex,
/// and `fork()` waits for it (pthread_atfork handlers, registered by `log::start`).
struct TzLock(std::cell::UnsafeCell<libc::pthread_mutex_t>);
// SAFETY: a pthread mutex is made to be shared between threads; it is only used through
// pthread_mutex_lock/unlock.
unsafe impl Sync for TzLock {}
static TZ_LOCK: TzLock = TzLock(std::cell::UnsafeCell::new(libc::PTHREAD_MUTEX_INITIALIZER));

/// `pthread_atfork` prepare handler: no libumd `localtime_r` call is under way across a fork.
pub(crate) extern "C" fn tz_lock_before_fork() {
    // SAFETY: a statically initialised mutex.
    unsafe { libc::pthread_mutex_lock(TZ_LOCK.0.get()) };
}

/// `pthread_atfork` parent and child handler: releases what the prepare handler took (in the
/// child the forking thread, which took it, is the one that runs this).
pub(crate) extern "C" fn tz_unlock_after_fork() {
    // SAFETY: held by this thread since `tz_lock_before_fork`.
    unsafe { libc::pthread_mutex_unlock(TZ_LOCK.0.get()) };
}

impl Clock for SystemClock {
    fn utc_offset_s(&self, wall_ns: u64) -> i64 {
        let t = (wall_ns / 1_000_000_000) as libc::time_t;
        // SAFETY: an all-zero tm is a valid out-value.
        let mut tm: libc::tm = unsafe { std::mem::zeroed() };
        tz_lock_before_fork();
        // SAFETY: both pointers are valid for the call.
        let ok = !unsafe { libc::localtime_r(&t, &mut tm) }.is_null();
        tz_unlock_after_fork();
        if !ok {
            return 0;
        }
        tm.tm_gmtoff
    }
}

/// A fixed UTC offset (tests).
pub struct FixedOffset(pub i64);

impl Clock for FixedOffset {
    fn utc_offset_s(&self, _: u64) -> i64 {
        self.0
    }
}

/// Configuration of the file sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileConfig {
    /// Directory of the log files.
    pub dir: PathBuf,
    /// File name stem: files are `<stem>.log`, `<stem>.1.log`, ...
    pub stem: String,
    /// Rotate before a file would exceed this many bytes (minimum 4096).
    pub max_bytes: u64,
    /// Files kept, the active one included (minimum 1).
    pub max_files: u32,
}

/// The rotating file.
pub struct RotatingFile {
    cfg: FileConfig,
    clock: Arc<dyn Clock>,
    file: Option<File>,
    size: u64,
    /// Wall ns at which the active file's local day ends.
    day_end_ns: u64,
    buf: Vec<u8>,
    buf_records: u64,
    /// A write failed part-way: the next write starts a fresh line.
    partial: bool,
    /// Rotations done.
    pub rotations: u64,
}

/// Bytes buffered before they are written out.
const BUF_BYTES: usize = 64 * 1024;

/// Days since the epoch of local time at `wall_ns`.
fn local_day(clock: &dyn Clock, wall_ns: u64) -> i64 {
    ((wall_ns / 1_000_000_000) as i64 + clock.utc_offset_s(wall_ns)).div_euclid(86_400)
}

impl RotatingFile {
    /// A closed file sink; [`RotatingFile::open`] opens it.
    pub fn new(mut cfg: FileConfig, clock: Arc<dyn Clock>) -> Self {
        cfg.max_bytes = cfg.max_bytes.max(4096);
        cfg.max_files = cfg.max_files.max(1);
        RotatingFile {
            cfg,
            clock,
            file: None,
            size: 0,
            day_end_ns: u64::MAX,
            buf: Vec::with_capacity(BUF_BYTES),
            buf_records: 0,
            partial: false,
            rotations: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FileConfig {
        &self.cfg
    }

    /// Path of the file with rotation index `i` (0: the active file).
    pub fn path_of(&self, i: u32) -> PathBuf {
        if i == 0 {
            self.cfg.dir.join(format!("{}.log", self.cfg.stem))
        } else {
            self.cfg.dir.join(format!("{}.{i}.log", self.cfg.stem))
        }
    }

    /// True while a file is open.
    pub fn is_open(&self) -> bool {
        self.file.is_some()
    }

    /// Creates the directory if needed and opens (appends to) the active file. `now_ns` dates it.
    pub fn open(&mut self, now_ns: u64) -> io::Result<()> {
        fs::create_dir_all(&self.cfg.dir)?;
        let path = self.path_of(0);
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o640)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)?;
        let f = above_stdio(f)?;
        // A shared lock on the active file says "this run is live" to the pruning of other
        // processes ([`prune_runs`]), across PID namespaces too; it goes away with the process.
        // Best effort: a filesystem without flock leaves the pid check alone.
        // SAFETY: flock on a file descriptor this function owns.
        unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&f),
                libc::LOCK_SH | libc::LOCK_NB,
            );
        }
        self.size = f.metadata().map(|m| m.len()).unwrap_or(0);
        self.file = Some(f);
        self.set_day(now_ns);
        if self.partial {
            self.partial = false;
            self.buf.splice(0..0, *b"\n");
        }
        Ok(())
    }

    fn set_day(&mut self, now_ns: u64) {
        let day = local_day(&*self.clock, now_ns);
        let off = self.clock.utc_offset_s(now_ns);
        let end_s = (day + 1) * 86_400 - off;
        self.day_end_ns = if end_s <= 0 {
            0
        } else {
            (end_s as u64).saturating_mul(1_000_000_000)
        };
    }

    /// Closes the file, dropping (and returning the count of) buffered records.
    pub fn close(&mut self) -> u64 {
        let lost = self.buf_records;
        self.buf.clear();
        self.buf_records = 0;
        self.file = None;
        lost
    }

    /// Appends one record line dated `wall_ns`, rotating first when due. Errors come from
    /// writing out the buffer; the records it held are then counted by the caller via
    /// [`RotatingFile::take_failed`].
    pub fn append(&mut self, line: &[u8], wall_ns: u64) -> io::Result<()> {
        if self.file.is_none() {
            return Err(io::Error::other("log file is not open"));
        }
        let pending = self.size + self.buf.len() as u64;
        let too_big = pending > 0 && pending + line.len() as u64 > self.cfg.max_bytes;
        let new_day = pending > 0 && wall_ns >= self.day_end_ns;
        if too_big || new_day {
            // On failure the record joins the buffer so the caller counts it with the others.
            if let Err(e) = self.flush().and_then(|()| self.rotate(wall_ns)) {
                self.buf.extend_from_slice(line);
                self.buf_records += 1;
                return Err(e);
            }
        } else if wall_ns >= self.day_end_ns {
            self.set_day(wall_ns);
        }
        self.buf.extend_from_slice(line);
        self.buf_records += 1;
        if self.buf.len() >= BUF_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Records in the buffer that a failed write did not get out (and forgets them).
    pub fn take_failed(&mut self) -> u64 {
        let n = self.buf_records;
        self.buf.clear();
        self.buf_records = 0;
        n
    }

    /// Writes the buffer to the file (`write(2)`, not `fsync`). On failure the whole records
    /// that did get out leave the buffer; the rest stay (see [`RotatingFile::take_failed`]).
    pub fn flush(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let Some(f) = self.file.as_mut() else {
            return Err(io::Error::other("log file is not open"));
        };
        let mut done = 0;
        let mut err = None;
        while done < self.buf.len() {
            match f.write(&self.buf[done..]) {
                Ok(0) => {
                    err = Some(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
                    break;
                }
                Ok(n) => {
                    done += n;
                    self.size += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        match err {
            None => {
                self.buf.clear();
                self.buf_records = 0;
                Ok(())
            }
            Some(e) => {
                let whole = self.buf[..done].iter().filter(|&&b| b == b'\n').count() as u64;
                self.partial |= done > 0 && self.buf[done - 1] != b'\n';
                self.buf.drain(..done);
                self.buf_records = self.buf_records.saturating_sub(whole);
                Err(e)
            }
        }
    }

    /// `fdatasync` of the active file (explicit flush requests only).
    pub fn sync(&mut self) -> io::Result<()> {
        match self.file.as_ref() {
            Some(f) => f.sync_data(),
            None => Ok(()),
        }
    }

    /// Records written out since the last call (for the counters).
    pub fn buffered_records(&self) -> u64 {
        self.buf_records
    }

    /// True when the active file was deleted or replaced under us (checked on the flush
    /// interval; the writer then reopens it).
    pub fn replaced(&self) -> bool {
        let Some(f) = self.file.as_ref() else {
            return false;
        };
        let Ok(mine) = f.metadata() else {
            return true;
        };
        match fs::metadata(self.path_of(0)) {
            Ok(m) => m.ino() != mine.ino() || m.dev() != mine.dev(),
            Err(_) => true,
        }
    }

    /// Reopens the active path after it was deleted or replaced.
    pub fn reopen(&mut self, now_ns: u64) -> io::Result<()> {
        self.file = None;
        self.open(now_ns)
    }

    /// Shifts `<stem>.log` → `.1` → `.2` ..., deletes what falls beyond `max_files`, and opens a
    /// fresh active file.
    fn rotate(&mut self, now_ns: u64) -> io::Result<()> {
        self.file = None;
        let keep = self.cfg.max_files;
        // Index keep-1 would be shifted past the limit; indices >= keep are leftovers of a larger
        // max_files set earlier.
        let first = keep.saturating_sub(1).max(1);
        let _ = fs::remove_file(self.path_of(first));
        let mut i = first + 1;
        while fs::remove_file(self.path_of(i)).is_ok() {
            i += 1;
        }
        if keep == 1 {
            let _ = fs::remove_file(self.path_of(0));
        } else {
            for j in (1..keep - 1).rev() {
                let from = self.path_of(j);
                if from.exists() {
                    fs::rename(&from, self.path_of(j + 1))?;
                }
            }
            let active = self.path_of(0);
            if active.exists() {
                fs::rename(&active, self.path_of(1))?;
            }
        }
        self.rotations += 1;
        self.size = 0;
        self.open(now_ns)
    }
}

/// The process id a libumd log file belongs to: `umd-<pid>.log`, `umd-<pid>.<n>.log`,
/// `umd-blackbox-<pid>-<time>.log`.
pub fn run_of(name: &str) -> Option<u32> {
    let rest = name.strip_suffix(".log")?;
    if let Some(b) = rest.strip_prefix("umd-blackbox-") {
        return b.split('-').next()?.parse().ok();
    }
    rest.strip_prefix("umd-")?.split('.').next()?.parse().ok()
}

/// Black boxes of exited runs kept in a directory, newest first (see [`prune_runs`]).
pub const BLACKBOXES_KEPT: usize = 32;

/// Directory-wide retention across processes: every process writes its own `umd-<pid>*` files,
/// so without this a directory shared by many runs would grow without bound. Keeps the log files
/// of the `keep` most recent runs (by newest modification time; the calling process and
/// processes still alive always count as kept) and deletes the log files of older runs that
/// have exited. Black boxes are the evidence of a crash or a device loss, which a crash loop
/// would otherwise delete after `keep` restarts: they are not pruned with their run, only beyond
/// the newest [`BLACKBOXES_KEPT`] of exited runs. Returns the number of files deleted.
/// `keep == 0` disables it.
pub fn prune_runs(dir: &Path, keep: u32, me: u32) -> usize {
    if keep == 0 {
        return 0;
    }
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    let mut runs: std::collections::HashMap<u32, (std::time::SystemTime, Vec<PathBuf>)> =
        std::collections::HashMap::new();
    let mut boxes: Vec<(u32, std::time::SystemTime, PathBuf)> = Vec::new();
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(pid) = run_of(name) else { continue };
        let Ok(md) = e.metadata() else { continue };
        if !md.is_file() {
            continue;
        }
        let t = md.modified().unwrap_or(std::time::UNIX_EPOCH);
        if name.starts_with("umd-blackbox-") {
            boxes.push((pid, t, e.path()));
            continue;
        }
        let r = runs
            .entry(pid)
            .or_insert((std::time::UNIX_EPOCH, Vec::new()));
        r.0 = r.0.max(t);
        r.1.push(e.path());
    }
    let alive = |pid: u32| -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        pid == me
            || unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
            || active_file_locked(&dir.join(format!("umd-{pid}.log")))
    };
    let mut v: Vec<(u32, std::time::SystemTime, Vec<PathBuf>)> =
        runs.into_iter().map(|(p, (t, f))| (p, t, f)).collect();
    v.sort_by_key(|r| std::cmp::Reverse(r.1));
    let mut kept = 0u32;
    let mut deleted = 0;
    for (pid, _, files) in v {
        if alive(pid) || kept < keep {
            kept += 1;
            continue;
        }
        for f in files {
            if fs::remove_file(&f).is_ok() {
                deleted += 1;
            }
        }
    }
    boxes.retain(|b| !alive(b.0));
    boxes.sort_by_key(|b| std::cmp::Reverse(b.1));
    for (_, _, f) in boxes.iter().skip(BLACKBOXES_KEPT) {
        if fs::remove_file(f).is_ok() {
            deleted += 1;
        }
    }
    deleted
}

/// Moves a file that got descriptor 0, 1 or 2 (a program started with stderr closed) above
/// them: otherwise the console's writes to fd 2 would land in the log file, interleaved with its
/// records, and the console sink would never be known to be down.
fn above_stdio(f: File) -> io::Result<File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    if f.as_raw_fd() > 2 {
        return Ok(f);
    }
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor `f` owns returns a new descriptor (>= 3) or -1.
    let fd = unsafe { libc::fcntl(f.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a fresh descriptor nothing else owns; `f` (the low one) is closed on drop.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// True when a live process holds the lock its writer takes on its active file (see
/// [`RotatingFile::open`]): its pid may be in another PID namespace, or reused, so the lock is
/// what tells a live run from an exited one. A pid check alone deleted the files of processes
/// still running in a multi-process job.
fn active_file_locked(path: &Path) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    // SAFETY: flock on a file descriptor owned by `f`.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        // SAFETY: as above; release at once (closing `f` would too).
        unsafe { libc::flock(fd, libc::LOCK_UN) };
        return false;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EWOULDBLOCK)
}

/// Default log directory: `$XDG_STATE_HOME/aigpu`, else `$HOME/.local/state/aigpu`, else the
/// fallback [`fallback_dir`].
pub fn default_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty()) {
        return Path::new(&x).join("aigpu");
    }
    if let Some(h) = std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        return Path::new(&h).join(".local/state/aigpu");
    }
    fallback_dir()
}

/// `/tmp/aigpu-<uid>`.
pub fn fallback_dir() -> PathBuf {
    // SAFETY: getuid has no preconditions.
    PathBuf::from(format!("/tmp/aigpu-{}", unsafe { libc::getuid() }))
}
