//! The context caches in front of the pool (`umd/src/memory/pool/cache.rs`): blocks freed on one
//! thread and reallocated on another, statistics that stay exact (peaks included) with many
//! threads and a concurrent reader, trim and context destroy taking cached blocks back, reuse
//! still gated on fences, and the validation codes for blocks freed into a cache (the history is
//! off here, so the caches are on).

#[path = "pool_util.rs"]
mod util;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use uapi::packet;
use umd::abi::context::{umdContextCreate, umdContextDestroy};
use umd::abi::device::{umdDeviceClose, umdDeviceOpen};
use umd::abi::memory::{umdMemAlloc, umdMemFreeAddress, umdMemGetAddress};
use umd::context::Context;
use umd::error::umdResult::*;
use umd::memory::pool::stats::Stats;
use umd::memory::Buffer;

const K: u64 = 1024;
const M: u64 = 1024 * 1024;

/// Every identity a snapshot must satisfy, whatever ran concurrently.
fn consistent(s: &Stats) {
    for g in [
        &s.allocated_bytes,
        &s.requested_bytes,
        &s.reserved_bytes,
        &s.active_bytes,
        &s.cached_bytes,
        &s.allocation_count,
        &s.segment_count,
        &s.active_count,
        &s.cached_count,
    ] {
        for c in &g.0 {
            assert!(c.current <= c.peak, "{c:?}");
            assert_eq!(c.allocated - c.freed, c.current, "{c:?}");
        }
        assert_eq!(g.all().current, g.0[1].current + g.0[2].current);
    }
    assert_eq!(
        s.cached_bytes.all().current,
        s.reserved_bytes.all().current - s.allocated_bytes.all().current
    );
    assert!(s.allocated_bytes.all().current <= s.active_bytes.all().current);
    assert_eq!(s.num_cache_hits + s.num_cache_misses, s.num_allocs);
}

#[test]
fn a_block_freed_on_one_thread_is_reallocated_on_another() {
    let (_dev, pool, ctx) = util::setup(util::on());
    // Thread A allocates and frees: the block stays in the context's cache.
    let va = {
        let ctx = ctx.clone();
        std::thread::spawn(move || {
            let b = Buffer::alloc(&ctx, 3000, 0).unwrap();
            b.va
        })
        .join()
        .unwrap()
    };
    let before = pool.ctx_stats(ctx.acct);
    // Thread B reallocates it from the cache, many times over, each time handing the buffer to
    // thread C, which frees it: the block goes around the two threads (and the cache's lock
    // with it), always the same one.
    let (tx, rx) = std::sync::mpsc::sync_channel::<Buffer>(0);
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<()>(0);
    let c = std::thread::spawn(move || {
        for b in rx {
            drop(b);
            done_tx.send(()).unwrap();
        }
    });
    let ctx_b = ctx.clone();
    let vas: Vec<u64> = std::thread::spawn(move || {
        (0..200)
            .map(|_| {
                let b = Buffer::alloc(&ctx_b, 3000, 0).unwrap();
                assert!(b.hit);
                let va = b.va;
                tx.send(b).unwrap();
                done_rx.recv().unwrap();
                va
            })
            .collect()
    })
    .join()
    .unwrap();
    c.join().unwrap();
    assert!(vas.iter().all(|v| *v == va), "the block thread A freed");
    let after = pool.ctx_stats(ctx.acct);
    assert_eq!(after.num_allocs - before.num_allocs, 200);
    assert_eq!(after.num_cache_hits - before.num_cache_hits, 200);
    assert_eq!(after.num_frees - before.num_frees, 200);
    assert_eq!(after.allocated_bytes.current, 0);
    assert_eq!(after.requested_bytes.allocated, 201 * 3000);
    assert_eq!(after.allocation_count.peak, 1);
    let s = pool.stats();
    consistent(&s);
    assert_eq!(s.num_kernel_allocs, 1, "one slab for everything");
    assert_eq!(s.allocation_count.all().current, 0);
}

