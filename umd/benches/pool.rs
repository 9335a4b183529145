//! Memory pool benchmark (issue 6; prints numbers, asserts nothing).
//!
//! Alloc+free pairs of 512 B, 64 KiB and 4 MiB, on 1 and 4 threads, through
//!   - the pool's hit path (`Pool::alloc` + `Pool::free`, a cached block),
//!   - glibc `malloc` + `free` of the same size (the reference for "cheap"),
//!   - the backend's raw `gem_create` + `gem_close` (what an uncached allocation must at least
//!     pay), and the full uncached path (`UMD_POOL=off`: create + VA + bind, unbind + close),
//!   - the C ABI (`umdMemAlloc` + `umdMemFree`: handle table, logging call sites, pool),
//!
//! all measured in the same run: each figure is the median over RUNS runs of ns per pair (one
//! thread: the thread's CPU time; several: wall time / all pairs of all threads), pool and malloc
//! runs alternating so both see the same machine load. Then a replay of a training-step-like
//! allocation trace with the pool on and off: kernel calls saved, peak reserved vs peak
//! allocated.
//!
//! Run: `cargo bench -p umd --bench pool` (simulator backend; `UMD_BACKEND=kmd` on a machine with
//! the module; `POOL_BENCH_PAIRS=1`: only the alloc+free table, as the QEMU guest runs it against
//! aigpu.ko with `bench/submit/run.sh guest`).

use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::Instant;
use umd::abi::memory::{umdMemAlloc, umdMemFree};
use umd::abi::types::umdBuffer;
use umd::context::Context;
use umd::device::Device;
use umd::memory::pool::config::Config;
use umd::memory::pool::{FreeNote, Grant, Pool, Request};
use umd::memory::Buffer;

const RUNS: usize = 11;
const SIZES: [(u64, &str); 3] = [(512, "512 B"), (64 << 10, "64 KiB"), (4 << 20, "4 MiB")];

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; the clock exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// ns per iteration of one run of `f`, `iters` times on each of `threads` threads. One thread:
/// the thread's CPU time (robust against other processes on a shared machine); several: wall
/// time divided by all iterations (throughput, contention included).
fn run_once(threads: usize, iters: usize, f: &(impl Fn(usize) + Sync)) -> f64 {
    // POOL_BENCH_WALL=1: wall time for one thread too (the QEMU guest's thread CPU clock is too
    // coarse under emulation: it read 0 for whole runs).
    if threads == 1 && std::env::var_os("POOL_BENCH_WALL").is_none() {
        let c0 = thread_cpu_ns();
        for _ in 0..iters {
            f(0);
        }
        return (thread_cpu_ns() - c0) as f64 / iters as f64;
    }
    let barrier = Barrier::new(threads);
    let t0 = std::sync::Mutex::new(None::<Instant>);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (barrier, t0) = (&barrier, &t0);
            s.spawn(move || {
                barrier.wait();
                if t == 0 {
                    *t0.lock().unwrap() = Some(Instant::now());
                }
                for _ in 0..iters {
                    f(t);
                }
            });
        }
    });
    let el = t0.lock().unwrap().unwrap().elapsed().as_nanos() as f64;
    el / (iters * threads) as f64
}

/// One thread's CPU ns per iteration of `f`, run in chunks of `chunk` iterations with `pause`
/// (untimed) after each: the C ABI table lets the log writer drain between chunks, so what is
/// timed is the caller's cost, not a wait for the writer.
fn run_chunked(iters: usize, chunk: usize, f: &impl Fn(usize), pause: &impl Fn()) -> f64 {
    let mut ns = 0;
    let mut done = 0;
    while done < iters {
        let n = chunk.min(iters - done);
        let c0 = thread_cpu_ns();
        for i in 0..n {
            f(done + i);
        }
        ns += thread_cpu_ns() - c0;
        done += n;
        pause();
    }
    ns as f64 / iters as f64
}

/// Median ns per iteration over RUNS runs.
fn measure(threads: usize, iters: usize, f: impl Fn(usize) + Sync) -> f64 {
    median((0..RUNS).map(|_| run_once(threads, iters, &f)).collect())
}

