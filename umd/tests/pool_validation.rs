//! Validation: use after free and out-of-bounds accesses rejected at submit with the command
//! buffer, packet offset, VA, buffer id and where/when it was freed; free by address (double,
//! foreign, never allocated, interior, wrong context); the leak report at context destroy.

#[path = "pool_util.rs"]
mod util;

use uapi::packet;
use umd::abi::context::{umdContextCreate, umdContextDestroy};
use umd::abi::device::{umdDeviceClose, umdDeviceOpen};
use umd::abi::memory::{umdMemAllocEx, umdMemAllocInfo, umdMemFreeAddress, umdMemGetAddress};
use umd::error::umdResult::*;
use umd::memory::pool::config::Config;
use umd::memory::Buffer;

#[test]
fn use_after_free_is_rejected_at_submit_with_the_whole_story() {
    let (_dev, pool, ctx) = util::setup(Config {
        history: 64,
        ..Config::default()
    });
    let keep = Buffer::alloc(&ctx, 4096, 0).unwrap();
    let x = Buffer::alloc(&ctx, 4096, 0).unwrap();
    let (xva, xid) = (x.va, x.id);
    let cb = util::cmdbuf(
        &ctx,
        &[
            &packet::encode_fill(keep.va, 64, 1),
            &packet::encode_copy(keep.va, xva + 128, 64),
        ],
    );
    drop(x);
    let before = pool.stats();
    let e = umd::submit::submit(&ctx, std::slice::from_ref(&cb), &[]).unwrap_err();
    assert_eq!(e.code, UMD_ERR_MEM_USE_AFTER_FREE, "{}", e.message);
    assert_eq!(e.fault_va, xva + 128);
    assert_eq!(e.ctx_id, ctx.id);
    for want in [
        "command buffer #0",
        "packet at byte offset 24 writes",
        &format!("[{:#x}, {:#x})", xva + 128, xva + 192),
        &format!(
            "buffer {xid} (4096 bytes at VA {xva:#x}, allocated on context {})",
            ctx.id
        ),
        "ms ago (pool event #",
        // Where it was freed (history on): a Rust caller gets the location libumd knows (a C
        // caller gets its return addresses: abi_test+0x2a3c).
        " at umd/src/memory/mod.rs:",
    ] {
        assert!(
            e.message.contains(want),
            "missing {want:?} in {}",
            e.message
        );
    }
    // Nothing was submitted and no block stays pinned: the freed block is reusable.
    assert_eq!(ctx.last_seqno.load(std::sync::atomic::Ordering::Acquire), 0);
    let y = Buffer::alloc(&ctx, 4096, 0).unwrap();
    assert_eq!(y.va, xva);
    let after = pool.stats();
    assert_eq!(after.num_deferred_frees, before.num_deferred_frees);
    // Now the VA is live again (y): the same command buffer is accepted.
    let s = umd::submit::submit(&ctx, &[cb], &[]).unwrap();
    umd::submit::wait(&ctx, s, 10_000_000_000).unwrap();
}

#[test]
fn use_after_free_of_memory_already_returned_to_the_kernel() {
    let (_dev, _pool, ctx) = util::setup(Config {
        enabled: false,
        ..Config::default()
    });
    let x = Buffer::alloc(&ctx, 4096, 0).unwrap();
    let xva = x.va;
    let cb = util::cmdbuf(&ctx, &[&packet::encode_fill(xva, 16, 1)]);
    drop(x);
    let e = umd::submit::submit(&ctx, &[cb], &[]).unwrap_err();
    assert_eq!(e.code, UMD_ERR_MEM_USE_AFTER_FREE);
    assert!(
        e.message.contains("returned it to the kernel"),
        "{}",
        e.message
    );
    assert!(e.message.contains("UMD_POOL_HISTORY"), "{}", e.message);
}

#[test]
fn out_of_bounds_accesses_are_rejected_and_unknown_vas_left_to_the_mmu() {
    let (_dev, _pool, ctx) = util::setup(util::on());
    let a = Buffer::alloc(&ctx, 1000, 0).unwrap();
    let _b = Buffer::alloc(&ctx, 1000, 0).unwrap();
    // 1000 bytes asked, 1024 reserved: byte 1000 is already out of bounds.
    let cb = util::cmdbuf(&ctx, &[&packet::encode_fill(a.va, 1004, 7)]);
    let e = umd::submit::submit(&ctx, &[cb], &[]).unwrap_err();
    assert_eq!(e.code, UMD_ERR_MEM_OUT_OF_BOUNDS);
    assert!(
        e.message.contains("runs 4 bytes past the end of buffer"),
        "{}",
        e.message
    );
    assert_eq!(e.fault_va, a.va + 1000);
    // Never-allocated slab memory.
    let cb = util::cmdbuf(&ctx, &[&packet::encode_fill(a.va + 64 * 1024, 4, 7)]);
    let e = umd::submit::submit(&ctx, &[cb], &[]).unwrap_err();
    assert_eq!(e.code, UMD_ERR_MEM_OUT_OF_BOUNDS);
    assert!(
        e.message.contains("not allocated to any live buffer"),
        "{}",
        e.message
    );
    // A VA outside every pool object goes to the GPU, whose MMU faults it (context lost).
    let cb = util::cmdbuf(&ctx, &[&packet::encode_fill(0x7f_0010_0000, 4, 7)]);
    let s = umd::submit::submit(&ctx, &[cb], &[]).unwrap();
    let e = umd::submit::wait(&ctx, s, 10_000_000_000).unwrap_err();
    assert_eq!(e.code, UMD_ERR_CTX_LOST);
}