#[test]
fn peaks_stay_exact_when_contexts_alternate() {
    let (dev, pool, a) = util::setup(util::on());
    let b = Arc::new(Context::create(&dev, 1).unwrap());
    let peak = |s: &Stats| {
        (
            s.allocated_bytes.all().peak,
            s.requested_bytes.all().peak,
            s.allocation_count.all().peak,
        )
    };
    // A holds two blocks, frees them into its cache, B takes two of its own: the device never
    // held more than two at a time.
    let x: Vec<Buffer> = (0..2)
        .map(|_| Buffer::alloc(&a, 64 * K, 0).unwrap())
        .collect();
    drop(x);
    let y: Vec<Buffer> = (0..2)
        .map(|_| Buffer::alloc(&b, 64 * K - 1, 0).unwrap())
        .collect();
    let s = pool.stats();
    consistent(&s);
    assert_eq!(peak(&s), (128 * K, 128 * K, 2));
    // A takes two again while B holds its two: now four.
    let x: Vec<Buffer> = (0..2)
        .map(|_| Buffer::alloc(&a, 64 * K, 0).unwrap())
        .collect();
    let s = pool.stats();
    consistent(&s);
    assert_eq!(peak(&s), (256 * K, 256 * K - 2, 4));
    drop((x, y));
    // Hits alone never raise a peak; the per-context peaks are the contexts' own.
    for _ in 0..100 {
        drop(Buffer::alloc(&a, 64 * K, 0).unwrap());
    }
    let s = pool.stats();
    consistent(&s);
    assert_eq!(peak(&s), (256 * K, 256 * K - 2, 4));
    assert_eq!(s.allocated_bytes.all().current, 0);
    let ca = pool.ctx_stats(a.acct);
    assert_eq!(
        (ca.allocation_count.peak, ca.allocated_bytes.peak),
        (2, 128 * K)
    );
    assert_eq!(ca.num_allocs, 104);
    pool.reset_peaks();
    let s = pool.stats();
    assert_eq!(peak(&s), (0, 0, 0));
    assert_eq!(pool.ctx_stats(a.acct).allocation_count.peak, 0);
}

#[test]
fn many_threads_with_caches_and_a_concurrent_reader_add_up() {
    let (dev, pool, ctx0) = util::setup(util::on());
    let ctxs: Vec<Arc<Context>> = std::iter::once(ctx0)
        .chain((0..3).map(|_| Arc::new(Context::create(&dev, 1).unwrap())))
        .collect();
    let stop = AtomicBool::new(false);
    let (per_thread, snapshots) = std::thread::scope(|s| {
        // A reader taking snapshots while the caches serve: each one must add up.
        let reader = s.spawn(|| {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                consistent(&pool.stats());
                n += 1;
            }
            n
        });
        let workers: Vec<_> = (0..8)
            .map(|t| {
                let ctx = ctxs[t % 4].clone(); // two threads per context
                s.spawn(move || {
                    let sizes = [512, 3000, 64 * K, 200 * K, 3 * M];
                    let mut rng = 0x9E37_79B9_7F4A_7C15u64 ^ t as u64;
                    let mut live: Vec<Buffer> = Vec::new();
                    let (mut allocs, mut bytes) = (0u64, 0u64);
                    for _ in 0..4000 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if live.len() < 6 && (!rng.is_multiple_of(3) || live.is_empty()) {
                            let size = sizes[(rng >> 20) as usize % sizes.len()] - (rng >> 40) % 8;
                            live.push(Buffer::alloc(&ctx, size, 0).unwrap());
                            allocs += 1;
                            bytes += size;
                        } else {
                            live.swap_remove((rng >> 8) as usize % live.len());
                        }
                    }
                    (allocs, bytes)
                })
            })
            .collect();
        let per_thread: Vec<(u64, u64)> = workers.into_iter().map(|h| h.join().unwrap()).collect();
        stop.store(true, Ordering::Relaxed);
        (per_thread, reader.join().unwrap())
    });
    assert!(snapshots > 0);
    let total: u64 = per_thread.iter().map(|p| p.0).sum();
    let s = pool.stats();
    consistent(&s);
    assert_eq!((s.num_allocs, s.num_frees), (total, total));
    assert!(s.num_cache_hits > total / 2, "the caches served: {s:?}");
    assert_eq!(
        s.requested_bytes.all().allocated,
        per_thread.iter().map(|p| p.1).sum::<u64>()
    );
    for g in [&s.allocated_bytes, &s.requested_bytes, &s.allocation_count] {
        assert_eq!(g.all().current, 0);
    }
    assert!(
        s.allocation_count.all().peak <= 48,
        "at most 6 live per thread"
    );
    assert!(s.allocated_bytes.all().peak <= s.reserved_bytes.all().peak);
    for (i, c) in ctxs.iter().enumerate() {
        let cs = pool.ctx_stats(c.acct);
        assert_eq!(
            cs.num_allocs,
            per_thread[i].0 + per_thread[i + 4].0,
            "context {i}"
        );
        assert_eq!(
            (cs.num_frees, cs.allocated_bytes.current),
            (cs.num_allocs, 0)
        );
        assert!(cs.allocation_count.peak <= 12);
    }
    assert_eq!(pool.trim(&dev, 0), s.reserved_bytes.all().current);
}

