//! The emergency ring (the black box), written by hand: `tracing` has nothing like it.
//!
//! A ring of N fixed-size slots allocated once at initialisation. Every WARN-and-worse event is
//! formatted on the calling thread into a stack buffer (no allocation) and copied into the next
//! slot; the queue and the writer thread are not involved, so the ring keeps the last N
//! critical records even when the pipeline is broken (queue full, writer stuck, disk full): when
//! the device is lost and the regular log cannot be written, this pre-allocated channel still
//! keeps the last screen of what went wrong (docs/logging.md, "Emergency ring and black box").
//!
//! Each slot is a small seqlock: a writer makes the sequence odd, copies, makes it even again;
//! a reader (the dump) skips a slot that is odd or changed while it was copied. The dump uses
//! only `open`/`write`/`close`/`mkdir`/`clock_gettime`/`getpid` and formatting into stack
//! buffers, so it is async-signal-safe and runs from the fatal-signal handler too.
//!
//! File: `<dir>/umd-blackbox-<pid>-<UTC time>.log`, e.g.
//! `umd-blackbox-4242-20261129T095615.123456Z.log`: `#` comment lines, then the records, oldest
//! first, in the text format.

use super::format::FixedLine;
use std::cell::UnsafeCell;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Bytes per slot (a longer line is cut and ends with `…`).
pub(crate) const SLOT_BYTES: usize = 1024;
/// Default number of slots.
pub(crate) const DEFAULT_RECORDS: usize = 256;
/// Longest directory path the dump can use.
pub(crate) const DIR_BYTES: usize = 512;

struct Slot {
    seq: AtomicU64,
    idx: AtomicU64,
    len: AtomicU32,
    data: UnsafeCell<[u8; SLOT_BYTES]>,
}

// SAFETY: `data` is only written by the thread that made `seq` odd (a CAS from even), and
// readers validate `seq` around their copy.
unsafe impl Sync for Slot {}

static SLOTS: AtomicPtr<Slot> = AtomicPtr::new(std::ptr::null_mut());
static NSLOTS: AtomicUsize = AtomicUsize::new(0);
static HEAD: AtomicU64 = AtomicU64::new(0);
static SKIPPED: AtomicU64 = AtomicU64::new(0);
static DUMPS: AtomicU64 = AtomicU64::new(0);

/// The dump directory, double-buffered so a signal handler never reads a half-written path.
struct DirBufs {
    bufs: UnsafeCell<[[u8; DIR_BYTES]; 2]>,
    lens: [AtomicUsize; 2],
    active: AtomicUsize,
}
// SAFETY: a writer fills the inactive buffer and then publishes it with `active` (Release);
// readers use only the active one. Writers are serialised by the caller (init / config change).
unsafe impl Sync for DirBufs {}

static DIR: DirBufs = DirBufs {
    bufs: UnsafeCell::new([[0; DIR_BYTES]; 2]),
    lens: [AtomicUsize::new(0), AtomicUsize::new(0)],
    active: AtomicUsize::new(0),
};

/// Allocates the ring once (later calls keep the first size).
pub fn init(records: usize) {
    if !SLOTS.load(Ordering::Acquire).is_null() {
        return;
    }
    let n = records.clamp(16, 65_536);
    let v: Vec<Slot> = (0..n)
        .map(|_| Slot {
            seq: AtomicU64::new(0),
            idx: AtomicU64::new(u64::MAX),
            len: AtomicU32::new(0),
            data: UnsafeCell::new([0; SLOT_BYTES]),
        })
        .collect();
    let p = Box::into_raw(v.into_boxed_slice()) as *mut Slot;
    if SLOTS
        .compare_exchange(std::ptr::null_mut(), p, Ordering::AcqRel, Ordering::Acquire)
        .is_ok()
    {
        NSLOTS.store(n, Ordering::Release);
    } else {
        // SAFETY: `p` came from Box::into_raw of a boxed slice of length n just above and was
        // never published.
        drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n)) });
    }
}

fn slots() -> &'static [Slot] {
    let p = SLOTS.load(Ordering::Acquire);
    let n = NSLOTS.load(Ordering::Acquire);
    if p.is_null() || n == 0 {
        return &[];
    }
    // SAFETY: published once, never freed, `n` elements.
    unsafe { std::slice::from_raw_parts(p, n) }
}

/// Sets the directory black boxes are written to.
pub fn set_dir(dir: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    let b = dir.as_os_str().as_bytes();
    if b.len() >= DIR_BYTES - 1 {
        return;
    }
    let next = 1 - DIR.active.load(Ordering::Acquire);
    // SAFETY: the inactive buffer is not read (readers take the active one); writers are
    // serialised by the caller.
    unsafe {
        let bufs = &mut *DIR.bufs.get();
        bufs[next][..b.len()].copy_from_slice(b);
        bufs[next][b.len()] = 0;
    }
    DIR.lens[next].store(b.len(), Ordering::Release);
    DIR.active.store(next, Ordering::Release);
}

