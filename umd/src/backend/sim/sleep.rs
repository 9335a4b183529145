//! Sleeping in WAIT the way aigpu.ko's interruptible sleep does: woken by a change of the
//! device's state, by the deadline, or by a signal.
//!
//! A condition variable cannot tell a signal from a spurious wake-up (the futex call is restarted
//! under the caller), so a waiter sleeps in `ppoll(2)` on its thread's eventfd instead, which a
//! signal handler always interrupts (`EINTR`, whatever `SA_RESTART` says). The kernel then
//! restarts a WAIT whose signal's handler has `SA_RESTART`, and returns `EINTR` otherwise; which
//! signal arrived is not known here once its handler ran, so the simulator restarts when every
//! caught signal's handler has `SA_RESTART` and reports the interruption when any lacks it (the
//! one approximation: see docs/libumd.md, "Simulator settings").
//!
//! Written by hand: no crate offers a condition variable whose wait a signal interrupts.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

/// How a sleep ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Woke {
    /// A change was announced (or a spurious wake-up): look again.
    Changed,
    /// The timeout passed.
    TimedOut,
    /// A signal's handler ran and the call is not to be restarted.
    Interrupted,
}

/// The eventfds of the threads asleep in a WAIT on one device.
#[derive(Default)]
pub struct Sleepers {
    fds: Mutex<Vec<RawFd>>,
}

thread_local! {
    /// This thread's eventfd (created at its first sleep, closed with the thread).
    static EVENT: Option<OwnedFd> = {
        // SAFETY: plain syscall; a valid descriptor or -1 is returned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        // SAFETY: `fd` is a new descriptor owned by nobody else.
        (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
    };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Sleepers {
    /// Wakes every sleeper (after a change of the state they wait on, made under its lock).
    pub fn wake_all(&self) {
        let one: u64 = 1;
        for &fd in lock(&self.fds).iter() {
            // SAFETY: `fd` is a live eventfd of a thread that is registered (it unregisters
            // before its thread can close it); writing 8 bytes of a u64 is the eventfd protocol.
            // A full counter (EAGAIN) still leaves the sleeper woken.
            let _ = unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
        }
    }

    /// Releases `guard` (of `state`), sleeps until [`Sleepers::wake_all`], `timeout` or a
    /// signal, and takes the lock again. The caller registered nothing: a change made after it
    /// looked at the state (under `guard`) and before it sleeps is not lost, because this
    /// registers before releasing the lock.
    pub fn sleep<'a, T>(
        &self,
        guard: MutexGuard<'a, T>,
        state: &'a Mutex<T>,
        timeout: Duration,
    ) -> (MutexGuard<'a, T>, Woke) {
        let Some(fd) = EVENT.with(|e| e.as_ref().map(|f| f.as_raw_fd())) else {
            // No eventfd (descriptors exhausted): sleep briefly and look again.
            drop(guard);
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return (lock(state), Woke::Changed);
        };
        lock(&self.fds).push(fd);
        drop(guard);
        let woke = poll(fd, timeout);
        lock(&self.fds).retain(|&f| f != fd);
        let mut sink = 0u64;
        // SAFETY: reading the 8-byte counter of our own non-blocking eventfd (resets it).
        let _ = unsafe { libc::read(fd, (&mut sink as *mut u64).cast(), 8) };
        (lock(state), woke)
    }
}

fn poll(fd: RawFd, timeout: Duration) -> Woke {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: one valid pollfd; `ts` lives across the call; no signal mask change.
    let r = unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) };
    match r {
        0 => Woke::TimedOut,
        r if r > 0 => Woke::Changed,
        _ if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {
            if every_handler_restarts() {
                Woke::Changed
            } else {
                Woke::Interrupted
            }
        }
        _ => Woke::Changed,
    }
}

/// Whether every signal with a handler installed has `SA_RESTART` (then the kernel would have
/// restarted the WAIT, whichever of them arrived). The synchronous fault signals are left out:
/// their handlers (the Rust runtime's stack-overflow guard, libumd's crash flush) run for a fault
/// of the thread itself, never while it sleeps here.
fn every_handler_restarts() -> bool {
    const FAULTS: [libc::c_int; 7] = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGFPE,
        libc::SIGILL,
        libc::SIGTRAP,
        libc::SIGSYS,
        libc::SIGABRT,
    ];
    (1..libc::SIGRTMAX())
        .filter(|s| !FAULTS.contains(s))
        .all(|sig| {
            // SAFETY: `sigaction` is plain data: all zero is a valid value, overwritten below.
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: queries (does not change) the action of signal `sig`; `old` is written.
            let r = unsafe { libc::sigaction(sig, std::ptr::null(), &mut old) };
            r != 0
                || old.sa_sigaction == libc::SIG_DFL
                || old.sa_sigaction == libc::SIG_IGN
                || old.sa_flags & libc::SA_RESTART != 0
        })
}
