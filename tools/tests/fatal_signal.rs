//! A process that dies of a fatal signal, the way an on-call engineer meets it: the program
//! (tests/triage/crash.c, written from include/umd.h) runs one job on the simulator, then its
//! own code writes through a NULL pointer. Its log directory then holds a black box whose
//! `process_exit` record (umd/src/log/signals.rs) says how it ended, and `umd-smi triage` names
//! the crash in the application layer with the signal and what was still live; its regular log
//! still got the records queued when it crashed (its start record: the configuration is judged).

#[path = "../../umd/tests/c_util.rs"]
mod c_util;
mod common;

use serde_json::Value;
use std::os::unix::process::ExitStatusExt;
use std::process::Command;

const SMI: &str = env!("CARGO_BIN_EXE_umd-smi");

#[test]
fn a_crash_is_named_with_its_signal_and_what_was_live() {
    let exe = c_util::out_dir().join("staged-crash");
    let o = c_util::compile("tests/triage/crash.c", &exe, &["-std=c11", "-O2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = common::scratch("fatal-signal");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).expect("log dir");
    let mut c = crash_command(&exe);
    let out = c
        .env("UMD_BACKEND", "sim")
        .env("UMD_LOG_DIR", &logs)
        .env("UMD_LOG_CONSOLE", "off")
        .env("UMD_LOG_OVERFLOW", "block")
        .output()
        .expect("run the crashing program");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(libc::SIGSEGV), "{stderr}");
    assert!(
        stderr.contains("umd: fatal signal SIGSEGV: black box written to "),
        "{stderr}"
    );
    let machine = common::machine("not-loaded");
    let o = Command::new(SMI)
        .env_clear()
        .args([
            "triage",
            "--json",
            "--no-archive",
            "--now",
            "2026-12-02T02:00:00Z",
        ])
        .arg("--root")
        .arg(machine.join("root"))
        .arg("--dmesg")
        .arg(machine.join("dmesg.txt"))
        .arg("--log-dir")
        .arg(&logs)
        .arg("-o")
        .arg(dir.join("out"))
        .output()
        .expect("run umd-smi triage");
    let screen = String::from_utf8_lossy(&o.stdout).into_owned();
    let json: Value = serde_json::from_str(&screen).unwrap_or_else(|e| panic!("{e}\n{screen}"));
    let layer = |name: &str| {
        json["verdict"]
            .as_array()
            .and_then(|l| l.iter().find(|l| l["layer"] == name))
            .unwrap_or_else(|| panic!("no {name} layer\n{screen}"))
    };
    // The process's start record reached its regular log before it died (the handler has the
    // writer flush): its settings are judged, not "not checked".
    assert_eq!(layer("configuration")["status"], "ok", "{screen}");
    let app = layer("application");
    assert_eq!(app["status"], "finding", "{app:#}");
    let crash = app["findings"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["kind"] == "fatal_signal"))
        .unwrap_or_else(|| panic!("no fatal_signal finding\n{app:#}"));
    assert_eq!(crash["signal"], "SIGSEGV", "{crash:#}");
    assert_eq!(
        crash["pid"].as_u64(),
        Some(u64::from(out_pid(&logs))),
        "{crash:#}"
    );
    let text = crash["text"].as_str().unwrap_or("");
    assert!(
        text.ends_with("died of SIGSEGV (status 139) with 1 context and 1 buffer still live"),
        "{crash:#}"
    );
}

/// The crashed process's pid, from its black box's name (`umd-blackbox-<pid>-<time>.log`).
fn out_pid(logs: &std::path::Path) -> u32 {
    let names: Vec<String> = std::fs::read_dir(logs)
        .expect("read the log dir")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names
        .iter()
        .find_map(|n| n.strip_prefix("umd-blackbox-"))
        .and_then(|r| r.split('-').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no black box in {names:?}"))
}

/// The same crash with stderr a pipe nobody reads any more (a supervisor that went away): the
/// handler's notice fails with EPIPE instead of killing the process with SIGPIPE, so it still
/// dies of SIGSEGV, with its black box and exit record written.
#[test]
fn a_crash_with_a_closed_stderr_pipe_still_dies_of_its_signal() {
    use std::os::unix::io::FromRawFd;
    let exe = c_util::out_dir().join("staged-crash-pipe");
    let o = c_util::compile("tests/triage/crash.c", &exe, &["-std=c11", "-O2"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = common::scratch("fatal-signal-pipe");
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).expect("log dir");
    let mut fds = [0i32; 2];
    // SAFETY: pipe with a valid out-array; the read end is closed at once, the write end handed
    // to the child as its stderr (owned by the Stdio from here on).
    let stderr = unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        std::process::Stdio::from_raw_fd(fds[1])
    };
    let mut c = crash_command(&exe);
    let status = c
        .env("UMD_BACKEND", "sim")
        .env("UMD_LOG_DIR", &logs)
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .status()
        .expect("run the crashing program");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}");
    let bb: Vec<String> = std::fs::read_dir(&logs)
        .expect("read the log dir")
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains("umd-blackbox-"))
        .map(|p| std::fs::read_to_string(p).unwrap_or_default())
        .collect();
    assert_eq!(bb.len(), 1, "one black box");
    assert!(
        bb[0].contains(" event=process_exit how=signal signal=SIGSEGV "),
        "{}",
        bb[0]
    );
}

/// The crashing program with no inherited `UMD_*` variable and no core file (whatever the
/// machine's limit), so a crash leaves nothing in the scratch directory.
fn crash_command(exe: &std::path::Path) -> Command {
    let mut c = Command::new(exe);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_") {
            c.env_remove(k);
        }
    }
    // SAFETY: plain setrlimit in the child before exec.
    unsafe {
        use std::os::unix::process::CommandExt;
        c.pre_exec(|| {
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            Ok(())
        });
    }
    c
}
