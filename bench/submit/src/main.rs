//! umd-submit-bench: the cost of kernel submission, on whichever backend `UMD_BACKEND` selects
//! (the real module in the QEMU guest, the simulator on the host), in one run (docs/benchmarks.md,
//! "Kernel submission"). Prints numbers; asserts nothing.
//!
//! ```text
//! umd-submit-bench [--iters N] [--repeats R] [--mlp-demo PATH]
//! umd-submit-bench --only single|batched|roundtrip [--iters N] [--repeats R]
//! ```
//!
//! * floor: a bare `DRM_IOCTL_VERSION` round trip on the render node (kernel backend), or a bare
//!   backend call (`query`, in-process) on the simulator; plus one thread wake-up (a pipe
//!   ping-pong between two threads, halved);
//! * round trip: submit of a one-packet job (a 4-byte FILL) and wait for its fence, N times;
//!   median and p90, and its ratio to (floor + one wake-up) — the target is <= 3x;
//! * 1,000 small jobs (one 4-byte FILL each): one submit ioctl per job vs batched into submits of
//!   256 command buffers (4 ioctls), then one wait: ioctl count and jobs/s, median of R repeats —
//!   targets >= 20x fewer ioctls and >= 5x the throughput (also the median of each repeat's own
//!   ratio, and on aigpu.ko, run as root, the device thread's busy time per job from debugfs);
//! * the MLP demo (`examples/mlp_demo`, run R times as a child with the same environment): wall
//!   time of the process and its own "GPU submit+wait" time, medians.
//!
//! `--only` runs just one half of the 1,000-job comparison, R times, or N x R round trips (for a
//! profiler: the samples then belong to that path alone).
//!
//! The backend is used through the `Backend` trait (one method per ioctl), so the kernel numbers
//! are ioctl numbers, not libumd overhead.

use std::io::{Read, Write};
use std::time::Instant;
use uapi::ioctl::{Cmdbuf, PRIORITY_NORMAL, VM_ACCESS_READ, VM_ACCESS_WRITE};
use umd::backend::{select, Backend};

const VA: u64 = 0x4000_0000;
const BUF: u64 = 1 << 20;
const CMD_OFF: u64 = 0x8_0000;
const JOBS: usize = 1000;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn pct(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() as f64 - 1.0) * p) as usize]
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One thread wake-up: half of a pipe ping-pong between two threads (median, ns).
fn wakeup_ns(iters: usize) -> f64 {
    let mut a = [0i32; 2];
    let mut b = [0i32; 2];
    // SAFETY: valid out-arrays for pipe().
    unsafe {
        libc::pipe(a.as_mut_ptr());
        libc::pipe(b.as_mut_ptr());
    }
    // SAFETY: the descriptors were just created and are owned by these files.
    let (mut a_r, mut a_w, mut b_r, mut b_w) = unsafe {
        use std::os::fd::FromRawFd;
        (
            std::fs::File::from_raw_fd(a[0]),
            std::fs::File::from_raw_fd(a[1]),
            std::fs::File::from_raw_fd(b[0]),
            std::fs::File::from_raw_fd(b[1]),
        )
    };
    let echo = std::thread::spawn(move || {
        let mut c = [0u8; 1];
        while a_r.read_exact(&mut c).is_ok() && c[0] != 0 {
            if b_w.write_all(&c).is_err() {
                break;
            }
        }
    });
    let mut v = Vec::with_capacity(iters);
    let mut c = [1u8; 1];
    for _ in 0..iters {
        let t = Instant::now();
        a_w.write_all(&[1]).unwrap();
        b_r.read_exact(&mut c).unwrap();
        v.push(t.elapsed().as_nanos() as f64 / 2.0);
    }
    a_w.write_all(&[0]).unwrap();
    echo.join().unwrap();
    median(v)
}

