//! Pool behaviour with exact statistics: coalescing and best fit, fragmentation, reuse gated on
//! the fence of the last job, trim and the release threshold, UMD_POOL=off, the history ring,
//! and many threads whose statistics add up.

#[path = "pool_util.rs"]
mod util;

use std::sync::Arc;
use uapi::packet;
use umd::memory::pool::config::Config;
use umd::memory::pool::history::EventKind;
use umd::memory::{AllocRequest, Buffer};

const K: u64 = 1024;
const M: u64 = 1024 * 1024;

#[test]
fn coalescing_best_fit_and_fragmentation_exactly() {
    let (dev, pool, ctx) = util::setup(util::on());
    let a = Buffer::alloc(&ctx, 256 * K, 0).unwrap();
    let b = Buffer::alloc(&ctx, 256 * K, 0).unwrap();
    let c = Buffer::alloc(&ctx, 256 * K, 0).unwrap();
    assert_eq!(
        (b.va - a.va, c.va - b.va),
        (256 * K, 256 * K),
        "carved in order"
    );
    let s = pool.stats();
    assert_eq!(s.reserved_bytes.all().current, 2 * M);
    assert_eq!(
        s.reserved_bytes
            .pool(umd::memory::pool::size_class::PoolKind::Small)
            .current,
        2 * M
    );
    assert_eq!(s.allocated_bytes.all().current, 768 * K);
    assert_eq!(s.requested_bytes.all().current, 768 * K);
    assert_eq!(s.cached_bytes.all().current, 2 * M - 768 * K);
    assert_eq!(s.allocation_count.all().current, 3);
    assert_eq!(s.cached_count.all().current, 1);
    assert_eq!(s.segment_count.all().current, 1);
    assert_eq!(
        (s.num_allocs, s.num_cache_misses, s.num_cache_hits),
        (3, 1, 2)
    );
    assert_eq!(s.num_kernel_allocs, 1);
    let a_va = a.va;
    drop(a);
    drop(b);
    let s = pool.stats();
    // A and B merged into one 512 KiB block; the tail is a second free block.
    assert_eq!(s.cached_count.all().current, 2);
    assert_eq!(s.cached_bytes.all().current, 512 * K + 1280 * K);
    assert_eq!(s.largest_free_block, 1280 * K);
    assert_eq!(s.largest_recent_request, 256 * K);
    assert_eq!(s.fragmentation_bytes, 0);
    assert_eq!(s.allocation_count.all().peak, 3);
    // Best fit: the merged 512 KiB hole, not the larger tail.
    let d = Buffer::alloc(&ctx, 512 * K, 0).unwrap();
    assert_eq!(d.va, a_va);
    let e = Buffer::alloc(&ctx, M, 0).unwrap();
    assert_eq!(e.va, c.va + 256 * K);
    let s = pool.stats();
    assert_eq!(s.largest_free_block, 256 * K);
    assert_eq!(s.largest_recent_request, M);
    assert_eq!(
        s.fragmentation_bytes,
        256 * K,
        "the 256 KiB tail cannot serve 1 MiB"
    );
    assert_eq!(s.num_kernel_allocs, 1, "everything came out of one slab");
    drop((c, d, e));
    let s = pool.stats();
    assert_eq!(s.cached_count.all().current, 1, "fully coalesced");
    assert_eq!(s.largest_free_block, 2 * M);
    assert_eq!(s.allocated_bytes.all().current, 0);
    assert_eq!(s.active_bytes.all().current, 0);
    assert_eq!(s.num_frees, 5);
    let released = pool.trim(&dev, 0);
    assert_eq!(released, 2 * M);
    let s = pool.stats();
    assert_eq!(s.reserved_bytes.all().current, 0);
    assert_eq!(s.segment_count.all().current, 0);
    assert_eq!(
        (s.num_kernel_frees, s.num_segments_released, s.num_trims),
        (1, 1, 1)
    );
    assert_eq!(s.reserved_bytes.all().peak, 2 * M);
}

