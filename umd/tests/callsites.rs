//! The application's call sites (src/caller.rs; docs/logging.md, "Call sites"): tests/c/callsites.c
//! allocates and frees at known lines in known functions; its log records' `caller` and
//! `caller_fn` fields, the detail of its double free and its leak report must name them. Built
//! with `-g -rdynamic` (exported functions: dladdr names them) and again stripped (only
//! `module+offset`); `addr2line` maps the offsets back to the marked lines.

#[path = "c_util.rs"]
mod c_util;
#[path = "log_util.rs"]
mod log_util;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The program built with `extra` flags, under `name`.
fn build(name: &str, extra: &[&str]) -> PathBuf {
    let exe = c_util::out_dir().join(name);
    let o = c_util::compile_with("tests/c/callsites.c", &exe, &["-std=c11"], extra);
    assert!(
        o.status.success(),
        "tests/c/callsites.c does not compile:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

/// Runs `exe` on the simulator with a JSON log in a fresh directory: (its output, the records).
fn run(exe: &Path, name: &str) -> (Output, Vec<Value>) {
    run_with(exe, name, &[])
}

/// [`run`] with more variables.
fn run_with(exe: &Path, name: &str, envs: &[(&str, &str)]) -> (Output, Vec<Value>) {
    let dir = log_dir(name);
    let o = command(exe, &dir)
        .envs(envs.iter().copied())
        .output()
        .expect("run callsites");
    log_util::assert_ok(&o);
    (o, records(&dir))
}

/// A fresh log directory for `name`.
fn log_dir(name: &str) -> PathBuf {
    let dir = c_util::out_dir().join(format!("{name}-logs"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("log dir");
    dir
}

/// `program` with none of the caller's `UMD_*` variables, on the simulator, logging JSON into
/// `dir`.
fn command(program: impl AsRef<std::ffi::OsStr>, dir: &Path) -> Command {
    let mut c = Command::new(program);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_") {
            c.env_remove(k);
        }
    }
    c.env("UMD_BACKEND", "sim")
        .env("UMD_LOG_DIR", dir)
        .env("UMD_LOG_FORMAT", "json")
        .env("UMD_LOG_SIGNALS", "0");
    c
}

/// The JSON records of every log file in `dir`.
fn records(dir: &Path) -> Vec<Value> {
    let mut recs = Vec::new();
    for e in std::fs::read_dir(dir).expect("read log dir").flatten() {
        let text = std::fs::read_to_string(e.path()).unwrap_or_default();
        recs.extend(text.lines().filter_map(|l| serde_json::from_str(l).ok()));
    }
    recs
}

/// The first record with `event=<e>`.
fn event<'a>(recs: &'a [Value], e: &str) -> &'a Value {
    recs.iter()
        .find(|r| r["fields"]["event"] == e)
        .unwrap_or_else(|| panic!("no {e} record"))
}

/// The string field `k` of the first record with message `msg` whose field `key` is `val`.
fn field(recs: &[Value], msg: &str, key: &str, val: u64, k: &str) -> String {
    let r = recs
        .iter()
        .find(|r| r["msg"] == msg && r["fields"][key] == val)
        .unwrap_or_else(|| panic!("no {msg:?} record with {key}={val}"));
    r["fields"][k]
        .as_str()
        .unwrap_or_else(|| panic!("{msg:?} record has no string field {k}: {r}"))
        .to_string()
}

/// `<path>+0x<off>` split, the path checked to be `exe`.
fn offset(caller: &str, exe: &Path) -> u64 {
    let (m, off) = caller.rsplit_once('+').expect("module+offset");
    assert_eq!(Path::new(m), exe, "caller module of {caller}");
    u64::from_str_radix(off.trim_start_matches("0x"), 16).expect("hex offset")
}

