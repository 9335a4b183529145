//! Per-module filtering from `UMD_LOG`, and run-time level changes through the C ABI taking
//! effect for the next call.

#[path = "log_util.rs"]
mod util;
use std::ffi::{c_char, CStr};
use umd::abi::log::*;
use umd::umdResult;
use util::*;

fn get_filter(sink: u32) -> String {
    let mut need = 0usize;
    assert_eq!(
        umdLogGetFilter(sink, std::ptr::null_mut(), 0, &mut need),
        umdResult::UMD_SUCCESS
    );
    let mut buf = vec![0 as c_char; need];
    assert_eq!(
        umdLogGetFilter(sink, buf.as_mut_ptr(), buf.len(), &mut need),
        umdResult::UMD_SUCCESS
    );
    // SAFETY: NUL-terminated by umdLogGetFilter.
    unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

/// Messages of the records in the file, in order.
fn messages(dir: &std::path::Path) -> Vec<String> {
    lines(&log_path(dir, std::process::id()))
        .iter()
        .filter_map(|l| {
            let s = l.find(" \"")? + 2;
            let e = s + l[s..].find('"')?;
            Some(l[s..e].to_string())
        })
        .collect()
}

#[test]
fn per_module_levels_and_runtime_change() {
    if is_child() {
        umd::log::ensure_init();
        let dir = std::path::PathBuf::from(std::env::var("UMD_LOG_DIR").unwrap());
        // UMD_LOG=warn,umd::memory=debug: both sinks start from it.
        assert_eq!(get_filter(UMD_LOG_SINK_FILE), "umd::memory=debug,warn");
        assert_eq!(get_filter(UMD_LOG_SINK_CONSOLE), "umd::memory=debug,warn");
        tracing::debug!(target: "umd::memory", "mem debug 1");
        tracing::debug!(target: "umd::memory::pool", "pool debug 1");
        tracing::trace!(target: "umd::memory", "mem trace 1");
        tracing::info!(target: "umd::submit", "submit info 1");
        tracing::warn!(target: "umd::submit", "submit warn 1");
        flush();
        assert_eq!(
            messages(&dir),
            ["mem debug 1", "pool debug 1", "submit warn 1"]
        );

        // Run time: umd::submit to INFO on the file only; umd::memory off on both.
        assert_eq!(
            umdLogSetLevel(
                c"umd::submit".as_ptr(),
                UMD_LOG_LEVEL_INFO,
                UMD_LOG_SINK_FILE
            ),
            umdResult::UMD_SUCCESS
        );
        assert_eq!(
            umdLogSetLevel(c"umd::memory".as_ptr(), UMD_LOG_LEVEL_OFF, UMD_LOG_SINK_ALL),
            umdResult::UMD_SUCCESS
        );
        assert_eq!(
            get_filter(UMD_LOG_SINK_FILE),
            "umd::memory=off,umd::submit=info,warn"
        );
        assert_eq!(get_filter(UMD_LOG_SINK_CONSOLE), "umd::memory=off,warn");
        tracing::debug!(target: "umd::memory", "mem debug 2");
        tracing::info!(target: "umd::submit", "submit info 2");
        // WARN of a module that is off: not in the sinks (the emergency ring still keeps it).
        tracing::warn!(target: "umd::memory", "mem warn 2");
        flush();
        assert_eq!(
            messages(&dir),
            [
                "mem debug 1",
                "pool debug 1",
                "submit warn 1",
                "submit info 2"
            ]
        );

        // The default level, NULL module.
        assert_eq!(
            umdLogSetLevel(std::ptr::null(), UMD_LOG_LEVEL_TRACE, UMD_LOG_SINK_FILE),
            umdResult::UMD_SUCCESS
        );
        tracing::trace!(target: "umd::context", "ctx trace 3");
        flush();
        assert_eq!(messages(&dir).last().unwrap(), "ctx trace 3");

        // A whole filter; a bad one changes nothing and says why.
        assert_eq!(
            umdLogSetFilter(UMD_LOG_SINK_ALL, c"error,umd::device=info".as_ptr()),
            umdResult::UMD_SUCCESS
        );
        assert_eq!(get_filter(UMD_LOG_SINK_CONSOLE), "umd::device=info,error");
        assert_eq!(
            umdLogSetFilter(UMD_LOG_SINK_FILE, c"umd=loud".as_ptr()),
            umdResult::UMD_ERR_LOG_BAD_FILTER
        );
        let d = umd::error::detail::last();
        assert!(d.message_str().contains("umd=loud"), "{}", d.message_str());
        assert_eq!(get_filter(UMD_LOG_SINK_FILE), "umd::device=info,error");
        assert_eq!(
            umdLogSetLevel(c"umd::memory".as_ptr(), 9, UMD_LOG_SINK_FILE),
            umdResult::UMD_ERR_INVALID_ARGUMENT
        );
        assert_eq!(
            umdLogSetLevel(c"umd::memory".as_ptr(), UMD_LOG_LEVEL_INFO, 4),
            umdResult::UMD_ERR_INVALID_FLAGS
        );
        // A mistyped libumd module is refused, naming it; nothing changes.
        assert_eq!(
            umdLogSetLevel(
                c"umd::memroy".as_ptr(),
                UMD_LOG_LEVEL_DEBUG,
                UMD_LOG_SINK_FILE
            ),
            umdResult::UMD_ERR_LOG_BAD_FILTER
        );
        assert_eq!(
            umd::error::detail::last().message_str(),
            "module names 'umd::memroy', which matches no libumd module (targets are module paths such as umd::memory, umd::submit, umd::backend::sim); nothing changed. Action: fix the call (arguments, handles or call order)."
        );
        assert_eq!(get_filter(UMD_LOG_SINK_FILE), "umd::device=info,error");
        assert_eq!(
            umdLogSetFilter(UMD_LOG_SINK_FILE, c"verbose".as_ptr()),
            umdResult::UMD_ERR_LOG_BAD_FILTER
        );
        assert_eq!(get_filter(UMD_LOG_SINK_FILE), "umd::device=info,error");
        // Too small a buffer: truncated copy, the size needed, UMD_ERR_INVALID_SIZE.
        let mut small = [0 as c_char; 4];
        let mut need = 0usize;
        assert_eq!(
            umdLogGetFilter(UMD_LOG_SINK_FILE, small.as_mut_ptr(), 4, &mut need),
            umdResult::UMD_ERR_INVALID_SIZE
        );
        assert_eq!(need, "umd::device=info,error".len() + 1);
        // SAFETY: NUL-terminated.
        assert_eq!(unsafe { CStr::from_ptr(small.as_ptr()) }.to_bytes(), b"umd");
        return;
    }
    let dir = fresh_dir("filter");
    let o = run_child(
        "per_module_levels_and_runtime_change",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG", "warn,umd::memory=debug"),
        ],
    );
    assert_ok(&o);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A bad `UMD_LOG` is ignored with one WARN naming it; the defaults apply.
#[test]
fn bad_env_filter_falls_back_and_says_so() {
    if is_child() {
        umd::log::ensure_init();
        assert_eq!(get_filter(UMD_LOG_SINK_CONSOLE), "warn");
        assert_eq!(get_filter(UMD_LOG_SINK_FILE), "info");
        flush();
        return;
    }
    let dir = fresh_dir("badenv");
    let o = run_child(
        "bad_env_filter_falls_back_and_says_so",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG", "umd=loud"),
            ("UMD_LOG_MAX_FILES", "many"),
        ],
    );
    assert_ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("UMD_LOG ignored: log filter 'umd=loud'"),
        "{err}"
    );
    assert!(err.contains("UMD_LOG_MAX_FILES='many' ignored"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