fn dir_bytes() -> &'static [u8] {
    let a = DIR.active.load(Ordering::Acquire);
    let n = DIR.lens[a].load(Ordering::Acquire);
    // SAFETY: the active buffer is not written while active.
    unsafe { &(&(*DIR.bufs.get()))[a][..n] }
}

/// Stores one finished line (ending in `\n`). Never allocates, never blocks.
pub fn push(line: &[u8]) {
    let s = slots();
    if s.is_empty() {
        return;
    }
    let i = HEAD.fetch_add(1, Ordering::Relaxed);
    let slot = &s[(i % s.len() as u64) as usize];
    let seq = slot.seq.load(Ordering::Relaxed);
    if seq & 1 == 1
        || slot
            .seq
            .compare_exchange(seq, seq + 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    {
        SKIPPED.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let n = line.len().min(SLOT_BYTES);
    // SAFETY: we own the slot while its sequence is odd.
    unsafe { (&mut (*slot.data.get()))[..n].copy_from_slice(&line[..n]) };
    slot.len.store(n as u32, Ordering::Relaxed);
    slot.idx.store(i, Ordering::Relaxed);
    slot.seq.store(seq + 2, Ordering::Release);
}

/// Records stored since start (including overwritten ones).
pub fn records_written() -> u64 {
    HEAD.load(Ordering::Relaxed)
}

/// Black boxes written.
pub fn dumps() -> u64 {
    DUMPS.load(Ordering::Relaxed)
}

/// Forgets every stored record (tests and the child after `fork` keep the parent's records;
/// only tests call this).
pub fn clear() {
    for s in slots() {
        s.idx.store(u64::MAX, Ordering::Relaxed);
    }
}

fn realtime() -> (u64, u64) {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-pointer; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME, &mut ts) };
    (ts.tv_sec as u64, ts.tv_nsec as u64)
}

fn write_fd(fd: i32, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        // SAFETY: b is a valid buffer.
        let r = unsafe { libc::write(fd, b.as_ptr().cast(), b.len()) };
        if r < 0 {
            // SAFETY: reading errno is async-signal-safe.
            if unsafe { *libc::__errno_location() } == libc::EINTR {
                continue;
            }
            return false;
        }
        if r == 0 {
            return false;
        }
        b = &b[r as usize..];
    }
    true
}

/// Builds `<dir>/umd-blackbox-<pid>-<time>.log\0` into `out`; returns the length without NUL.
fn make_path(out: &mut [u8], dir: &[u8], pid: i32, sec: u64, nsec: u64) -> Option<usize> {
    let (days, rem) = (sec / 86_400, sec % 86_400);
    let (y, m, d) = crate::util::civil_from_days(days as i64);
    let n = dir.len();
    if n + 96 > out.len() {
        return None;
    }
    out[..n].copy_from_slice(dir);
    let mut w = FixedLine::new(&mut out[n..]);
    write!(
        w,
        "/umd-blackbox-{pid}-{y:04}{m:02}{d:02}T{:02}{:02}{:02}.{:06}Z.log\0",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60,
        nsec / 1000
    )
    .ok()?;
    let k = w.finish();
    Some(n + k - 1)
}

/// Buffers of a dump, static so the fatal-signal handler stays within the small alternate
/// signal stack (the Rust runtime gives each thread about 8 KiB). One dump at a time.
struct Scratch {
    dir: [u8; DIR_BYTES],
    path: [u8; DIR_BYTES + 128],
    fallback: [u8; 64],
    text: [u8; 1024],
    line: [u8; SLOT_BYTES],
}

struct ScratchCell(UnsafeCell<Scratch>);
// SAFETY: used only by the holder of SCRATCH_BUSY.
unsafe impl Sync for ScratchCell {}

static SCRATCH: ScratchCell = ScratchCell(UnsafeCell::new(Scratch {
    dir: [0; DIR_BYTES],
    path: [0; DIR_BYTES + 128],
    fallback: [0; 64],
    text: [0; 1024],
    line: [0; SLOT_BYTES],
}));
static SCRATCH_BUSY: AtomicBool = AtomicBool::new(false);

/// Opens `<dir>/umd-blackbox-<pid>-<time>.log` (creating `dir` itself if missing) and returns
/// the fd and the path length in `sc.path`.
fn open_in(sc: &mut Scratch, which: u8, pid: i32, sec: u64, nsec: u64) -> Option<(i32, usize)> {
    let dir: &[u8] = if which == 0 {
        dir_bytes()
    } else {
        let n = sc.fallback.iter().position(|&b| b == 0).unwrap_or(0);
        &sc.fallback[..n]
    };
    if dir.is_empty() || dir.len() >= DIR_BYTES {
        return None;
    }
    let n = dir.len();
    sc.dir[..n].copy_from_slice(dir);
    sc.dir[n] = 0;
    // SAFETY: NUL-terminated path; mkdir is async-signal-safe. EEXIST is fine.
    unsafe { libc::mkdir(sc.dir.as_ptr().cast(), 0o750) };
    let plen = make_path(&mut sc.path, &sc.dir[..n], pid, sec, nsec)?;
    // SAFETY: `path` is NUL-terminated at plen; open is async-signal-safe.
    let fd = unsafe {
        libc::open(
            sc.path.as_ptr().cast(),
            libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC,
            0o640,
        )
    };
    (fd >= 0).then_some((fd, plen))
}

