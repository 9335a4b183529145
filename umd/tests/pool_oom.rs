//! Out of memory (its own process: it fills the device): the pool releases its cache and
//! retries once; when that is not enough the detail names every number; a request larger than
//! the device is a different code. Sizes follow the device's memory, so the same test runs on
//! the kernel module.

#[path = "pool_util.rs"]
mod util;

use umd::error::umdResult::*;
use umd::memory::Buffer;

const M: u64 = 1 << 20;

#[test]
fn oom_releases_the_cache_retries_once_then_explains() {
    if std::env::var_os("UMD_SIM_MEM_MIB").is_none() {
        std::env::set_var("UMD_SIM_MEM_MIB", "64");
    }
    let (dev, pool, ctx) = util::setup(util::on());
    let total = dev.info.mem_total;
    let big1 = (total / 2 + total / 8) / (2 * M) * (2 * M); // 40 MiB of 64
    let big2 = (total * 3 / 4) / (2 * M) * (2 * M); // 48 MiB of 64
    drop(Buffer::alloc(&ctx, big1, 0).unwrap());
    let s = pool.stats();
    assert_eq!(s.cached_bytes.all().current, big1, "kept for reuse");
    // big2 does not fit next to the cached big1: the pool must give big1 back and retry.
    let b2 = Buffer::alloc(&ctx, big2, 0).expect("retry after releasing the cache succeeds");
    let s = pool.stats();
    assert_eq!(s.num_alloc_retries, 1);
    assert_eq!(s.num_ooms, 0);
    assert_eq!(s.num_segments_released, 1);
    assert_eq!(s.reserved_bytes.all().current, big2);
    assert_eq!(s.reserved_bytes.all().peak, big2);
    // Now genuinely out of memory: nothing cached to give back.
    let small = Buffer::alloc(&ctx, 100, 0).unwrap();
    let e = Buffer::alloc(&ctx, big2, 0).err().expect("out of memory");
    assert_eq!(e.code, UMD_ERR_MEM_OUT_OF_MEMORY);
    assert_eq!(e.ctx_id, ctx.id);
    assert_eq!(e.os_errno, libc::ENOMEM);
    let m = &e.message;
    for want in [
        format!("tried to allocate {}.00 MiB", big2 / M),
        format!("requested {big2} bytes; large class {big2}"),
        format!("device total {}.00 MiB", total / M),
        ", free ".into(),
        format!("This process: {}.00 MiB allocated (2 buffers)", big2 / M),
        "reserved but unallocated".into(),
        "awaiting GPU fences".into(),
        "largest free block 2.00 MiB".into(),
        "fragmentation 2.00 MiB".into(),
        "Released 0 B of cache and retried once".into(),
        "errno ENOMEM".into(),
        "umdMemTrim".into(),
        "smaller batch".into(),
        "UMD_POOL_RELEASE_THRESHOLD".into(),
    ] {
        assert!(m.contains(&want), "missing {want:?} in {m}");
    }
    assert!(
        m.len() < 700,
        "detail must fit umdErrorDetail.message: {} chars",
        m.len()
    );
    let s = pool.stats();
    assert_eq!((s.num_ooms, s.num_alloc_retries), (1, 2));
    // Never possible: a different code.
    let e = Buffer::alloc(&ctx, total + 1, 0).err().expect("too large");
    assert_eq!(e.code, UMD_ERR_MEM_TOO_LARGE);
    assert!(e.message.contains("can never succeed"));
    drop((b2, small));
}
