//! Tearing a context down under a blocked `umdFenceWait` (docs/libumd.md, "Closing under a
//! blocked wait"): `umdDeviceClose` or `umdContextDestroy` from another thread wakes the waiter
//! at once with `UMD_ERR_INVALID_HANDLE` and a detail that says so; the close itself waits for
//! the context's work as CTX_DESTROY always does, which for a job that never finishes means
//! until the job timeout declares it hung. The simulator's CTX_DESTROY does what aigpu.ko's does
//! (`kmd/gpu/clients.rs`, `ctx_destroy`); `tests/c/short_process.c` mode `close-under-wait` checks the
//! waiter's side on the kernel module in the QEMU guest.

use std::ffi::CStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use umd::abi::{cmdbuf::*, context::*, device::*, errors::*, memory::*, sync::*, types::*};
use umd::error::detail::umdErrorDetail;
use umd::umdResult;

const DEVICE_CLOSED: &str =
    "the device was closed by another thread (umdDeviceClose) while this wait was blocked";
const CONTEXT_DESTROYED: &str =
    "the context was destroyed by another thread (umdContextDestroy) while this wait was blocked";

/// How long the woken waiter may take: far below the job timeout set below.
const PROMPT: Duration = Duration::from_millis(500);
/// The simulator's job timeout here: the stuck job is declared hung this long after it started.
const JOB_TIMEOUT_MS: u64 = 1500;

/// The close waits for the stuck job until the timeout declares it hung: at least half the
/// timeout after the close started (the job started ~150 ms before), at most the destroy's own
/// bound (twice the timeout plus a second) with a second of slack for a loaded machine.
#[track_caller]
fn check_close_time(took: Duration) {
    let timeout = Duration::from_millis(JOB_TIMEOUT_MS);
    assert!(
        took >= timeout / 2,
        "the close did not wait for the work: {took:?}"
    );
    assert!(
        took < 2 * timeout + Duration::from_secs(2),
        "the close took {took:?}"
    );
}

/// The tests share simulated device 0 and look at its context count: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn setup() -> std::sync::MutexGuard<'static, ()> {
    let g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    std::env::set_var("UMD_BACKEND", "sim");
    // The job never finishes: the watchdog declares it hung after this.
    std::env::set_var("UMD_SIM_JOB_TIMEOUT_MS", JOB_TIMEOUT_MS.to_string());
    g
}

#[track_caller]
fn ok(r: umdResult) {
    assert_eq!(r, umdResult::UMD_SUCCESS);
}

fn open() -> umdDevice {
    let mut dev = 0;
    ok(umdDeviceOpen(0, &mut dev));
    dev
}

fn context(dev: umdDevice) -> umdContext {
    let mut ctx = 0;
    ok(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &mut ctx));
    ctx
}

/// Submits a job that waits for a value nobody ever writes.
fn submit_stuck_job(ctx: umdContext) -> umdFence {
    let mut buf = 0;
    ok(umdMemAlloc(ctx, 4096, 0, &mut buf));
    let mut va = 0;
    ok(umdMemGetAddress(buf, &mut va));
    ok(umdMemcpyHtoD(buf, 0, [0u8; 8].as_ptr().cast(), 8));
    let mut cb = 0;
    ok(umdCmdBufCreate(ctx, &mut cb));
    ok(umdCmdBufBegin(cb));
    ok(umdCmdWaitValue(cb, va, 0x5eed_0000_0001));
    ok(umdCmdBufEnd(cb));
    let mut fence = umdFence::default();
    ok(umdSubmit(ctx, &cb, 1, std::ptr::null(), 0, &mut fence));
    fence
}

struct Woken {
    code: umdResult,
    detail: umdErrorDetail,
    at: Instant,
}

/// A thread blocked in an infinite `umdFenceWait` on `fence`.
fn waiter(fence: umdFence) -> std::thread::JoinHandle<Woken> {
    let t = std::thread::spawn(move || {
        let code = umdFenceWait(&fence, UMD_TIMEOUT_INFINITE);
        let at = Instant::now();
        let mut detail = umdErrorDetail::empty();
        detail.struct_size = std::mem::size_of::<umdErrorDetail>() as u32;
        let r = umdGetLastErrorDetail(&mut detail);
        assert_eq!(r, umdResult::UMD_SUCCESS);
        Woken { code, detail, at }
    });
    // Let it reach the wait (it cannot return before the job completes, which it never does).
    std::thread::sleep(Duration::from_millis(150));
    assert!(!t.is_finished(), "the wait returned before the close");
    t
}

fn text(s: &[std::ffi::c_char]) -> String {
    // SAFETY: the detail's strings are NUL-terminated within their arrays.
    unsafe { CStr::from_ptr(s.as_ptr()) }
        .to_string_lossy()
        .into_owned()
}

#[track_caller]
fn check_woken(w: &Woken, since: Instant, fence: umdFence, sentence: &str) {
    assert!(
        w.at.duration_since(since) < PROMPT,
        "waiter woke {:?} after the close",
        w.at.duration_since(since)
    );
    assert_eq!(w.code, umdResult::UMD_ERR_INVALID_HANDLE);
    assert_eq!(w.detail.code, umdResult::UMD_ERR_INVALID_HANDLE as i32);
    assert_eq!(text(&w.detail.function), "umdFenceWait");
    assert_eq!(w.detail.fence_seqno, fence.seqno);
    let msg = text(&w.detail.message);
    assert!(msg.contains(sentence), "{msg}");
    assert!(
        msg.contains(&format!(
            "seqno {}): {sentence}; the fence will never signal",
            fence.seqno
        )),
        "{msg}"
    );
    assert!(
        !msg.contains("job timeout") && !msg.contains("timed out"),
        "{msg}"
    );
}