#[test]
fn free_by_address_errors_and_leak_report() {
    util::env();
    let lines = util::Lines::default();
    let sub = util::Capture(lines.clone());
    tracing::subscriber::with_default(sub, || {
        let (mut dev, mut c1, mut c2) = (0, 0, 0);
        assert_eq!(umdDeviceOpen(0, &mut dev), UMD_SUCCESS);
        let d = umd::registry::DEVICES.get(dev).unwrap();
        umd::memory::pool::Pool::install(
            &d,
            Config {
                history: 16,
                ..Config::default()
            },
        )
        .unwrap();
        assert_eq!(umdContextCreate(dev, 1, &mut c1), UMD_SUCCESS);
        assert_eq!(umdContextCreate(dev, 1, &mut c2), UMD_SUCCESS);
        let mut info = umdMemAllocInfo {
            struct_size: std::mem::size_of::<umdMemAllocInfo>() as u32,
            flags: 0,
            size: 3000,
            alignment: 4096,
            tag: c"optimizer.m".as_ptr(),
        };
        let (mut b, mut va) = (0, 0);
        assert_eq!(umdMemAllocEx(c1, &info, &mut b), UMD_SUCCESS);
        assert_eq!(umdMemGetAddress(b, &mut va), UMD_SUCCESS);
        assert_eq!(va % 4096, 0);
        assert_eq!(umdMemFreeAddress(c2, va), UMD_ERR_MEM_WRONG_CONTEXT);
        assert_eq!(umdMemFreeAddress(c1, va + 8), UMD_ERR_MEM_INVALID_FREE);
        assert_eq!(
            umdMemFreeAddress(c1, 0x7f_0000_0000),
            UMD_ERR_MEM_INVALID_FREE
        );
        assert_eq!(umdMemFreeAddress(c1, va), UMD_SUCCESS);
        assert_eq!(umdMemFreeAddress(c1, va), UMD_ERR_MEM_DOUBLE_FREE);
        // Leak: allocated with a tag and left for umdContextDestroy.
        info.size = 5000;
        info.alignment = 0;
        info.tag = c"activations.layer3".as_ptr();
        let mut leak = 0;
        assert_eq!(umdMemAllocEx(c2, &info, &mut leak), UMD_SUCCESS);
        let before = umd::memory::pool::Pool::for_device(&d).unwrap().stats();
        assert_eq!(umdContextDestroy(c2), UMD_SUCCESS);
        let after = umd::memory::pool::Pool::for_device(&d).unwrap().stats();
        assert_eq!(
            before.allocation_count.all().current - after.allocation_count.all().current,
            1
        );
        assert_eq!(umdContextDestroy(c1), UMD_SUCCESS);
        assert_eq!(umdDeviceClose(dev), UMD_SUCCESS);
    });
    let leaks = lines.grep("leak: buffer still allocated at umdContextDestroy");
    assert_eq!(leaks.len(), 1, "{:?}", lines.0.lock().unwrap());
    let l = &leaks[0];
    for want in [
        "WARN",
        "size=5000",
        "class=5120",
        "tag=activations.layer3",
        "age_ms=",
        "site=umd/src/abi/memory.rs:",
    ] {
        assert!(l.contains(want), "missing {want:?} in {l}");
    }
    assert_eq!(lines.grep("leak summary: 1 buffers (5000 bytes)").len(), 1);
    // Every alloc pairs with a free in the INFO log, by buffer id.
    let allocs = lines.grep("INFO alloc");
    let frees = lines.grep("INFO free");
    assert_eq!(allocs.len(), 2);
    assert_eq!(frees.len(), 2);
    for a in &allocs {
        let id = a
            .split_whitespace()
            .find(|w| w.starts_with("buffer="))
            .unwrap();
        assert!(
            frees.iter().any(|f| f.split_whitespace().any(|w| w == id)),
            "{a}"
        );
    }
}
