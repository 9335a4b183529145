//! `umd-log` on logs the test suite itself produces: a child process drives libumd (simulator
//! backend, C ABI) through allocations, a leak, jobs, a GPU fault and a device loss with the
//! file log at DEBUG; the parent runs the `umd-log` binary on the directory it wrote.

use std::path::{Path, PathBuf};
use std::process::Command;
use umd::abi::{cmdbuf, context, device, memory, sync, types::*};
use umd::umdResult;

fn is_child() -> bool {
    std::env::var_os("UMD_TOOLS_LOG_CHILD").is_some()
}

fn ok(r: umdResult, what: &str) {
    assert_eq!(r, umdResult::UMD_SUCCESS, "{what}");
}

/// One job on `ctx` filling `size` bytes at `dst`; returns the submit result and the fence.
fn fill(ctx: umdContext, dst: u64, size: u64) -> (umdResult, umdFence) {
    let mut cb: umdCmdBuf = 0;
    ok(cmdbuf::umdCmdBufCreate(ctx, &mut cb), "cmdbuf create");
    ok(cmdbuf::umdCmdBufBegin(cb), "begin");
    ok(cmdbuf::umdCmdFill(cb, dst, size, 0x01020304), "fill");
    ok(cmdbuf::umdCmdBufEnd(cb), "end");
    let mut f = umdFence {
        context: 0,
        seqno: 0,
    };
    let r = sync::umdSubmit(ctx, &cb, 1, std::ptr::null(), 0, &mut f);
    let _ = cmdbuf::umdCmdBufDestroy(cb);
    (r, f)
}

/// What the child does; prints `ids <ctx a> <ctx b> <buffer ids...>` for the parent.
fn child() {
    let mut dev: umdDevice = 0;
    ok(device::umdDeviceOpen(0, &mut dev), "device open");
    let (mut a, mut b, mut c) = (0, 0, 0);
    ok(
        context::umdContextCreate(dev, UMD_PRIORITY_NORMAL, &mut a),
        "ctx a",
    );
    ok(
        context::umdContextCreate(dev, UMD_PRIORITY_HIGH, &mut b),
        "ctx b",
    );
    let mut bufs = [0u64; 4];
    for (i, size) in [4096u64, 65536, 1 << 20].iter().enumerate() {
        ok(memory::umdMemAlloc(a, *size, 0, &mut bufs[i]), "alloc a");
    }
    ok(memory::umdMemAlloc(b, 8192, 0, &mut bufs[3]), "alloc b");
    ok(memory::umdMemFree(bufs[0]), "free a0");
    // Two jobs on b that complete.
    let mut va = 0;
    ok(memory::umdMemGetAddress(bufs[3], &mut va), "address");
    for _ in 0..2 {
        let (r, f) = fill(b, va, 4096);
        ok(r, "submit b");
        ok(sync::umdFenceWait(&f, 5_000_000_000), "wait b");
    }
    // A job on b writing far outside anything mapped: a GPU fault bans b.
    let (r, f) = fill(b, va + (64 << 30), 4096);
    ok(r, "submit faulting job");
    assert_eq!(
        sync::umdFenceWait(&f, 5_000_000_000),
        umdResult::UMD_ERR_CTX_LOST
    );
    // a leaks its two remaining buffers: libumd reports them at context destroy.
    ok(context::umdContextDestroy(a), "ctx a destroy");
    // The next engine reset fails: a fault on c loses the device.
    ok(
        context::umdContextCreate(dev, UMD_PRIORITY_NORMAL, &mut c),
        "ctx c",
    );
    ok(
        device::umdDebugInjectFault(dev, UMD_DEBUG_FAULT_RESET_FAILURE),
        "inject reset failure",
    );
    let (r, f) = fill(c, 0x7f0010000, 4096);
    ok(r, "submit on c");
    let w = sync::umdFenceWait(&f, 5_000_000_000);
    assert!(
        matches!(
            w,
            umdResult::UMD_ERR_DEVICE_LOST | umdResult::UMD_ERR_CTX_LOST
        ),
        "{w:?}"
    );
    let mut x = 0;
    assert_eq!(
        memory::umdMemAlloc(c, 4096, 0, &mut x),
        umdResult::UMD_ERR_DEVICE_LOST
    );
    ok(umd::abi::log::umdLogFlush(5000), "flush");
    println!("\nids {a} {b} {}", std::process::id());
}