#[test]
fn trim_and_context_destroy_take_cached_blocks_back() {
    let (dev, pool, ctx) = util::setup(util::on());
    // Freed into the cache, not coalesced: only a trim that takes it back can release the slab.
    drop(Buffer::alloc(&ctx, M, 0).unwrap());
    assert_eq!(pool.trim(&dev, 0), 2 * M);
    // A destroyed context's cache comes back too (its account slot is no longer visited).
    let other = Arc::new(Context::create(&dev, 1).unwrap());
    drop(Buffer::alloc(&other, M, 0).unwrap());
    drop(Buffer::alloc(&other, M, 0).unwrap()); // a size asked for again: it stays cached
                                                // A buffer served by the cache (its block is the cache's) that outlives its context.
    for _ in 0..2 {
        drop(Buffer::alloc(&other, 100 * K, 0).unwrap());
    }
    let outlives = Buffer::alloc(&other, 100 * K, 0).unwrap();
    assert!(outlives.hit);
    let ctx_acct = other.acct;
    drop(other);
    let s = pool.stats();
    assert_eq!(s.allocation_count.all().current, 1);
    assert_eq!(pool.ctx_stats(ctx_acct).allocation_count.current, 1);
    drop(outlives); // freed after its context: back to the pool, not to a cache
    assert_eq!(pool.trim(&dev, 0), 2 * M);
    let s = pool.stats();
    consistent(&s);
    assert_eq!(
        (s.reserved_bytes.all().current, s.num_segments_released),
        (0, 2)
    );
    assert_eq!(s.num_frees, s.num_allocs);
}

