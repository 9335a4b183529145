//! Short-lived processes, run the way outside programs run: `tests/c/short_process.c` (written
//! from include/umd.h alone) in one mode per program shape, each in a fresh log directory. For
//! each: the exit status, the exact records of the log file (level, module, function, ctx, code,
//! message), the console, and the process time against the same program with `UMD_LOG=off`
//! (docs/logging.md, "Short processes, fork and a closed console").

#[path = "c_util.rs"]
mod c_util;
#[path = "log_util.rs"]
mod log_util;
use log_util::log_files;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn program() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let exe = c_util::out_dir().join("short_process");
        let o = c_util::compile_with(
            "tests/c/short_process.c",
            &exe,
            &["-std=c11"],
            &["-ldl", "-lpthread"],
        );
        assert!(
            o.status.success(),
            "short_process.c does not compile:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        exe
    })
    .clone()
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("umd-short-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create dir");
    d
}

/// The program in `mode` with only the given `UMD_*` variables (plus a fresh `UMD_LOG_DIR`).
fn command(mode: &str, dir: &Path, envs: &[(&str, &str)]) -> Command {
    let mut c = Command::new(program());
    c.args(mode.split(' '));
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_") {
            c.env_remove(k);
        }
    }
    c.env("UMD_LOG_DIR", dir).env("UMD_LOG_SIGNALS", "0");
    // The loader finds libumd.so.1 for dlopen by the run path of the program; make it explicit.
    c.env("LD_LIBRARY_PATH", c_util::profile_dir());
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

struct Run {
    out: Output,
    took: Duration,
    dir: PathBuf,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn assert_exit0(&self) {
        assert!(
            self.out.status.success(),
            "status {:?}\n--- stdout\n{}--- stderr\n{}",
            self.out.status,
            self.stdout(),
            self.stderr()
        );
    }
    /// The records of every `umd-<pid>.log` in the directory, file by file (sorted by name),
    /// without the process's story records (`umd::log::story`).
    fn file_records(&self) -> Vec<Rec> {
        self.all_file_records()
            .into_iter()
            .filter(not_story)
            .collect()
    }
    /// [`Run::file_records`] with the story records.
    fn all_file_records(&self) -> Vec<Rec> {
        log_files(&self.dir)
            .iter()
            .flat_map(|p| {
                std::fs::read_to_string(p)
                    .unwrap_or_default()
                    .lines()
                    .map(parse)
                    .collect::<Vec<_>>()
            })
            .collect()
    }
    fn console_records(&self) -> Vec<Rec> {
        self.stderr()
            .lines()
            .filter(|l| l.starts_with("20"))
            .map(parse)
            .filter(not_story)
            .collect()
    }
}

/// The process's start and exit records (docs/tools.md, "The process's story") are every
/// process's; these tests are about the records of the calls.
fn not_story(r: &Rec) -> bool {
    r.module != "umd::log::story"
}

fn run(mode: &str, name: &str, envs: &[(&str, &str)]) -> Run {
    let dir = fresh_dir(name);
    let t = Instant::now();
    let out = command(mode, &dir, envs)
        .output()
        .expect("run short_process");
    Run {
        out,
        took: t.elapsed(),
        dir,
    }
}

/// One text record's fixed fields (docs/logging.md, "Text"): level, module, function, ctx, code,
/// message, and the raw `key=value` tail.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Rec {
    level: String,
    module: String,
    function: String,
    ctx: String,
    code: String,
    msg: String,
    params: String,
}

fn parse(line: &str) -> Rec {
    let mut rest = line;
    let mut tok = Vec::new();
    for _ in 0..9 {
        let (t, r) = rest.split_once(' ').unwrap_or((rest, ""));
        tok.push(t.to_string());
        rest = r;
    }
    // The message is a JSON string literal; find where it ends.
    let mut end = 1;
    let b = rest.as_bytes();
    while end < b.len() {
        match b[end] {
            b'\\' => end += 2,
            b'"' => break,
            _ => end += 1,
        }
    }
    let msg: String = serde_json::from_str(&rest[..=end.min(rest.len() - 1)]).unwrap_or_else(|e| {
        panic!("record message does not parse ({e}): {line}");
    });
    Rec {
        level: tok[2].clone(),
        module: tok[4].clone(),
        function: tok[5].clone(),
        ctx: tok[7].trim_start_matches("ctx=").to_string(),
        code: tok[8].trim_start_matches("code=").to_string(),
        msg,
        params: rest[(end + 1).min(rest.len())..].trim().to_string(),
    }
}