fn run(bin: &str, args: &[&str]) -> String {
    let o = Command::new(bin).args(args).output().expect("spawn");
    assert!(
        o.status.success(),
        "{bin} {args:?}: {:?}\n{}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn fresh(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("aigpu-tools-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("mkdir");
    d
}

fn log_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn umd_log_reads_what_libumd_wrote() {
    if is_child() {
        child();
        return;
    }
    let dir = fresh("live");
    let exe = std::env::current_exe().expect("current_exe");
    let mut c = Command::new(exe);
    c.args([
        "umd_log_reads_what_libumd_wrote",
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, _) in std::env::vars() {
        if k.starts_with("UMD_") {
            c.env_remove(k);
        }
    }
    let o = c
        .env("UMD_TOOLS_LOG_CHILD", "1")
        .env("UMD_BACKEND", "sim")
        .env("UMD_SIM_JOB_TIMEOUT_MS", "500")
        .env("UMD_LOG_DIR", &dir)
        .env("UMD_LOG_CONSOLE", "off")
        .env("UMD_LOG_SIGNALS", "0")
        .output()
        .expect("spawn child");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "child failed\n{stdout}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let pid: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("ids "))
        .and_then(|l| l.split_whitespace().nth(2))
        .and_then(|p| p.parse().ok())
        .expect("child printed its pid");
    let files = log_files(&dir);
    assert!(
        files.contains(&format!("umd-{pid}.log")),
        "libumd wrote no log file: {files:?}"
    );
    assert!(
        files.iter().any(|f| f.starts_with("umd-blackbox-")),
        "device loss wrote a black box: {files:?}"
    );
    // libumd's context ids (the C handles carry a generation): a and b are the first two
    // contexts libumd created.
    let mut notes = aigpu_tools::host::Notes::default();
    let set = aigpu_tools::umdlog::LogSet::load(std::slice::from_ref(&dir), &[], &mut notes);
    assert_eq!(set.bad, 0, "every line parses: {:?}", set.first_bad);
    let created: Vec<u64> = set
        .recs
        .iter()
        .filter(|r| r.module == "umd::context" && r.msg == "context created")
        .filter_map(|r| r.ctx_u64())
        .collect();
    let (a, b) = (created[0], created[1]);

    // The simulated driver's fault and loss records carry the facts of aigpu.ko's lines, with
    // their field names (rules/src/rules/report.rs, lost.rs): the fault on b was the program's,
    // the loss an injected failed reset.
    use aigpu_tools::umdlog::facts::{self, Fact};
    use rules::rules::lost::LossCause;
    let sim_recs = |lead: &str| -> Vec<&aigpu_tools::umdlog::Rec> {
        set.recs
            .iter()
            .filter(|r| r.module.starts_with("umd::backend::sim") && r.msg.starts_with(lead))
            .collect()
    };
    let lost = sim_recs("device lost");
    assert_eq!(lost.len(), 1, "one loss record: {lost:#?}");
    assert_eq!(lost[0].field_str("cause").as_deref(), Some("reset_failed"));
    assert_eq!(lost[0].field_u64("injected"), Some(1));
    assert_eq!(lost[0].field_str("layer").as_deref(), Some("hardware"));
    let fault = sim_recs("GPU fault");
    assert_eq!(fault[0].field_str("fault").as_deref(), Some("unmapped"));
    assert_eq!(fault[0].field_str("access").as_deref(), Some("write"));
    assert_eq!(fault[0].field_u64("injected"), Some(0));
    let typed: Vec<Fact> = facts::all(&set)
        .into_iter()
        .map(|(f, _)| f)
        .filter(|f| matches!(f, Fact::DevLost { .. } | Fact::DevFault { .. }))
        .collect();
    assert!(
        typed.contains(&Fact::DevLost {
            cause: LossCause::ResetFailed,
            injected: true
        }),
        "{typed:#?}"
    );
    assert!(
        typed.iter().any(|f| matches!(
            f,
            Fact::DevFault {
                injected: Some(false),
                ..
            }
        )),
        "{typed:#?}"
    );
    let bin = env!("CARGO_BIN_EXE_umd-log");
    let d = dir.to_str().expect("utf-8 temp dir");

    // leaks: a's 64 KiB and 1 MiB buffers, reported by libumd at umdContextDestroy; a's 4 KiB
    // buffer was freed.
    let leaks = run(bin, &["-d", d, "leaks"]);
    let a_hdr = format!("pid {pid} ctx {a}: 2 buffers, 1.1 MiB");
    let a_block: Vec<&str> = leaks
        .lines()
        .skip_while(|l| *l != a_hdr)
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    let bufs: Vec<&str> = a_block
        .iter()
        .filter(|l| l.starts_with("  buffer "))
        .copied()
        .collect();
    assert_eq!(bufs.len(), 2, "{a_hdr:?} with two buffers in\n{leaks}");
    assert!(bufs[0].contains(": 65536 B at "), "{leaks}");
    assert!(bufs[1].contains(": 1048576 B at "), "{leaks}");
    assert!(
        a_block.contains(&"    libumd reported it: leak: buffer still allocated at umdContextDestroy; freeing it"),
        "{leaks}"
    );
    // Each names the child's umdMemAlloc call: file:line from this test binary's DWARF, the
    // function demangled (docs/tools.md, "Call sites in the findings").
    let line = include_str!("umd_log_live.rs")
        .lines()
        .position(|l| l.contains("\"alloc a\");"))
        .expect("the alloc line")
        + 1;
    let site =
        format!("    call site: umd_log_live.rs:{line} in umd_log_live::child (umd_log_live-");
    let sites = a_block.iter().filter(|l| l.starts_with(&site)).count();
    assert_eq!(sites, 2, "{site:?} twice in\n{leaks}");
    let j: serde_json::Value =
        serde_json::from_str(&run(bin, &["-d", d, "--json", "leaks"])).expect("leaks json");
    let sizes: Vec<u64> = j["leaks"]
        .as_array()
        .expect("leaks array")
        .iter()
        .filter(|l| l["ctx"] == a)
        .filter_map(|l| l["size"].as_u64())
        .collect();
    assert_eq!(sizes, vec![65536, 1 << 20], "{j:#}");

    // errors: the context loss on b, then the device loss.
    let errors = run(bin, &["-d", d, "errors"]);
    let lost_ctx = errors
        .lines()
        .position(|l| l.contains(&format!("ctx={b} UMD_ERR_CTX_LOST umdFenceWait:")));
    let lost_dev = errors
        .lines()
        .position(|l| l.contains("device lost: all further calls fail with UMD_ERR_DEVICE_LOST"));
    assert!(
        lost_ctx.is_some() && lost_dev.is_some() && lost_ctx < lost_dev,
        "{errors}"
    );
    assert!(
        errors.contains("UMD_ERR_DEVICE_LOST umdMemAlloc:"),
        "{errors}"
    );

    // last-job: the device loss ends the story; b's last job is its third (seqno 3), the one
    // that faulted, and 2 is the last b completed.
    let lj = run(bin, &["-d", d, "last-job"]);
    assert!(
        lj.lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("device lost at ")),
        "{lj}"
    );
    let b_block: Vec<&str> = lj
        .lines()
        .skip_while(|l| *l != format!("pid {pid} ctx {b}:"))
        .take(5)
        .collect();
    assert!(
        b_block
            .get(1)
            .is_some_and(|l| l.starts_with("  last submitted: seqno 3 ")),
        "{lj}"
    );
    // With the default file level (INFO): libumd logs every submit and every completed wait.
    assert!(
        b_block
            .get(2)
            .is_some_and(|l| l.starts_with("  last completed: seqno 2 ")),
        "{lj}"
    );
    assert!(
        b_block
            .get(3)
            .is_some_and(|l| l.starts_with("  context lost at ")
                && l.contains("GPU fault 'unmapped' (write access)")),
        "{lj}"
    );
    assert!(
        b_block
            .get(4)
            .is_some_and(|l| l.starts_with("  GPU fault on: seqno 3 job 3")),
        "{lj}"
    );

    // ctx: b's story in order: created, its buffer, three submits, the fault, the loss.
    let story = run(bin, &["-d", d, "ctx", &b.to_string()]);
    let msgs: Vec<&str> = story
        .lines()
        .skip(2)
        .filter_map(|l| l.split_once(": ").map(|(_, m)| m))
        .collect();
    let first = |m: &str| msgs.iter().position(|x| x.starts_with(m));
    assert!(first("context created").is_some(), "{story}");
    assert!(first("alloc").is_some(), "{story}");
    assert!(first("submit").is_some(), "{story}");
    assert!(first("GPU fault").is_some(), "{story}");
    assert!(first("context created") < first("alloc"), "{story}");
    assert!(first("submit") < first("GPU fault"), "{story}");
    let _ = std::fs::remove_dir_all(&dir);
}
