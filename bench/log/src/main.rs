//! umd-log-bench: libumd's log pipeline against spdlog, in one invocation (docs/benchmarks.md,
//! "Logging"). Prints numbers; asserts nothing.
//!
//! ```text
//! umd-log-bench [--spdlog PATH] [--records N] [--repeats R] [--per-thread M] [--dir DIR]
//! ```
//!
//! Workload (the same on both sides, see bench/log/spdlog_bench.cpp): console at WARN, file at
//! INFO with size rotation (128 MiB x 5), blocking overflow, a queue of 16384 records, and an
//! INFO record with ctx, code, function, two numeric fields and a message.
//!
//! * disabled: a DEBUG call, 50 M times, ns per call (the level is off everywhere);
//! * enqueue latency: groups of 8 consecutive calls timed with rdtsc (timer overhead
//!   subtracted; a sample is the group's time per call), 1 and 4 threads, bursts of 200 calls
//!   with a 1 ms pause so the writer keeps up (what is measured is the caller's cost, not a full
//!   queue); p50 / p99 / p99.9 over all samples;
//! * throughput: N records from one thread as fast as they go, until the file has them all.
//!
//! Each figure is the median over R repeats; spdlog runs after libumd, in a child process, so the
//! two never share the CPU.

use std::hint::black_box;
use std::time::{Duration, Instant};

#[cfg(target_arch = "x86_64")]
fn ticks() -> u64 {
    // SAFETY: rdtsc has no preconditions on x86_64.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn ticks() -> u64 {
    umd::error::detail::mono_ns()
}

/// The measured record (the same fields as spdlog_bench.cpp's), with extra fields at the end,
/// through the typed front end libumd's hot call sites use (`umd::record!`, docs/logging.md,
/// "Two front ends").
macro_rules! record {
    ($($extra:tt)*) => {
        umd::record!(
            INFO,
            "buffer allocated",
            ctx = 7u64,
            code = "UMD_SUCCESS",
            function = "umdMemAlloc",
            bytes = 4096u64,
            $($extra)*
        )
    };
}

/// The same record through `tracing::info!` (the front end of every other call site).
macro_rules! traced {
    ($($extra:tt)*) => {
        tracing::info!(
            ctx = 7u64,
            code = "UMD_SUCCESS",
            function = "umdMemAlloc",
            bytes = 4096u64,
            $($extra)*,
            "buffer allocated"
        )
    };
}

fn ticks_per_ns() -> f64 {
    let (t0, c0) = (Instant::now(), ticks());
    std::thread::sleep(Duration::from_millis(100));
    let (t1, c1) = (Instant::now(), ticks());
    (c1 - c0) as f64 / (t1 - t0).as_nanos() as f64
}

