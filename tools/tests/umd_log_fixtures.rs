//! `umd-log` on recorded logs written by hand in libumd's format (docs/logging.md): two
//! processes, one writing text across three rotated files plus a black box, the other JSON lines
//! ending in a line cut short by a kill. Exact output, text and JSON.

mod common;
use common::*;

const LOG: &str = env!("CARGO_BIN_EXE_umd-log");

fn umd_log(args: &[&str]) -> String {
    let dir = fixtures().join("logs");
    let mut a = vec!["-d", dir.to_str().expect("utf-8")];
    a.extend_from_slice(args);
    let o = run(LOG, &a);
    assert_eq!(
        o.status.code(),
        Some(0),
        "umd-log {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    // JSON names the files it read: the checkout's path is replaced.
    scrub(&stdout(&o), &fixtures(), "<FIXTURES>")
}

#[test]
fn leaks() {
    golden("umd-log-leaks.txt", &umd_log(&["leaks"]));
    golden("umd-log-leaks.json", &umd_log(&["--json", "leaks"]));
}

#[test]
fn errors() {
    golden("umd-log-errors.txt", &umd_log(&["errors"]));
    let v: serde_json::Value = serde_json::from_str(&umd_log(&["--json", "errors"])).expect("json");
    let codes: Vec<&str> = v["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .map(|e| e["code"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(
        codes,
        vec![
            "UMD_ERR_MEM_OUT_OF_MEMORY",
            "UMD_ERR_SYNC_TIMEOUT",
            "-",
            "UMD_ERR_CTX_LOST",
            "-",
            "UMD_ERR_DEVICE_LOST"
        ]
    );
    assert_eq!(v["input"]["bad_lines"], 1);
}

#[test]
fn one_context() {
    golden(
        "umd-log-ctx-1-pid-4411.txt",
        &umd_log(&["ctx", "1", "--pid", "4411"]),
    );
    // Without --pid, context 1 of both processes, and a hint.
    let both = umd_log(&["ctx", "1"]);
    assert!(both.lines().nth(1).is_some_and(
        |l| l.ends_with(" in 2 processes (context ids are per process: add --pid to pick one)")
    ));
}

#[test]
fn last_job() {
    golden("umd-log-last-job.txt", &umd_log(&["last-job"]));
    golden("umd-log-last-job.json", &umd_log(&["--json", "last-job"]));
}

#[test]
fn single_file_and_missing_input() {
    // A file given directly (JSON lines).
    let f = fixtures().join("logs/umd-5120.log");
    let o = run(LOG, &["errors", f.to_str().expect("utf-8")]);
    assert!(stdout(&o).contains("1 error record\n"), "{}", stdout(&o));
    let o = run(LOG, &["-d", "/nonexistent-aigpu-logs", "leaks"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "umd-log: log directory /nonexistent-aigpu-logs: missing\numd-log: no libumd log files (umd-<pid>.log, umd-<pid>.<n>.log, umd-blackbox-*.log) in /nonexistent-aigpu-logs\n"
    );
    let o = run(LOG, &["ctx", "twelve"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr)
        .starts_with("error: invalid value 'twelve' for '<ID>': invalid digit found in string\n"));
}
