//! The emergency ring: dumped on request, on device loss (and named in the device-lost detail),
//! and on SIGSEGV / SIGABRT in a child process, with the process's `process_exit` record saying
//! which signal ended it and what was still live.

#[path = "log_util.rs"]
mod util;
use std::ffi::{c_char, CStr};
use std::os::unix::process::ExitStatusExt;
use umd::abi::log::*;
use umd::umdResult;
use util::*;

fn dump() -> String {
    let mut buf = [0 as c_char; 1024];
    let mut need = 0usize;
    assert_eq!(
        umdLogDumpBlackbox(buf.as_mut_ptr(), buf.len(), &mut need),
        umdResult::UMD_SUCCESS
    );
    // SAFETY: NUL-terminated.
    let p = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    assert_eq!(need, p.len() + 1);
    p
}

/// Record lines (not `#` comments) of a black box.
fn records(p: &str) -> Vec<String> {
    lines(std::path::Path::new(p))
        .into_iter()
        .filter(|l| !l.starts_with('#'))
        .collect()
}

#[test]
fn ring_keeps_the_last_n_warn_and_worse() {
    if is_child() {
        umd::log::ensure_init();
        for i in 0..40u32 {
            tracing::warn!(i, "warn {i}");
            tracing::info!(i, "info {i} (not in the ring)");
        }
        // The sinks may drop everything: the ring does not depend on them.
        assert_eq!(
            umdLogSetLevel(std::ptr::null(), UMD_LOG_LEVEL_OFF, UMD_LOG_SINK_ALL),
            umdResult::UMD_SUCCESS
        );
        tracing::error!(ctx = 9u64, "error with the sinks off");
        let p = dump();
        let name = std::path::Path::new(&p)
            .file_name()
            .unwrap()
            .to_str()
            .unwrap();
        assert!(
            name.starts_with(&format!("umd-blackbox-{}-", std::process::id())),
            "{name}"
        );
        let recs = records(&p);
        assert_eq!(recs.len(), 16, "{recs:#?}");
        for (k, l) in recs[..15].iter().enumerate() {
            let i = 25 + k;
            assert!(l.contains(" WARN tid="), "{l}");
            assert!(l.ends_with(&format!("\"warn {i}\" i={i}")), "{l}");
        }
        assert!(recs[15].contains(" ERROR ") && recs[15].contains("ctx=9"));
        let head = &lines(std::path::Path::new(&p))[0];
        assert!(head.starts_with("# aigpu libumd black box: pid="), "{head}");
        assert_eq!(stats().blackbox_dumps, 1);
        return;
    }
    let dir = fresh_dir("ring");
    let o = run_child(
        "ring_keeps_the_last_n_warn_and_worse",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_RING", "16"),
        ],
    );
    assert_ok(&o);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn device_lost_writes_the_black_box_and_names_it() {
    if is_child() {
        umd::log::ensure_init();
        let mut dev = 0u64;
        assert_eq!(
            umd::abi::device::umdDeviceOpen(0, &mut dev),
            umdResult::UMD_SUCCESS
        );
        tracing::warn!("the last thing before the loss");
        // A hanging job whose engine reset fails: the device is lost (as in tests/c/abi_test.c).
        use umd::abi::{cmdbuf::*, context::*, device::*, sync::*, types::*};
        let mut ctx = 0u64;
        assert_eq!(
            umdContextCreate(dev, UMD_PRIORITY_NORMAL, &mut ctx),
            umdResult::UMD_SUCCESS
        );
        let mut cb = 0u64;
        assert_eq!(umdCmdBufCreate(ctx, &mut cb), umdResult::UMD_SUCCESS);
        assert_eq!(umdCmdBufBegin(cb), umdResult::UMD_SUCCESS);
        assert_eq!(umdCmdDebugHang(cb), umdResult::UMD_SUCCESS);
        assert_eq!(umdCmdBufEnd(cb), umdResult::UMD_SUCCESS);
        assert_eq!(
            umdDebugInjectFault(dev, UMD_DEBUG_FAULT_RESET_FAILURE),
            umdResult::UMD_SUCCESS
        );
        let mut fence = umdFence::default();
        assert_eq!(
            umdSubmit(ctx, &cb, 1, std::ptr::null(), 0, &mut fence),
            umdResult::UMD_SUCCESS
        );
        let r = umdFenceWait(&fence, 30_000_000_000);
        assert_eq!(r, umdResult::UMD_ERR_DEVICE_LOST);
        let msg = umd::error::detail::last().message_str();
        let path = msg
            .split("black box: ")
            .nth(1)
            .and_then(|r| r.split(&[')', ';', ' '][..]).next())
            .unwrap_or_else(|| panic!("detail names no black box: {msg}"))
            .to_string();
        let recs = records(&path);
        assert!(
            recs.iter()
                .any(|l| l.contains("the last thing before the loss")),
            "{recs:#?}"
        );
        assert!(
            recs.last()
                .unwrap()
                .contains("device lost: all further calls fail"),
            "{recs:#?}"
        );
        // Later calls fail fast and point at the same file; no second black box.
        let r = umdContextCreate(dev, UMD_PRIORITY_NORMAL, &mut ctx);
        assert_eq!(r, umdResult::UMD_ERR_DEVICE_LOST);
        assert!(umd::error::detail::last().message_str().contains(&path));
        assert_eq!(stats().blackbox_dumps, 1);
        // Opening the device again while this process still holds it: refused as lost, and the
        // loss found at open is an ERROR record of its own (then the call's WARN).
        let mut dev2 = 0u64;
        assert_eq!(umdDeviceOpen(0, &mut dev2), umdResult::UMD_ERR_DEVICE_LOST);
        flush();
        let own = std::path::Path::new(&std::env::var("UMD_LOG_DIR").unwrap())
            .join(format!("umd-{}.log", std::process::id()));
        let log = lines(&own);
        let at_open: Vec<&String> = log
            .iter()
            .filter(|l| l.contains("device lost: device 0 cannot be opened"))
            .collect();
        assert_eq!(at_open.len(), 1, "{log:#?}");
        assert!(at_open[0].contains(" ERROR "), "{}", at_open[0]);
        let after = log
            .iter()
            .skip_while(|l| !l.contains("device lost: device 0 cannot be opened"))
            .nth(1)
            .unwrap_or_else(|| panic!("no record after the ERROR: {log:#?}"));
        assert!(
            after.contains(" WARN ")
                && after.contains("code=UMD_ERR_DEVICE_LOST")
                && after.contains("umdDeviceOpen"),
            "{after}"
        );
        return;
    }
    let dir = fresh_dir("lost");
    let o = run_child(
        "device_lost_writes_the_black_box_and_names_it",
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_SIM_HANG_DEBUG", "1"),
            ("UMD_SIM_JOB_TIMEOUT_MS", "50"),
        ],
    );
    assert_ok(&o);
    assert_eq!(blackboxes(&dir).len(), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens device 0 and a context with a 4 KiB and an 8 KiB buffer: (device, context, buffers).
fn device_context_two_buffers() -> (u64, u64, u64, u64) {
    use umd::abi::{context::*, device::*, memory::*, types::*};
    let (mut dev, mut ctx, mut b1, mut b2) = (0u64, 0u64, 0u64, 0u64);
    assert_eq!(umdDeviceOpen(0, &mut dev), umdResult::UMD_SUCCESS);
    assert_eq!(
        umdContextCreate(dev, UMD_PRIORITY_NORMAL, &mut ctx),
        umdResult::UMD_SUCCESS
    );
    assert_eq!(umdMemAlloc(ctx, 4096, 0, &mut b1), umdResult::UMD_SUCCESS);
    assert_eq!(umdMemAlloc(ctx, 8192, 0, &mut b2), umdResult::UMD_SUCCESS);
    (dev, ctx, b1, b2)
}

fn fatal_child(how: &str) {
    // No core file in the test's directory, whatever the machine's limit.
    let none = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain setrlimit on this process.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &none) };
    umd::log::ensure_init();
    if how == "segv" {
        // Live at the crash: one device, one context, two buffers (the exit record counts them).
        let _live = device_context_two_buffers();
    }
    tracing::warn!(ctx = 1u64, "last words 1");
    tracing::error!(ctx = 1u64, code = "UMD_ERR_INTERNAL", "last words 2");
    tracing::warn!(ctx = 1u64, "last words 3");
    tracing::info!(ctx = 1u64, "the last info before the crash");
    match how {
        // SAFETY: deliberately invalid: the test needs a real fault.
        "segv" => unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) },
        _ => std::process::abort(),
    }
}

