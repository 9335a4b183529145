//! Size classes: how a request is rounded before the pool looks for a block.
//!
//! | request | rounded to | pool | kernel object |
//! |---|---|---|---|
//! | 1 B ..= 4 KiB | a multiple of 512 B | small | shared 2 MiB slab |
//! | 4 KiB ..= 1 MiB | 4 classes per power of two (5, 6, 7, 8 KiB, 10, 12, 14, 16 KiB, ...) | small | shared 2 MiB slab |
//! | > 1 MiB | 8 steps per power of two, at most 2 MiB apart (waste <= 12.5 % and < 2 MiB) | large | its own (or a cached large block) |
//!
//! Every class is a multiple of [`MIN_BLOCK`]; large classes are multiples of [`LARGE_GRANULE`].
//! The free lists (bins) use the same geometry over arbitrary block sizes: 8 sub-bins per power
//! of two, so the first non-empty bin at or above a request's class is its best-fitting class
//! (two-level segregated fit, O(1) with two bitmaps).

/// Smallest block and small-pool granularity; also the default alignment of every buffer.
pub(crate) const MIN_BLOCK: u64 = 512;
/// Largest request served from the small pool.
pub(crate) const SMALL_MAX: u64 = 1 << 20;
/// Size of one small-pool slab (one kernel object shared by many small buffers).
pub(crate) const SLAB_SIZE: u64 = 2 << 20;
/// Granularity of large-pool blocks (and of their splits).
pub(crate) const LARGE_GRANULE: u64 = 64 << 10;
/// Largest alignment the small pool serves (larger alignments go to the large pool).
pub(crate) const SMALL_MAX_ALIGN: u64 = 64 << 10;
/// Largest large-class step: above 16 MiB a request is rounded to a multiple of this.
pub(crate) const LARGE_MAX_STEP: u64 = 2 << 20;

/// Which pool a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PoolKind {
    /// Requests up to [`SMALL_MAX`], sub-allocated from slabs.
    Small,
    /// Larger requests (or large alignments): own kernel objects.
    Large,
}

impl PoolKind {
    /// "small" / "large".
    pub fn name(self) -> &'static str {
        match self {
            PoolKind::Small => "small",
            PoolKind::Large => "large",
        }
    }
    /// Block granularity (split unit) of the pool.
    pub fn granule(self) -> u64 {
        match self {
            PoolKind::Small => MIN_BLOCK,
            PoolKind::Large => LARGE_GRANULE,
        }
    }
}

/// The pool a request of `size` bytes aligned to `align` goes to.
#[inline]
pub fn pool_for(size: u64, align: u64) -> PoolKind {
    if size <= SMALL_MAX && align <= SMALL_MAX_ALIGN {
        PoolKind::Small
    } else {
        PoolKind::Large
    }
}

#[inline]
fn log2_floor(v: u64) -> u32 {
    63 - v.leading_zeros()
}

/// `v` rounded up to a multiple of the power of two `p` (a mask, not a division: this runs on
/// every allocation). `None` on overflow.
#[inline]
pub fn align_up(v: u64, p: u64) -> Option<u64> {
    Some(v.checked_add(p - 1)? & !(p - 1))
}

/// The size class of a request: the block size the pool hands out for it. `None` when the
/// rounding overflows.
#[inline]
pub fn round(size: u64, kind: PoolKind) -> Option<u64> {
    let size = size.max(1);
    match kind {
        PoolKind::Small => {
            if size <= 4096 {
                return align_up(size, MIN_BLOCK);
            }
            // 4 steps per power of two.
            let p = log2_floor(size - 1); // 2^p < size <= 2^(p+1)
            let step = 1u64 << (p - 2);
            align_up(size, step)
        }
        PoolKind::Large => {
            let p = log2_floor(size.saturating_sub(1).max(1));
            let step = (1u64 << p.saturating_sub(3)).clamp(LARGE_GRANULE, LARGE_MAX_STEP);
            align_up(size, step)
        }
    }
}

/// The requests of pool `kind` that round to `class` are those in `(floor, class]`: `floor`,
/// or `None` when `class` is not a size class of `kind`.
pub fn class_floor(class: u64, kind: PoolKind) -> Option<u64> {
    let below = |n: u64| {
        class
            .checked_sub(n)
            .filter(|f| round(f + 1, kind) == Some(class))
    };
    let floor = match kind {
        PoolKind::Small if class > SMALL_MAX => return None,
        PoolKind::Small if class <= 4096 => below(MIN_BLOCK)?,
        PoolKind::Small => below(1 << (log2_floor(class - 1) - 2))?,
        PoolKind::Large => {
            let p = log2_floor(class.saturating_sub(1).max(1));
            below((1u64 << p.saturating_sub(3)).clamp(LARGE_GRANULE, LARGE_MAX_STEP))?
        }
    };
    (floor == 0 || round(floor, kind).is_some_and(|c| c < class)).then_some(floor)
}

