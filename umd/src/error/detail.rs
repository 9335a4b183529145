//! `umdGetLastErrorDetail`: the most recent failure of the calling thread, with everything a
//! person needs to act on it. Written only by failing calls; a successful call neither formats
//! nor allocates (the thread-local slot is touched only on the failure path).

use super::{action_text, umdErrorAction, umdResult, UmdError};
use std::cell::RefCell;
use std::ffi::c_char;

/// Bytes of the `function` field.
pub const UMD_DETAIL_FUNCTION_LEN: usize = 64;
/// Bytes of the `file` field.
pub const UMD_DETAIL_FILE_LEN: usize = 128;
/// Bytes of the `message` field.
pub const UMD_DETAIL_MESSAGE_LEN: usize = 768;

/// The detail of the calling thread's most recent failure. Versioned: the caller sets
/// `struct_size = sizeof(umdErrorDetail)` and libumd fills at most that many bytes, so the
/// struct can grow at its end without breaking old callers.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct umdErrorDetail {
    /// In: `sizeof(umdErrorDetail)` as the caller was compiled with.
    pub struct_size: u32,
    /// The failing call's result (`UMD_SUCCESS` if this thread has had no failure).
    pub code: i32,
    /// What the caller should do (`umdErrorAction`).
    pub action: i32,
    /// errno the backend (kernel driver or simulator) returned, 0 if none.
    pub os_errno: i32,
    /// KMD reason code (`AIGPU_REASON_*`), 0 if none.
    pub kmd_reason: u32,
    /// Source line in libumd where the error was produced.
    pub line: u32,
    /// OS thread id of the failing call.
    pub thread_id: u64,
    /// Context id the call was made on, 0 if none.
    pub context_id: u64,
    /// Fence sequence number involved, 0 if none.
    pub fence_seqno: u64,
    /// Faulting GPU virtual address, 0 if none.
    pub fault_va: u64,
    /// CLOCK_MONOTONIC time of the failure, ns.
    pub mono_ns: u64,
    /// Wall-clock (UTC) time of the failure, ns since the Unix epoch.
    pub wall_ns: u64,
    /// The API function that failed (NUL-terminated).
    pub function: [c_char; UMD_DETAIL_FUNCTION_LEN],
    /// Source file in libumd where the error was produced (NUL-terminated).
    pub file: [c_char; UMD_DETAIL_FILE_LEN],
    /// What happened, with the numbers, and what to do (NUL-terminated).
    pub message: [c_char; UMD_DETAIL_MESSAGE_LEN],
}

impl umdErrorDetail {
    /// An all-zero detail (code `UMD_SUCCESS`).
    pub fn empty() -> Self {
        // SAFETY: every field is an integer or an integer array: all-zero is a valid value.
        unsafe { std::mem::zeroed() }
    }
    /// The message as a Rust string (for tests and logs).
    pub fn message_str(&self) -> String {
        cstr_field(&self.message)
    }
    /// The function as a Rust string.
    pub fn function_str(&self) -> String {
        cstr_field(&self.function)
    }
}

fn cstr_field(f: &[c_char]) -> String {
    let bytes: Vec<u8> = f
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Copies `s` into a fixed C field, truncating on a UTF-8 boundary and always NUL-terminating.
fn fill(dst: &mut [c_char], s: &str) {
    let max = dst.len() - 1;
    let mut n = s.len().min(max);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    dst[n] = 0;
}

thread_local! {
    /// No destructor on purpose (the detail is plain data): a thread-local with one is gone
    /// once `exit()` has run the thread's TLS destructors, and C programs call libumd from
    /// `atexit` handlers, which run after that.
    static LAST: RefCell<Option<umdErrorDetail>> = const { RefCell::new(None) };
}

/// OS thread id of the caller.
pub fn thread_id() -> u64 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() as u64 }
}

/// CLOCK_MONOTONIC now, ns.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `clock` now, ns (CLOCK_MONOTONIC and CLOCK_MONOTONIC_COARSE exist on every Linux since
/// 2.6.32).
pub fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; the callers pass clocks every Linux has.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Wall clock now, ns since the epoch.
pub fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Builds the full detail for `err` raised by API function `function`.
pub fn build(function: &str, err: &UmdError) -> umdErrorDetail {
    let mut d = umdErrorDetail::empty();
    d.struct_size = std::mem::size_of::<umdErrorDetail>() as u32;
    d.code = err.code as i32;
    d.action = err.code.action() as i32;
    d.os_errno = err.os_errno;
    d.kmd_reason = err.kmd_reason;
    d.line = err.line;
    d.thread_id = thread_id();
    d.context_id = err.ctx_id;
    d.fence_seqno = err.fence_seqno;
    d.fault_va = err.fault_va;
    d.mono_ns = mono_ns();
    d.wall_ns = wall_ns();
    fill(&mut d.function, function);
    fill(&mut d.file, err.file);
    let msg = format!(
        "{} Action: {}.",
        err.message,
        action_text(err.code.action())
    );
    fill(&mut d.message, &msg);
    d
}

/// Stores the detail of a failure for the calling thread and returns it.
pub fn record(function: &str, err: &UmdError) -> umdErrorDetail {
    let d = build(function, err);
    let _ = LAST.try_with(|l| {
        if let Ok(mut slot) = l.try_borrow_mut() {
            *slot = Some(d);
        }
    });
    d
}

/// The calling thread's most recent failure detail (code `UMD_SUCCESS` if none).
pub fn last() -> umdErrorDetail {
    LAST.try_with(|l| l.try_borrow().ok().and_then(|d| *d))
        .ok()
        .flatten()
        .unwrap_or_else(|| {
            let mut d = umdErrorDetail::empty();
            d.struct_size = std::mem::size_of::<umdErrorDetail>() as u32;
            d.code = umdResult::UMD_SUCCESS as i32;
            d.action = umdErrorAction::UMD_ACTION_NONE as i32;
            d
        })
}

/// Copies the last detail into a caller struct of `struct_size` bytes (versioning rule: fill at
/// most what the caller knows about).
///
/// # Safety
/// `out` must point to at least `(*out).struct_size` writable bytes.
pub unsafe fn copy_out(out: *mut umdErrorDetail) -> Result<(), UmdError> {
    // SAFETY: the caller guarantees `out` is valid for its struct_size; struct_size is the first
    // field, so reading it only needs 4 valid bytes.
    let size = unsafe { std::ptr::addr_of!((*out).struct_size).read_unaligned() } as usize;
    let min = crate::abi::types::UMD_ERROR_DETAIL_SIZE_V1 as usize;
    if size < min {
        return Err(UmdError::new(
            umdResult::UMD_ERR_INVALID_STRUCT_SIZE,
            format!(
                "umdErrorDetail.struct_size is {size}; set it to sizeof(umdErrorDetail) ({}), at least {min}.",
                std::mem::size_of::<umdErrorDetail>()
            ),
        ));
    }
    let d = last();
    let n = size.min(std::mem::size_of::<umdErrorDetail>());
    // SAFETY: `d` is a plain repr(C) value; we copy n <= sizeof bytes into the caller's buffer,
    // which holds at least `size >= n` bytes; then restore the caller's struct_size.
    unsafe {
        std::ptr::copy_nonoverlapping(&d as *const umdErrorDetail as *const u8, out as *mut u8, n);
        std::ptr::addr_of_mut!((*out).struct_size).write_unaligned(size as u32);
    }
    Ok(())
}