/// (level, module, function, ctx, code) of each record plus the message's start.
fn shape(recs: &[Rec]) -> Vec<(String, String, String, String, String, String)> {
    recs.iter()
        .map(|r| {
            (
                r.level.clone(),
                r.module.clone(),
                r.function.clone(),
                r.ctx.clone(),
                r.code.clone(),
                r.msg.chars().take(60).collect(),
            )
        })
        .collect()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// The program's time with the log on, against `UMD_LOG=off`, medians of 3 each: within 50 ms.
fn assert_quick(mode: &str, envs: &[(&str, &str)]) {
    let mut on = Vec::new();
    let mut off = Vec::new();
    for i in 0..3 {
        on.push(run(mode, &format!("{mode}-t{i}"), envs).took);
        let mut e = envs.to_vec();
        e.push(("UMD_LOG", "off"));
        off.push(run(mode, &format!("{mode}-o{i}"), &e).took);
    }
    let (on, off) = (median(on), median(off));
    println!("{mode}: median {on:?} with the log, {off:?} with UMD_LOG=off");
    assert!(
        on < off + Duration::from_millis(50),
        "{mode}: {on:?} with the log against {off:?} with UMD_LOG=off"
    );
}

const KMD_ABSENT: &[(&str, &str)] = &[("UMD_BACKEND", "kmd")];

fn kmd_present() -> bool {
    std::fs::read_dir("/sys/module/aigpu").is_ok()
}

#[test]
fn a_process_that_fails_at_its_first_call_keeps_its_records_and_exits_at_once() {
    if kmd_present() {
        return; // the guest has the module: there the kmd backend is available
    }
    let r = run("fail-first", "fail-first", KMD_ABSENT);
    r.assert_exit0();
    assert!(
        r.stdout()
            .contains("short_process: open UMD_ERR_INIT_BACKEND_UNAVAILABLE\n"),
        "{}",
        r.stdout()
    );
    let file = r.file_records();
    println!("{:#?}", shape(&file));
    assert_eq!(
        shape(&file)
            .iter()
            .map(|s| (s.0.as_str(), s.1.as_str(), s.2.as_str(), s.4.as_str()))
            .collect::<Vec<_>>(),
        vec![(
            "WARN",
            "umd::abi",
            "umdDeviceOpen",
            "UMD_ERR_INIT_BACKEND_UNAVAILABLE"
        )],
        "{file:#?}"
    );
    assert_eq!(r.console_records(), file, "console and file agree");
    assert_quick("fail-first", KMD_ABSENT);
}

/// The sim WARN every process without a kernel device logs once (docs/libumd.md, backends).
const SIM_NOTICE: &str = "no aigpu kernel device; using the simulator backend";

fn shapes_of(recs: &[Rec]) -> Vec<(String, String, String, String)> {
    recs.iter()
        .map(|r| {
            (
                r.level.clone(),
                r.module.clone(),
                r.function.clone(),
                r.code.clone(),
            )
        })
        .collect()
}

fn owned(v: &[(&str, &str, &str, &str)]) -> Vec<(String, String, String, String)> {
    v.iter()
        .map(|(a, b, c, d)| (a.to_string(), b.to_string(), c.to_string(), d.to_string()))
        .collect()
}

const NULL_CTX_ALLOC: (&str, &str, &str, &str) =
    ("WARN", "umd::abi", "umdMemAlloc", "UMD_ERR_INVALID_HANDLE");
const SIM_SELECTED: (&str, &str, &str, &str) = ("WARN", "umd::backend::select", "-", "-");

#[test]
fn a_process_that_succeeds_then_fails_keeps_every_record() {
    let r = run("fail-alloc", "fail-alloc", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    let file = r.file_records();
    assert_eq!(shapes_of(&file), owned(&[NULL_CTX_ALLOC]), "{file:#?}");
    assert!(file[0]
        .msg
        .starts_with("umdContext handle 0x0000000000000000 is the null handle 0."));
    assert_eq!(r.console_records(), file);
    // With the automatic backend choice the simulator notice comes first.
    let r = run("fail-alloc", "fail-alloc-auto", &[]);
    r.assert_exit0();
    if !kmd_present() {
        let file = r.file_records();
        assert_eq!(
            shapes_of(&file),
            owned(&[SIM_SELECTED, NULL_CTX_ALLOC]),
            "{file:#?}"
        );
        assert!(file[0].msg.starts_with(SIM_NOTICE), "{file:#?}");
    }
    assert_quick("fail-alloc", &[("UMD_BACKEND", "sim")]);
}

#[test]
fn a_process_that_succeeds_at_its_first_call_exits_at_once() {
    let r = run("succeed-first", "succeed-first", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    assert!(r.stdout().contains("short_process: count UMD_SUCCESS\n"));
    assert_eq!(
        r.file_records(),
        vec![],
        "nothing to say at the default levels"
    );
    assert_quick("succeed-first", &[("UMD_BACKEND", "sim")]);
}

#[test]
fn exit_from_a_second_thread_keeps_its_records() {
    let r = run("exit-thread", "exit-thread", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    let file = r.file_records();
    assert_eq!(shapes_of(&file), owned(&[NULL_CTX_ALLOC]), "{file:#?}");
    assert_eq!(r.console_records(), file);
    assert_quick("exit-thread", &[("UMD_BACKEND", "sim")]);
}

#[test]
fn a_call_from_an_atexit_handler_that_calls_exit_is_logged_not_aborted() {
    let r = run("atexit-exit", "atexit-exit", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    assert!(
        r.stdout()
            .ends_with("short_process: done\nshort_process: atexit alloc UMD_ERR_INVALID_HANDLE\n"),
        "{}",
        r.stdout()
    );
    let file = r.file_records();
    assert_eq!(
        shapes_of(&file),
        owned(&[NULL_CTX_ALLOC, NULL_CTX_ALLOC]),
        "{file:#?}"
    );
    assert_eq!(r.console_records(), file);
    assert_quick("atexit-exit", &[("UMD_BACKEND", "sim")]);
}

#[test]
fn fork_then_exit_in_the_child_keeps_both_processes_records() {
    let r = run("fork-exit", "fork-exit", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    let files = log_files(&r.dir);
    assert_eq!(files.len(), 2, "one file per process: {files:?}");
    for f in &files {
        let recs: Vec<Rec> = std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .map(parse)
            .collect();
        assert_eq!(
            shapes_of(&recs),
            owned(&[NULL_CTX_ALLOC]),
            "{}: {recs:#?}",
            f.display()
        );
    }
    assert_eq!(r.console_records().len(), 2);
    assert_quick("fork-exit", &[("UMD_BACKEND", "sim")]);
}

#[test]
fn dlopen_and_dlclose_keep_the_records_and_do_not_crash() {
    let r = run("dlopen", "dlopen", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    assert!(r
        .stdout()
        .contains("short_process: dlopen alloc -3\nshort_process: dlclosed\n"));
    let file = r.file_records();
    assert_eq!(shapes_of(&file), owned(&[NULL_CTX_ALLOC]), "{file:#?}");
    assert_eq!(r.console_records(), file);
    assert_quick("dlopen", &[("UMD_BACKEND", "sim")]);
}

/// `prog 2>&1 >/dev/null | head -1`: the console's reader goes away. libumd must not raise
/// SIGPIPE in its host: the host exits 0, the file keeps every record, and one record says the
/// console sink is down.
#[test]
fn a_closed_stderr_pipe_neither_kills_the_host_nor_loses_records() {
    let dir = fresh_dir("sigpipe");
    let mut child = command("console-burst", &dir, &[("UMD_BACKEND", "sim")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // Read one line of the console, then close the pipe (what `| head -1` does).
    let mut err = child.stderr.take().expect("stderr pipe");
    let mut first = [0u8; 64];
    let _ = err.read(&mut first);
    drop(err);
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    let status = child.wait().expect("wait");
    assert!(status.success(), "host killed: {status:?}\n{stdout}");
    assert!(stdout.ends_with("short_process: done\n"), "{stdout}");
    let r = Run {
        out: Output {
            status,
            stdout: stdout.into_bytes(),
            stderr: Vec::new(),
        },
        took: Duration::ZERO,
        dir,
    };
    let file = r.file_records();
    let allocs = file.iter().filter(|f| f.function == "umdMemAlloc").count();
    assert_eq!(allocs, 18, "every record in the file: {file:#?}");
    let down: Vec<&Rec> = file
        .iter()
        .filter(|f| {
            f.msg
                .starts_with("console sink down: writing stderr failed: Broken pipe")
        })
        .collect();
    assert_eq!(down.len(), 1, "said once: {file:#?}");
    assert_eq!(down[0].module, "umd::log::writer");
    assert_eq!(down[0].params, "errno=32");
}

#[test]
fn a_console_flood_is_rate_limited_with_a_summary_and_the_file_keeps_all() {
    let r = run("flood", "flood", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    let file = r.file_records();
    let console = r.console_records();
    let in_file = file
        .iter()
        .filter(|f| f.function == "umdMemGetAddress")
        .count();
    assert_eq!(in_file, 20_000, "the file keeps every record");
    let shown = console
        .iter()
        .filter(|f| f.function == "umdMemGetAddress")
        .count();
    let summaries: Vec<&Rec> = console
        .iter()
        .filter(|f| f.module == "umd::log::limit")
        .collect();
    let suppressed: u64 = summaries
        .iter()
        .map(|s| {
            s.params
                .split(' ')
                .find_map(|kv| kv.strip_prefix("suppressed="))
                .and_then(|v| v.parse::<u64>().ok())
                .expect("suppressed=<n>")
        })
        .sum();
    assert!(
        shown <= 5 * 4,
        "{shown} console records in a flood of 20,000"
    );
    assert_eq!(
        shown as u64 + suppressed,
        20_000,
        "every record shown or counted: {summaries:#?}"
    );
    assert!(summaries[0].msg.ends_with(
        "similar console records suppressed (at most 5 per call site per second); the log file has them all"
    ));
    assert!(
        summaries[0].params.contains("site=umd/src/abi/mod.rs:"),
        "{}",
        summaries[0].params
    );
}

#[test]
fn the_log_file_path_is_there_right_after_start_up() {
    for i in 0..5 {
        let r = run(
            "file-path",
            &format!("file-path-{i}"),
            &[("UMD_BACKEND", "sim")],
        );
        r.assert_exit0();
        let out = r.stdout();
        assert!(
            out.contains("short_process: path NULL buf size 8 UMD_ERR_INVALID_POINTER\nshort_process: path UMD_SUCCESS\n"),
            "{out}"
        );
        let path = out
            .lines()
            .find_map(|l| l.strip_prefix("short_process: path is "))
            .expect("path line");
        assert!(Path::new(path).starts_with(&r.dir), "{path}");
        assert!(Path::new(path).exists(), "{path}");
    }
}

#[test]
fn a_hang_packet_without_hang_debugging_is_an_invalid_packet_on_its_context() {
    let r = run(
        "hang-disabled",
        "hang-disabled",
        &[("UMD_BACKEND", "sim"), ("UMD_SIM_HANG_DEBUG", "0")],
    );
    r.assert_exit0();
    assert!(
        r.stdout().contains("short_process: hang UMD_ERR_SUBMIT_INVALID_PACKET\nshort_process: hang detail ctx=1 invalid packet: HANG packet while hang debugging is disabled"),
        "{}",
        r.stdout()
    );
    let file = r.file_records();
    let rec = file
        .iter()
        .find(|f| f.function == "umdCmdDebugHang")
        .expect("logged");
    assert_eq!(
        (rec.ctx.as_str(), rec.code.as_str()),
        ("1", "UMD_ERR_SUBMIT_INVALID_PACKET")
    );
}

/// The fork contract (docs/libumd.md, "fork"): inherited handles fail fast naming fork(), the
/// child's own device works, and the parent's keeps working. The QEMU guest runs the same mode
/// on the kernel backend.
#[test]
fn after_fork_inherited_handles_fail_fast_and_the_childs_own_device_works() {
    let t = Instant::now();
    let r = run("fork-device", "fork-device", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    let out = r.stdout();
    for want in [
        "short_process: child free of the parent's freed buffer UMD_ERR_INVALID_HANDLE\n",
        " was destroyed. Action: fix the call (arguments, handles or call order).\n",
        "short_process: child inherited alloc UMD_ERR_INVALID_HANDLE\n",
        "short_process: child inherited context create UMD_ERR_INVALID_HANDLE\n",
        "short_process: child inherited close UMD_ERR_INVALID_HANDLE\n",
        "short_process: child open UMD_SUCCESS\n",
        "short_process: child wait UMD_SUCCESS\nshort_process: child word 0x5a5a5a5a\n",
        "short_process: child status 0\n",
        "short_process: parent wait UMD_SUCCESS\nshort_process: parent word 0x5a5a5a5a\n",
        "short_process: done\n",
    ] {
        assert!(out.contains(want), "missing {want:?} in\n{out}");
    }
    assert!(
        out.contains("before fork(): a forked child cannot use its parent's devices, contexts, buffers or command buffers; open the device again in the child (umdDeviceOpen) and create new objects."),
        "{out}"
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "no wait ran into a timeout: {:?}",
        t.elapsed()
    );
}

/// A context destroyed with 5,000 buffers still allocated: a bounded report (the first 32 leaks
/// one record each, then one summary with the totals by call site: the program's one
/// `umdMemAlloc` call, as `short_process+0x..` since it exports no symbol for it), quickly.
#[test]
fn a_leaky_destroy_reports_a_bounded_summary_quickly() {
    let r = run("leak-arena", "leak-arena", &[("UMD_BACKEND", "sim")]);
    r.assert_exit0();
    let file = r.file_records();
    let detailed = file
        .iter()
        .filter(|f| f.msg == "leak: buffer still allocated at umdContextDestroy; freeing it")
        .count();
    assert_eq!(detailed, 32, "{:#?}", shape(&file));
    let summary: Vec<&Rec> = file
        .iter()
        .filter(|f| f.msg.starts_with("leak summary:"))
        .collect();
    assert_eq!(summary.len(), 1);
    assert_eq!(
        summary[0].msg,
        "leak summary: 5000 buffers (1280000 bytes) were still allocated at umdContextDestroy"
    );
    let p = &summary[0].params;
    let site = p
        .strip_prefix(
            "buffers=5000 bytes=1280000 unlisted=4968 groups=1 largest=\"short_process+0x",
        )
        .and_then(|rest| rest.split_once(": 5000 buffers, 1280000 bytes\""))
        .map(|(off, _)| off);
    assert!(
        site.is_some_and(|off| !off.is_empty() && off.bytes().all(|b| b.is_ascii_hexdigit())),
        "{p}"
    );
    assert_eq!(summary[0].ctx, "1");
    let us: u64 = r
        .stdout()
        .lines()
        .find_map(|l| l.strip_prefix("short_process: destroy took "))
        .and_then(|l| l.strip_suffix(" us"))
        .and_then(|v| v.parse().ok())
        .expect("time line");
    assert!(us < 200_000, "destroy took {us} us");
    println!("leaky destroy of 5000 buffers: {us} us");
}

/// The same program the QEMU guest runs on the kernel module: a close under a blocked wait wakes
/// the waiter at once (docs/libumd.md, "Closing under a blocked wait"). The program checks the
/// code, the sentence and the timing itself.
#[test]
fn a_close_under_a_blocked_wait_wakes_the_waiter_at_once() {
    let r = run(
        "close-under-wait",
        "close-under-wait",
        &[("UMD_BACKEND", "sim"), ("UMD_SIM_JOB_TIMEOUT_MS", "1000")],
    );
    r.assert_exit0();
    let out = r.stdout();
    assert!(
        out.contains("short_process: close under wait UMD_SUCCESS\nshort_process: waiter UMD_ERR_INVALID_HANDLE\n"),
        "{out}"
    );
    println!("{out}");
}

/// A GPU fault on context 3 (device 1, whose simulated kernel calls it context 1): libumd's
/// records and detail name context 3; the simulated kernel's record names its own id as
/// `kmd_ctx`, never as `ctx`, so no record blames the innocent context 1.
#[test]
fn a_fault_is_logged_under_the_libumd_context_that_caused_it() {
    let r = run(
        "fault-second-device",
        "fault-second-device",
        &[("UMD_BACKEND", "sim"), ("UMD_SIM_DEVICES", "2")],
    );
    r.assert_exit0();
    assert!(
        r.stdout().contains("short_process: faulting wait UMD_ERR_CTX_LOST\nshort_process: faulting wait detail ctx=3 context 3 was lost: GPU fault 'unmapped' (write access) at VA 0x7f0010000"),
        "{}",
        r.stdout()
    );
    let file = r.file_records();
    let sim = file
        .iter()
        .find(|f| f.msg.starts_with("GPU fault:"))
        .expect("the simulated kernel's fault record");
    assert_eq!(sim.msg, "GPU fault: kmd context 1 banned");
    assert_eq!((sim.level.as_str(), sim.ctx.as_str()), ("ERROR", "-"));
    assert!(
        sim.params.starts_with("device=1 kmd_ctx=1 seqno=1 ")
            && sim.params.ends_with(
                " fault=unmapped access=write va=0x7f0010000 offset=0 injected=0 class=\"page fault\" layer=application"
            ),
        "{}",
        sim.params
    );
    let wait = file
        .iter()
        .find(|f| f.function == "umdFenceWait")
        .expect("the wait's record");
    assert_eq!(
        (wait.ctx.as_str(), wait.code.as_str()),
        ("3", "UMD_ERR_CTX_LOST")
    );
    // Context 1's own records (created, destroyed) are INFO; no WARN or ERROR names it.
    assert!(
        !file.iter().any(|f| f.ctx == "1" && f.level != "INFO"),
        "a failure record names the innocent context 1: {:#?}",
        shape(&file)
    );
}

/// The test hook's hardware faults on the simulator: the simulated kernel's memory-error and
/// loss records carry the fields of aigpu.ko's lines (rules/src/rules/report.rs, lost.rs):
/// `fault`, `access`, `injected`, and the loss's `cause`.
#[test]
fn injected_hardware_faults_say_so_in_the_simulated_kernels_records() {
    let r = run(
        "injected-hardware",
        "injected-hardware",
        &[("UMD_BACKEND", "sim")],
    );
    r.assert_exit0();
    assert!(
        r.stdout().contains("short_process: inject memory error UMD_SUCCESS\nshort_process: memory error wait UMD_SUCCESS\nshort_process: inject fall off the bus UMD_SUCCESS\nshort_process: context after the fall UMD_ERR_DEVICE_LOST\nshort_process: open while a context lives UMD_ERR_DEVICE_LOST\n"),
        "{}",
        r.stdout()
    );
    // The refused open says when the device works again (rules::lost::WORKS_AGAIN); once no
    // context is left the next open power-cycles it, and the open that saw the loss stays lost.
    assert!(
        r.stdout().contains(&format!(
            "short_process: open while a context lives detail ctx=0 opening simulated device 0: the device is lost (a failed reset or a fall off the bus); {}. Action: close the device and open it again.\n",
            rules::lost::WORKS_AGAIN
        )),
        "{}",
        r.stdout()
    );
    assert!(
        r.stdout().contains("short_process: open once no context is left UMD_SUCCESS\nshort_process: context on the power-cycled device UMD_SUCCESS\nshort_process: the open that saw the loss UMD_ERR_DEVICE_LOST\n"),
        "{}",
        r.stdout()
    );
    assert!(r.took < Duration::from_secs(10), "took {:?}", r.took);
    let file = r.file_records();
    let sim = |lead: &str| -> Vec<Rec> {
        file.iter()
            .filter(|f| f.module == "umd::backend::sim::recovery" && f.msg.starts_with(lead))
            .cloned()
            .collect()
    };
    let fault = sim("GPU fault");
    assert_eq!(fault.len(), 1, "{:#?}", shape(&file));
    assert!(
        fault[0].params.contains(" fault=bus-error access=")
            && fault[0]
                .params
                .ends_with(" injected=1 class=\"uncorrectable memory error\" layer=hardware"),
        "{}",
        fault[0].params
    );
    let lost = sim("device lost");
    assert_eq!(lost.len(), 1, "{:#?}", shape(&file));
    assert_eq!(lost[0].level, "ERROR");
    assert_eq!(
        lost[0].params,
        "device=0 cause=off_bus injected=1 layer=hardware"
    );
    // The power cycle is said with aigpu.ko's fields (rules::lost::ReinitLine), once.
    let reinit: Vec<Rec> = file
        .iter()
        .filter(|f| {
            f.module == "umd::backend::sim::gpu" && f.msg.starts_with("device re-initialised")
        })
        .cloned()
        .collect();
    assert_eq!(reinit.len(), 1, "{:#?}", shape(&file));
    assert_eq!(reinit[0].level, "WARN");
    assert_eq!(
        reinit[0].params,
        "device=0 method=power_cycle lost_cause=off_bus layer=hardware"
    );
    // libumd's ERROR for the refused open reaches the file too.
    assert!(
        file.iter().any(|f| f.level == "ERROR" && f.msg.starts_with("device lost: device 0 cannot be opened: opening simulated device 0: the device is lost")),
        "{:#?}",
        shape(&file)
    );
}

/// `UMD_LOG=verbose` (a typo of a level) on a run with a GPU fault: the defaults stay (the file
/// has the fault and the CTX_LOST, the console its WARN and ERROR records), and one WARN on the
/// console and in the file names the ignored directive.
#[test]
fn a_typo_in_umd_log_keeps_the_defaults_and_says_which_directive() {
    let r = run(
        "fault-second-device",
        "typo-umd-log",
        &[
            ("UMD_BACKEND", "sim"),
            ("UMD_SIM_DEVICES", "2"),
            ("UMD_LOG", "verbose"),
        ],
    );
    r.assert_exit0();
    let file = r.file_records();
    let console = r.console_records();
    let said = "UMD_LOG ignored: log filter 'verbose': directive 'verbose' is neither a level nor a target=level pair (expected e.g. 'warn,umd::memory=debug'; levels: off error warn info debug trace); using the default (console warn, file info)";
    for (sink, recs) in [("file", &file), ("console", &console)] {
        let w: Vec<&Rec> = recs.iter().filter(|f| f.msg == said).collect();
        assert_eq!(w.len(), 1, "{sink}: {:#?}", shape(recs));
        assert_eq!(
            (w[0].level.as_str(), w[0].params.as_str()),
            ("WARN", "variable=UMD_LOG")
        );
        assert!(
            recs.iter()
                .any(|f| f.function == "umdFenceWait" && f.code == "UMD_ERR_CTX_LOST"),
            "{sink}: {:#?}",
            shape(recs)
        );
    }
    assert!(
        file.iter().any(|f| f.msg == "device opened"),
        "INFO still in the file"
    );
    assert!(
        !console.iter().any(|f| f.level == "INFO"),
        "the console stays at WARN"
    );
}

/// A mistyped variable name is said once, with the closest real name.
#[test]
fn a_mistyped_variable_name_is_said_with_the_closest_one() {
    let r = run(
        "fail-alloc",
        "typo-name",
        &[("UMD_BACKEND", "sim"), ("UMD_LOG_DIRR", "/nowhere")],
    );
    r.assert_exit0();
    let file = r.file_records();
    let w: Vec<&Rec> = file
        .iter()
        .filter(|f| f.params == "variable=UMD_LOG_DIRR")
        .collect();
    assert_eq!(w.len(), 1, "{:#?}", shape(&file));
    assert_eq!(
        w[0].msg,
        "UMD_LOG_DIRR is not a variable libumd reads and is ignored (did you mean UMD_LOG_DIR? the variables are listed in docs/libumd.md)"
    );
}

/// One legal GEMM of 17 G multiply-accumulates (minutes of work) is declared hung within the job
/// timeout plus a slack, and another context's high-priority job completes meanwhile, and so
/// does another process's open and high-priority job (hw-spec §6, "Long packets"). The QEMU
/// guest runs the same mode on the kernel module.
#[test]
fn one_long_packet_cannot_defeat_the_job_timeout() {
    let r = run(
        "long-packet 500",
        "long-packet",
        &[("UMD_BACKEND", "sim"), ("UMD_SIM_JOB_TIMEOUT_MS", "500")],
    );
    let out = r.stdout();
    println!("{out}");
    r.assert_exit0();
    assert!(
        out.contains("short_process: high-priority fill UMD_SUCCESS\nshort_process: another process's open and high-priority job UMD_SUCCESS\nshort_process: long gemm UMD_ERR_CTX_LOST\n"),
        "{out}"
    );
    assert!(out.contains("hung=1\n"), "{out}");
}

/// A typo in the value of every variable libumd reads (`umd::log::config::VARIABLES`), one per
/// process that opens device 0, creates a context, allocates and exits: it never goes unsaid.
/// A log setting keeps its default and one WARN names the variable (`variable=<name>`); a
/// backend, pool or simulator setting fails the call that reads it (the open, or the first
/// context for the pool) with UMD_ERR_INIT_BAD_CONFIG naming it (action: fix the setting),
/// logged too. The process exits at once either way. (`UMD_LOG_DIR` takes any path, so it has no
/// typo of its value; an unusable one is `log_faults`'s.)
#[test]
fn a_typo_in_the_value_of_every_variable_is_said() {
    for &name in umd::log::config::VARIABLES {
        if name == "UMD_LOG_DIR" {
            continue;
        }
        let mut envs = vec![("UMD_BACKEND", "sim")];
        if name == "UMD_BACKEND" {
            envs.clear();
        }
        envs.push((name, "bogus"));
        let r = run("open-alloc", &format!("typo-{name}"), &envs);
        r.assert_exit0();
        assert!(r.took < Duration::from_secs(2), "{name}: took {:?}", r.took);
        let file = r.file_records();
        let out = r.stdout();
        let said_in_log = file.iter().any(|f| {
            (f.level == "WARN" || f.level == "ERROR")
                && (f.params.contains(&format!("variable={name}")) || f.msg.contains(name))
        });
        assert!(
            said_in_log,
            "{name}: no record names it: {:#?}",
            shape(&file)
        );
        if name.starts_with("UMD_LOG") {
            assert!(
                out.contains("short_process: alloc UMD_SUCCESS\n"),
                "{name}: {out}"
            );
            continue;
        }
        assert!(out.contains(" UMD_ERR_INIT_BAD_CONFIG\n"), "{name}: {out}");
        let rec = file
            .iter()
            .find(|f| f.code == "UMD_ERR_INIT_BAD_CONFIG")
            .expect("the failed call's record");
        assert!(rec.msg.contains(name), "{name}: {}", rec.msg);
        assert!(
            rec.msg.contains("Action: fix the setting the detail names"),
            "{name}: {}",
            rec.msg
        );
    }
}

/// A program started with stderr closed (fd 2 not open at all): the console sink is down from
/// the first record, said once in the file (EBADF), and the file keeps every record.
#[test]
fn a_closed_stderr_descriptor_leaves_the_file_complete() {
    use std::os::unix::process::CommandExt;
    let dir = fresh_dir("closed-fd2");
    let mut c = command("console-burst", &dir, &[("UMD_BACKEND", "sim")]);
    // SAFETY: close(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        c.pre_exec(|| {
            libc::close(2);
            Ok(())
        });
    }
    let out = c.stdout(Stdio::piped()).output().expect("run");
    assert!(out.status.success(), "{:?}", out.status);
    let r = Run {
        out,
        took: Duration::ZERO,
        dir,
    };
    let file = r.file_records();
    assert_eq!(
        file.iter().filter(|f| f.function == "umdMemAlloc").count(),
        18
    );
    let down: Vec<&Rec> = file
        .iter()
        .filter(|f| {
            f.msg
                .starts_with("console sink down: writing stderr failed: Bad file descriptor")
        })
        .collect();
    assert_eq!(down.len(), 1, "{:#?}", shape(&file));
    assert_eq!(down[0].params, "errno=9");
}

/// The closed pipe again, but the console's reader goes away after a burst that the rate limit
/// cut short: the only console write left is the suppressed-records summary at exit. Its
/// failure must still be said in the file, and the host exit 0 (found in the QEMU guest, where
/// the burst fits in one writer batch).
#[test]
fn a_console_closed_before_the_exit_summary_is_said_in_the_file() {
    let dir = fresh_dir("sigpipe-at-exit");
    let mut child = command("flood", &dir, &[("UMD_BACKEND", "sim")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut err = child.stderr.take().expect("stderr pipe");
    let mut first = [0u8; 64];
    let _ = err.read(&mut first);
    drop(err);
    let mut stdout = String::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_string(&mut stdout)
        .expect("read stdout");
    let status = child.wait().expect("wait");
    assert!(status.success(), "host killed: {status:?}\n{stdout}");
    let r = Run {
        out: Output {
            status,
            stdout: stdout.into_bytes(),
            stderr: Vec::new(),
        },
        took: Duration::ZERO,
        dir,
    };
    let file = r.file_records();
    assert_eq!(
        file.iter()
            .filter(|f| f.function == "umdMemGetAddress")
            .count(),
        20_000
    );
    let down = file
        .iter()
        .filter(|f| {
            f.msg
                .starts_with("console sink down: writing stderr failed: Broken pipe")
        })
        .count();
    assert_eq!(
        down,
        1,
        "{:#?}",
        shape(&file[file.len().saturating_sub(5)..])
    );
}

/// The `backend` setting record says what the process asked for (`UMD_BACKEND=kmd`), and the
/// `process_start` record what it got (nothing, without aigpu.ko): triage's configuration layer
/// reads the setting, and "backend none" would misquote the user's environment.
#[test]
fn the_backend_setting_is_what_was_asked_for() {
    if std::path::Path::new("/sys/module/aigpu").exists() {
        eprintln!("skipped: aigpu is loaded here (the open would succeed)");
        return;
    }
    let r = run("open-alloc", "backend-asked", &[("UMD_BACKEND", "kmd")]);
    r.assert_exit0();
    // The story records themselves (`file_records` leaves them out).
    let file = r.all_file_records();
    let rec = |event: &str| {
        file.iter()
            .find(|f| {
                f.params.contains(&format!("event={event} "))
                    && (event != "setting" || f.params.contains(" name=backend "))
            })
            .unwrap_or_else(|| panic!("no {event} record: {:#?}", shape(&file)))
    };
    let setting = &rec("setting").params;
    assert!(
        setting.contains(" value=kmd ")
            && setting.contains(" default=auto ")
            && setting.contains(" src=environment "),
        "{setting}"
    );
    let start = &rec("process_start").params;
    assert!(
        start.contains(" backend=none ") && start.contains(" backend_src=environment "),
        "{start}"
    );
}
