//! The C ABI (`include/umd.h`, generated from these files by cbindgen).
//!
//! Every entry point runs inside [`guard`]: it catches panics (they become `UMD_ERR_INTERNAL`
//! with the panic message in the detail, never unwinding into C), records the detail of every
//! failure for `umdGetLastErrorDetail`, and logs it where it was produced. The success path does
//! no formatting and no allocation for error reporting.
//!
//! Two lints are off here on purpose: `double_must_use`, because the function-level
//! `#[must_use]` is what makes cbindgen mark each declaration `UMD_MUST_USE` in C (the type-level
//! one only helps Rust callers); and `not_unsafe_ptr_arg_deref`, because C entry points take raw
//! pointers by definition and check them (NULL -> `UMD_ERR_INVALID_POINTER`) before use.
#![allow(clippy::double_must_use, clippy::not_unsafe_ptr_arg_deref)]

pub mod cmdbuf;
pub mod context;
pub mod device;
pub mod errors;
pub mod log;
pub mod memory;
pub mod sync;
pub mod types;

use crate::error::{detail, umdResult, UmdError, UmdResult};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// The object a call acts on, so that every failure of a call on a live context handle (or on
/// a command buffer or buffer of one) names that context in its detail and log record, whatever
/// check failed first: a NULL out-pointer, a bad flag, a size of 0 (docs/libumd.md, "Error
/// details"). Resolved only on the failure path.
#[derive(Clone, Copy)]
pub(crate) enum On {
    /// A `umdContext`.
    Context(u64),
    /// A `umdCmdBuf` (its context).
    CmdBuf(u64),
    /// A `umdBuffer` (the context it was allocated on).
    Buffer(u64),
    /// A `umdFence` pointer (its context); NULL is skipped.
    Fence(*const types::umdFence),
}

impl On {
    fn ctx_id(self) -> Option<u64> {
        use crate::registry::{BUFFERS, CMDBUFS, CONTEXTS};
        match self {
            On::Context(h) => CONTEXTS.get(h).ok().map(|c| c.id),
            On::CmdBuf(h) => CMDBUFS.get(h).ok().map(|c| c.ctx.id),
            // A destroyed buffer's context from the table's tombstone (`registry::BUFFERS`).
            On::Buffer(h) => BUFFERS
                .find(h)
                .map(|b| b.ctx_id)
                .or_else(|| BUFFERS.kept(h).map(|k| k[2])),
            // SAFETY: NULL or the caller's valid umdFence (documented in umd.h); the call that
            // failed had the same pointer.
            On::Fence(f) => unsafe { f.as_ref() }.and_then(|f| On::Context(f.context).ctx_id()),
        }
    }
}

/// Runs an API call: panics and errors become result codes with a recorded detail.
pub(crate) fn guard(function: &'static str, f: impl FnOnce() -> UmdResult<umdResult>) -> umdResult {
    guard_inner(function, None, f)
}

/// [`guard`] for a call on an object: a failure names the object's context.
pub(crate) fn guard_on(
    function: &'static str,
    on: On,
    f: impl FnOnce() -> UmdResult<umdResult>,
) -> umdResult {
    guard_inner(function, Some(on), f)
}

#[inline(always)]
fn guard_inner(
    function: &'static str,
    on: Option<On>,
    f: impl FnOnce() -> UmdResult<umdResult>,
) -> umdResult {
    crate::log::ensure_init();
    crate::fork::install();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => fail_safely(function, on, e),
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "non-string panic payload".into());
            fail_safely(
                function,
                on,
                UmdError::new(
                    umdResult::UMD_ERR_INTERNAL,
                    format!("panic inside {function}: {what}."),
                ),
            )
        }
    }
}

/// Records and logs a failure inside the panic boundary too: reporting must never turn an error
/// into an abort across `extern "C"` (it runs in odd places: `atexit` handlers, a forked child).
/// Out of line: the success path of every entry point carries none of this.
#[cold]
#[inline(never)]
fn fail_safely(function: &'static str, on: Option<On>, mut e: UmdError) -> umdResult {
    let code = e.code;
    catch_unwind(AssertUnwindSafe(|| {
        if e.ctx_id == 0 {
            if let Some(id) = on.and_then(On::ctx_id) {
                e.ctx_id = id;
            }
        }
        fail(function, e)
    }))
    .unwrap_or(code)
}

#[cold]
fn fail(function: &'static str, e: UmdError) -> umdResult {
    let d = detail::record(function, &e);
    let msg = d.message_str();
    let code = e.code.name();
    // The record's own file:line is this function; `at` is where the error was produced (the
    // same location the detail reports).
    let at = format_args!("{}:{}", e.file, e.line);
    match e.code {
        // Device loss is logged once at ERROR where it is detected (Device::mark_lost); the
        // fast failures after it are WARN, so they neither wait for the file nor flood it.
        umdResult::UMD_ERR_CTX_LOST
        | umdResult::UMD_ERR_CTX_DEPENDENCY_FAILED
        | umdResult::UMD_ERR_INTERNAL
        | umdResult::UMD_ERR_INTERNAL_KMD_UNEXPECTED
        | umdResult::UMD_ERR_MEM_OUT_OF_MEMORY => {
            tracing::error!(
                ctx = e.ctx_id,
                code,
                function,
                errno = e.os_errno,
                reason = e.kmd_reason,
                va = format_args!("{:#x}", e.fault_va),
                seqno = e.fence_seqno,
                at = %at,
                "{msg}"
            )
        }
        _ => tracing::warn!(
            ctx = e.ctx_id,
            code,
            function,
            errno = e.os_errno,
            reason = e.kmd_reason,
            va = format_args!("{:#x}", e.fault_va),
            seqno = e.fence_seqno,
            at = %at,
            "{msg}"
        ),
    }
    e.code
}