/// Writes the ring to a new black-box file. Async-signal-safe, bounded, never allocates.
/// `on_path` gets the file's path; returns the errno of what failed.
fn dump_raw(reason: &str, on_path: &mut dyn FnMut(&[u8])) -> Result<(), i32> {
    // One dump at a time; a second one waits a little (never in a signal handler, which
    // gives up at once rather than deadlock on a dump it interrupted).
    let mut spins = 0u32;
    while SCRATCH_BUSY
        .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        spins += 1;
        if spins > 2000 || IN_SIGNAL.load(Ordering::Relaxed) {
            return Err(libc::EBUSY);
        }
        // SAFETY: sched_yield has no preconditions.
        unsafe { libc::sched_yield() };
    }
    // SAFETY: we hold SCRATCH_BUSY.
    let sc = unsafe { &mut *SCRATCH.0.get() };
    let r = dump_locked(sc, reason, on_path);
    SCRATCH_BUSY.store(false, Ordering::Release);
    r
}

static IN_SIGNAL: AtomicBool = AtomicBool::new(false);

fn dump_locked(sc: &mut Scratch, reason: &str, on_path: &mut dyn FnMut(&[u8])) -> Result<(), i32> {
    // SAFETY: getpid and getuid are async-signal-safe.
    let (pid, uid) = unsafe { (libc::getpid(), libc::getuid()) };
    let (sec, nsec) = realtime();
    {
        let mut w = FixedLine::new(&mut sc.fallback[..63]);
        let _ = write!(w, "/tmp/aigpu-{uid}");
        let n = w.finish();
        sc.fallback[n] = 0;
    }
    let opened = open_in(sc, 0, pid, sec, nsec).or_else(|| open_in(sc, 1, pid, sec, nsec));
    let Some((fd, plen)) = opened else {
        // SAFETY: reading errno.
        return Err(unsafe { *libc::__errno_location() });
    };
    let s = slots();
    let head = HEAD.load(Ordering::Acquire);
    let first = head.saturating_sub(s.len() as u64);
    let hn = {
        let mut w = FixedLine::new(&mut sc.text);
        let _ = writeln!(
            w,
            "# aigpu libumd black box: pid={pid} reason=\"{reason}\" written={sec}.{:06} records={} ring={} (the last WARN-and-worse records, oldest first; text format, docs/logging.md)",
            nsec / 1000,
            head - first,
            s.len()
        );
        w.finish()
    };
    let mut ok = write_fd(fd, &sc.text[..hn]);
    for i in first..head {
        let slot = &s[(i % s.len() as u64) as usize];
        let s1 = slot.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 || slot.idx.load(Ordering::Relaxed) != i {
            continue;
        }
        let n = (slot.len.load(Ordering::Relaxed) as usize).min(SLOT_BYTES);
        // SAFETY: a racy read of plain bytes is validated by re-reading the sequence below
        // (`read_volatile` keeps the copy between the two loads).
        unsafe {
            let src = (*slot.data.get()).as_ptr();
            for (k, b) in sc.line[..n].iter_mut().enumerate() {
                *b = std::ptr::read_volatile(src.add(k));
            }
        }
        std::sync::atomic::fence(Ordering::Acquire);
        if slot.seq.load(Ordering::Relaxed) != s1 {
            continue;
        }
        ok &= write_fd(fd, &sc.line[..n]);
    }
    // SAFETY: fd is ours.
    unsafe { libc::close(fd) };
    DUMPS.fetch_add(1, Ordering::Relaxed);
    on_path(&sc.path[..plen]);
    if !ok {
        return Err(libc::EIO);
    }
    Ok(())
}

/// Writes a black box (not from a signal handler): the file's path, or why it failed.
pub fn dump(reason: &str) -> Result<String, String> {
    let mut path = String::new();
    match dump_raw(reason, &mut |p| {
        path = String::from_utf8_lossy(p).into_owned()
    }) {
        Ok(()) => Ok(path),
        Err(e) => Err(format!(
            "black box not written: {}",
            std::io::Error::from_raw_os_error(e)
        )),
    }
}

/// Writes a black box from the fatal-signal handler and says so on stderr. Async-signal-safe;
/// its stack use is small (the buffers are static).
pub fn dump_from_signal(sig: i32) {
    IN_SIGNAL.store(true, Ordering::Relaxed);
    let name = match sig {
        libc::SIGSEGV => "fatal signal SIGSEGV",
        libc::SIGBUS => "fatal signal SIGBUS",
        libc::SIGABRT => "fatal signal SIGABRT",
        _ => "fatal signal",
    };
    let r = dump_raw(name, &mut |p| {
        write_fd(2, b"umd: ");
        write_fd(2, name.as_bytes());
        write_fd(2, b": black box written to ");
        write_fd(2, p);
        write_fd(2, b"\n");
    });
    if r.is_err() {
        write_fd(2, b"umd: ");
        write_fd(2, name.as_bytes());
        write_fd(2, b": black box not written\n");
    }
}
