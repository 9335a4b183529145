//! The staged failures of tests/triage (tests/triage/README.md): each a small C program written
//! from include/umd.h that fails the way applications do, run in a fresh log directory with
//! the environment its `.expect` file names, then `umd-smi triage --json` over its log and a
//! recorded machine without the kernel module; the verdict's layers and the first findings'
//! fields (kind, context, call, packet, address, size, buffer, culprit, innocent contexts,
//! setting, fix) must be exactly the expected ones.
//!
//! Two switches make the same binary run in the QEMU guest (tests/guest/init.sh) against the real
//! aigpu.ko: `STAGED_BIN_DIR` names a directory holding the prebuilt programs (`staged-<name>`,
//! scripts/build-guest-umd.sh) and `umd-smi`, instead of compiling them with `cc` (the guest has
//! none); `STAGED_LIVE=1` makes `umd-smi triage` read the real machine (its sysfs, debugfs,
//! dmesg) instead of the recorded one; `STAGED_MODULE` (the insmod arguments) reloads aigpu
//! before each kernel-side case. The kernel-side cases (`needs live` in their `.expect`)
//! run only in live mode with aigpu loaded; the simulator's cases run on the host only (the
//! recorded machine is part of what they assert). The `.expect` files are compiled in.

#[path = "../../umd/tests/c_util.rs"]
mod c_util;
mod common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `STAGED_BIN_DIR`: the directory of prebuilt `staged-<name>` programs and `umd-smi`.
fn bin_dir() -> Option<PathBuf> {
    std::env::var_os("STAGED_BIN_DIR").map(PathBuf::from)
}

/// `STAGED_LIVE=1`: triage reads this machine, not the recorded one.
fn live() -> bool {
    std::env::var_os("STAGED_LIVE").is_some_and(|v| v == "1")
}

fn smi() -> PathBuf {
    match bin_dir() {
        Some(d) => d.join("umd-smi"),
        None => PathBuf::from(env!("CARGO_BIN_EXE_umd-smi")),
    }
}

/// The text of `tests/triage/<case>.expect`, compiled in (the guest has no source tree).
macro_rules! expect_text {
    ($case:literal) => {
        (
            $case,
            include_str!(concat!("../../tests/triage/", $case, ".expect")),
        )
    };
}

/// One `.expect` file.
struct Expect {
    program: String,
    env: Vec<(String, String)>,
    exit: i32,
    /// (layer as in verdict.json, finding index, expectation).
    layers: Vec<(String, usize, Want)>,
    /// `needs live`: a kernel-side case, run only in live mode with aigpu loaded.
    live: bool,
    /// `user N`: the program runs as uid and gid N.
    user: Option<u32>,
    /// `render_node_mode 0600`: every render node gets this mode for the case (restored after).
    render_node_mode: Option<u32>,
    /// `inject_uapi_version 2.0`: QUERY reports this UAPI version for the case (debugfs, `0`
    /// after).
    inject_uapi_version: Option<String>,
}

enum Want {
    Ok,
    NotChecked,
    /// (field, value, substring match).
    Finding(Vec<(String, String, bool)>),
}

fn layer_name(k: &str) -> String {
    match k {
        "kernel_module" => "kernel module".into(),
        "user_space" => "user-space driver".into(),
        other => other.into(),
    }
}

/// `kind=x ctx=1 packet=offset 0 fix~=some words`: a value runs to the next `key=` or `key~=`.
fn pairs(s: &str) -> Vec<(String, String, bool)> {
    let mut out: Vec<(String, String, bool)> = Vec::new();
    for tok in s.split(' ') {
        let key = tok.split_once("~=").or_else(|| tok.split_once('='));
        match key {
            Some((k, v))
                if !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_') =>
            {
                out.push((k.to_string(), v.to_string(), tok.contains("~=")))
            }
            _ => {
                let last = out.last_mut().expect("a value before any key");
                last.1 = format!("{} {tok}", last.1);
            }
        }
    }
    out
}