#[test]
fn reuse_from_a_cache_still_waits_for_fences() {
    let (_dev, pool, ctx) = util::setup(util::on());
    let flag = Buffer::alloc(&ctx, 4096, 0).unwrap();
    // Warm the cache with the size, then use a block of it in a job that waits for the CPU.
    drop(Buffer::alloc(&ctx, 8192, 0).unwrap());
    let y = Buffer::alloc(&ctx, 8192, 0).unwrap();
    assert!(y.hit);
    let y_va = y.va;
    let cb = util::cmdbuf(
        &ctx,
        &[
            &packet::encode_wait_mem(flag.va, 1),
            &packet::encode_fill(y.va, 8192, 0x55),
        ],
    );
    let seqno = umd::submit::submit(&ctx, &[cb], &[]).unwrap();
    let deferred = pool.stats().num_deferred_frees;
    drop(y);
    assert_eq!(pool.stats().num_deferred_frees, deferred + 1);
    for _ in 0..3 {
        let z = Buffer::alloc(&ctx, 8192, 0).unwrap();
        assert_ne!(
            z.va, y_va,
            "reused while the job that uses it may still run"
        );
    }
    flag.write(0, &1u64.to_le_bytes()).unwrap();
    umd::submit::wait(&ctx, seqno, 10_000_000_000).unwrap();
    let z = Buffer::alloc(&ctx, 8192, 0).unwrap();
    assert_eq!(z.va, y_va, "reused once the fence signalled");
    // A block whose job already completed goes back into the cache at once.
    let cb = util::cmdbuf(&ctx, &[&packet::encode_fill(z.va, 64, 1)]);
    let seqno = umd::submit::submit(&ctx, &[cb], &[]).unwrap();
    umd::submit::wait(&ctx, seqno, 10_000_000_000).unwrap();
    let deferred = pool.stats().num_deferred_frees;
    drop(z);
    let again = Buffer::alloc(&ctx, 8192, 0).unwrap();
    assert_eq!((again.va, again.hit), (y_va, true));
    assert_eq!(pool.stats().num_deferred_frees, deferred);
    consistent(&pool.stats());
}

#[test]
fn blocks_freed_into_a_cache_keep_their_validation_codes() {
    util::env();
    let (mut dev, mut c1, mut c2) = (0, 0, 0);
    assert_eq!(umdDeviceOpen(0, &mut dev), UMD_SUCCESS);
    assert_eq!(umdContextCreate(dev, 1, &mut c1), UMD_SUCCESS);
    assert_eq!(umdContextCreate(dev, 1, &mut c2), UMD_SUCCESS);
    let (mut b, mut va) = (0, 0);
    assert_eq!(umdMemAlloc(c1, 3000, 0, &mut b), UMD_SUCCESS);
    assert_eq!(umdMemGetAddress(b, &mut va), UMD_SUCCESS);
    assert_eq!(umdMemFreeAddress(c2, va), UMD_ERR_MEM_WRONG_CONTEXT);
    assert_eq!(umdMemFreeAddress(c1, va + 8), UMD_ERR_MEM_INVALID_FREE);
    assert_eq!(umdMemFreeAddress(c1, va), UMD_SUCCESS);
    // Now a free block in c1's cache: a double free, reported with the buffer's story.
    assert_eq!(umdMemFreeAddress(c1, va), UMD_ERR_MEM_DOUBLE_FREE);
    let msg = umd::error::detail::last().message_str();
    assert!(
        msg.contains("double free") && msg.contains("3000 bytes"),
        "{msg}"
    );
    assert!(msg.contains("ms ago"), "{msg}");
    // Submitting a command buffer that touches it: use after free, and the block is not reused
    // by the failed submit.
    let ctx = umd::registry::CONTEXTS.get(c1).unwrap();
    let cb = util::cmdbuf(&ctx, &[&packet::encode_fill(va + 64, 16, 1)]);
    let e = umd::submit::submit(&ctx, &[cb], &[]).unwrap_err();
    assert_eq!(e.code, UMD_ERR_MEM_USE_AFTER_FREE, "{}", e.message);
    assert!(e.message.contains("3000 bytes"), "{}", e.message);
    // Reallocated (from the cache): live again, the same address.
    assert_eq!(umdMemAlloc(c1, 3000, 0, &mut b), UMD_SUCCESS);
    let mut va2 = 0;
    assert_eq!(umdMemGetAddress(b, &mut va2), UMD_SUCCESS);
    assert_eq!(va2, va);
    assert_eq!(umdMemFreeAddress(c1, va2), UMD_SUCCESS);
    drop(ctx);
    assert_eq!(umdContextDestroy(c2), UMD_SUCCESS);
    assert_eq!(umdContextDestroy(c1), UMD_SUCCESS);
    assert_eq!(umdDeviceClose(dev), UMD_SUCCESS);
}