/// `file:line` of the call whose return address is at `off` in `exe` (`addr2line` on the
/// address before it: the call instruction).
fn line_of(exe: &Path, off: u64) -> String {
    let o = Command::new("addr2line")
        .arg("-e")
        .arg(exe)
        .arg(format!("{:#x}", off - 1))
        .output()
        .expect("run addr2line");
    let s = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let (f, l) = s.rsplit_once(':').expect("file:line");
    let line = l.split(' ').next().unwrap_or(l);
    format!("{}:{line}", f.rsplit('/').next().unwrap_or(f))
}

/// The buffer id of the `alloc` record with `size`.
fn buffer_of_size(recs: &[Value], size: u64) -> u64 {
    recs.iter()
        .find(|r| r["msg"] == "alloc" && r["fields"]["size"] == size)
        .and_then(|r| r["fields"]["buffer"].as_u64())
        .unwrap_or_else(|| panic!("no alloc of {size} bytes"))
}

#[test]
fn log_records_detail_and_leak_report_name_the_applications_functions() {
    let exe = build("callsites", &["-g", "-rdynamic"]);
    let (o, recs) = run(&exe, "callsites");
    let (a, t, l) = (
        buffer_of_size(&recs, 4096),
        buffer_of_size(&recs, 8192),
        buffer_of_size(&recs, 12288),
    );
    let func = |msg, b, f: &str| {
        let got = field(&recs, msg, "buffer", b, "caller_fn");
        assert!(got.starts_with(&format!("{f}+0x")), "{msg} of {b}: {got}");
    };
    func("alloc", a, "make_scratch");
    func("free", a, "drop_scratch");
    func("alloc", t, "make_tagged");
    func("free", t, "free_by_address");
    func("alloc", l, "leak_one");
    // The offsets are the marked lines.
    let at = |msg, b| {
        line_of(
            &exe,
            offset(&field(&recs, msg, "buffer", b, "caller"), &exe),
        )
    };
    assert_eq!(at("alloc", a), "callsites.c:19");
    assert_eq!(at("free", a), "callsites.c:23");
    assert_eq!(at("alloc", t), "callsites.c:28");
    assert_eq!(at("free", t), "callsites.c:32");
    assert_eq!(at("alloc", l), "callsites.c:36");
    // The leaked buffer is freed by the umdContextDestroy call, in main.
    func("free", l, "main");
    let destroy = include_str!("../../tests/c/callsites.c")
        .lines()
        .position(|l| l.contains("umdContextDestroy(ctx)"))
        .expect("the destroy line")
        + 1;
    assert_eq!(at("free", l), format!("callsites.c:{destroy}"));

    // The double free's detail names both calls, as the log records do.
    let short = |msg, b| {
        let off = offset(&field(&recs, msg, "buffer", b, "caller"), &exe);
        let f = field(&recs, msg, "buffer", b, "caller_fn");
        format!("{f} (callsites+{off:#x})")
    };
    let out = String::from_utf8_lossy(&o.stdout);
    let line = out
        .lines()
        .find(|l| l.starts_with("double_free "))
        .expect("double_free line");
    let head = format!(
        "double_free UMD_ERR_MEM_DOUBLE_FREE double free of 0x200000: buffer {t} (8192 bytes at VA 0x200000, allocated on context 1 at {}), freed ",
        short("alloc", t)
    );
    assert!(line.starts_with(&head), "{line}\nwanted {head}");
    let tail = format!(
        " at {}. Action: fix the call (arguments, handles or call order).",
        short("free", t)
    );
    assert!(line.ends_with(&tail), "{line}\nwanted {tail}");

    // The use after free's detail (the submit's check), the same calls of the second buffer
    // make_scratch allocated.
    let u = recs
        .iter()
        .filter(|r| r["msg"] == "alloc" && r["fields"]["size"] == 4096)
        .filter_map(|r| r["fields"]["buffer"].as_u64())
        .nth(1)
        .expect("a second 4096-byte buffer");
    let line = out
        .lines()
        .find(|l| l.starts_with("use_after_free "))
        .expect("use_after_free line");
    assert!(
        line.starts_with("use_after_free UMD_ERR_MEM_USE_AFTER_FREE command buffer #0: "),
        "{line}"
    );
    let want = format!(
        ", memory of buffer {u} (4096 bytes at VA {}, allocated on context 1 at {}), freed ",
        field(&recs, "alloc", "buffer", u, "va"),
        short("alloc", u)
    );
    assert!(line.contains(&want), "{line}\nwanted {want}");
    let want = format!(" at {}. Free a buffer only after", short("free", u));
    assert!(line.contains(&want), "{line}\nwanted {want}");
    assert!(short("alloc", u).starts_with("make_scratch+0x"));
    assert!(short("free", u).starts_with("drop_scratch+0x"));

    // umdMemFree of that freed handle names the buffer and both calls (the handle table's
    // tombstone), in the detail and in the failed call's log record; once its slot and memory
    // went to the next make_scratch, a use of the old handle names that buffer.
    let line = out
        .lines()
        .find(|l| l.starts_with("handle_double_free "))
        .expect("handle_double_free line");
    let want = format!(
        " was destroyed: it was buffer {u} (4096 bytes at VA {}, allocated on context 1 at {}), freed ",
        field(&recs, "alloc", "buffer", u, "va"),
        short("alloc", u)
    );
    assert!(
        line.starts_with("handle_double_free UMD_ERR_INVALID_HANDLE umdBuffer handle 0x")
            && line.contains(&want)
            && line.ends_with(&format!(
                " at {}. Action: fix the call (arguments, handles or call order).",
                short("free", u)
            )),
        "{line}\nwanted ...{want}..."
    );
    let logged = recs
        .iter()
        .find(|r| r["function"] == "umdMemFree" && r["code"] == "UMD_ERR_INVALID_HANDLE")
        .expect("the failed umdMemFree's record");
    assert_eq!(
        logged["msg"].as_str(),
        line.strip_prefix("handle_double_free UMD_ERR_INVALID_HANDLE ")
    );
    assert_eq!(logged["ctx"], 1, "the freed buffer's context: {logged}");
    let w = recs
        .iter()
        .filter(|r| r["msg"] == "alloc")
        .filter(|r| {
            r["fields"]["caller_fn"]
                .as_str()
                .is_some_and(|f| f.starts_with("make_scratch+"))
        })
        .filter_map(|r| r["fields"]["buffer"].as_u64())
        .nth(2)
        .expect("make_scratch's third buffer");
    let line = out
        .lines()
        .find(|l| l.starts_with("handle_reused "))
        .expect("handle_reused line");
    assert!(
        line.contains(&format!(
            " was destroyed: it was buffer {u} at VA {}, freed; its memory has been allocated again since (buffer {w})."
        , field(&recs, "alloc", "buffer", u, "va"))),
        "{line}"
    );

    // The leak: its record and the summary's group name leak_one.
    let leak = event(&recs, "leak");
    assert_eq!(leak["fields"]["buffer"], l);
    assert_eq!(
        leak["fields"]["caller"],
        field(&recs, "alloc", "buffer", l, "caller")
    );
    assert_eq!(
        leak["fields"]["caller_fn"],
        field(&recs, "alloc", "buffer", l, "caller_fn")
    );
    let summary = event(&recs, "leak_summary");
    assert_eq!(
        summary["fields"]["largest"],
        format!("{}: 1 buffers, 12288 bytes", short("alloc", l))
    );
}