/// The simulated device's debugfs status field `key`.
fn sim_status(key: &str) -> String {
    let f = umd::backend::sim::SimFile::open(0).expect("sim open");
    let s = f.gpu().debugfs_status();
    s.split_whitespace()
        .find_map(|kv| kv.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in {s}"))
        .to_string()
}

/// Nothing is left behind: no context on the device, and a fresh open runs a FILL.
fn device_still_works() {
    assert_eq!(sim_status("contexts"), "0");
    let dev = open();
    let ctx = context(dev);
    let mut buf = 0;
    ok(umdMemAlloc(ctx, 4096, 0, &mut buf));
    let mut va = 0;
    ok(umdMemGetAddress(buf, &mut va));
    let mut cb = 0;
    ok(umdCmdBufCreate(ctx, &mut cb));
    ok(umdCmdBufBegin(cb));
    ok(umdCmdFill(cb, va, 4096, 0xa5a5_5a5a));
    ok(umdCmdBufEnd(cb));
    let mut fence = umdFence::default();
    ok(umdSubmit(ctx, &cb, 1, std::ptr::null(), 0, &mut fence));
    ok(umdFenceWait(&fence, 5_000_000_000));
    let mut words = [0u32; 1024];
    ok(umdMemcpyDtoH(words.as_mut_ptr().cast(), buf, 0, 4096));
    assert!(words.iter().all(|&w| w == 0xa5a5_5a5a));
    ok(umdCmdBufDestroy(cb));
    ok(umdMemFree(buf));
    ok(umdContextDestroy(ctx));
    ok(umdDeviceClose(dev));
    assert_eq!(sim_status("contexts"), "0");
}

#[test]
fn device_close_wakes_a_blocked_wait_at_once_and_waits_for_the_work() {
    let _g = setup();
    let dev = open();
    let ctx = context(dev);
    let fence = submit_stuck_job(ctx);
    let t = waiter(fence);
    let start = Instant::now();
    let r = umdDeviceClose(dev);
    let took = start.elapsed();
    assert_eq!(r, umdResult::UMD_SUCCESS);
    check_close_time(took);
    let w = t.join().expect("waiter");
    check_woken(&w, start, fence, DEVICE_CLOSED);
    // The handles are gone.
    assert_eq!(umdFenceWait(&fence, 0), umdResult::UMD_ERR_INVALID_HANDLE);
    assert_eq!(umdDeviceClose(dev), umdResult::UMD_ERR_INVALID_HANDLE);
    device_still_works();
}

#[test]
fn context_destroy_wakes_a_blocked_wait_at_once() {
    let _g = setup();
    let dev = open();
    let ctx = context(dev);
    // A context of the same device that keeps working across the hang and its reset.
    let other = context(dev);
    let fence = submit_stuck_job(ctx);
    let t = waiter(fence);
    let start = Instant::now();
    let r = umdContextDestroy(ctx);
    let took = start.elapsed();
    assert_eq!(r, umdResult::UMD_SUCCESS);
    check_close_time(took);
    let w = t.join().expect("waiter");
    check_woken(&w, start, fence, CONTEXT_DESTROYED);
    assert_eq!(umdContextDestroy(ctx), umdResult::UMD_ERR_INVALID_HANDLE);
    // The device and its other context are unharmed.
    let mut buf = 0;
    ok(umdMemAlloc(other, 4096, 0, &mut buf));
    let mut va = 0;
    ok(umdMemGetAddress(buf, &mut va));
    let mut cb = 0;
    ok(umdCmdBufCreate(other, &mut cb));
    ok(umdCmdBufBegin(cb));
    ok(umdCmdFill(cb, va, 4096, 7));
    ok(umdCmdBufEnd(cb));
    let mut f2 = umdFence::default();
    ok(umdSubmit(other, &cb, 1, std::ptr::null(), 0, &mut f2));
    ok(umdFenceWait(&f2, 5_000_000_000));
    let mut words = [0u32; 1024];
    ok(umdMemcpyDtoH(words.as_mut_ptr().cast(), buf, 0, 4096));
    assert!(words.iter().all(|&w| w == 7));
    ok(umdCmdBufDestroy(cb));
    ok(umdMemFree(buf));
    ok(umdContextDestroy(other));
    ok(umdDeviceClose(dev));
    device_still_works();
}

#[test]
fn several_waiters_on_one_context_all_wake() {
    let _g = setup();
    let dev = open();
    let ctx = context(dev);
    let fence = submit_stuck_job(ctx);
    let ts: Vec<_> = (0..3).map(|_| waiter(fence)).collect();
    let start = Instant::now();
    ok(umdDeviceClose(dev));
    check_close_time(start.elapsed());
    for t in ts {
        check_woken(&t.join().expect("waiter"), start, fence, DEVICE_CLOSED);
    }
    device_still_works();
}
