//! Errors: the frozen `umdResult` codes ([`codes`]), the error value every internal function
//! returns ([`UmdError`]), and the per-thread last-error detail ([`detail`]).

pub mod codes;
pub mod detail;

pub use codes::{action_text, umdErrorAction, umdResult};

use std::panic::Location;

/// An error on its way to the C caller: the code plus everything `umdGetLastErrorDetail`
/// reports. Built only on failure paths, so its allocation never touches a successful call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}: {message}", code.name())]
pub struct UmdError {
    /// The result code.
    pub code: umdResult,
    /// Human-readable message with the relevant numbers.
    pub message: String,
    /// Context the call was made on (0: none).
    pub ctx_id: u64,
    /// errno the backend reported (0: none).
    pub os_errno: i32,
    /// KMD reason code (0: none).
    pub kmd_reason: u32,
    /// Fence sequence number involved (0: none).
    pub fence_seqno: u64,
    /// Faulting GPU VA (0: none).
    pub fault_va: u64,
    /// Where in libumd the error was produced.
    pub file: &'static str,
    /// Line of `file`.
    pub line: u32,
}

impl UmdError {
    /// A new error at the caller's source location.
    #[track_caller]
    pub fn new(code: umdResult, message: impl Into<String>) -> Self {
        let loc = Location::caller();
        UmdError {
            code,
            message: message.into(),
            ctx_id: 0,
            os_errno: 0,
            kmd_reason: 0,
            fence_seqno: 0,
            fault_va: 0,
            file: loc.file(),
            line: loc.line(),
        }
    }
    /// Names the context.
    pub fn ctx(mut self, ctx_id: u64) -> Self {
        if self.ctx_id == 0 {
            self.ctx_id = ctx_id;
        }
        self
    }
    /// Records the backend's errno and reason.
    pub fn kmd(mut self, errno: i32, reason: u32) -> Self {
        self.os_errno = errno;
        self.kmd_reason = reason;
        self
    }
    /// Records the fence sequence number.
    pub fn seqno(mut self, seqno: u64) -> Self {
        self.fence_seqno = seqno;
        self
    }
    /// Records the faulting VA.
    pub fn fault_va(mut self, va: u64) -> Self {
        self.fault_va = va;
        self
    }
}

/// Result type of every internal function.
pub type UmdResult<T> = Result<T, UmdError>;

/// `return Err(UmdError::new(code, format!(...)))` in one line.
#[macro_export]
macro_rules! bail {
    ($code:ident, $($fmt:tt)*) => {
        return Err($crate::error::UmdError::new($crate::error::umdResult::$code, format!($($fmt)*)))
    };
}