#[test]
fn a_stripped_program_gets_module_and_offset() {
    let exe = build("callsites-stripped", &["-s"]);
    let (o, recs) = run(&exe, "callsites-stripped");
    let a = buffer_of_size(&recs, 4096);
    let caller = field(&recs, "alloc", "buffer", a, "caller");
    let off = offset(&caller, &exe);
    assert!(off > 0, "{caller}");
    assert_eq!(field(&recs, "alloc", "buffer", a, "caller_fn"), "-");
    // Without symbols: module+offset in the detail and the leak summary.
    let module = |msg, b| {
        let off = offset(&field(&recs, msg, "buffer", b, "caller"), &exe);
        format!("callsites-stripped+{off:#x}")
    };
    let t = buffer_of_size(&recs, 8192);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let want = format!("allocated on context 1 at {}), freed ", module("alloc", t));
    assert!(out.contains(&want), "{out}\nwanted {want}");
    let want = format!(" at {}. Action:", module("free", t));
    assert!(out.contains(&want), "{out}\nwanted {want}");
    let l = buffer_of_size(&recs, 12288);
    let summary = event(&recs, "leak_summary");
    assert_eq!(
        summary["fields"]["largest"],
        format!("{}: 1 buffers, 12288 bytes", module("alloc", l))
    );
}