#[test]
fn large_blocks_are_cached_split_and_released_by_the_threshold() {
    let (dev, pool, ctx) = util::setup(util::on());
    let big = Buffer::alloc(&ctx, 8 * M, 0).unwrap();
    let va = big.va;
    drop(big);
    // A smaller large request is carved out of the cached 8 MiB block: no kernel call.
    let x = Buffer::alloc(&ctx, 3 * M, 0).unwrap();
    assert_eq!(x.va, va);
    assert!(x.hit);
    let s = pool.stats();
    assert_eq!(s.num_kernel_allocs, 1);
    assert_eq!(s.allocated_bytes.all().current, 3 * M);
    assert_eq!(s.cached_bytes.all().current, 5 * M);
    drop(x);
    pool.set_release_threshold(&dev, 0);
    let s = pool.stats();
    assert_eq!(s.reserved_bytes.all().current, 0);
    assert_eq!(s.release_threshold, 0);
    // With threshold 0, a free returns its emptied kernel object at once.
    let y = Buffer::alloc(&ctx, 5 * M, 0).unwrap();
    drop(y);
    let s = pool.stats();
    assert_eq!(s.reserved_bytes.all().current, 0);
    assert_eq!((s.num_kernel_allocs, s.num_kernel_frees), (2, 2));
}

#[test]
fn reuse_waits_for_the_fence_of_the_last_job() {
    let (_dev, pool, ctx) = util::setup(util::on());
    let flag = Buffer::alloc(&ctx, 4096, 0).unwrap();
    let y = Buffer::alloc(&ctx, 8192, 0).unwrap();
    let y_va = y.va;
    // The job waits for the CPU to set the flag, then fills y.
    let cb = util::cmdbuf(
        &ctx,
        &[
            &packet::encode_wait_mem(flag.va, 1),
            &packet::encode_fill(y.va, 8192, 0x55),
        ],
    );
    let seqno = umd::submit::submit(&ctx, &[cb], &[]).unwrap();
    drop(y);
    let s = pool.stats();
    assert_eq!(s.num_deferred_frees, 1);
    assert_eq!(
        s.active_bytes.all().current - s.allocated_bytes.all().current,
        8192,
        "pending"
    );
    assert_eq!(
        s.active_count.all().current,
        3,
        "flag, y (pending), the command buffer"
    );
    let y2 = Buffer::alloc(&ctx, 8192, 0).unwrap();
    assert_ne!(
        y2.va, y_va,
        "reused while the job that uses it may still run"
    );
    flag.write(0, &1u64.to_le_bytes()).unwrap();
    umd::submit::wait(&ctx, seqno, 10_000_000_000).unwrap();
    let y3 = Buffer::alloc(&ctx, 8192, 0).unwrap();
    assert_eq!(y3.va, y_va, "reused once the fence signalled");
    let s = pool.stats();
    assert_eq!(
        s.active_bytes.all().current,
        s.allocated_bytes.all().current
    );
    let hist = pool.history_events();
    assert!(hist.is_empty(), "history is off by default");
}

#[test]
fn pool_off_makes_one_kernel_object_per_buffer_and_keeps_nothing() {
    let (_dev, pool, ctx) = util::setup(Config {
        enabled: false,
        ..Config::default()
    });
    let a = Buffer::alloc(&ctx, 100, 0).unwrap();
    let b = Buffer::alloc(&ctx, 100, 0).unwrap();
    assert!(b.va >= a.va + 8192, "own VA range with a guard page");
    let s = pool.stats();
    assert!(!s.pool_enabled);
    assert_eq!(s.num_kernel_allocs, 2);
    assert_eq!(s.reserved_bytes.all().current, 8192);
    assert_eq!(s.allocated_bytes.all().current, 8192);
    drop((a, b));
    let s = pool.stats();
    assert_eq!(s.reserved_bytes.all().current, 0);
    assert_eq!(s.num_kernel_frees, 2);
    assert_eq!(s.num_cache_hits, 0);
}