/// The floor call: `DRM_IOCTL_VERSION` on the node (kernel), `query` (simulator). Median ns.
fn floor_ns(b: &dyn Backend, iters: usize) -> (f64, &'static str) {
    if b.kind() == "kmd" {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(b.location())
            .expect("open the render node");
        let mut v = Vec::with_capacity(iters);
        for _ in 0..iters {
            let mut ver = umd::backend::kmd::ioctl::DrmVersion {
                version_major: 0,
                version_minor: 0,
                version_patchlevel: 0,
                name_len: 0,
                name: std::ptr::null_mut(),
                date_len: 0,
                date: std::ptr::null_mut(),
                desc_len: 0,
                desc: std::ptr::null_mut(),
            };
            let t = Instant::now();
            // SAFETY: a valid drm_version with no buffers (lengths 0).
            unsafe { umd::backend::kmd::ioctl::drm_version(f.as_raw_fd(), &mut ver) }
                .expect("DRM_IOCTL_VERSION");
            v.push(t.elapsed().as_nanos() as f64);
        }
        (median(v), "DRM_IOCTL_VERSION")
    } else {
        let mut v = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            std::hint::black_box(b.query().expect("query"));
            v.push(t.elapsed().as_nanos() as f64);
        }
        (median(v), "backend query() (in-process)")
    }
}

fn deadline() -> u64 {
    umd::error::detail::mono_ns() + 30_000_000_000
}

/// `n` submit + wait round trips of the one-packet job; each one's duration (ns).
fn round_trips(b: &dyn Backend, ctx: u32, cb: Cmdbuf, n: usize) -> Vec<f64> {
    let mut rt = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let s = b.submit(ctx, &[cb], &[], 0).expect("submit");
        b.wait(ctx, s, deadline()).expect("wait");
        rt.push(t.elapsed().as_nanos() as f64);
    }
    rt
}

/// One run of the 1,000 jobs.
struct JobsRun {
    ioctls: usize,
    secs: f64,
    /// Each submit call's duration (ns).
    calls: Vec<f64>,
    /// The final wait's duration (ns): the work the device still had when the last submit
    /// returned, plus the interrupt and wake-up path.
    wait_ns: f64,
}

/// 1,000 jobs, one FILL each: `per_ioctl` command buffers per submit, then one wait.
fn jobs(b: &dyn Backend, ctx: u32, cb: Cmdbuf, per_ioctl: usize) -> JobsRun {
    let batch = vec![cb; per_ioctl];
    let mut calls = Vec::with_capacity(JOBS);
    let t = Instant::now();
    let mut ioctls = 0;
    let mut left = JOBS;
    let mut last = 0;
    while left > 0 {
        let n = left.min(per_ioctl);
        let c = Instant::now();
        last = b.submit(ctx, &batch[..n], &[], 0).expect("submit");
        calls.push(c.elapsed().as_nanos() as f64);
        ioctls += 1;
        left -= n;
    }
    let w = Instant::now();
    b.wait(ctx, last, deadline()).expect("wait");
    let wait_ns = w.elapsed().as_nanos() as f64;
    ioctls += 1;
    JobsRun {
        ioctls,
        secs: t.elapsed().as_secs_f64(),
        calls,
        wait_ns,
    }
}

/// One half of the 1,000-job comparison (one per ioctl, or batched), over the repeats.
#[derive(Default)]
struct Half {
    ioctls: usize,
    /// Jobs per second of each repeat.
    rates: Vec<f64>,
    /// Every submit call's duration (ns).
    calls: Vec<f64>,
    /// The final wait of each repeat (ns).
    waits: Vec<f64>,
    /// Time in submit calls per job (ns), per repeat: what batching saves the submitting
    /// thread, whatever the device costs.
    cpu: Vec<f64>,
    /// The device's (steps, busy us) summed over the repeats (aigpu.ko, as root).
    dev: (u64, u64),
}

impl Half {
    /// Runs the 1,000 jobs once with `per_ioctl` buffers per submit; returns its seconds.
    fn run(
        &mut self,
        b: &dyn Backend,
        ctx: u32,
        cb: Cmdbuf,
        per_ioctl: usize,
        location: &str,
    ) -> f64 {
        let before = device_busy(location);
        let r = jobs(b, ctx, cb, per_ioctl);
        if let (Some(a), Some(z)) = (before, device_busy(location)) {
            self.dev.0 += z.0.saturating_sub(a.0);
            self.dev.1 += z.1.saturating_sub(a.1);
        }
        self.ioctls = r.ioctls;
        self.rates.push(JOBS as f64 / r.secs);
        self.cpu.push(r.calls.iter().sum::<f64>() / JOBS as f64);
        self.calls.extend(r.calls);
        self.waits.push(r.wait_ns);
        r.secs
    }