/// Through Python's ctypes (the python/ package): the direct caller of the entries is libffi's
/// call trampoline (or the interpreter's ctypes module), a module of its own, and nothing
/// crashes; a double free's detail names it.
#[test]
fn a_call_from_python_ctypes_names_the_ffi_module() {
    let python = ["python3", "/usr/bin/python3"].into_iter().find(|p| {
        Command::new(p)
            .arg("-c")
            .arg("import ctypes")
            .output()
            .is_ok_and(|o| o.status.success())
    });
    let Some(python) = python else {
        eprintln!("skipped: no python3 with ctypes");
        return;
    };
    let dir = log_dir("python");
    let code = r#"
import aigpu
with aigpu.Device(0) as d, d.context() as c:
    b = c.alloc(4096)
    va = b.address
    b.close()
    try:
        c.free_address(va)
    except aigpu.UmdError as e:
        print("detail", e)
"#;
    let o = command(python, &dir)
        .arg("-c")
        .arg(code)
        .env("PYTHONPATH", c_util::root().join("python"))
        .env("AIGPU_UMD_LIBRARY", c_util::libumd())
        .output()
        .expect("run python");
    log_util::assert_ok(&o);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let recs = records(&dir);
    let b = buffer_of_size(&recs, 4096);
    let caller = field(&recs, "alloc", "buffer", b, "caller");
    let (module, off) = caller.rsplit_once("+0x").expect("module+offset");
    let name = module.rsplit('/').next().unwrap_or(module);
    assert!(
        ["libffi", "_ctypes", "libpython", "python"]
            .iter()
            .any(|p| name.starts_with(p)),
        "alloc caller {caller}"
    );
    assert_eq!(field(&recs, "alloc", "buffer", b, "caller_fn"), "-");
    let free = field(&recs, "free", "buffer", b, "caller");
    let (free_module, free_off) = free.rsplit_once("+0x").expect("module+offset");
    assert_eq!(
        free_module, module,
        "free caller {free}, alloc caller {caller}"
    );
    let want = format!("allocated on context 1 at {name}+0x{off}), freed ");
    assert!(out.contains(&want), "{out}\nwanted {want}");
    let want = format!(" at {name}+0x{free_off}. Action:");
    assert!(out.contains(&want), "{out}\nwanted {want}");
}

/// With `UMD_POOL_HISTORY=N` the leak's `site` is the backtrace, its first frame the same call
/// as `caller` (both resolved by src/caller.rs), then main.
#[test]
fn the_history_backtrace_starts_at_the_same_call() {
    let exe = build("callsites-history", &["-g", "-rdynamic"]);
    let (_, recs) = run_with(&exe, "callsites-history", &[("UMD_POOL_HISTORY", "64")]);
    let l = buffer_of_size(&recs, 12288);
    let leak = event(&recs, "leak");
    let off = offset(&field(&recs, "alloc", "buffer", l, "caller"), &exe);
    let f = field(&recs, "alloc", "buffer", l, "caller_fn");
    let site = leak["fields"]["site"].as_str().unwrap_or("");
    let want = format!("{f} (callsites-history+{off:#x}) <- main+0x");
    assert!(site.starts_with(&want), "{site}\nwanted {want}");
    assert!(site.ends_with(")"), "{site}");
    assert!(site.contains(" (via umd/src/"), "{site}");
}
