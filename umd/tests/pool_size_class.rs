//! Size classes and alignment: properties over random requests (proptest), and the addresses
//! real allocations get (aligned, inside the device's VA range, never overlapping a live one).

#[path = "pool_util.rs"]
mod util;

use proptest::prelude::*;
use umd::memory::pool::size_class::{bin_ceil, bin_floor, bin_lower, pool_for, round, PoolKind};
use umd::memory::{AllocRequest, Buffer};

proptest! {
    #[test]
    fn small_classes_cover_the_request_with_bounded_waste(size in 1u64..=(1 << 20)) {
        let c = round(size, PoolKind::Small).unwrap();
        prop_assert!(c >= size);
        prop_assert_eq!(c % 512, 0);
        if size <= 4096 {
            prop_assert!(c - size < 512);
        } else {
            prop_assert!((c - size) * 4 < size, "waste {} for {}", c - size, size);
        }
        // Classes are monotonic and idempotent.
        prop_assert_eq!(round(c, PoolKind::Small).unwrap(), c);
        prop_assert!(round(size + 1, PoolKind::Small).unwrap() >= c);
        prop_assert!(c <= 1 << 20);
    }

    #[test]
    fn large_classes_waste_at_most_an_eighth_and_under_2_mib(size in ((1u64 << 20) + 1)..(1u64 << 40)) {
        let c = round(size, PoolKind::Large).unwrap();
        prop_assert!(c >= size);
        prop_assert_eq!(c % (64 << 10), 0);
        prop_assert!((c - size) * 8 <= size);
        prop_assert!(c - size < 2 << 20);
        prop_assert_eq!(round(c, PoolKind::Large).unwrap(), c);
    }

    #[test]
    fn a_search_starts_in_a_bin_whose_blocks_all_fit(size in 512u64..(1u64 << 50)) {
        let (f, s) = bin_ceil(size);
        prop_assert!(bin_lower(f, s) >= size);
        let (f, s) = bin_floor(size);
        prop_assert!(bin_lower(f, s) <= size);
        // Every size class up to 16 MiB is a bin boundary: its bin holds only blocks that fit
        // it (above, classes are 2 MiB apart and bins wider; the search then also scans the
        // class's own bin).
        let kind = pool_for(size, 512);
        let c = round(size, kind).unwrap();
        if c <= 16 << 20 {
            let (f, s) = bin_floor(c);
            prop_assert_eq!(bin_lower(f, s), c);
        }
    }

    #[test]
    fn pool_choice(size in 1u64..(64u64 << 20), align_log in 9u32..24) {
        let align = 1u64 << align_log;
        let k = pool_for(size, align);
        prop_assert_eq!(k == PoolKind::Small, size <= 1 << 20 && align <= 64 << 10);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn allocations_are_aligned_and_never_overlap(
        reqs in proptest::collection::vec((1u64..(3u64 << 20), 9u32..22, any::<bool>()), 1..40)
    ) {
        let (dev, _pool, ctx) = util::setup(util::on());
        let mut live: Vec<Buffer> = Vec::new();
        for (i, (size, align_log, keep)) in reqs.into_iter().enumerate() {
            let align = 1u64 << align_log;
            let b = Buffer::alloc_ex(&ctx, &AllocRequest { size, align, ..Default::default() }).unwrap();
            prop_assert_eq!(b.va % align, 0, "request {} ({} bytes aligned {})", i, size, align);
            prop_assert!(b.va >= dev.info.va_start && b.va + b.alloc_size <= dev.info.va_end);
            prop_assert!(b.alloc_size >= size);
            for o in &live {
                prop_assert!(b.va + b.alloc_size <= o.va || o.va + o.alloc_size <= b.va,
                    "overlap: [{:#x}+{}) and [{:#x}+{})", b.va, b.alloc_size, o.va, o.alloc_size);
            }
            if keep { live.push(b); }
        }
    }
}
