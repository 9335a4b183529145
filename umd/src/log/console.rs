//! Writing to the console (file descriptor 2) without ever raising `SIGPIPE` in the host.
//!
//! A library must not kill the program that loaded it: `prog 2>&1 >/dev/null | head -1` closes
//! the pipe behind stderr, and a plain `write(2)` there raises `SIGPIPE`, whose default action
//! ends the process (Rust programs ignore it at start, C programs do not). `send(MSG_NOSIGNAL)`
//! only exists for sockets, so the POSIX recipe is used instead: the signal is blocked on the
//! writing thread, the write fails with `EPIPE`, and the `SIGPIPE` that write left pending on
//! the thread is taken back with `sigtimedwait` (unless one was pending before, which belongs to
//! someone else). The writer thread blocks `SIGPIPE` for its whole life; other threads (the
//! rare one-line notices) block it around the one write. No library does this small thing, so
//! it is written here.

use std::io;

fn sigpipe_set() -> libc::sigset_t {
    // SAFETY: an all-zero sigset_t is a valid out-value; sigemptyset/sigaddset initialise it.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
    }
    set
}

fn sigpipe_pending() -> bool {
    // SAFETY: as above.
    let mut pending: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `pending` is a valid out-pointer.
    unsafe {
        libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, libc::SIGPIPE) == 1
    }
}

/// Takes back the `SIGPIPE` a failed write left pending on this thread (it is blocked here).
fn consume_sigpipe() {
    let set = sigpipe_set();
    let zero = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid set and timeout; a NULL siginfo is allowed.
    unsafe {
        libc::sigtimedwait(&set, std::ptr::null_mut(), &zero);
    }
}

/// Blocks `SIGPIPE` on the calling thread for good (the writer thread, at its start).
pub(crate) fn block_sigpipe_on_this_thread() {
    let set = sigpipe_set();
    // SAFETY: valid set; the old mask is not needed.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Writes all of `buf` to fd 2 on a thread that has `SIGPIPE` blocked. `EINTR` is retried; any
/// other failure (`EPIPE`, `EBADF`, `ENOSPC`, a zero-length write) is returned.
pub(crate) fn write_blocked(mut buf: &[u8]) -> io::Result<()> {
    let pending_before = sigpipe_pending();
    while !buf.is_empty() {
        // SAFETY: valid buffer; fd 2 is stderr (a closed fd just fails with EBADF).
        let r = unsafe { libc::write(2, buf.as_ptr().cast(), buf.len()) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if e.raw_os_error() == Some(libc::EPIPE) && !pending_before {
                consume_sigpipe();
            }
            return Err(e);
        }
        if r == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "write returned 0"));
        }
        buf = &buf[r as usize..];
    }
    Ok(())
}

/// Writes a one-line notice to stderr from any thread: `SIGPIPE` is blocked around the write and
/// the thread's mask restored after. Failures are ignored (there is nowhere else to say them).
pub(crate) fn write_direct(msg: &[u8]) {
    let set = sigpipe_set();
    // SAFETY: as above.
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sets.
    let masked = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) } == 0;
    let _ = write_blocked(msg);
    if masked {
        // SAFETY: restores the mask read above.
        unsafe {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
    }
}