fn parse(text: &str) -> Expect {
    let mut e = Expect {
        program: String::new(),
        env: Vec::new(),
        exit: 0,
        layers: Vec::new(),
        live: false,
        user: None,
        render_node_mode: None,
        inject_uapi_version: None,
    };
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let (head, rest) = line.split_once(' ').unwrap_or((line, ""));
        match head {
            "program" => e.program = rest.to_string(),
            "env" => {
                e.env = rest
                    .split(' ')
                    .filter_map(|kv| kv.split_once('='))
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect()
            }
            "exit" => e.exit = rest.parse().expect("exit status"),
            "needs" => {
                assert_eq!(rest, "live", "needs: only `live`");
                e.live = true
            }
            "user" => e.user = Some(rest.parse().expect("uid")),
            "render_node_mode" => {
                e.render_node_mode = Some(u32::from_str_radix(rest, 8).expect("octal mode"))
            }
            "inject_uapi_version" => e.inject_uapi_version = Some(rest.to_string()),
            layer => {
                let (layer, index) = match layer.split_once('+') {
                    Some((l, n)) => (l, n.parse().expect("finding index")),
                    None => (layer, 0),
                };
                let want = match rest {
                    "ok" => Want::Ok,
                    "not_checked" => Want::NotChecked,
                    facts => Want::Finding(pairs(facts)),
                };
                e.layers.push((layer_name(layer), index, want));
            }
        }
    }
    e
}

