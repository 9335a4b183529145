//! Running tests/c/sim_hold.c, a process on the simulator that holds its device open until its
//! standard input closes, so another process can look at it (umd/tests/sim_publish.rs,
//! tools/tests/sim_export.rs; included with `#[path]` after `c_util.rs`, in a subdirectory so that
//! cargo does not build it as a test of its own).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// The compiled program.
pub fn program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = crate::c_util::out_dir().join("sim_hold");
            let o = crate::c_util::compile(
                "tests/c/sim_hold.c",
                &exe,
                &["-std=c11", "-D_DEFAULT_SOURCE"],
            );
            assert!(
                o.status.success(),
                "tests/c/sim_hold.c does not compile:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            exe
        })
        .clone()
}

/// A fresh directory for one test (mode 0755, owned by the test's user).
pub fn fresh(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("sim_hold")
        .join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create test dir");
    d
}

/// The command: the simulator, the published views below `sim_dir`, the log in `sim_dir/logs`
/// and nothing of the test's own `UMD_*` environment.
pub fn command(sim_dir: &Path, mode: &str, envs: &[(&str, &str)]) -> Command {
    let mut c = Command::new(program());
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_") {
            c.env_remove(k);
        }
    }
    c.env("UMD_BACKEND", "sim")
        .env("UMD_SIM_DIR", sim_dir)
        .env("UMD_LOG_DIR", sim_dir.join("logs"));
    if !mode.is_empty() {
        c.arg(mode);
    }
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

/// A running sim_hold.
pub struct Holder {
    child: Child,
    stdin: Option<ChildStdin>,
    /// Its pid.
    pub pid: u32,
    /// The lines it printed up to `ready` (`child pid=...` in mode fork).
    pub lines: Vec<String>,
    out: BufReader<std::process::ChildStdout>,
}

/// How a holder ended.
pub struct Ended {
    /// Exit code (None: killed by a signal).
    pub code: Option<i32>,
    /// Its standard output after `ready`.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Holder {
    /// Starts it and waits for its `ready` line.
    pub fn start(mut c: Command) -> Holder {
        let mut child = c
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sim_hold");
        let stdin = child.stdin.take();
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut lines = Vec::new();
        loop {
            let mut l = String::new();
            if out.read_line(&mut l).expect("read sim_hold") == 0 {
                let mut err = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut err);
                }
                let _ = child.wait();
                panic!("sim_hold ended before ready: {lines:?}\n{err}");
            }
            let l = l.trim_end().to_string();
            let ready = l.starts_with("ready ");
            lines.push(l);
            if ready {
                break;
            }
        }
        let pid = child.id();
        Holder {
            child,
            stdin,
            pid,
            lines,
            out,
        }
    }

    /// Closes its standard input: it closes everything and exits.
    pub fn finish(mut self) -> Ended {
        drop(self.stdin.take());
        self.end()
    }

    /// SIGKILL (by its pid).
    pub fn kill(mut self) -> Ended {
        let _ = self.child.kill();
        self.end()
    }

    fn end(mut self) -> Ended {
        let st = self.child.wait().expect("wait sim_hold");
        let mut stdout = String::new();
        let _ = self.out.read_to_string(&mut stdout);
        let mut stderr = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            let _ = e.read_to_string(&mut stderr);
        }
        Ended {
            code: st.code(),
            stdout,
            stderr,
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `f` every 20 ms for up to 5 s; the last answer.
pub fn wait_until<T>(mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `key=value` of a line (the first).
pub fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.split(' ')
        .find_map(|p| p.strip_prefix(key)?.strip_prefix('='))
}

/// The device directory of `pid` below `sim_dir`.
pub fn dev_dir(sim_dir: &Path, pid: u32, n: u32) -> PathBuf {
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    sim_dir
        .join(format!("aigpu-sim-{uid}"))
        .join(pid.to_string())
        .join(format!("dev{n}"))
}

/// Waits until the views in `dir` show sim_hold's whole workload: both contexts' jobs complete
/// in `contexts`, two jobs in `status` and `clients`, and an `owner` (a round writes the files
/// one after the other, so each is waited for on its own).
pub fn wait_for_the_work(dir: &Path) {
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
    wait_until(|| {
        let c = read("contexts")?;
        let done = c.lines().count() == 2 && c.lines().all(|l| l.contains(" completed=1 "));
        let s = read("status")?;
        let k = read("clients")?;
        let o = read("owner")?;
        (done && s.contains(" jobs=2 ") && k.contains(" jobs=2") && !o.is_empty()).then_some(())
    })
    .unwrap_or_else(|| panic!("{}: the work is not published", dir.display()));
}