fn timer_overhead() -> u64 {
    let mut v: Vec<u64> = (0..10_000)
        .map(|_| {
            let a = ticks();
            let b = ticks();
            b - a
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn disabled_ns() -> f64 {
    let n = 50_000_000u64;
    let t0 = Instant::now();
    for i in 0..n {
        umd::record!(
            DEBUG,
            "buffer allocated",
            ctx = 7u64,
            code = "UMD_SUCCESS",
            bytes = 4096u64,
            va = black_box(i)
        );
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

/// A module whose level is off while the default is INFO: the call site's cached interest.
fn module_off_ns() -> f64 {
    let n = 50_000_000u64;
    let t0 = Instant::now();
    for i in 0..n {
        tracing::info!(target: "bench::quiet", ctx = 7u64, va = black_box(i), "buffer allocated");
    }
    t0.elapsed().as_nanos() as f64 / n as f64
}

/// Caller cost samples; `TRACED`: through `tracing::info!` instead of `umd::record!`.
fn latency<const TRACED: bool>(threads: u32, per: u32, ovh: u64) -> Vec<u64> {
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || {
                let mut v = Vec::with_capacity(per as usize);
                let mut i = 0u32;
                while i < per {
                    for _ in 0..200 / GROUP {
                        if i >= per {
                            break;
                        }
                        let a = ticks();
                        for g in 0..GROUP {
                            if TRACED {
                                traced!(va = (i + g) as u64, t);
                            } else {
                                record!(va = (i + g) as u64, t);
                            }
                        }
                        let b = ticks();
                        v.push((b - a).saturating_sub(ovh));
                        i += GROUP;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                v
            })
        })
        .collect();
    let mut all: Vec<u64> = hs
        .into_iter()
        .flat_map(|h| h.join().unwrap_or_default())
        .collect();
    all.sort_unstable();
    let _ = umd::log::flush(Duration::from_secs(60), false);
    all
}

fn pct(v: &[u64], p: f64, tpn: f64) -> f64 {
    let i = ((p * v.len() as f64) as usize).min(v.len() - 1);
    v[i] as f64 / tpn / GROUP as f64
}

/// Calls timed together: this VM's TSC advances in steps of about 40 ns, too coarse for one
/// call; a latency sample is a group's time per call.
const GROUP: u32 = 8;

fn throughput(records: u64) -> f64 {
    let t0 = Instant::now();
    for i in 0..records {
        record!(va = i);
    }
    let _ = umd::log::flush(Duration::from_secs(120), false);
    records as f64 / t0.elapsed().as_secs_f64()
}

#[derive(Default, Clone, Copy)]
struct Figures {
    disabled: f64,
    module_off: f64,
    lat1: [f64; 3],
    lat4: [f64; 3],
    /// 1 thread, p50, through `tracing::info!`.
    traced1: f64,
    throughput: f64,
    timer: f64,
}

fn run_spdlog(
    path: &str,
    dir: &str,
    records: u64,
    repeats: u32,
    per: u32,
    queue: &str,
) -> Option<Figures> {
    let out = std::process::Command::new(path)
        .args([
            "--dir",
            dir,
            "--records",
            &records.to_string(),
            "--repeats",
            &repeats.to_string(),
            "--per-thread",
            &per.to_string(),
            "--queue",
            queue,
        ])
        .output()
        .map_err(|e| eprintln!("cannot run {path}: {e}"))
        .ok()?;
    if !out.status.success() {
        eprintln!("{path} failed: {:?}", out.status);
        return None;
    }
    let mut f = Figures::default();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = l.split_whitespace();
        let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse::<f64>().ok())) else {
            continue;
        };
        match k {
            "timer_overhead_ns" => f.timer = v,
            "disabled_ns" => f.disabled = v,
            "lat1_p50_ns" => f.lat1[0] = v,
            "lat1_p99_ns" => f.lat1[1] = v,
            "lat1_p999_ns" => f.lat1[2] = v,
            "lat4_p50_ns" => f.lat4[0] = v,
            "lat4_p99_ns" => f.lat4[1] = v,
            "lat4_p999_ns" => f.lat4[2] = v,
            "throughput_rps" => f.throughput = v,
            _ => {}
        }
    }
    Some(f)
}

/// The 1-minute load average (the machine is shared: read the figures with it).
fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let load_before = load();
    let arg = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let records: u64 = arg("--records")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let repeats: u32 = arg("--repeats").and_then(|v| v.parse().ok()).unwrap_or(5);
    let per: u32 = arg("--per-thread")
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let base = arg("--dir").unwrap_or_else(|| {
        std::env::temp_dir()
            .join(format!("umd-log-bench-{}", std::process::id()))
            .display()
            .to_string()
    });
    let ours_dir = format!("{base}/umd");
    let theirs_dir = format!("{base}/spdlog");
    // The pipeline reads its configuration once, at the first log call.
    std::env::set_var("UMD_LOG_DIR", &ours_dir);
    std::env::set_var("UMD_LOG_CONSOLE", "warn");
    std::env::set_var("UMD_LOG_FILE", "info,bench::quiet=off");
    std::env::set_var("UMD_LOG_OVERFLOW", "block");
    // Block like spdlog's policy does (the default 100 ms bound would drop records when the
    // kernel throttles the writer thread's page-cache writes during the throughput run).
    std::env::set_var("UMD_LOG_BLOCK_MS", "60000");
    let queue = arg("--queue").unwrap_or_else(|| "16384".into());
    std::env::set_var("UMD_LOG_QUEUE", &queue);
    std::env::set_var("UMD_LOG_SIGNALS", "0");
    umd::log::ensure_init();

    let tpn = ticks_per_ns();
    let ovh = timer_overhead();
    let mut dis = vec![];
    let mut off = vec![];
    let mut l1: [Vec<f64>; 3] = Default::default();
    let mut l4: [Vec<f64>; 3] = Default::default();
    let mut thr = vec![];
    let mut tr = vec![];
    for _ in 0..repeats {
        dis.push(disabled_ns());
        off.push(module_off_ns());
        let a = latency::<false>(1, per, ovh);
        let b = latency::<false>(4, per, ovh);
        tr.push(pct(&latency::<true>(1, per, ovh), 0.50, tpn));
        for (k, p) in [0.50, 0.99, 0.999].into_iter().enumerate() {
            l1[k].push(pct(&a, p, tpn));
            l4[k].push(pct(&b, p, tpn));
        }
        thr.push(throughput(records));
    }
    let s = umd::log::stats();
    let ours = Figures {
        disabled: median(dis),
        module_off: median(off),
        lat1: l1.map(median),
        lat4: l4.map(median),
        traced1: median(tr),
        throughput: median(thr),
        timer: ovh as f64 / tpn,
    };
    let theirs =
        arg("--spdlog").and_then(|p| run_spdlog(&p, &theirs_dir, records, repeats, per, &queue));

    println!(
        "logging benchmark: {repeats} repeats (medians), {records} records for throughput, {per} calls per thread for latency"
    );
    println!(
        "libumd: {} records to the file, {} dropped, {} rotations; timer overhead subtracted: {:.1} ns",
        s.written_file, s.dropped, s.rotations, ours.timer
    );
    println!(
        "cpus: {}, load average before/after: {load_before} / {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load()
    );
    println!();
    println!(
        "{:<34} {:>12} {:>12} {:>12}   target",
        "metric", "libumd", "spdlog", "ours/spdlog"
    );
    let row = |name: &str, a: f64, b: Option<f64>, unit: &str, target: &str| {
        let (bs, r) = match b {
            Some(b) if b > 0.0 => (format!("{b:.1}"), format!("{:.2}", a / b)),
            _ => ("-".into(), "-".into()),
        };
        println!(
            "{:<34} {:>12} {:>12} {:>12}   {target}",
            format!("{name} ({unit})"),
            format!("{a:.1}"),
            bs,
            r
        );
    };
    let t = theirs;
    println!(
        "{:<34} {:>12} {:>12} {:>12}   <= 1 ns",
        "disabled call (ns)",
        format!("{:.2}", ours.disabled),
        t.map(|t| format!("{:.2}", t.disabled))
            .unwrap_or("-".into()),
        t.map(|t| format!("{:.3}", ours.disabled / t.disabled))
            .unwrap_or("-".into())
    );
    println!(
        "{:<34} {:>12} {:>12} {:>12}",
        "module filtered off (ns)",
        format!("{:.2}", ours.module_off),
        "-",
        "-"
    );
    let names = ["p50", "p99", "p99.9"];
    let targets = ["<= 0.15 x spdlog", "", "<= 1000 ns"];
    for k in 0..3 {
        row(
            &format!("enqueue 1 thread {}", names[k]),
            ours.lat1[k],
            t.map(|t| t.lat1[k]),
            "ns",
            targets[k],
        );
    }
    for k in 0..3 {
        row(
            &format!("enqueue 4 threads {}", names[k]),
            ours.lat4[k],
            t.map(|t| t.lat4[k]),
            "ns",
            targets[k],
        );
    }
    row(
        "tracing::info!, 1 thread p50",
        ours.traced1,
        t.map(|t| t.lat1[0]),
        "ns",
        "(reference: the other front end)",
    );
    row(
        "throughput to file",
        ours.throughput,
        t.map(|t| t.throughput),
        "records/s",
        ">= 2000000",
    );
    if t.is_none() {
        println!("\n(spdlog not run: pass --spdlog PATH; bench/log/run.sh builds it)");
    }
    if arg("--keep").is_none() {
        let _ = std::fs::remove_dir_all(&base);
    }
}