    /// Prints the half's line; returns its median jobs/s.
    fn print(&self, label: &str) -> f64 {
        let rate = median(self.rates.clone());
        println!(
            "  {label} {:>5} ioctls, {rate:>10.0} jobs/s  (submit call median {:.1} us, p99 {:.1} us; final wait {:.1} us)",
            self.ioctls,
            median(self.calls.clone()) / 1e3,
            pct(self.calls.clone(), 0.99) / 1e3,
            median(self.waits.clone()) / 1e3
        );
        rate
    }
}

/// The device's work counters from aigpu.ko's debugfs `status` (root, kernel backend only):
/// (steps, microseconds the device thread spent executing). `None` elsewhere.
fn device_busy(location: &str) -> Option<(u64, u64)> {
    let minor = location.rsplit("renderD").next()?.parse::<u32>().ok()?;
    let st = std::fs::read_to_string(format!("/sys/kernel/debug/dri/{minor}/status")).ok()?;
    let field = |k: &str| {
        st.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("steps=")?, field("busy_us=")?))
}

fn mlp_demo(path: &str, repeats: usize) -> Option<(f64, f64)> {
    let mut wall = Vec::new();
    let mut gpu = Vec::new();
    for _ in 0..repeats {
        let t = Instant::now();
        let out = std::process::Command::new(path).output().ok()?;
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !text.contains("result:   PASS") {
            eprintln!(
                "umd-submit-bench: {path} failed:\n{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            return None;
        }
        let g = text
            .lines()
            .find_map(|l| l.strip_prefix("time:     GPU submit+wait "))
            .and_then(|r| r.split(' ').next())
            .and_then(|v| v.parse::<f64>().ok())?;
        wall.push(ms);
        gpu.push(g);
    }
    Some((median(wall), median(gpu)))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iters: usize = arg(&args, "--iters", 2000);
    let repeats: usize = arg(&args, "--repeats", 5);
    let demo: Option<String> = args
        .iter()
        .position(|a| a == "--mlp-demo")
        .and_then(|i| args.get(i + 1))
        .cloned();
    if std::env::var_os("UMD_BACKEND").is_none() {
        std::env::set_var("UMD_BACKEND", "sim");
    }
    let resolved = select::resolve().expect("backend resolves");
    let b = select::open(&resolved, 0).expect("device 0 opens");
    let b: &dyn Backend = &*b;

    // One 1 MiB buffer: data at VA, command buffers from VA + 512 KiB.
    let h = b.gem_create(BUF).expect("gem create");
    b.vm_bind(h, VA, 0, BUF, VM_ACCESS_READ | VM_ACCESS_WRITE)
        .expect("bind");
    let m = b.gem_mmap(h, BUF).expect("mmap");
    let fill = uapi::packet::encode_fill(VA, 4, 0x1234_5678);
    // SAFETY: the mapping is BUF bytes; the packet goes at CMD_OFF, well inside.
    unsafe {
        std::ptr::copy_nonoverlapping(
            fill.as_ptr() as *const u8,
            m.ptr.add(CMD_OFF as usize),
            fill.len() * 4,
        )
    };
    let cb = Cmdbuf {
        va: VA + CMD_OFF,
        size: (fill.len() * 4) as u32,
        flags: 0,
    };
    let ctx = b.ctx_create(PRIORITY_NORMAL).expect("context");

    println!("umd-submit-bench: backend {} ({})", b.kind(), b.location());
    println!(
        "  cpus online: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // Warm up (first-use costs: page faults, slots, the device thread).
    for _ in 0..50 {
        let s = b.submit(ctx, &[cb], &[], 0).expect("submit");
        b.wait(ctx, s, deadline()).expect("wait");
    }

    if let Some(only) = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
    {
        let per_ioctl = match only.as_str() {
            "single" => 1,
            "batched" => uapi::ioctl::MAX_CMDBUFS as usize,
            "roundtrip" => {
                let rt = round_trips(b, ctx, cb, iters * repeats);
                println!(
                    "submit + wait, one-packet job: median {:.1} us over {} round trips",
                    median(rt) / 1e3,
                    iters * repeats
                );
                return;
            }
            other => {
                eprintln!(
                    "umd-submit-bench: --only takes single, batched or roundtrip, not {other}"
                );
                std::process::exit(2);
            }
        };
        let runs: Vec<JobsRun> = (0..repeats).map(|_| jobs(b, ctx, cb, per_ioctl)).collect();
        println!(
            "{JOBS} small jobs, {per_ioctl} per ioctl: {:.0} jobs/s (median of {repeats}; submit call median {:.1} us, final wait median {:.1} us)",
            median(runs.iter().map(|r| JOBS as f64 / r.secs).collect()),
            median(runs.iter().flat_map(|r| r.calls.iter().copied()).collect()) / 1e3,
            median(runs.iter().map(|r| r.wait_ns).collect()) / 1e3
        );
        return;
    }

    let (floor, floor_what) = floor_ns(b, iters);
    let wake = wakeup_ns(iters.min(2000));
    let rt = round_trips(b, ctx, cb, iters);
    let rt_med = median(rt.clone());
    let rt_p90 = pct(rt, 0.9);
    println!("round trip ({iters} iterations, medians):");
    println!(
        "  floor: {floor_what}                 {:>10.1} us",
        floor / 1e3
    );
    println!(
        "  one thread wake-up (pipe ping-pong / 2)     {:>10.1} us",
        wake / 1e3
    );
    println!(
        "  submit + wait, one-packet job               {:>10.1} us (p90 {:.1} us)",
        rt_med / 1e3,
        rt_p90 / 1e3
    );
    println!(
        "  ratio round trip / (floor + wake-up)        {:>10.2}x  (target <= 3x)",
        rt_med / (floor + wake)
    );
    println!(
        "  ratio round trip / floor                    {:>10.2}x",
        rt_med / floor
    );

    let location = b.location();
    let (mut single, mut batched) = (Half::default(), Half::default());
    let mut pair_ratios = Vec::new();
    for _ in 0..repeats {
        let one = single.run(b, ctx, cb, 1, &location);
        let many = batched.run(b, ctx, cb, uapi::ioctl::MAX_CMDBUFS as usize, &location);
        // The two halves of one repeat ran back to back: their ratio is what drifts least
        // between repeats on a noisy machine.
        pair_ratios.push(one / many);
    }
    println!("{JOBS} small jobs (one 4-byte FILL each), median of {repeats}:");
    let js = single.print("one job per submit ioctl: ");
    let jb = batched.print("batched, 256 per ioctl:   ");
    println!(
        "  ratios: {:.1}x fewer ioctls (target >= 20x), {:.1}x the throughput (target >= 5x; ratio of the medians)",
        single.ioctls as f64 / batched.ioctls as f64,
        jb / js
    );
    let mut sorted = pair_ratios.clone();
    sorted.sort_by(|a, b| a.total_cmp(b));
    println!(
        "  throughput ratio per repeat (single and batched back to back): median {:.1}x, range {:.1}-{:.1}x",
        median(pair_ratios),
        sorted.first().copied().unwrap_or(0.0),
        sorted.last().copied().unwrap_or(0.0)
    );
    let (cpu1, cpub) = (median(single.cpu.clone()), median(batched.cpu.clone()));
    println!(
        "  submit calls per job: one per ioctl {:.2} us, batched {:.2} us ({:.1}x less; median of the repeats)",
        cpu1 / 1e3,
        cpub / 1e3,
        cpu1 / cpub.max(1.0)
    );
    let per_job = |d: (u64, u64)| d.1 as f64 / (repeats * JOBS) as f64;
    if single.dev.0 > 0 && batched.dev.0 > 0 {
        println!(
            "  device thread busy per job (debugfs busy_us): one per ioctl {:.2} us, batched {:.2} us ({} / {} steps)",
            per_job(single.dev),
            per_job(batched.dev),
            single.dev.0,
            batched.dev.0
        );
    }

    if let Some(path) = demo {
        match mlp_demo(&path, repeats) {
            Some((wall, gpu)) => {
                println!("MLP demo ({path}), median of {repeats}:");
                println!("  process wall time {wall:.1} ms, GPU submit+wait {gpu:.2} ms");
            }
            None => println!("MLP demo ({path}): did not run"),
        }
    }
    let _ = b.ctx_destroy(ctx);
    let _ = b.gem_munmap(m);
    let _ = b.vm_unbind(VA, BUF);
    let _ = b.gem_close(h);
}
