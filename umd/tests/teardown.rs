//! Closing with jobs in flight releases everything: a buffer holds its context (it reaches its
//! device and pool through it: docs/memory.md, "What a pair costs") and a context keeps the
//! buffers its submitted jobs read until they complete, so `Context::close` lets those go, or
//! the two would keep each other, and the device's kernel file, alive. Seen from outside, on
//! the backend `UMD_BACKEND` selects (the simulator by default; aigpu.ko in the QEMU guest):
//! the device's files are gone after `umdDeviceClose`.

use std::sync::Mutex;
use umd::abi::{cmdbuf::*, context::*, device::*, memory::*, sync::*, types::*};
use umd::backend::sim::SimFile;
use umd::umdResult;

/// The tests share device 0 and count its files: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

#[track_caller]
fn ok(r: umdResult) {
    assert_eq!(r, umdResult::UMD_SUCCESS);
}

/// Counts this process's open files of device 0.
enum Files {
    /// The simulator's `clients` debugfs text (one line per file), read through a file of its
    /// own, which it does not count.
    Sim(SimFile),
    /// The render nodes this process holds open or mapped (`/proc/self/fd`, `/proc/self/maps`):
    /// the pool's CPU mappings keep a kernel file alive after its descriptor is closed.
    Kmd,
}

impl Files {
    fn open() -> Files {
        match std::env::var("UMD_BACKEND").as_deref() {
            Ok("kmd") => Files::Kmd,
            _ => {
                std::env::set_var("UMD_BACKEND", "sim");
                Files::Sim(SimFile::open(0).expect("observer file"))
            }
        }
    }

    fn count(&self) -> usize {
        match self {
            Files::Sim(observer) => observer.gpu().debugfs_clients().lines().count() - 1,
            Files::Kmd => {
                let fds = std::fs::read_dir("/proc/self/fd")
                    .expect("/proc/self/fd")
                    .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter(|t| t.to_string_lossy().starts_with("/dev/dri/renderD"))
                    .count();
                let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
                fds + maps
                    .lines()
                    .filter(|l| l.contains("/dev/dri/renderD"))
                    .count()
            }
        }
    }

    fn describe(&self) -> String {
        match self {
            Files::Sim(observer) => observer.gpu().debugfs_clients(),
            Files::Kmd => "render node descriptors and mappings of this process".into(),
        }
    }
}

/// Submits `n` one-packet jobs on `ctx` and does not wait for them: each keeps its command
/// buffer's upload buffer in the context until it completes.
fn submit_unwaited(ctx: umdContext, n: usize) {
    let mut buf = 0;
    ok(umdMemAlloc(ctx, 4096, 0, &mut buf));
    let mut va = 0;
    ok(umdMemGetAddress(buf, &mut va));
    for i in 0..n {
        let mut cb = 0;
        ok(umdCmdBufCreate(ctx, &mut cb));
        ok(umdCmdBufBegin(cb));
        ok(umdCmdFill(cb, va, 4096, i as u32));
        ok(umdCmdBufEnd(cb));
        let mut fence = umdFence::default();
        ok(umdSubmit(ctx, &cb, 1, std::ptr::null(), 0, &mut fence));
        // Destroyed at once: the job in flight still holds its upload buffer.
        ok(umdCmdBufDestroy(cb));
    }
}

fn setup() -> (std::sync::MutexGuard<'static, ()>, Files) {
    let g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let files = Files::open();
    assert_eq!(files.count(), 0, "{}", files.describe());
    (g, files)
}

#[track_caller]
fn check_released(files: &Files) {
    assert_eq!(
        files.count(),
        0,
        "the device's file is still open after umdDeviceClose: {}",
        files.describe()
    );
}

/// Device 0 opened, one context on it with 8 unwaited jobs (the device's file is open).
fn device_with_jobs_in_flight(files: &Files) -> (umdDevice, umdContext) {
    let mut dev = 0;
    ok(umdDeviceOpen(0, &mut dev));
    let mut ctx = 0;
    ok(umdContextCreate(dev, UMD_PRIORITY_NORMAL, &mut ctx));
    submit_unwaited(ctx, 8);
    assert!(files.count() >= 1, "{}", files.describe());
    (dev, ctx)
}

#[test]
fn device_close_with_jobs_in_flight_releases_the_device() {
    let (_g, files) = setup();
    let (dev, _ctx) = device_with_jobs_in_flight(&files);
    // The context and its buffer are leaks the close reports and destroys.
    ok(umdDeviceClose(dev));
    check_released(&files);
}

#[test]
fn context_destroy_with_jobs_in_flight_then_device_close_releases_the_device() {
    let (_g, files) = setup();
    let (dev, ctx) = device_with_jobs_in_flight(&files);
    ok(umdContextDestroy(ctx));
    if let Files::Sim(observer) = &files {
        let clients = observer.gpu().debugfs_clients();
        assert!(
            clients.lines().any(|l| l.contains(" contexts=0 ")),
            "{clients}"
        );
    }
    assert!(files.count() >= 1, "{}", files.describe());
    ok(umdDeviceClose(dev));
    check_released(&files);
}

/// A submit that races the close and keeps its job's buffers after the close let the others go
/// would rebuild the cycle: a closing context keeps nothing.
#[test]
fn a_closing_context_keeps_no_jobs_buffers() {
    let (_g, files) = setup();
    let r = umd::registry::resolved().expect("backend resolves");
    let dev = std::sync::Arc::new(umd::device::Device::open(&r, 0).expect("device opens"));
    let ctx = std::sync::Arc::new(umd::context::Context::create(&dev, 1).expect("context creates"));
    let kept = umd::memory::BufferRef::new(umd::memory::Buffer::alloc(&ctx, 4096, 0).unwrap());
    assert_eq!(ctx.keep_inflight(1, vec![kept.clone()]), 1);
    assert_eq!(umd::memory::BufferRef::count(&kept), 2);
    ctx.close(umd::context::ClosedBy::ContextDestroy)
        .expect("close");
    assert_eq!(
        umd::memory::BufferRef::count(&kept),
        1,
        "the close let go of job 1's buffer"
    );
    let late = umd::memory::BufferRef::new(umd::memory::Buffer::alloc(&ctx, 4096, 0).unwrap());
    assert_eq!(ctx.keep_inflight(2, vec![late.clone()]), 0);
    assert_eq!(
        umd::memory::BufferRef::count(&late),
        1,
        "kept after the close"
    );
    drop((kept, late, ctx, dev));
    check_released(&files);
}
