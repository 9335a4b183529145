//! The `umdResult` codes: one table, from which the C enum, the names, the messages and the
//! caller actions are all generated, so they cannot drift apart.
//!
//! Rules (docs/libumd.md, "Results"): 0 is success, negative values are errors, positive values are
//! non-error statuses. Values are assigned by domain range and are frozen once released: never
//! reused, never re-meant. `umd/errors.golden` lists every released `NAME = value`; the test
//! `tests/error_codes_golden.rs` fails if one changes or disappears.
//!
//! Domains: statuses 1..99, INVALID (caller errors) -1..-99, INIT -100.., DEVICE -200..,
//! CTX -300.., MEM -400.., SUBMIT -500.., SYNC -600.., LOG -700.., INTERNAL -900...

/// What the caller should do about a result.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum umdErrorAction {
    /// Nothing: the call succeeded or reported a status.
    UMD_ACTION_NONE = 0,
    /// The same call may succeed later unchanged (transient condition).
    UMD_ACTION_RETRY = 1,
    /// Free device memory (or trim the pool) and retry.
    UMD_ACTION_FREE_MEMORY_AND_RETRY = 2,
    /// The context is unusable: destroy it and create a new one.
    UMD_ACTION_RECREATE_CONTEXT = 3,
    /// The device is unusable: close it and open it again (or give up).
    UMD_ACTION_RECREATE_DEVICE = 4,
    /// The call itself is wrong (arguments, handles, order): fix the caller.
    UMD_ACTION_FIX_CALL = 5,
    /// The installation is wrong (driver, module, permissions, versions): fix the machine.
    UMD_ACTION_CHECK_INSTALLATION = 6,
    /// A bug in the driver: report it with the detail and the log.
    UMD_ACTION_REPORT_BUG = 7,
    /// A setting is wrong (an environment variable or a configuration call): fix the value the
    /// detail names.
    UMD_ACTION_FIX_CONFIGURATION = 8,
    /// A per-process limit is reached: release objects of that kind (destroy contexts) and
    /// retry.
    UMD_ACTION_RELEASE_AND_RETRY = 9,
}

