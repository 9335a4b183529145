// SPDX-License-Identifier: GPL-2.0
//! Text building for debugfs files, crash dumps and log lines: a growable byte buffer that
//! implements `core::fmt::Write` and never fails loudly (an allocation failure truncates the text
//! and is remembered), and the one function that prints a device log line.

use core::ffi::c_int;

use kernel::{bindings, prelude::*};

/// A text being built.
#[derive(Default)]
pub(crate) struct Text {
    buf: KVec<u8>,
    truncated: bool,
}

impl Text {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The bytes written so far.
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Takes the bytes.
    pub(crate) fn into_bytes(self) -> KVec<u8> {
        self.buf
    }

    /// Whether an allocation failed (the text is cut short).
    #[allow(dead_code)]
    pub(crate) fn truncated(&self) -> bool {
        self.truncated
    }

    /// Appends raw bytes.
    pub(crate) fn push_bytes(&mut self, b: &[u8]) {
        if self.buf.extend_from_slice(b, GFP_KERNEL).is_err() {
            self.truncated = true;
        }
    }
}

impl core::fmt::Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push_bytes(s.as_bytes());
        Ok(())
    }
}

/// `write!` into a [`Text`], ignoring the (never reported) result.
#[macro_export]
macro_rules! tprint {
    ($t:expr, $($arg:tt)*) => {{
        let _ = core::fmt::Write::write_fmt($t, format_args!($($arg)*));
    }};
}

/// Kernel log levels used by the driver's device lines.
#[derive(Clone, Copy)]
pub(crate) enum Level {
    Err,
    Warn,
    #[allow(dead_code)]
    Info,
}

/// Prints `aigpu <device>: <text>` at `level` (the shape of the probe line and of every device
/// event line the triage tool parses).
pub(crate) fn dev_log(level: Level, device: &CStr, text: &[u8]) {
    let len = c_int::try_from(text.len()).unwrap_or(c_int::MAX);
    let fmt: &CStr = match level {
        Level::Err => c"\x013aigpu %s: %.*s\n",
        Level::Warn => c"\x014aigpu %s: %.*s\n",
        Level::Info => c"\x016aigpu %s: %.*s\n",
    };
    // SAFETY: `_printk` is variadic; the format takes `%s` (a NUL-terminated string that outlives
    // the call), then `%.*s` (a C int length and a pointer to at least that many bytes).
    unsafe {
        bindings::_printk(
            fmt.as_char_ptr(),
            device.as_char_ptr(),
            len,
            text.as_ptr(),
        )
    };
}

/// A command name (`task_struct::comm`) made safe for `key=value` lines (no spaces, no `=`).
#[derive(Clone, Copy, Default)]
pub(crate) struct Comm {
    bytes: [u8; 16],
    len: usize,
}

impl Comm {
    /// The command name of the current task.
    pub(crate) fn current() -> Self {
        // SAFETY: `get_current` returns the running task, valid for this call; `comm` is a
        // NUL-padded array inside it that we only copy.
        let raw = unsafe { (*bindings::get_current()).comm };
        let mut c = Comm::default();
        for &ch in raw.iter() {
            #[allow(clippy::unnecessary_cast)] // `c_char` is `i8` on other architectures
            let b = ch as u8;
            if b == 0 || c.len >= c.bytes.len() {
                break;
            }
            c.bytes[c.len] = if b.is_ascii_graphic() && b != b'=' { b } else { b'_' };
            c.len += 1;
        }
        c
    }
}

impl core::fmt::Display for Comm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("?");
        if s.is_empty() {
            f.write_str("?")
        } else {
            f.write_str(s)
        }
    }
}

/// The thread-group id (process id) of the current task.
pub(crate) fn current_tgid() -> i32 {
    // SAFETY: `get_current` returns the running task, valid for this call.
    unsafe { (*bindings::get_current()).tgid }
}