/// Sub-bins per power of two.
pub(crate) const SUB_BITS: u32 = 3;
const SUBS: u32 = 1 << SUB_BITS;
/// Number of first-level bins (powers of two from MIN_BLOCK up to 2^63).
pub(crate) const FL_COUNT: usize = 64 - 9;

/// Bin of a free block of `size` bytes (size >= MIN_BLOCK): the largest bin whose lower bound
/// is <= size. `(first level, second level)`.
pub fn bin_floor(size: u64) -> (usize, usize) {
    let size = size.max(MIN_BLOCK);
    let p = log2_floor(size);
    let fl = (p - 9) as usize;
    let sl = if p >= SUB_BITS {
        ((size >> (p - SUB_BITS)) & (SUBS as u64 - 1)) as usize
    } else {
        0
    };
    (fl, sl)
}

/// First bin whose every block is >= `size`: where a search for `size` starts.
pub fn bin_ceil(size: u64) -> (usize, usize) {
    let size = size.max(MIN_BLOCK);
    let p = log2_floor(size);
    // Round size up to the next bin boundary, then take its floor bin.
    let step = if p >= SUB_BITS {
        1u64 << (p - SUB_BITS)
    } else {
        1
    };
    match align_up(size, step) {
        Some(up) => bin_floor(up),
        None => (FL_COUNT, 0),
    }
}

/// Lower bound (smallest block size) of bin `(fl, sl)`.
pub fn bin_lower(fl: usize, sl: usize) -> u64 {
    let p = fl as u32 + 9;
    (1u64 << p) + ((sl as u64) << (p - SUB_BITS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_classes() {
        let s = |n| round(n, PoolKind::Small).unwrap();
        let l = |n| round(n, PoolKind::Large).unwrap();
        assert_eq!(s(1), 512);
        assert_eq!(s(512), 512);
        assert_eq!(s(513), 1024);
        assert_eq!(s(4096), 4096);
        assert_eq!(s(4097), 5120);
        assert_eq!(s(6000), 6144);
        assert_eq!(s(64 << 10), 64 << 10);
        assert_eq!(s((64 << 10) + 1), 80 << 10);
        assert_eq!(s(1 << 20), 1 << 20);
        assert_eq!(l((1 << 20) + 1), (1 << 20) + (128 << 10));
        assert_eq!(l(4 << 20), 4 << 20);
        assert_eq!(l((4 << 20) + 1), (4 << 20) + (512 << 10));
        assert_eq!(l((32 << 20) + 4096), 34 << 20);
        assert_eq!(l(1 << 30), 1 << 30);
        assert_eq!(l((1 << 30) + 1), (1 << 30) + (2 << 20));
        assert_eq!(pool_for(1 << 20, 512), PoolKind::Small);
        assert_eq!(pool_for((1 << 20) + 1, 512), PoolKind::Large);
        assert_eq!(pool_for(512, 1 << 20), PoolKind::Large);
    }

    #[test]
    fn class_floors_bound_exactly_the_requests_of_a_class() {
        for (kind, max) in [(PoolKind::Small, SMALL_MAX), (PoolKind::Large, 64 << 20)] {
            let mut r = 1u64;
            while r <= max {
                let c = round(r, kind).unwrap();
                let f = class_floor(c, kind).unwrap_or_else(|| panic!("{kind:?} {r} -> {c}"));
                assert!(f < r && r <= c, "{kind:?} {r}: ({f}, {c}]");
                assert_eq!(round(f + 1, kind), Some(c));
                assert!(f == 0 || round(f, kind).unwrap() < c);
                r += 1 + r / 7;
            }
        }
        assert_eq!(class_floor(1000, PoolKind::Small), None);
        assert_eq!(class_floor(5 << 20, PoolKind::Small), None);
    }

    #[test]
    fn bins() {
        assert_eq!(bin_floor(512), (0, 0));
        assert_eq!(bin_floor(1023), (0, 7));
        assert_eq!(bin_floor(1024), (1, 0));
        assert_eq!(bin_ceil(512), (0, 0));
        assert_eq!(bin_ceil(513), (0, 1));
        assert_eq!(bin_ceil(1024), (1, 0));
        assert_eq!(bin_lower(1, 1), 1024 + 128);
        assert_eq!(bin_ceil(u64::MAX), (FL_COUNT, 0));
    }
}