/// Result of every libumd call (`int32_t`): 0 success, < 0 error, > 0 status.
#[repr(i32)]
#[must_use]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum umdResult {
    /// The call succeeded.
    UMD_SUCCESS = 0,
    /// The fence or operation has not completed yet (a query, not a failure).
    UMD_STATUS_NOT_READY = 1,
    /// An argument has a value the call does not accept.
    UMD_ERR_INVALID_ARGUMENT = -1,
    /// A required pointer argument is NULL.
    UMD_ERR_INVALID_POINTER = -2,
    /// A handle is not valid: never created, already destroyed, of the wrong type, or foreign.
    UMD_ERR_INVALID_HANDLE = -3,
    /// A size is zero or absurdly large for the call.
    UMD_ERR_INVALID_SIZE = -4,
    /// An offset + size runs outside the object it addresses.
    UMD_ERR_INVALID_RANGE = -5,
    /// Flags with bits this version does not define.
    UMD_ERR_INVALID_FLAGS = -6,
    /// A versioned struct's size field is too small or unset.
    UMD_ERR_INVALID_STRUCT_SIZE = -7,
    /// The object is in the wrong state for the call (e.g. recording into an ended command buffer).
    UMD_ERR_INVALID_STATE = -8,
    /// No aigpu device could be found or opened by any allowed backend.
    UMD_ERR_INIT_NO_DEVICE = -100,
    /// The kernel driver's UAPI version cannot be driven by this libumd.
    UMD_ERR_INIT_VERSION_MISMATCH = -101,
    /// The requested backend is not available (e.g. UMD_BACKEND=kmd without the module).
    UMD_ERR_INIT_BACKEND_UNAVAILABLE = -102,
    /// The device node exists but may not be opened by this user.
    UMD_ERR_INIT_PERMISSION_DENIED = -103,
    /// An environment setting (UMD_BACKEND, UMD_SIM_*) has an invalid value.
    UMD_ERR_INIT_BAD_CONFIG = -104,
    /// The device is lost (hung and unrecoverable, or gone): every later call fails fast.
    UMD_ERR_DEVICE_LOST = -200,
    /// No device with that index.
    UMD_ERR_DEVICE_NOT_FOUND = -201,
    /// The context was reset or faulted (it is guilty and banned); its pending work is gone.
    UMD_ERR_CTX_LOST = -300,
    /// Too many contexts.
    UMD_ERR_CTX_LIMIT = -301,
    /// Work this call depends on failed: a fence it waits for belongs to a context that faulted,
    /// hung or failed the same way, so it will never signal. The dependent job did not run (it
    /// was not given garbage input); its context is lost. The detail names the failed producer
    /// (context, fence and why).
    UMD_ERR_CTX_DEPENDENCY_FAILED = -302,
    /// Not enough device memory now; freeing memory or trimming the pool may help.
    UMD_ERR_MEM_OUT_OF_MEMORY = -400,
    /// The request can never succeed: larger than the device's memory or the object limit.
    UMD_ERR_MEM_TOO_LARGE = -401,
    /// Unmap of a buffer that is not mapped.
    UMD_ERR_MEM_NOT_MAPPED = -402,
    /// A buffer was freed twice (by address: its memory is already free).
    UMD_ERR_MEM_DOUBLE_FREE = -403,
    /// A free of an address this device's pool never handed out (foreign, never allocated, or
    /// not the start of a buffer).
    UMD_ERR_MEM_INVALID_FREE = -404,
    /// A buffer was freed through a context other than the one it was allocated on.
    UMD_ERR_MEM_WRONG_CONTEXT = -405,
    /// A submitted command buffer uses memory of a buffer that was already freed.
    UMD_ERR_MEM_USE_AFTER_FREE = -406,
    /// A submitted command buffer accesses pool memory outside any live buffer (past the end of
    /// a buffer, or never allocated).
    UMD_ERR_MEM_OUT_OF_BOUNDS = -407,
    /// The kernel driver rejected a packet (malformed, or HANG with hang debugging off).
    UMD_ERR_SUBMIT_INVALID_PACKET = -500,
    /// The ring is full and the submit was asked not to block.
    UMD_ERR_SUBMIT_RING_FULL = -501,
    /// A wait fence of the submit is invalid (never submitted, other device).
    UMD_ERR_SUBMIT_BAD_WAIT_FENCE = -502,
    /// The wait timed out; the work is still running.
    UMD_ERR_SYNC_TIMEOUT = -600,
    /// The wait was interrupted by a signal; call it again.
    UMD_ERR_SYNC_INTERRUPTED = -601,
    /// The fence was never submitted (its sequence number is beyond the last submit).
    UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED = -602,
    /// A log filter string could not be parsed.
    UMD_ERR_LOG_BAD_FILTER = -700,
    /// A log flush did not complete within its timeout.
    UMD_ERR_LOG_FLUSH_TIMEOUT = -701,
    /// A log file could not be written (the driver itself keeps working).
    UMD_ERR_LOG_IO = -702,
    /// An internal error (a caught panic or a broken invariant): a driver bug.
    UMD_ERR_INTERNAL = -900,
    /// The kernel driver returned an error libumd does not know how to map.
    UMD_ERR_INTERNAL_KMD_UNEXPECTED = -901,
}