#[test]
fn history_records_alloc_reuse_free_with_sites_as_json_lines() {
    let (_dev, pool, ctx) = util::setup(Config {
        history: 8,
        ..Config::default()
    });
    let t = Buffer::alloc_ex(
        &ctx,
        &AllocRequest {
            size: 1000,
            tag: Some("act\"0"),
            ..Default::default()
        },
    )
    .unwrap();
    let va = t.va;
    drop(t);
    let u = Buffer::alloc(&ctx, 1000, 0).unwrap();
    assert_eq!(u.va, va);
    let ev = pool.history_events();
    let kinds: Vec<EventKind> = ev.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::SegmentAlloc,
            EventKind::Alloc,
            EventKind::Free,
            EventKind::Reuse
        ]
    );
    assert!(ev.windows(2).all(|w| w[1].seq == w[0].seq + 1));
    let alloc = &ev[1];
    assert_eq!(
        (alloc.ctx, alloc.va, alloc.size, alloc.requested),
        (ctx.id, va, 1024, 1000)
    );
    assert_eq!(alloc.tag.as_deref(), Some("act\"0"));
    let site = alloc.site.as_ref().expect("site recorded").describe();
    assert!(site.contains("pool_stats.rs"), "{site}");
    let json = pool.history_json();
    let lines: Vec<&str> = json.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[1].contains("\"event\":\"alloc\""), "{}", lines[1]);
    assert!(lines[1].contains(&format!("\"ctx\":{}", ctx.id)));
    assert!(lines[1].contains("\"tag\":\"act\\\"0\""), "{}", lines[1]);
    assert!(lines[3].contains("\"event\":\"reuse\""));
    // The ring keeps the last 8.
    for _ in 0..10 {
        drop(Buffer::alloc(&ctx, 1000, 0).unwrap());
    }
    let s = pool.stats();
    assert_eq!(s.history_capacity, 8);
    assert_eq!(s.history_events, 24);
    assert_eq!(pool.history_events().len(), 8);
    drop(u);
}

#[test]
fn threads_allocating_and_freeing_concurrently_add_up() {
    let (dev, pool, ctx0) = util::setup(util::on());
    let ctxs: Vec<_> = (0..4)
        .map(|i| {
            if i == 0 {
                ctx0.clone()
            } else {
                Arc::new(umd::context::Context::create(&dev, 1).unwrap())
            }
        })
        .collect();
    let per_thread: Vec<(u64, u64)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|t| {
                // Two threads per context: contexts are shared too.
                let ctx = ctxs[t % 4].clone();
                s.spawn(move || {
                    let mut rng = 0x1234_5678_9abc_def0u64 ^ (t as u64 * 0x9E37_79B9);
                    let mut live: Vec<Buffer> = Vec::new();
                    let (mut allocs, mut bytes) = (0u64, 0u64);
                    for _ in 0..1500 {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        if live.len() < 24 && (!rng.is_multiple_of(3) || live.is_empty()) {
                            let size = if rng.is_multiple_of(17) {
                                1 + rng % (3 * M)
                            } else {
                                1 + rng % (64 * K)
                            };
                            live.push(Buffer::alloc(&ctx, size, 0).unwrap());
                            allocs += 1;
                            bytes += size;
                        } else {
                            let i = (rng >> 8) as usize % live.len();
                            live.swap_remove(i);
                        }
                    }
                    (allocs, bytes)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: u64 = per_thread.iter().map(|p| p.0).sum();
    let s = pool.stats();
    assert_eq!(s.num_allocs, total);
    assert_eq!(s.num_frees, total);
    assert_eq!(s.num_cache_hits + s.num_cache_misses, total);
    assert_eq!(
        s.requested_bytes.all().allocated,
        per_thread.iter().map(|p| p.1).sum::<u64>()
    );
    assert_eq!(
        s.requested_bytes.all().freed,
        s.requested_bytes.all().allocated
    );
    for g in [
        &s.allocated_bytes,
        &s.requested_bytes,
        &s.active_bytes,
        &s.allocation_count,
        &s.active_count,
    ] {
        assert_eq!(g.all().current, 0);
        assert_eq!(g.all().current, g.0[1].current + g.0[2].current);
    }
    assert_eq!(s.cached_bytes.all().current, s.reserved_bytes.all().current);
    assert_eq!(
        s.reserved_bytes.all().allocated - s.reserved_bytes.all().freed,
        s.reserved_bytes.all().current
    );
    assert_eq!(
        s.allocated_bytes.all().allocated,
        s.allocated_bytes.all().freed
    );
    assert!(s.allocated_bytes.all().peak <= s.reserved_bytes.all().peak);
    let per_ctx: u64 = ctxs.iter().map(|c| pool.ctx_stats(c.acct).num_allocs).sum();
    assert_eq!(per_ctx, total);
    for (i, c) in ctxs.iter().enumerate() {
        let cs = pool.ctx_stats(c.acct);
        assert_eq!(
            cs.num_allocs,
            per_thread[i].0 + per_thread[i + 4].0,
            "context {i}"
        );
        assert_eq!(cs.allocated_bytes.current, 0);
        assert_eq!(cs.num_frees, cs.num_allocs);
    }
    assert_eq!(pool.trim(&dev, 0), s.reserved_bytes.all().current);
}