/// The black box's `process_exit` record: its fields after the message, e.g. `event=process_exit
/// how=signal signal=SIGSEGV status=139 live_devices=1 live_context_count=1 live_buffers=2`.
fn exit_fields(recs: &[String]) -> String {
    let exits: Vec<&String> = recs
        .iter()
        .filter(|l| l.contains(" event=process_exit "))
        .collect();
    assert_eq!(exits.len(), 1, "one exit record: {recs:#?}");
    let l = exits[0];
    assert!(
        l.contains(" ERROR tid=") && l.contains(" umd::log::story "),
        "level and target: {l}"
    );
    l.split("\"process exit\" ")
        .nth(1)
        .unwrap_or_else(|| panic!("message: {l}"))
        .to_string()
}

fn check_fatal(test: &str, sig: i32, live: &str) {
    let dir = fresh_dir(test);
    let o = run_child(
        test,
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_SIGNALS", "1"),
        ],
    );
    assert_eq!(o.status.signal(), Some(sig), "dies of the signal: {o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    let path = err
        .split("black box written to ")
        .nth(1)
        .and_then(|r| r.lines().next())
        .unwrap_or_else(|| panic!("no black box message: {err}"))
        .to_string();
    let recs = records(&path);
    let words: Vec<&str> = recs
        .iter()
        .filter_map(|l| l.split('"').nth(1))
        .filter(|m| m.starts_with("last words"))
        .collect();
    assert_eq!(words, ["last words 1", "last words 2", "last words 3"]);
    // The regular log holds every record logged before the crash too, the INFO ones (the
    // process's start among them) that the black box does not keep: the handler had the writer
    // write them out before the process died.
    let regular: Vec<String> = log_files(&dir).iter().flat_map(|f| lines(f)).collect();
    for want in ["\"last words 3\"", "\"the last info before the crash\""] {
        assert!(
            regular.iter().any(|l| l.contains(want)),
            "{want} in the regular log: {regular:#?}"
        );
    }
    if sig == libc::SIGSEGV {
        assert!(
            regular.iter().any(|l| l.contains(" event=process_start ")),
            "the process start record in the regular log: {regular:#?}"
        );
    }
    let name = if sig == libc::SIGSEGV {
        "SIGSEGV"
    } else {
        "SIGABRT"
    };
    assert_eq!(
        exit_fields(&recs),
        format!(
            "event=process_exit how=signal signal={name} status={} {live}",
            128 + sig
        )
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigsegv_dumps_the_ring() {
    if is_child() {
        fatal_child("segv");
        return;
    }
    check_fatal(
        "sigsegv_dumps_the_ring",
        libc::SIGSEGV,
        "live_devices=1 live_context_count=1 live_buffers=2",
    );
}

#[test]
fn sigabrt_dumps_the_ring() {
    if is_child() {
        fatal_child("abort");
        return;
    }
    check_fatal(
        "sigabrt_dumps_the_ring",
        libc::SIGABRT,
        "live_devices=0 live_context_count=0 live_buffers=0",
    );
}

/// The parent of `forked_child_crash_has_its_own_exit_record`: holds a device, a context and two
/// buffers, forks, and the child crashes on its first own record. Exits 0 when the child died of
/// SIGSEGV, 3 otherwise (a hang ends in SIGALRM after 20 s).
fn fork_then_crash() {
    umd::log::ensure_init();
    use umd::abi::{context::*, device::*, memory::*};
    let (dev, ctx, b1, b2) = device_context_two_buffers();
    tracing::warn!(ctx = 1u64, "parent words before the fork");
    // SAFETY: fork in a test process; the child only logs, crashes, or is killed by the alarm.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let none = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain setrlimit / alarm on this process.
        unsafe {
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::alarm(20);
        }
        tracing::warn!(ctx = 1u64, "child last words");
        // SAFETY: deliberately invalid: the test needs a real fault.
        unsafe { std::ptr::write_volatile(std::ptr::null_mut::<u64>(), 1) };
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    let segv = libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGSEGV;
    println!("forked child pid={pid} status={status}");
    assert_eq!(umdMemFree(b2), umdResult::UMD_SUCCESS);
    assert_eq!(umdMemFree(b1), umdResult::UMD_SUCCESS);
    assert_eq!(umdContextDestroy(ctx), umdResult::UMD_SUCCESS);
    assert_eq!(umdDeviceClose(dev), umdResult::UMD_SUCCESS);
    let _ = umd::log::flush(std::time::Duration::from_secs(2), false);
    std::process::exit(if segv { 0 } else { 3 });
}

/// A forked child that crashes: its own black box (its pid in the name) with its last words and
/// an exit record that counts none of the parent's objects (a child's copies are not its own),
/// while the parent goes on, frees everything and exits normally.
#[test]
fn forked_child_crash_has_its_own_exit_record() {
    if is_child() {
        fork_then_crash();
        return;
    }
    let test = "forked_child_crash_has_its_own_exit_record";
    let dir = fresh_dir(test);
    let o = run_child(
        test,
        &[
            ("UMD_LOG_DIR", dir.to_str().unwrap()),
            ("UMD_LOG_SIGNALS", "1"),
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "the child died of SIGSEGV: {o:?}");
    let child: u32 = out
        .split("forked child pid=")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no child pid: {out}"));
    let boxes = blackboxes(&dir);
    assert_eq!(boxes.len(), 1, "one black box, the child's: {boxes:?}");
    let name = boxes[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with(&format!("umd-blackbox-{child}-")),
        "named for the child: {name}"
    );
    let recs = records(boxes[0].to_str().unwrap());
    assert!(
        recs.iter().any(|l| l.contains("\"child last words\"")),
        "the child's last record: {recs:#?}"
    );
    assert_eq!(
        exit_fields(&recs),
        "event=process_exit how=signal signal=SIGSEGV status=139 live_devices=0 live_context_count=0 live_buffers=0"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