/// Medians of two measurements taken in alternation (both see the same machine load), and the
/// median of their per-run ratio a/b.
fn measure_pair(
    threads: usize,
    iters: usize,
    a: impl Fn(usize) + Sync,
    b: impl Fn(usize) + Sync,
) -> (f64, f64, f64) {
    let (mut va, mut vb, mut r) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let x = run_once(threads, iters, &a);
        let y = run_once(threads, iters, &b);
        va.push(x);
        vb.push(y);
        r.push(x / y);
    }
    (median(va), median(vb), median(r))
}

fn open_device(pool_on: bool) -> (Arc<Device>, Arc<Pool>, Vec<Arc<Context>>) {
    let r = umd::registry::resolved().expect("backend");
    let dev = Arc::new(Device::open(&r, 0).expect("device"));
    let pool = Pool::install(
        &dev,
        Config {
            enabled: pool_on,
            ..Config::default()
        },
    )
    .expect("pool");
    let ctxs = (0..4)
        .map(|_| Arc::new(Context::create(&dev, 1).expect("context")))
        .collect();
    (dev, pool, ctxs)
}

fn req(ctx: &Context, size: u64) -> Request {
    Request {
        size,
        align: 512,
        read_only: false,
        buffer_id: 1,
        ctx_id: ctx.id,
        acct: ctx.acct,
        tag: None,
        site: None,
    }
}

/// The log directory of one benchmark run (`UMD_LOG_DIR`), removed when the run ends.
struct RunLogs(std::path::PathBuf);

impl RunLogs {
    fn new() -> RunLogs {
        let d = std::env::temp_dir().join(format!("umd-pool-bench-{}", std::process::id()));
        std::env::set_var("UMD_LOG_DIR", &d);
        RunLogs(d)
    }
}

