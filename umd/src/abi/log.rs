//! Logging: per-sink levels and filters, formats, the file sink's place and rotation, flush,
//! counters and the emergency black box (docs/logging.md).

use super::{guard, out, struct_size};
use crate::error::{umdResult, UmdError, UmdResult};
use crate::log;
use std::ffi::{c_char, CStr};
use std::time::Duration;

/// Log level: nothing.
pub const UMD_LOG_LEVEL_OFF: i32 = 0;
/// Log level: errors only.
pub const UMD_LOG_LEVEL_ERROR: i32 = 1;
/// Log level: warnings and errors (the console's default).
pub const UMD_LOG_LEVEL_WARN: i32 = 2;
/// Log level: key events (the file's default).
pub const UMD_LOG_LEVEL_INFO: i32 = 3;
/// Log level: detailed debugging.
pub const UMD_LOG_LEVEL_DEBUG: i32 = 4;
/// Log level: everything, including per-call parameters.
pub const UMD_LOG_LEVEL_TRACE: i32 = 5;

/// Sink bit: the console (stderr).
pub const UMD_LOG_SINK_CONSOLE: u32 = 1;
/// Sink bit: the log file.
pub const UMD_LOG_SINK_FILE: u32 = 2;
/// Both sinks.
pub const UMD_LOG_SINK_ALL: u32 = 3;

/// Record format: text lines for people.
pub const UMD_LOG_FORMAT_TEXT: u32 = 0;
/// Record format: JSON lines for machines.
pub const UMD_LOG_FORMAT_JSON: u32 = 1;

/// Logging counters. Versioned: set `struct_size = sizeof(umdLogStats)` first (at least
/// `UMD_LOG_STATS_SIZE_V1`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
#[allow(non_camel_case_types)]
pub struct umdLogStats {
    /// In: sizeof(umdLogStats).
    pub struct_size: u32,
    /// 1 while the file sink is writing, 0 while it is down (console only) or not open.
    pub file_ok: u32,
    /// Records dropped because the queue was full (lossy mode, or blocking mode past its
    /// bound).
    pub dropped: u64,
    /// Records the file sink failed to write (disk full, unwritable directory, ...).
    pub failed_file: u64,
    /// Records the console failed to write.
    pub failed_console: u64,
    /// Records written to the file.
    pub written_file: u64,
    /// Records written to the console.
    pub written_console: u64,
    /// File rotations.
    pub rotations: u64,
    /// Flushes (explicit or on ERROR) that timed out.
    pub flush_timeouts: u64,
    /// WARN-and-worse records stored in the emergency ring since start.
    pub ring_records: u64,
    /// Black-box files written.
    pub blackbox_dumps: u64,
    /// Records waiting in the queue now.
    pub queued: u64,
    /// Queue capacity (records).
    pub queue_capacity: u64,
}

fn sinks_arg(sinks: u32) -> UmdResult<u32> {
    if sinks == 0 || sinks & !UMD_LOG_SINK_ALL != 0 {
        return Err(UmdError::new(
            umdResult::UMD_ERR_INVALID_FLAGS,
            format!("sinks is {sinks:#x}; use UMD_LOG_SINK_CONSOLE (1), UMD_LOG_SINK_FILE (2) or both (3)."),
        ));
    }
    Ok(sinks)
}

/// An optional C string as UTF-8 (NULL → None).
fn opt_str<'a>(p: *const c_char, name: &str) -> UmdResult<Option<&'a str>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: the caller passes NULL or a NUL-terminated string (documented).
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map(Some).map_err(|_| {
        UmdError::new(
            umdResult::UMD_ERR_INVALID_ARGUMENT,
            format!("'{name}' is not valid UTF-8."),
        )
    })
}

/// Copies `s` NUL-terminated into `buf` of `size` bytes; `*needed` (if not NULL) gets the
/// bytes required. `buf` NULL with `size` 0 only queries the size.
fn copy_string(s: &str, buf: *mut c_char, size: usize, needed: *mut usize) -> UmdResult<()> {
    let need = s.len() + 1;
    // SAFETY: NULL or a valid size_t pointer (documented).
    if let Some(n) = unsafe { needed.as_mut() } {
        *n = need;
    }
    if buf.is_null() {
        if size == 0 {
            return Ok(());
        }
        return Err(super::null("buf"));
    }
    let n = need.min(size);
    if n == 0 {
        return Err(UmdError::new(
            umdResult::UMD_ERR_INVALID_SIZE,
            format!("buffer of size 0; {need} bytes needed."),
        ));
    }
    // SAFETY: buf holds `size >= n` bytes (caller contract).
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr(), buf.cast::<u8>(), n - 1);
        *buf.add(n - 1) = 0;
    }
    if size < need {
        return Err(UmdError::new(
            umdResult::UMD_ERR_INVALID_SIZE,
            format!("buffer of {size} bytes is too small: {need} bytes needed (truncated copy written)."),
        ));
    }
    Ok(())
}

