//! Version and error queries.

use super::guard;
use crate::error::{codes::umdErrorAction, detail::umdErrorDetail, umdResult};
use std::ffi::c_char;

/// libumd major version.
pub const UMD_VERSION_MAJOR: u32 = 0;
/// libumd minor version.
pub const UMD_VERSION_MINOR: u32 = 1;
/// libumd patch version.
pub const UMD_VERSION_PATCH: u32 = 0;

/// Reports libumd's version and the UAPI version it speaks. Any pointer may be NULL.
#[no_mangle]
#[must_use]
pub extern "C" fn umdGetVersion(
    major: *mut u32,
    minor: *mut u32,
    patch: *mut u32,
    uapi_major: *mut u32,
    uapi_minor: *mut u32,
) -> umdResult {
    guard("umdGetVersion", || {
        for (p, v) in [
            (major, UMD_VERSION_MAJOR),
            (minor, UMD_VERSION_MINOR),
            (patch, UMD_VERSION_PATCH),
            (uapi_major, uapi::UAPI_MAJOR),
            (uapi_minor, uapi::UAPI_MINOR),
        ] {
            // SAFETY: the caller passes NULL or a valid uint32_t pointer.
            if let Some(r) = unsafe { p.as_mut() } {
                *r = v;
            }
        }
        Ok(umdResult::UMD_SUCCESS)
    })
}

// umdGetErrorName, umdGetErrorString, umdGetErrorAction and umdIsRetryable need no guard():
// they are lookups in static tables that cannot panic, and must not touch the last-error detail.

/// The enumerator name of a result ("UMD_ERR_DEVICE_LOST"); "UMD_UNKNOWN_RESULT" for values that
/// are not codes. Never NULL; the string is static.
#[no_mangle]
pub extern "C" fn umdGetErrorName(result: i32) -> *const c_char {
    match umdResult::from_raw(result) {
        Some(r) => r.name_cstr().as_ptr(),
        None => c"UMD_UNKNOWN_RESULT".as_ptr(),
    }
}

/// One sentence saying what a result means. Never NULL; the string is static.
#[no_mangle]
pub extern "C" fn umdGetErrorString(result: i32) -> *const c_char {
    match umdResult::from_raw(result) {
        Some(r) => r.text_cstr().as_ptr(),
        None => c"unknown result code (newer libumd, or not a umdResult)".as_ptr(),
    }
}

/// What the caller should do about a result (retry, free memory, recreate context, ...).
#[no_mangle]
pub extern "C" fn umdGetErrorAction(result: i32) -> umdErrorAction {
    match umdResult::from_raw(result) {
        Some(r) => r.action(),
        None => umdErrorAction::UMD_ACTION_REPORT_BUG,
    }
}

/// 1 if retrying the call (possibly after freeing memory) can succeed, else 0.
#[no_mangle]
pub extern "C" fn umdIsRetryable(result: i32) -> i32 {
    umdResult::from_raw(result).is_some_and(|r| r.is_retryable()) as i32
}

/// Fills `*detail` with the calling thread's most recent failure (code UMD_SUCCESS if there was
/// none). Set `detail->struct_size = sizeof(umdErrorDetail)` first (at least
/// `UMD_ERROR_DETAIL_SIZE_V1`). Successful calls do not
/// clear it.
#[no_mangle]
#[must_use]
pub extern "C" fn umdGetLastErrorDetail(detail: *mut umdErrorDetail) -> umdResult {
    if detail.is_null() {
        // Not recorded: the detail must keep describing the failure the caller asks about.
        return umdResult::UMD_ERR_INVALID_POINTER;
    }
    // Not run in `guard()`: a failure here must not overwrite the detail being asked for. It
    // still catches panics so none can cross into C.
    let copy = std::panic::catch_unwind(|| {
        // SAFETY: non-NULL, and the caller promises struct_size valid bytes.
        unsafe { crate::error::detail::copy_out(detail) }
    });
    match copy {
        Ok(Ok(())) => umdResult::UMD_SUCCESS,
        Ok(Err(e)) => e.code,
        Err(_) => umdResult::UMD_ERR_INTERNAL,
    }
}