impl Drop for RunLogs {
    fn drop(&mut self) {
        let _ = umd::log::flush(std::time::Duration::from_secs(60), false);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn main() {
    if std::env::var_os("UMD_BACKEND").is_none() {
        std::env::set_var("UMD_BACKEND", "sim");
    }
    if std::env::var_os("UMD_SIM_MEM_MIB").is_none() {
        std::env::set_var("UMD_SIM_MEM_MIB", "2048");
    }
    // The C ABI table counts every log record: a full queue waits for room instead of dropping.
    if std::env::var_os("UMD_LOG_OVERFLOW").is_none() {
        std::env::set_var("UMD_LOG_OVERFLOW", "block");
        std::env::set_var("UMD_LOG_BLOCK_MS", "60000");
    }
    // The table writes ~20 million records (its rotated files are hundreds of MB): into a
    // directory of the run's own, removed at the end, not the user's log directory, where
    // `umd-smi` and `umd-log` would read them.
    let _logs = std::env::var_os("UMD_LOG_DIR").is_none().then(RunLogs::new);
    let (dev, pool, ctxs) = open_device(true);
    let (dev_off, pool_off, ctxs_off) = open_device(false);
    if std::env::var_os("POOL_BENCH_PAIRS").is_some() {
        // Only the alloc+free table (the QEMU guest runs this against aigpu.ko: its raw path is
        // the real create and close ioctls; the trace needs more device memory than it has).
        pairs(&dev, &pool, &ctxs, &dev_off, &pool_off, &ctxs_off);
        return;
    }
    if std::env::var_os("POOL_BENCH_TRACE").is_some() {
        trace_replay(&dev, &pool, &ctxs[0], &dev_off, &pool_off, &ctxs_off[0]);
        return;
    }
    if std::env::var_os("POOL_BENCH_PROFILE").is_some() {
        // Only the hit loops (alternating with malloc), for a profiler; POOL_BENCH_PROFILE=4:
        // with 4 threads.
        let threads = std::env::var("POOL_BENCH_PROFILE").map_or(1, |v| v.parse().unwrap_or(1));
        for (size, name) in SIZES {
            let reqs: Vec<Request> = ctxs.iter().map(|c| req(c, size)).collect();
            let iters =
                std::env::var("POOL_BENCH_ITERS").map_or(1_000_000, |v| v.parse().unwrap_or(1));
            let (hit, malloc, ratio) = measure_pair(
                threads,
                iters,
                |t| {
                    let g = pool.alloc(&dev, &reqs[t]).unwrap();
                    pool.free(&dev, black_box(&g), FreeNote::default());
                },
                |_| {
                    // SAFETY: plain malloc/free of the same pointer.
                    unsafe { libc::free(black_box(libc::malloc(size as usize))) }
                },
            );
            println!("hit {name}: {hit:.1} ns, malloc {malloc:.1} ns, {ratio:.2}x");
        }
        return;
    }
    let abi_only = std::env::var_os("POOL_BENCH_ABI").is_some();
    if !abi_only {
        pairs(&dev, &pool, &ctxs, &dev_off, &pool_off, &ctxs_off);
    }
    // The full C ABI path (one thread): handle table + pool + the INFO log records of every
    // alloc and free (run with UMD_LOG=warn to see the cost without them). Every record is to
    // reach the file: the queue blocks instead of dropping (UMD_LOG_OVERFLOW=block, set in
    // main), and the records written and dropped are counted below.
    println!(
        "\nC ABI path (UMD_LOG={}, UMD_LOG_OVERFLOW={}), one thread, ns per pair: thread CPU time in chunks of 1000 pairs with a log flush between chunks (untimed), median of {RUNS} runs, alternating with the pool hit; in brackets the wall time of 100000 pairs back to back (with INFO on: at the log writer's rate):",
        std::env::var("UMD_LOG").unwrap_or_else(|_| "default: INFO to the file sink".into()),
        std::env::var("UMD_LOG_OVERFLOW").unwrap_or_default(),
    );
    println!(
        "\n| size | C ABI umdMemAlloc+umdMemFree (hit) | Buffer::alloc + drop | its two INFO call sites | pool hit | C ABI / pool hit |"
    );
    println!("|---|---|---|---|---|---|");
    let mut cdev = 0u64;
    let mut cctx = 0u64;
    assert_eq!(
        umd::abi::device::umdDeviceOpen(0, &mut cdev),
        umd::error::umdResult::UMD_SUCCESS
    );
    assert_eq!(
        umd::abi::context::umdContextCreate(cdev, 1, &mut cctx),
        umd::error::umdResult::UMD_SUCCESS
    );
    let _ = umd::log::flush(std::time::Duration::from_secs(60), false);
    let log0 = umd::log::stats();
    for (size, name) in SIZES {
        let mut b: umdBuffer = 0;
        let _ = umdMemAlloc(cctx, size, 0, &mut b);
        let _ = umdMemFree(b);
        let r = req(&ctxs[0], size);
        let abi_pair = |_| {
            let mut b: umdBuffer = 0;
            let _ = umdMemAlloc(cctx, size, 0, &mut b);
            let _ = umdMemFree(black_box(b));
        };
        let hit_pair = |_| {
            let g = pool.alloc(&dev, &r).unwrap();
            pool.free(&dev, black_box(&g), FreeNote::default());
        };
        // 1000 pairs (2000 records) per chunk, then a flush: the lane holds a chunk, so the
        // caller never waits for the writer inside the timed part, and every record is written.
        let drain = || {
            let _ = umd::log::flush(std::time::Duration::from_secs(60), false);
        };
        let (mut va, mut vb, mut vr) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..RUNS {
            let x = run_chunked(100_000, 1000, &abi_pair, &drain);
            let y = run_chunked(100_000, 1000, &hit_pair, &drain);
            va.push(x);
            vb.push(y);
            vr.push(x / y);
        }
        let (abi, hit, ratio) = (median(va), median(vb), median(vr));
        // Back to back without pauses: with INFO on, the writer's rate is the bound (blocking
        // mode waits for room), so this is the pair's wall time at the writer's throughput.
        let abi_wall = median(
            (0..3)
                .map(|_| {
                    let t0 = Instant::now();
                    for i in 0..100_000 {
                        abi_pair(i);
                    }
                    t0.elapsed().as_nanos() as f64 / 100_000.0
                })
                .collect(),
        );
        // The Rust API (what the C ABI wraps): buffer id, time stamps, the pool, and the INFO
        // records of its alloc and free.
        let buf = median(
            (0..RUNS)
                .map(|_| {
                    run_chunked(
                        100_000,
                        1000,
                        &|_| drop(black_box(Buffer::alloc(&ctxs[0], size, 0).unwrap())),
                        &drain,
                    )
                })
                .collect(),
        );
        // The same two INFO call sites alone (the front end umd/src/memory/mod.rs uses,
        // docs/logging.md "Two front ends"): with INFO off (UMD_LOG=warn) this is the price of
        // the pairing records on the hit path.
        let info_pair = |i: usize| {
            let (id, va) = (black_box(i as u64), black_box(0x20_0000u64));
            let caller = black_box(0x40_1000u64);
            umd::record!(
                INFO,
                "alloc",
                ctx = 1u64,
                buffer = id,
                size,
                va,
                class = size,
                pool = "small",
                hit = true,
                tag = "",
                caller,
            );
            umd::record!(INFO, "free", ctx = 1u64, buffer = id, size, va, caller);
        };
        let info = median(
            (0..RUNS)
                .map(|_| run_chunked(100_000, 1000, &info_pair, &drain))
                .collect(),
        );
        println!(
            "| {name} | {abi:.1} [{abi_wall:.1}] | {buf:.1} | {info:.1} | {hit:.1} | {ratio:.1}x |"
        );
    }
    let _ = umd::log::flush(std::time::Duration::from_secs(60), false);
    let log1 = umd::log::stats();
    println!(
        "\nlog records in the C ABI table: {} written to the file, {} dropped (the two INFO records of every pair, when INFO is on)",
        log1.written_file - log0.written_file,
        log1.dropped - log0.dropped
    );
    let _ = umd::abi::context::umdContextDestroy(cctx);
    let _ = umd::abi::device::umdDeviceClose(cdev);

    if !abi_only {
        trace_replay(&dev, &pool, &ctxs[0], &dev_off, &pool_off, &ctxs_off[0]);
    }
}

/// The alloc+free pair table: pool hit, malloc, raw backend, uncached.
fn pairs(
    dev: &Device,
    pool: &Pool,
    ctxs: &[Arc<Context>],
    dev_off: &Device,
    pool_off: &Pool,
    ctxs_off: &[Arc<Context>],
) {
    println!(
        "memory pool benchmark: backend {} ({}), {} CPUs, median of {RUNS} runs, ns per alloc+free pair\n",
        dev.backend.kind(),
        dev.backend.location(),
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!("| size | threads | pool hit | malloc/free | raw create+close | uncached (UMD_POOL=off) | pool / malloc | raw / pool | uncached / pool |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for (size, name) in SIZES {
        for threads in [1usize, 4] {
            let reqs: Vec<Request> = ctxs.iter().map(|c| req(c, size)).collect();
            // Warm: one kernel object per thread's first block, then every pair is a hit.
            let warm: Vec<_> = reqs.iter().map(|r| pool.alloc(dev, r).unwrap()).collect();
            for g in warm {
                pool.free(dev, &g, FreeNote::default());
            }
            let before = pool.stats();
            let (hit, malloc, ratio) = measure_pair(
                threads,
                200_000,
                |t| {
                    let g = pool.alloc(dev, &reqs[t]).unwrap();
                    pool.free(dev, black_box(&g), FreeNote::default());
                },
                |_| {
                    // SAFETY: plain malloc/free of the same pointer.
                    unsafe {
                        let p = libc::malloc(size as usize);
                        libc::free(black_box(p));
                    }
                },
            );
            let after = pool.stats();
            assert_eq!(
                after.num_kernel_allocs, before.num_kernel_allocs,
                "hit path made kernel calls"
            );
            let raw_iters = if size >= 1 << 20 { 50 } else { 2_000 };
            let raw = measure(threads, raw_iters, |_| {
                let h = dev.backend.gem_create(size).unwrap();
                dev.backend.gem_close(black_box(h)).unwrap();
            });
            let reqs_off: Vec<Request> = ctxs_off.iter().map(|c| req(c, size)).collect();
            let off = measure(threads, raw_iters, |t| {
                let g = pool_off.alloc(dev_off, &reqs_off[t]).unwrap();
                pool_off.free(dev_off, black_box(&g), FreeNote::default());
            });
            println!(
                "| {name} | {threads} | {hit:.1} | {malloc:.1} | {raw:.0} | {off:.0} | {ratio:.2}x | {:.0}x | {:.0}x |",
                raw / hit,
                off / hit
            );
        }
    }
}

/// xorshift64*: a deterministic trace without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Log-uniform in [lo, hi].
    fn log_uniform(&mut self, lo: u64, hi: u64) -> u64 {
        let (a, b) = ((lo as f64).ln(), (hi as f64).ln());
        let u = (self.next() >> 11) as f64 / (1u64 << 53) as f64;
        (a + (b - a) * u).exp() as u64
    }
}

#[derive(Clone, Copy)]
enum Op {
    Alloc(usize, u64),
    Free(usize),
    /// End of a training step (timing boundary).
    Step,
}

/// A training-step-shaped trace: 24 long-lived weights (1-16 MiB); per step 400 activations
/// (512 B-2 MiB, a few 4-8 MiB) kept until backward, each with two short-lived temporaries,
/// then gradients per weight and an optimizer temporary.
fn trace(steps: usize) -> (Vec<Op>, usize) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut ops = Vec::new();
    let mut next = 0usize;
    let mut id = || {
        next += 1;
        next - 1
    };
    let weights: Vec<(usize, u64)> = (0..24)
        .map(|_| (id(), rng.log_uniform(1 << 20, 16 << 20)))
        .collect();
    for &(w, s) in &weights {
        ops.push(Op::Alloc(w, s));
    }
    for _ in 0..steps {
        let mut acts = Vec::new();
        for i in 0..400 {
            let s = if i % 50 == 7 {
                rng.log_uniform(4 << 20, 8 << 20)
            } else {
                rng.log_uniform(512, 2 << 20)
            };
            let a = id();
            ops.push(Op::Alloc(a, s));
            acts.push(a);
            for _ in 0..2 {
                let t = id();
                ops.push(Op::Alloc(t, rng.log_uniform(512, 256 << 10)));
                ops.push(Op::Free(t));
            }
        }
        let mut grads = Vec::new();
        for &(_, s) in &weights {
            let g = id();
            ops.push(Op::Alloc(g, s));
            grads.push(g);
        }
        for a in acts.into_iter().rev() {
            let t = id();
            ops.push(Op::Alloc(t, rng.log_uniform(512, 1 << 20)));
            ops.push(Op::Free(t));
            ops.push(Op::Free(a));
        }
        for (&g, &(_, s)) in grads.iter().zip(&weights) {
            let t = id();
            ops.push(Op::Alloc(t, s));
            ops.push(Op::Free(t));
            ops.push(Op::Free(g));
        }
        ops.push(Op::Step);
    }
    for &(w, _) in &weights {
        ops.push(Op::Free(w));
    }
    // Renumber buffers so that a freed one's number is reused: the replay's table of live
    // buffers stays small (the size of the live set, not of the whole trace).
    let (mut map, mut spare, mut slots) = (vec![0usize; next], Vec::new(), 0usize);
    for op in ops.iter_mut() {
        match op {
            Op::Alloc(i, _) => {
                map[*i] = spare.pop().unwrap_or_else(|| {
                    slots += 1;
                    slots - 1
                });
                *i = map[*i];
            }
            Op::Free(i) => {
                *i = map[*i];
                spare.push(*i);
            }
            Op::Step => {}
        }
    }
    (ops, slots)
}

/// Replays `ops`; returns the time of each step (ns), allocations, and kernel objects created
/// in the first step.
fn replay(dev: &Device, pool: &Pool, ctx: &Context, ops: &[Op], ids: usize) -> (Vec<f64>, u64) {
    pool.reset_peaks();
    let mut live: Vec<Option<Grant>> = vec![None; ids];
    let mut allocs = 0u64;
    let mut steps = Vec::new();
    let mut t = Instant::now();
    for op in ops {
        match *op {
            Op::Alloc(i, s) => {
                live[i] = Some(pool.alloc(dev, &req(ctx, s)).expect("trace alloc"));
                allocs += 1;
            }
            Op::Free(i) => {
                if let Some(g) = live[i].take() {
                    pool.free(dev, &g, FreeNote::default());
                }
            }
            Op::Step => {
                steps.push(t.elapsed().as_nanos() as f64);
                t = Instant::now();
            }
        }
    }
    (steps, allocs)
}

fn trace_replay(
    dev: &Device,
    pool: &Pool,
    ctx: &Context,
    dev_off: &Device,
    pool_off: &Pool,
    ctx_off: &Context,
) {
    let steps = 10;
    let (ops, ids) = trace(steps);
    // A throwaway pass first: the simulator's memory is faulted in by whoever touches it first,
    // which would otherwise be charged to the first configuration measured.
    let _ = replay(dev_off, pool_off, ctx_off, &ops, ids);
    pool.trim(dev, 0);
    let s0 = pool.stats();
    let (t_on, allocs) = replay(dev, pool, ctx, &ops, ids);
    let s1 = pool.stats();
    let o0 = pool_off.stats();
    let (t_off, _) = replay(dev_off, pool_off, ctx_off, &ops, ids);
    let o1 = pool_off.stats();
    let k_on = s1.num_kernel_allocs - s0.num_kernel_allocs;
    let k_off = o1.num_kernel_allocs - o0.num_kernel_allocs;
    let calls_on = s1.num_kernel_calls - s0.num_kernel_calls;
    let calls_off = o1.num_kernel_calls - o0.num_kernel_calls;
    println!("\ntraining-step trace: {steps} steps, {allocs} allocations ({} per step), sizes 512 B..16 MiB", allocs / steps as u64);
    println!("| | pool on | UMD_POOL=off | saved |");
    println!("|---|---|---|---|");
    println!(
        "| kernel objects created | {k_on} | {k_off} | {:.1}% |",
        100.0 * (1.0 - k_on as f64 / k_off.max(1) as f64)
    );
    println!(
        "| backend calls | {calls_on} | {calls_off} | {:.1}% |",
        100.0 * (1.0 - calls_on as f64 / calls_off.max(1) as f64)
    );
    // Steady state with the pool on: the later steps of this pass and of 9 more (a 10-step
    // median alone moves with the machine's load).
    let mut later = t_on[1..].to_vec();
    for _ in 0..9 {
        later.extend(replay(dev, pool, ctx, &ops, ids).0);
    }
    let first = (t_on[0], t_off[0]);
    let steady = (median(later), median(t_off[1..].to_vec()));
    println!(
        "| first step (cold) | {:.2} ms | {:.2} ms | {:.1}x |",
        first.0 / 1e6,
        first.1 / 1e6,
        first.1 / first.0
    );
    println!(
        "| later steps (median; pool on: of 99) | {:.2} ms | {:.2} ms | {:.1}x |",
        steady.0 / 1e6,
        steady.1 / 1e6,
        steady.1 / steady.0
    );
    let pa = s1.allocated_bytes.all().peak;
    let pr = s1.reserved_bytes.all().peak;
    println!(
        "| peak allocated | {:.1} MiB | {:.1} MiB | |",
        pa as f64 / 1048576.0,
        o1.allocated_bytes.all().peak as f64 / 1048576.0
    );
    println!(
        "| peak reserved | {:.1} MiB ({:.2}x allocated) | {:.1} MiB | |",
        pr as f64 / 1048576.0,
        pr as f64 / pa.max(1) as f64,
        o1.reserved_bytes.all().peak as f64 / 1048576.0
    );
    println!(
        "| peak requested | {:.1} MiB | | |",
        s1.requested_bytes.all().peak as f64 / 1048576.0
    );
}