/// A required out-pointer, or `UMD_ERR_INVALID_POINTER` naming the argument.
pub(crate) fn out<'a, T>(p: *mut T, name: &str) -> UmdResult<&'a mut T> {
    // SAFETY: the C caller promises a non-NULL pointer is valid for writes of T (documented in
    // umd.h); NULL is checked here.
    unsafe { p.as_mut() }.ok_or_else(|| null(name))
}

/// A required in-pointer.
pub(crate) fn inp<'a, T>(p: *const T, name: &str) -> UmdResult<&'a T> {
    // SAFETY: as in `out`, for reads.
    unsafe { p.as_ref() }.ok_or_else(|| null(name))
}

/// A required array of `n` elements (NULL allowed only when `n == 0`).
pub(crate) fn slice<'a, T>(p: *const T, n: u32, name: &str) -> UmdResult<&'a [T]> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(null(name));
    }
    // SAFETY: the caller promises `p` points to `n` valid elements (documented in umd.h).
    Ok(unsafe { std::slice::from_raw_parts(p, n as usize) })
}

#[track_caller]
fn null(name: &str) -> UmdError {
    UmdError::new(
        umdResult::UMD_ERR_INVALID_POINTER,
        format!("argument '{name}' is NULL."),
    )
}

/// Checks the `struct_size` of a versioned out-struct.
pub(crate) fn struct_size(got: u32, min: usize, name: &str) -> UmdResult<()> {
    if (got as usize) < min {
        return Err(UmdError::new(
            umdResult::UMD_ERR_INVALID_STRUCT_SIZE,
            format!("{name}.struct_size is {got}; set it to sizeof({name}) (at least {min})."),
        ));
    }
    Ok(())
}

/// Copies a value into a versioned caller struct of `size` bytes (fills what the caller knows).
pub(crate) fn copy_versioned<T: Copy>(v: &T, dst: *mut T, size: u32) {
    let n = (size as usize).min(std::mem::size_of::<T>());
    // SAFETY: dst is valid for `size` bytes (caller contract); we write n <= size bytes from a
    // plain repr(C) value, then restore the caller's struct_size (the first u32).
    unsafe {
        std::ptr::copy_nonoverlapping(v as *const T as *const u8, dst as *mut u8, n);
        (dst as *mut u32).write_unaligned(size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::detail::{copy_out, umdErrorDetail};

    #[test]
    fn a_panic_becomes_internal_error_with_detail() {
        let r = guard("umdTestPanics", || -> UmdResult<umdResult> {
            panic!("boom {}", 42)
        });
        assert_eq!(r, umdResult::UMD_ERR_INTERNAL);
        let d = detail::last();
        assert_eq!(d.code, umdResult::UMD_ERR_INTERNAL as i32);
        assert_eq!(d.function_str(), "umdTestPanics");
        assert!(
            d.message_str()
                .starts_with("panic inside umdTestPanics: boom 42."),
            "{}",
            d.message_str()
        );
        assert!(d
            .message_str()
            .ends_with("Action: report a bug with this detail and the log files."));
    }

    #[test]
    fn success_does_not_touch_the_detail() {
        let _ = guard("umdFails", || {
            Err(UmdError::new(umdResult::UMD_ERR_INVALID_SIZE, "size is 0."))
        });
        assert_eq!(
            guard("umdWorks", || Ok(umdResult::UMD_SUCCESS)),
            umdResult::UMD_SUCCESS
        );
        let d = detail::last();
        assert_eq!(
            (d.code, d.function_str()),
            (
                umdResult::UMD_ERR_INVALID_SIZE as i32,
                "umdFails".to_string()
            )
        );
    }

    #[test]
    fn versioned_detail_fills_only_what_both_sides_know() {
        let _ = guard("umdFails", || {
            Err(UmdError::new(umdResult::UMD_ERR_INVALID_RANGE, "past the end.").ctx(7))
        });
        // A caller built against a newer header (a larger struct): libumd fills its own size,
        // leaves the rest alone and keeps the caller's struct_size.
        #[repr(C)]
        struct Newer {
            d: umdErrorDetail,
            extra: u64,
        }
        let mut n = Newer {
            d: umdErrorDetail::empty(),
            extra: 0xAAAA,
        };
        n.d.struct_size = std::mem::size_of::<Newer>() as u32;
        // SAFETY: `n` is valid for the struct_size it claims.
        unsafe { copy_out(&mut n.d) }.expect("copy");
        assert_eq!(n.d.code, umdResult::UMD_ERR_INVALID_RANGE as i32);
        assert_eq!(n.d.context_id, 7);
        assert_eq!(n.d.struct_size, std::mem::size_of::<Newer>() as u32);
        assert_eq!(n.extra, 0xAAAA, "wrote past what libumd knows");
        // Version 1 is the minimum; one byte less is refused with the minimum in the detail.
        let mut v1 = umdErrorDetail::empty();
        v1.struct_size = types::UMD_ERROR_DETAIL_SIZE_V1;
        // SAFETY: a full struct.
        unsafe { copy_out(&mut v1) }.expect("v1 size");
        let mut short = umdErrorDetail::empty();
        short.struct_size = types::UMD_ERROR_DETAIL_SIZE_V1 - 1;
        // SAFETY: as above.
        let e = unsafe { copy_out(&mut short) }.unwrap_err();
        assert_eq!(e.code, umdResult::UMD_ERR_INVALID_STRUCT_SIZE);
        assert!(e.message.ends_with("at least 1032."), "{}", e.message);
    }
}
