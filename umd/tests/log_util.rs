//! Helpers shared by the `log_*` tests (included with `#[path]`; as its own test target it has
//! no tests). The log pipeline is process-global and configured from the environment, so each
//! scenario runs in a child process: the test re-executes its own binary for exactly one test
//! with `UMD_TEST_LOG_CHILD=1` and the scenario's environment, and checks what the child wrote.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// True inside the child process.
pub fn is_child() -> bool {
    std::env::var_os("UMD_TEST_LOG_CHILD").is_some()
}

/// A fresh empty directory under the system temp dir.
pub fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("umd-logtest-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create test dir");
    d
}

/// Runs test `test` of this binary in a child with `envs` (plus `UMD_LOG_SIGNALS=0` unless
/// given, and no inherited `UMD_LOG*`).
pub fn run_child(test: &str, envs: &[(&str, &str)]) -> Output {
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = Command::new(exe);
    c.args([test, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_LOG") || k == "UMD_BACKEND" {
            c.env_remove(k);
        }
    }
    c.env("UMD_TEST_LOG_CHILD", "1");
    c.env("UMD_BACKEND", "sim");
    if !envs.iter().any(|(k, _)| *k == "UMD_LOG_SIGNALS") {
        c.env("UMD_LOG_SIGNALS", "0");
    }
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("spawn child test")
}

/// Asserts the child passed, printing its output otherwise.
pub fn assert_ok(o: &Output) {
    assert!(
        o.status.success(),
        "child failed: {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// The child's stderr lines.
pub fn stderr_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stderr)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Lines of a file ("" if missing).
pub fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `umd-*.log` files (not black boxes) in `dir`, sorted by name.
pub fn log_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| {
        let n = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        n.starts_with("umd-") && !n.starts_with("umd-blackbox-") && n.ends_with(".log")
    });
    v.sort();
    v
}

/// The black-box files in `dir`.
pub fn blackboxes(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("umd-blackbox-"))
    });
    v.sort();
    v
}

/// The file sink's path for process `pid` in `dir`.
pub fn log_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(format!("umd-{pid}.log"))
}

/// Splits a text record into (wall, mono, rest-after-mono).
pub fn split_ts(line: &str) -> (&str, u64, &str) {
    let mut it = line.splitn(3, ' ');
    let wall = it.next().unwrap_or("");
    let mono = it.next().and_then(|m| m.parse().ok()).unwrap_or(0);
    (wall, mono, it.next().unwrap_or(""))
}

/// CLOCK_MONOTONIC now, ns.
pub fn mono_now() -> u64 {
    umd::error::detail::mono_ns()
}

/// This thread's OS id.
pub fn tid() -> u64 {
    umd::error::detail::thread_id()
}

/// Checks `2026-11-29T02:13:07.123456Z` shape.
pub fn is_rfc3339_us(s: &str) -> bool {
    let b = s.as_bytes();
    b.len() == 27
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[26] == b'Z'
        && b.iter()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19, 26].contains(&i) || c.is_ascii_digit())
}

/// Flushes through the C ABI and asserts success.
pub fn flush() {
    let r = umd::abi::log::umdLogFlush(5000);
    assert_eq!(r, umd::umdResult::UMD_SUCCESS, "umdLogFlush");
}

/// The counters through the C ABI.
pub fn stats() -> umd::abi::log::umdLogStats {
    let mut s = umd::abi::log::umdLogStats {
        struct_size: std::mem::size_of::<umd::abi::log::umdLogStats>() as u32,
        ..Default::default()
    };
    let r = umd::abi::log::umdLogGetStats(&mut s);
    assert_eq!(r, umd::umdResult::UMD_SUCCESS);
    s
}
