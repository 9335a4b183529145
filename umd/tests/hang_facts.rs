//! The simulator's job-timeout record carries the facts of aigpu.ko's dmesg line
//! (`rules::report::HangFacts`, docs/logging.md): a WAIT_MEM that never comes says
//! `state=waiting` with its address and value, a GEMM stopped mid-run says `state=executing`;
//! both say how long the job ran, the timeout and its source, and the run times of the
//! context's earlier jobs. Each scenario runs in a child process (the simulator's settings and
//! the log are read once per process).

#[path = "log_util.rs"]
mod util;
use umd::abi::{cmdbuf::*, context::*, device::*, memory::*, sync::*, types::*};
use umd::umdResult::{self, UMD_SUCCESS};
use util::*;

fn ok(r: umdResult, what: &str) {
    assert_eq!(r, UMD_SUCCESS, "{what}");
}

/// Records `record` into a fresh command buffer, submits it and waits; the wait's result.
fn run(ctx: umdContext, record: impl Fn(umdCmdBuf)) -> umdResult {
    let mut cb = 0;
    ok(umdCmdBufCreate(ctx, &mut cb), "create");
    ok(umdCmdBufBegin(cb), "begin");
    record(cb);
    ok(umdCmdBufEnd(cb), "end");
    let mut done = umdFence {
        context: 0,
        seqno: 0,
    };
    ok(
        umdSubmit(ctx, &cb, 1, std::ptr::null(), 0, &mut done),
        "submit",
    );
    let r = umdFenceWait(&done, UMD_TIMEOUT_INFINITE);
    let _ = umdCmdBufDestroy(cb);
    r
}

/// A device, a context and a buffer of `size` bytes: (context, buffer address).
fn open(size: u64) -> (umdContext, umdDevicePtr) {
    let (mut dev, mut ctx, mut buf, mut va) = (0, 0, 0, 0);
    ok(umdDeviceOpen(0, &mut dev), "open");
    ok(
        umdContextCreate(dev, UMD_PRIORITY_NORMAL, &mut ctx),
        "context",
    );
    ok(umdMemAlloc(ctx, size, 0, &mut buf), "alloc");
    ok(umdMemGetAddress(buf, &mut va), "address");
    (ctx, va)
}

/// Three short jobs of `ctx` that complete (its `recent_ms`).
fn three_fills(ctx: umdContext, va: umdDevicePtr) {
    for i in 0..3 {
        let r = run(ctx, |cb| ok(umdCmdFill(cb, va + 64, 64, i), "fill"));
        ok(r, "a fill completes");
    }
}

/// The one job-timeout record of the child's log, as its `key=value` fields after the message.
fn timeout_record(dir: &std::path::Path) -> Vec<(String, String)> {
    let files = log_files(dir);
    let recs: Vec<String> = files
        .iter()
        .flat_map(|f| lines(f))
        .filter(|l| l.contains(" timeout_ms=") && l.contains(" kmd_ctx="))
        .collect();
    assert_eq!(recs.len(), 1, "one job-timeout record: {recs:#?}");
    let after = recs[0]
        .split("resetting the engine\" ")
        .nth(1)
        .unwrap_or_else(|| panic!("fields after the message: {}", recs[0]));
    after
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn field<'a>(f: &'a [(String, String)], key: &str) -> &'a str {
    f.iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {key} in {f:?}"))
}

/// `recent_ms` of three fills: three small run times (each well below the timeout).
fn assert_three_recent(f: &[(String, String)], below: u64) {
    let recent: Vec<u64> = field(f, "recent_ms")
        .split(',')
        .map(|v| v.parse().expect("a run time"))
        .collect();
    assert_eq!(recent.len(), 3, "{f:?}");
    assert!(recent.iter().all(|&ms| ms < below), "{recent:?}");
}

fn ran_ms_within(f: &[(String, String)], timeout: u64) {
    let ran: u64 = field(f, "ran_ms").parse().expect("ran_ms");
    // Past the timeout (the watchdog's clock), at most a few watchdog periods and a loaded
    // machine's scheduling later.
    assert!(ran >= timeout && ran < timeout + 1500, "ran_ms={ran}");
}