fn program(name: &str) -> PathBuf {
    if let Some(d) = bin_dir() {
        let exe = d.join(format!("staged-{name}"));
        assert!(exe.exists(), "{} is not staged", exe.display());
        return exe;
    }
    let exe = c_util::out_dir().join(format!("staged-{name}"));
    let o = c_util::compile(&format!("tests/triage/{name}.c"), &exe, &["-std=c11", "-g"]);
    assert!(
        o.status.success(),
        "tests/triage/{name}.c does not compile:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

/// `want` is the value (`key=value`), a part of it (`key~=part`), or for a number a range
/// (`key=lo..hi`, both included: a time such as `ran_ms`).
fn value_matches(v: &Value, want: &str, sub: bool) -> bool {
    let got = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let range = want
        .split_once("..")
        .and_then(|(lo, hi)| Some((lo.parse::<u64>().ok()?, hi.parse::<u64>().ok()?)));
    if let (Some((lo, hi)), Some(n), false) = (range, v.as_u64(), sub) {
        return (lo..=hi).contains(&n);
    }
    if sub {
        got.contains(want)
    } else {
        got == want
    }
}

/// The machine state a kernel-side case sets up, put back when dropped (a failed case too).
#[derive(Default)]
struct Staging {
    /// (render node, its mode before).
    modes: Vec<(PathBuf, u32)>,
    /// debugfs `inject_uapi_version` files written.
    versions: Vec<PathBuf>,
}

impl Staging {
    fn new(e: &Expect) -> Staging {
        use std::os::unix::fs::PermissionsExt;
        let mut s = Staging::default();
        if let Some(mode) = e.render_node_mode {
            // The guest's render nodes are all aigpu's.
            for n in glob_dir("/dev/dri", |f| f.starts_with("renderD")) {
                let was = std::fs::metadata(&n)
                    .expect("stat render node")
                    .permissions()
                    .mode();
                s.modes.push((n.clone(), was & 0o7777));
                common::set_mode(&n, mode);
            }
            assert!(!s.modes.is_empty(), "no render node to chmod");
        }
        if let Some(v) = &e.inject_uapi_version {
            // Every device at once: libumd reports the mismatch only when no node is usable.
            for d in glob_dir("/sys/kernel/debug/dri", |_| true) {
                let f = d.join("inject_uapi_version");
                if f.exists() {
                    std::fs::write(&f, v).unwrap_or_else(|e| panic!("write {}: {e}", f.display()));
                    s.versions.push(f);
                }
            }
            assert!(
                !s.versions.is_empty(),
                "no debugfs inject_uapi_version file"
            );
        }
        s
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        for (n, mode) in &self.modes {
            common::set_mode(n, *mode);
        }
        for f in &self.versions {
            let _ = std::fs::write(f, "0");
        }
    }
}

/// The user name of `uid` in /etc/passwd (su takes a name). The guest has no passwd file of its
/// own: uid 65534 is added as `nobody`, the entry tests/guest/tools_test.sh adds too.
fn user_name(uid: u32) -> String {
    let has = |f: &str, l: &str| std::fs::read_to_string(f).is_ok_and(|t| t.contains(l));
    let append = |f: &str, l: &str| {
        use std::io::Write;
        let mut o = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(f)
            .unwrap_or_else(|e| panic!("open {f}: {e}"));
        writeln!(o, "{l}").unwrap_or_else(|e| panic!("write {f}: {e}"));
    };
    if uid == 65534 && !has("/etc/passwd", ":x:65534:") {
        append("/etc/passwd", "nobody:x:65534:65534:nobody:/tmp:/bin/sh");
        if !has("/etc/group", ":65534:") {
            append("/etc/group", "nogroup:x:65534:");
        }
    }
    let passwd = std::fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    passwd
        .lines()
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() > 2 && f[2] == uid.to_string())
        .map(|f| f[0].to_string())
        .unwrap_or_else(|| panic!("no user of uid {uid} in /etc/passwd"))
}

/// The entries of `dir` whose file name passes `keep`, sorted.
fn glob_dir(dir: &str, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .filter(|e| keep(&e.file_name().to_string_lossy()))
                .map(|e| e.path())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `STAGED_MODULE="<path to aigpu.ko> <parameters>"`: every kernel-side case starts on a freshly
/// loaded module (rmmod, insmod), so the one before leaves no crash dump or banned context in
/// the machine triage reads.
fn reload_module() {
    let Some(m) = std::env::var("STAGED_MODULE")
        .ok()
        .filter(|m| !m.is_empty())
    else {
        return;
    };
    let st = Command::new("rmmod")
        .arg("aigpu")
        .status()
        .expect("run rmmod");
    assert!(st.success(), "rmmod aigpu failed");
    let st = Command::new("insmod")
        .args(m.split(' '))
        .status()
        .expect("run insmod");
    assert!(st.success(), "insmod {m} failed");
}

/// Live mode changes the machine for a case (render node modes, the injected UAPI version) and
/// the kernel's log is shared: one case at a time.
static LIVE_ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs one staged failure and checks its verdict (the simulator's cases on the host, the
/// kernel-side ones in live mode with aigpu loaded; the others are skipped with a line saying
/// why).
fn staged((case, text): (&str, &str)) {
    let expect = parse(text);
    let loaded = Path::new("/sys/module/aigpu").exists();
    if expect.live && !(live() && loaded) {
        eprintln!("{case} skipped: needs STAGED_LIVE=1 and aigpu loaded");
        return;
    }
    if !expect.live && live() {
        eprintln!("{case} skipped: a case of the recorded machine (not STAGED_LIVE)");
        return;
    }
    let _one = live().then(|| LIVE_ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner()));
    if expect.live {
        reload_module();
    }
    let exe = program(&expect.program);
    let dir = common::scratch(case);
    let logs = dir.join("logs");
    std::fs::create_dir_all(&logs).expect("log dir");
    let staging = Staging::new(&expect);
    let mut c = match expect.user {
        // Through su (busybox's in the guest): std's own uid switch forks with a socket pair the
        // guest's kernel cannot make (no AF_UNIX: EAFNOSUPPORT). `-m` keeps the environment
        // given below; the program stands in for the shell.
        Some(id) => {
            let name = user_name(id);
            // Its log directory must be its own to write.
            common::set_mode(&logs, 0o1777);
            let mut c = Command::new("su");
            c.arg("-m").arg("-s").arg(&exe).arg(name);
            c
        }
        None => Command::new(&exe),
    };
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_") {
            c.env_remove(k);
        }
    }
    // Every record in the file even on a loaded machine: the verdict is judged on the whole log
    // (with the default `drop`, a full lane drops records and counts them).
    c.env("UMD_LOG_DIR", &logs)
        .env("UMD_LOG_SIGNALS", "0")
        .env("UMD_LOG_CONSOLE", "off")
        .env("UMD_LOG_OVERFLOW", "block")
        .env("UMD_LOG_BLOCK_MS", "5000")
        .envs(expect.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let out = c.output().expect("run the staged program");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(expect.exit),
        "{case}: exit status\n{stderr}"
    );
    let mut t = Command::new(smi());
    t.env_clear().args(["triage", "--json", "--no-archive"]);
    // The machine: this one in live mode, else the recorded one without the kernel module (the
    // simulator needs none).
    let _machine = (!live()).then(|| {
        let m = common::machine("not-loaded");
        t.args(["--now", "2026-12-02T02:00:00Z"])
            .arg("--root")
            .arg(m.join("root"))
            .arg("--dmesg")
            .arg(m.join("dmesg.txt"));
        m
    });
    if live() {
        t.env("PATH", std::env::var_os("PATH").unwrap_or_default());
    }
    let o = t
        .arg("--log-dir")
        .arg(&logs)
        .arg("-o")
        .arg(dir.join("out"))
        .output()
        .expect("run umd-smi triage");
    // The machine stays broken while triage looks at it, as the on-call engineer finds it.
    drop(staging);
    let screen = String::from_utf8_lossy(&o.stdout).into_owned();
    let json: Value =
        serde_json::from_str(&screen).unwrap_or_else(|e| panic!("{case}: {e}\n{screen}"));
    if live() {
        // The guest's serial log keeps what the on-call engineer would have seen.
        let shown: Vec<String> = json["verdict"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                let mut l = l.clone();
                for f in l["findings"].as_array_mut().into_iter().flatten() {
                    f["evidence"] = Value::Null;
                }
                l["evidence"] = Value::Null;
                format!("staged {case}: {l}")
            })
            .collect();
        eprintln!("{}", shown.join("\n"));
    }
    let layers = json["verdict"].as_array().expect("verdict layers");
    for (layer, index, want) in &expect.layers {
        let l = layers
            .iter()
            .find(|l| l["layer"] == layer.as_str())
            .unwrap_or_else(|| panic!("{case}: no layer {layer}"));
        let status = l["status"].as_str().unwrap_or("");
        let shown = format!("{case}, layer {layer}:\n{:#}", l);
        match want {
            Want::Ok => assert_eq!(status, "ok", "{shown}"),
            Want::NotChecked => assert_eq!(status, "not_checked", "{shown}"),
            Want::Finding(facts) => {
                assert_eq!(status, "finding", "{shown}");
                let f = &l["findings"][*index];
                for (k, v, sub) in facts {
                    if k == "innocent" {
                        let ctxs: Vec<String> = f["innocent"]
                            .as_array()
                            .map(|a| a.iter().map(|i| i["ctx"].to_string()).collect())
                            .unwrap_or_default();
                        assert_eq!(ctxs.join(","), *v, "{shown}");
                        continue;
                    }
                    assert!(
                        value_matches(&f[k.as_str()], v, *sub),
                        "{case}, layer {layer}, finding {index}: {k} is {}, expected {}{v}\n{shown}",
                        f[k.as_str()],
                        if *sub { "to contain " } else { "" }
                    );
                }
            }
        }
    }
}