impl umdResult {
    /// Every code, in declaration order.
    pub const ALL: &'static [umdResult] = &[
        umdResult::UMD_SUCCESS,
        umdResult::UMD_STATUS_NOT_READY,
        umdResult::UMD_ERR_INVALID_ARGUMENT,
        umdResult::UMD_ERR_INVALID_POINTER,
        umdResult::UMD_ERR_INVALID_HANDLE,
        umdResult::UMD_ERR_INVALID_SIZE,
        umdResult::UMD_ERR_INVALID_RANGE,
        umdResult::UMD_ERR_INVALID_FLAGS,
        umdResult::UMD_ERR_INVALID_STRUCT_SIZE,
        umdResult::UMD_ERR_INVALID_STATE,
        umdResult::UMD_ERR_INIT_NO_DEVICE,
        umdResult::UMD_ERR_INIT_VERSION_MISMATCH,
        umdResult::UMD_ERR_INIT_BACKEND_UNAVAILABLE,
        umdResult::UMD_ERR_INIT_PERMISSION_DENIED,
        umdResult::UMD_ERR_INIT_BAD_CONFIG,
        umdResult::UMD_ERR_DEVICE_LOST,
        umdResult::UMD_ERR_DEVICE_NOT_FOUND,
        umdResult::UMD_ERR_CTX_LOST,
        umdResult::UMD_ERR_CTX_LIMIT,
        umdResult::UMD_ERR_CTX_DEPENDENCY_FAILED,
        umdResult::UMD_ERR_MEM_OUT_OF_MEMORY,
        umdResult::UMD_ERR_MEM_TOO_LARGE,
        umdResult::UMD_ERR_MEM_NOT_MAPPED,
        umdResult::UMD_ERR_MEM_DOUBLE_FREE,
        umdResult::UMD_ERR_MEM_INVALID_FREE,
        umdResult::UMD_ERR_MEM_WRONG_CONTEXT,
        umdResult::UMD_ERR_MEM_USE_AFTER_FREE,
        umdResult::UMD_ERR_MEM_OUT_OF_BOUNDS,
        umdResult::UMD_ERR_SUBMIT_INVALID_PACKET,
        umdResult::UMD_ERR_SUBMIT_RING_FULL,
        umdResult::UMD_ERR_SUBMIT_BAD_WAIT_FENCE,
        umdResult::UMD_ERR_SYNC_TIMEOUT,
        umdResult::UMD_ERR_SYNC_INTERRUPTED,
        umdResult::UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED,
        umdResult::UMD_ERR_LOG_BAD_FILTER,
        umdResult::UMD_ERR_LOG_FLUSH_TIMEOUT,
        umdResult::UMD_ERR_LOG_IO,
        umdResult::UMD_ERR_INTERNAL,
        umdResult::UMD_ERR_INTERNAL_KMD_UNEXPECTED,
    ];

    /// The code for a raw value, if it is one.
    pub fn from_raw(v: i32) -> Option<umdResult> {
        Self::ALL.iter().copied().find(|&c| c as i32 == v)
    }

    /// Name (NUL-terminated), meaning (NUL-terminated) and caller action of the code: the one
    /// table they all come from. `tests/error_codes_golden.rs` checks each name against the
    /// variant's own name.
    const fn info(
        self,
    ) -> (
        &'static core::ffi::CStr,
        &'static core::ffi::CStr,
        umdErrorAction,
    ) {
        use umdErrorAction::*;
        match self {
            umdResult::UMD_SUCCESS => (c"UMD_SUCCESS", c"success", UMD_ACTION_NONE),
            umdResult::UMD_STATUS_NOT_READY => (
                c"UMD_STATUS_NOT_READY",
                c"not ready: the work has not completed yet",
                UMD_ACTION_NONE,
            ),
            umdResult::UMD_ERR_INVALID_ARGUMENT => (
                c"UMD_ERR_INVALID_ARGUMENT",
                c"invalid argument value",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_INVALID_POINTER => (
                c"UMD_ERR_INVALID_POINTER",
                c"required pointer argument is NULL",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_INVALID_HANDLE => (
                c"UMD_ERR_INVALID_HANDLE",
                c"invalid handle (never valid, destroyed, wrong type or foreign; see the detail)",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_INVALID_SIZE => (
                c"UMD_ERR_INVALID_SIZE",
                c"size is zero or too large for this call",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_INVALID_RANGE => (
                c"UMD_ERR_INVALID_RANGE",
                c"offset and size run outside the object",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_INVALID_FLAGS => (
                c"UMD_ERR_INVALID_FLAGS",
                c"unknown flag bits",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_INVALID_STRUCT_SIZE => (
                c"UMD_ERR_INVALID_STRUCT_SIZE",
                c"struct_size field too small or unset",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_INVALID_STATE => (
                c"UMD_ERR_INVALID_STATE",
                c"object is in the wrong state for this call",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_INIT_NO_DEVICE => (
                c"UMD_ERR_INIT_NO_DEVICE",
                c"no aigpu device available",
                UMD_ACTION_CHECK_INSTALLATION,
            ),
            umdResult::UMD_ERR_INIT_VERSION_MISMATCH => (
                c"UMD_ERR_INIT_VERSION_MISMATCH",
                c"kernel driver UAPI version incompatible with this libumd",
                UMD_ACTION_CHECK_INSTALLATION,
            ),
            umdResult::UMD_ERR_INIT_BACKEND_UNAVAILABLE => (
                c"UMD_ERR_INIT_BACKEND_UNAVAILABLE",
                c"requested backend is not available",
                UMD_ACTION_CHECK_INSTALLATION,
            ),
            umdResult::UMD_ERR_INIT_PERMISSION_DENIED => (
                c"UMD_ERR_INIT_PERMISSION_DENIED",
                c"permission denied opening the device node",
                UMD_ACTION_CHECK_INSTALLATION,
            ),
            umdResult::UMD_ERR_INIT_BAD_CONFIG => (
                c"UMD_ERR_INIT_BAD_CONFIG",
                c"invalid configuration value in the environment",
                UMD_ACTION_FIX_CONFIGURATION,
            ),
            umdResult::UMD_ERR_DEVICE_LOST => (
                c"UMD_ERR_DEVICE_LOST",
                c"device lost",
                UMD_ACTION_RECREATE_DEVICE,
            ),
            umdResult::UMD_ERR_DEVICE_NOT_FOUND => (
                c"UMD_ERR_DEVICE_NOT_FOUND",
                c"no device with that index",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_CTX_LOST => (
                c"UMD_ERR_CTX_LOST",
                c"context lost: it caused a fault or hang and was reset",
                UMD_ACTION_RECREATE_CONTEXT,
            ),
            umdResult::UMD_ERR_CTX_LIMIT => (
                c"UMD_ERR_CTX_LIMIT",
                c"context limit reached (64 per open device, or the device's hardware contexts)",
                UMD_ACTION_RELEASE_AND_RETRY,
            ),
            umdResult::UMD_ERR_CTX_DEPENDENCY_FAILED => (
                c"UMD_ERR_CTX_DEPENDENCY_FAILED",
                c"work this depends on failed: its producer context faulted or hung; nothing ran on its output",
                UMD_ACTION_RECREATE_CONTEXT,
            ),
            umdResult::UMD_ERR_MEM_OUT_OF_MEMORY => (
                c"UMD_ERR_MEM_OUT_OF_MEMORY",
                c"out of device memory",
                UMD_ACTION_FREE_MEMORY_AND_RETRY,
            ),
            umdResult::UMD_ERR_MEM_TOO_LARGE => (
                c"UMD_ERR_MEM_TOO_LARGE",
                c"request larger than the device can ever satisfy",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_MEM_NOT_MAPPED => (
                c"UMD_ERR_MEM_NOT_MAPPED",
                c"buffer is not mapped",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_MEM_DOUBLE_FREE => (
                c"UMD_ERR_MEM_DOUBLE_FREE",
                c"buffer freed twice",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_MEM_INVALID_FREE => (
                c"UMD_ERR_MEM_INVALID_FREE",
                c"free of an address that is not the start of a live buffer of this device",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_MEM_WRONG_CONTEXT => (
                c"UMD_ERR_MEM_WRONG_CONTEXT",
                c"buffer freed on a context other than the one it was allocated on",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_MEM_USE_AFTER_FREE => (
                c"UMD_ERR_MEM_USE_AFTER_FREE",
                c"a submitted command buffer uses a freed buffer",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_MEM_OUT_OF_BOUNDS => (
                c"UMD_ERR_MEM_OUT_OF_BOUNDS",
                c"a submitted command buffer accesses memory outside any live buffer",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_SUBMIT_INVALID_PACKET => (
                c"UMD_ERR_SUBMIT_INVALID_PACKET",
                c"a command buffer holds an invalid packet",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_SUBMIT_RING_FULL => {
                (c"UMD_ERR_SUBMIT_RING_FULL", c"ring full", UMD_ACTION_RETRY)
            }
            umdResult::UMD_ERR_SUBMIT_BAD_WAIT_FENCE => (
                c"UMD_ERR_SUBMIT_BAD_WAIT_FENCE",
                c"a wait fence of the submit is invalid",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_SYNC_TIMEOUT => (
                c"UMD_ERR_SYNC_TIMEOUT",
                c"wait timed out; the work is still running",
                UMD_ACTION_RETRY,
            ),
            umdResult::UMD_ERR_SYNC_INTERRUPTED => (
                c"UMD_ERR_SYNC_INTERRUPTED",
                c"wait interrupted by a signal",
                UMD_ACTION_RETRY,
            ),
            umdResult::UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED => (
                c"UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED",
                c"fence was never submitted",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_LOG_BAD_FILTER => (
                c"UMD_ERR_LOG_BAD_FILTER",
                c"log filter could not be parsed",
                UMD_ACTION_FIX_CALL,
            ),
            umdResult::UMD_ERR_LOG_FLUSH_TIMEOUT => (
                c"UMD_ERR_LOG_FLUSH_TIMEOUT",
                c"log flush did not complete in time",
                UMD_ACTION_RETRY,
            ),
            umdResult::UMD_ERR_LOG_IO => (
                c"UMD_ERR_LOG_IO",
                c"log file could not be written",
                UMD_ACTION_CHECK_INSTALLATION,
            ),
            umdResult::UMD_ERR_INTERNAL => (
                c"UMD_ERR_INTERNAL",
                c"internal error in libumd",
                UMD_ACTION_REPORT_BUG,
            ),
            umdResult::UMD_ERR_INTERNAL_KMD_UNEXPECTED => (
                c"UMD_ERR_INTERNAL_KMD_UNEXPECTED",
                c"unexpected error from the kernel driver",
                UMD_ACTION_REPORT_BUG,
            ),
        }
    }

    /// The enumerator's name (`"UMD_ERR_DEVICE_LOST"`), NUL-terminated.
    pub const fn name_cstr(self) -> &'static core::ffi::CStr {
        self.info().0
    }
    /// One sentence saying what the code means, NUL-terminated.
    pub const fn text_cstr(self) -> &'static core::ffi::CStr {
        self.info().1
    }
    /// What the caller should do.
    pub const fn action(self) -> umdErrorAction {
        self.info().2
    }
}

impl umdResult {
    /// The enumerator's name as a Rust string.
    pub fn name(self) -> &'static str {
        self.name_cstr().to_str().unwrap_or("UMD_?")
    }
    /// The meaning as a Rust string.
    pub fn text(self) -> &'static str {
        self.text_cstr().to_str().unwrap_or("?")
    }
    /// True for negative values.
    pub fn is_error(self) -> bool {
        (self as i32) < 0
    }
    /// True when retrying (possibly after freeing memory) can succeed.
    pub fn is_retryable(self) -> bool {
        matches!(
            self.action(),
            umdErrorAction::UMD_ACTION_RETRY
                | umdErrorAction::UMD_ACTION_FREE_MEMORY_AND_RETRY
                | umdErrorAction::UMD_ACTION_RELEASE_AND_RETRY
        )
    }
}

/// A one-line description of what the caller should do.
pub fn action_text(a: umdErrorAction) -> &'static str {
    match a {
        umdErrorAction::UMD_ACTION_NONE => "nothing to do",
        umdErrorAction::UMD_ACTION_RETRY => "retry the same call later",
        umdErrorAction::UMD_ACTION_FREE_MEMORY_AND_RETRY => {
            "free device memory (or trim the pool) and retry"
        }
        umdErrorAction::UMD_ACTION_RECREATE_CONTEXT => "destroy the context and create a new one",
        umdErrorAction::UMD_ACTION_RECREATE_DEVICE => "close the device and open it again",
        umdErrorAction::UMD_ACTION_FIX_CALL => "fix the call (arguments, handles or call order)",
        umdErrorAction::UMD_ACTION_CHECK_INSTALLATION => {
            "check the installation (module, device nodes, versions, permissions)"
        }
        umdErrorAction::UMD_ACTION_REPORT_BUG => "report a bug with this detail and the log files",
        umdErrorAction::UMD_ACTION_FIX_CONFIGURATION => {
            "fix the setting the detail names (environment variable or configuration call; docs/libumd.md lists them)"
        }
        umdErrorAction::UMD_ACTION_RELEASE_AND_RETRY => {
            "destroy contexts this process no longer needs (or open the device again for 64 more), then retry"
        }
    }
}