/// Runs `test` in a child (`timeout_ms`: its `UMD_SIM_JOB_TIMEOUT_MS`, `None` for the default)
/// and returns its stdout and its job-timeout record's fields.
fn in_child(test: &str, timeout_ms: Option<&str>) -> (String, Vec<(String, String)>) {
    let dir = fresh_dir(test);
    let mut env = vec![("UMD_LOG_DIR", dir.to_str().unwrap_or_default())];
    if let Some(t) = timeout_ms {
        env.push(("UMD_SIM_JOB_TIMEOUT_MS", t));
    }
    let o = run_child(test, &env);
    assert_ok(&o);
    let f = timeout_record(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    (String::from_utf8_lossy(&o.stdout).into_owned(), f)
}

/// The child's end: the job was lost to the timeout; the log is on disk.
fn lost_and_flushed(r: umdResult) {
    assert_eq!(r, umdResult::UMD_ERR_CTX_LOST);
    ok(umd::abi::log::umdLogFlush(5000), "flush");
}

#[test]
fn a_wait_mem_that_never_comes_is_waiting_on_its_address() {
    if is_child() {
        let (ctx, va) = open(4096);
        three_fills(ctx, va);
        // The u64 at va stays 0: WAIT_MEM for 5 at offset 0 never completes.
        println!("WAIT_VA={va:#x}");
        lost_and_flushed(run(ctx, |cb| ok(umdCmdWaitValue(cb, va, 5), "wait")));
        return;
    }
    let (out, f) = in_child(
        "a_wait_mem_that_never_comes_is_waiting_on_its_address",
        Some("200"),
    );
    let va = out
        .lines()
        .find_map(|l| l.split("WAIT_VA=").nth(1))
        .expect("the child names the address");
    assert_eq!(field(&f, "state"), "waiting");
    assert_eq!(field(&f, "wait"), "mem");
    assert_eq!(field(&f, "wait_va"), va);
    assert_eq!(field(&f, "wait_value"), "5");
    assert_eq!(field(&f, "offset"), "0");
    assert_eq!(field(&f, "timeout_ms"), "200");
    assert_eq!(field(&f, "timeout_source"), "environment");
    ran_ms_within(&f, 200);
    assert_three_recent(&f, 200);
}

#[test]
fn a_gemm_stopped_mid_run_is_executing() {
    if is_child() {
        let n: u32 = 1024;
        let nn = u64::from(n) * u64::from(n);
        let (ctx, x) = open(nn * 6);
        three_fills(ctx, x);
        let g = umdGemmI8Args {
            a: x,
            b: x + nn,
            c: x + 2 * nn,
            m: n,
            n,
            k: n,
            lda: n,
            ldb: n,
            ldc: n,
            flags: 0,
            reserved: 0,
        };
        lost_and_flushed(run(ctx, |cb| ok(umdCmdGemmI8(cb, &g), "gemm")));
        return;
    }
    let (_, f) = in_child("a_gemm_stopped_mid_run_is_executing", Some("20"));
    assert_eq!(field(&f, "state"), "executing");
    assert!(!f.iter().any(|(k, _)| k.starts_with("wait")), "{f:?}");
    assert_eq!(field(&f, "offset"), "0", "the GEMM is the only packet");
    assert_eq!(field(&f, "timeout_ms"), "20");
    assert_eq!(field(&f, "timeout_source"), "environment");
    ran_ms_within(&f, 20);
    assert_three_recent(&f, 20);
}

#[test]
fn the_default_timeout_says_so() {
    if is_child() {
        let (ctx, va) = open(4096);
        lost_and_flushed(run(ctx, |cb| ok(umdCmdWaitValue(cb, va, 1), "wait")));
        return;
    }
    let (_, f) = in_child("the_default_timeout_says_so", None);
    assert_eq!(field(&f, "timeout_ms"), "2000");
    assert_eq!(field(&f, "timeout_source"), "default");
    assert_eq!(field(&f, "recent_ms"), "none", "no job completed before");
    ran_ms_within(&f, 2000);
}