/// Sets the level of one module (a tracing target prefix such as "umd::memory"; NULL or "" sets
/// the default level) on the given sinks (`UMD_LOG_SINK_*`). Takes effect for calls made after
/// it returns. `level` is `UMD_LOG_LEVEL_*`.
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogSetLevel(module: *const c_char, level: i32, sinks: u32) -> umdResult {
    guard("umdLogSetLevel", || {
        let sinks = sinks_arg(sinks)?;
        let lvl = log::filter::level_from_i32(level).ok_or_else(|| {
            UmdError::new(
                umdResult::UMD_ERR_INVALID_ARGUMENT,
                format!("level is {level}; use UMD_LOG_LEVEL_OFF (0) .. UMD_LOG_LEVEL_TRACE (5)."),
            )
        })?;
        let module = opt_str(module, "module")?;
        if let Some(m) = module.map(str::trim).filter(|m| !m.is_empty()) {
            if m.contains([',', '=', '[', ' ']) {
                return Err(UmdError::new(
                    umdResult::UMD_ERR_LOG_BAD_FILTER,
                    format!("module '{m}' is not a module path (no ',', '=', '[' or spaces); use umdLogSetFilter for a whole filter."),
                ));
            }
            if let Err(why) = log::filter::check_target(m) {
                return Err(UmdError::new(
                    umdResult::UMD_ERR_LOG_BAD_FILTER,
                    format!("module {why}; nothing changed."),
                ));
            }
        }
        log::set_level(module, lvl, sinks);
        log::story::set_by_api(
            "log",
            &format!("{}={level}", module.unwrap_or("")),
            "umdLogSetLevel",
        );
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Replaces the whole filter of the given sinks with `filter` in the `RUST_LOG` syntax
/// (e.g. "warn,umd::memory=debug"). `UMD_ERR_LOG_BAD_FILTER` (nothing changed) when it does
/// not parse.
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogSetFilter(sinks: u32, filter: *const c_char) -> umdResult {
    guard("umdLogSetFilter", || {
        let sinks = sinks_arg(sinks)?;
        let spec = opt_str(filter, "filter")?.ok_or_else(|| super::null("filter"))?;
        log::set_filter(sinks, spec)
            .map_err(|e| UmdError::new(umdResult::UMD_ERR_LOG_BAD_FILTER, format!("{e}.")))?;
        log::story::set_by_api("log", spec, "umdLogSetFilter");
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Reads the current filter of one sink (`UMD_LOG_SINK_CONSOLE` or `UMD_LOG_SINK_FILE`) in
/// canonical `RUST_LOG` syntax into `buf` (`size` bytes, NUL-terminated). `*needed` (may be
/// NULL) receives the size required; `buf` NULL with `size` 0 only asks for it.
/// `UMD_ERR_INVALID_SIZE` when the buffer is too small (a truncated copy is written).
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogGetFilter(
    sink: u32,
    buf: *mut c_char,
    size: usize,
    needed: *mut usize,
) -> umdResult {
    guard("umdLogGetFilter", || {
        if sink != UMD_LOG_SINK_CONSOLE && sink != UMD_LOG_SINK_FILE {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_ARGUMENT,
                format!("sink is {sink}; name exactly one: UMD_LOG_SINK_CONSOLE (1) or UMD_LOG_SINK_FILE (2)."),
            ));
        }
        copy_string(&log::get_filter(sink), buf, size, needed)?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Sets the record format (`UMD_LOG_FORMAT_TEXT` or `UMD_LOG_FORMAT_JSON`) of the given sinks.
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogSetFormat(sinks: u32, format: u32) -> umdResult {
    guard("umdLogSetFormat", || {
        let sinks = sinks_arg(sinks)?;
        let f = match format {
            UMD_LOG_FORMAT_TEXT => log::Format::Text,
            UMD_LOG_FORMAT_JSON => log::Format::Json,
            _ => {
                return Err(UmdError::new(
                    umdResult::UMD_ERR_INVALID_ARGUMENT,
                    format!(
                    "format is {format}; use UMD_LOG_FORMAT_TEXT (0) or UMD_LOG_FORMAT_JSON (1)."
                ),
                ))
            }
        };
        log::set_format(sinks, f);
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Configures the file sink: directory (NULL: keep), size limit in bytes before rotation
/// (0: keep; minimum 4096) and number of files kept including the active one (0: keep). The
/// active file is closed and `umd-<pid>.log` is opened in the (new) directory.
/// `UMD_ERR_LOG_IO` when it cannot be opened: the file sink is then down (console only) and
/// retried periodically; the driver is not affected.
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogSetFile(dir: *const c_char, max_bytes: u64, max_files: u32) -> umdResult {
    guard("umdLogSetFile", || {
        let dir = opt_str(dir, "dir")?
            .filter(|d| !d.is_empty())
            .map(std::path::PathBuf::from);
        log::set_file(
            dir,
            (max_bytes != 0).then_some(max_bytes),
            (max_files != 0).then_some(max_files),
            Duration::from_secs(2),
        )
        .map_err(|e| UmdError::new(umdResult::UMD_ERR_LOG_IO, format!("{e}.")))?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// The path of the active log file into `buf` (like `umdLogGetFilter`).
/// `UMD_ERR_LOG_IO` when no file is open.
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogGetFilePath(
    buf: *mut c_char,
    size: usize,
    needed: *mut usize,
) -> umdResult {
    guard("umdLogGetFilePath", || {
        if buf.is_null() && size != 0 {
            return Err(super::null("buf"));
        }
        let p = log::file_path_wait(Duration::from_secs(1)).ok_or_else(|| {
            let why = match log::stats().file_ok {
                false => "the file sink is down (the console's 'sink down' record says why: directory, permissions, disk)",
                true => "the log writer did not open it within 1 s",
            };
            UmdError::new(umdResult::UMD_ERR_LOG_IO, format!("no log file is open: {why}."))
        })?;
        copy_string(&p.display().to_string(), buf, size, needed)?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Returns once every record logged before the call is written to the console and the file
/// (and the file is `fdatasync`ed), or after `timeout_ms` with `UMD_ERR_LOG_FLUSH_TIMEOUT`.
/// `UMD_ERR_LOG_IO` when the file sink is down (records went to the console only).
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogFlush(timeout_ms: u32) -> umdResult {
    guard("umdLogFlush", || {
        match log::flush(Duration::from_millis(timeout_ms as u64), true) {
            Ok(()) => Ok(umdResult::UMD_SUCCESS),
            Err(log::FlushError::Timeout) => Err(UmdError::new(
                umdResult::UMD_ERR_LOG_FLUSH_TIMEOUT,
                format!("the log writer did not finish within {timeout_ms} ms (a slow or blocked disk or console); records stay queued."),
            )),
            Err(log::FlushError::Io(e)) => {
                Err(UmdError::new(umdResult::UMD_ERR_LOG_IO, format!("{e}.")))
            }
        }
    })
}

/// Fills `*stats` with the logging counters. Set `stats->struct_size = sizeof(umdLogStats)`.
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogGetStats(stats: *mut umdLogStats) -> umdResult {
    guard("umdLogGetStats", || {
        let o = out(stats, "stats")?;
        struct_size(
            o.struct_size,
            super::types::UMD_LOG_STATS_SIZE_V1 as usize,
            "umdLogStats",
        )?;
        let s = log::stats();
        let v = umdLogStats {
            struct_size: std::mem::size_of::<umdLogStats>() as u32,
            file_ok: s.file_ok as u32,
            dropped: s.dropped,
            failed_file: s.failed_file,
            failed_console: s.failed_console,
            written_file: s.written_file,
            written_console: s.written_console,
            rotations: s.rotations,
            flush_timeouts: s.flush_timeouts,
            ring_records: s.ring_records,
            blackbox_dumps: s.blackbox_dumps,
            queued: s.queued,
            queue_capacity: s.queue_capacity,
        };
        let size = o.struct_size;
        super::copy_versioned(&v, stats, size);
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Writes the emergency ring (the last WARN-and-worse records) to
/// `<log dir>/umd-blackbox-<pid>-<time>.log` now and puts its path into `buf` (may be NULL with
/// `size` 0; `needed` may be NULL). `UMD_ERR_LOG_IO` when it cannot be written.
#[no_mangle]
#[must_use]
pub extern "C" fn umdLogDumpBlackbox(
    buf: *mut c_char,
    size: usize,
    needed: *mut usize,
) -> umdResult {
    guard("umdLogDumpBlackbox", || {
        let path = log::dump_blackbox("requested (umdLogDumpBlackbox)")
            .map_err(|e| UmdError::new(umdResult::UMD_ERR_LOG_IO, format!("{e}.")))?;
        copy_string(&path, buf, size, needed)?;
        Ok(umdResult::UMD_SUCCESS)
    })
}