#[test]
fn use_after_free_through_a_replayed_command_buffer() {
    staged(expect_text!("use_after_free"));
}

#[test]
fn out_of_bounds_write_with_an_innocent_second_context() {
    staged(expect_text!("oob_write"));
}

#[test]
fn page_fault_with_an_innocent_second_context() {
    staged(expect_text!("page_fault"));
}

#[test]
fn hang_with_the_default_timeout() {
    staged(expect_text!("hang"));
}

#[test]
fn job_timeout_set_too_short_is_configuration() {
    staged(expect_text!("short_timeout"));
}

#[test]
fn leak_with_a_normal_exit() {
    staged(expect_text!("leak"));
}

#[test]
fn buffers_live_at_a_normal_exit() {
    staged(expect_text!("live_at_exit"));
}

#[test]
fn out_of_memory_caused_by_another_context() {
    staged(expect_text!("oom"));
}

#[test]
fn memory_error_then_failed_reset_is_hardware() {
    staged(expect_text!("mem_error"));
}

/// The cases that need a machine without aigpu loaded (the guest has it).
fn staged_without_module(case: (&str, &str)) {
    if Path::new("/sys/module/aigpu").exists() {
        eprintln!("{} skipped: aigpu is loaded here", case.0);
        return;
    }
    staged(case);
}

#[test]
fn module_not_loaded() {
    staged_without_module(expect_text!("module_not_loaded"));
}

#[test]
fn memory_size_set_too_small_is_configuration() {
    staged(expect_text!("small_memory"));
}

#[test]
fn module_not_loaded_and_the_automatic_fallback() {
    staged_without_module(expect_text!("module_not_loaded_auto"));
}

#[test]
fn permission_denied_on_the_render_node() {
    staged(expect_text!("permission_denied"));
}

#[test]
fn kernel_uapi_this_libumd_cannot_drive() {
    staged(expect_text!("uapi_mismatch"));
}

#[test]
fn page_fault_on_the_kernel_backend_with_an_innocent_second_context() {
    staged(expect_text!("page_fault_kmd"));
}

#[test]
fn hang_on_the_kernel_backend() {
    staged(expect_text!("hang_kmd"));
}

#[test]
fn expect_files_parse() {
    let p = pairs("kind=page_fault packet=offset 0 fix~=the device pointer");
    assert_eq!(
        p,
        vec![
            ("kind".into(), "page_fault".into(), false),
            ("packet".into(), "offset 0".into(), false),
            ("fix".into(), "the device pointer".into(), true),
        ]
    );
}
