//! The argument rules of VM_BIND and VM_UNBIND, in the order docs/uapi.md lists them. Whether a
//! range overlaps an existing mapping (bind) or is exactly one (unbind) is each driver's lookup
//! in its own mapping tree, checked after these.

use super::Refusal;
use crate::uapi::ioctl::{VM_ACCESS_READ, VM_ACCESS_WRITE};
use crate::uapi::{pte, reason as r, version};

/// Most page-table pages (4 KiB each, the top-level table included) one address space (one DRM
/// file) may hold: 2048, 8 MiB of tables. Page tables are kernel memory that no GEM budget sees:
/// without a bound, one unprivileged file binding a 4 KiB object at a 1 GiB stride costs two
/// tables (plus bookkeeping) per mapping and can run the machine out of memory long before its
/// mapping limit. 2048 tables map 4 GiB densely (64 times a 64 MiB device) and still allow a
/// thousand mappings each in its own 1 GiB region, so no real workload meets the limit
/// (docs/kmd.md, "Page-table budget").
pub const MAX_PT_TABLES: usize = 2048;

/// Most mappings one address space may hold: 65536. Each costs the driver a tree node and a bus
/// registry entry per page (kernel memory no GEM budget sees either); the bound is far beyond
/// what the buffer pool's segments need (docs/libumd.md) and keeps one file's bookkeeping a few
/// MiB.
pub const MAX_MAPPINGS: usize = 1 << 16;

/// The mapping limit: an address space holding `held` mappings may add one, or the bind is
/// refused with `ENOSPC` + `OBJECT_LIMIT` (checked after the overlap test, before the page-table
/// budget and before anything is pinned or allocated).
pub const fn mapping_limit(held: usize) -> Result<(), Refusal> {
    if held >= MAX_MAPPINGS {
        return Err(Refusal::new(r::OBJECT_LIMIT));
    }
    Ok(())
}

/// Bytes of VA one table of `level` (0 = leaf table) covers.
const fn table_span(level: usize) -> u64 {
    version::PAGE_SIZE << (9 * (level as u64 + 1))
}

/// How many page-table pages a bind of `[va, end)` must allocate: the top-level table if the
/// address space has none yet (`has_top`), then for each lower level (L2, L1, L0 tables), every
/// table covering part of the range that does not exist yet (`exists(level, first_va)`, with
/// `level` 0 for a leaf table and `first_va` the lowest VA it covers). Counting stops once it
/// passes `cap` (the caller refuses anything above its remaining budget), so the walk is bounded
/// by the budget, not the range. The count is exact: a bind that is not refused allocates
/// exactly these tables.
pub fn tables_needed(
    va: u64,
    end: u64,
    has_top: bool,
    cap: usize,
    mut exists: impl FnMut(usize, u64) -> bool,
) -> usize {
    let mut needed = usize::from(!has_top);
    if va >= end {
        return needed;
    }
    let mut level = pte::LEVELS - 1;
    while level > 0 {
        level -= 1;
        let span = table_span(level);
        let mut base = va & !(span - 1);
        while base < end {
            if !has_top || !exists(level, base) {
                needed += 1;
                if needed > cap {
                    return needed;
                }
            }
            base = match base.checked_add(span) {
                Some(b) => b,
                None => break,
            };
        }
    }
    needed
}

/// The page-table budget of one address space: an address space holding `held` tables may
/// allocate `needed` more, or the bind is refused with `ENOSPC` + `PT_LIMIT` (before anything
/// is allocated or mapped).
pub const fn pt_budget(held: usize, needed: usize) -> Result<(), Refusal> {
    match held.checked_add(needed) {
        Some(total) if total <= MAX_PT_TABLES => Ok(()),
        _ => Err(Refusal::new(r::PT_LIMIT)),
    }
}

/// The page-table part of a bind of `[va, end)` into an address space holding `held` tables:
/// [`tables_needed`] within what is left of the budget, then [`pt_budget`]. Returns the number
/// of tables the bind will allocate.
pub fn pt_check(
    va: u64,
    end: u64,
    held: usize,
    has_top: bool,
    exists: impl FnMut(usize, u64) -> bool,
) -> Result<usize, Refusal> {
    let cap = MAX_PT_TABLES.saturating_sub(held);
    let needed = tables_needed(va, end, has_top, cap, exists);
    match pt_budget(held, needed) {
        Ok(()) => Ok(needed),
        Err(e) => Err(e),
    }
}

const fn page_aligned(v: u64) -> bool {
    v.is_multiple_of(version::PAGE_SIZE)
}

/// A GPU VA range: page aligned, not overflowing, inside `[VA_START, VA_END)`. Returns its end.
pub const fn va_range(va: u64, size: u64) -> Result<u64, Refusal> {
    if !page_aligned(va) || !page_aligned(size) {
        return Err(Refusal::new(r::UNALIGNED));
    }
    let Some(end) = va.checked_add(size) else {
        return Err(Refusal::new(r::VA_OUT_OF_RANGE));
    };
    if va < version::VA_START || end > version::VA_END {
        return Err(Refusal::new(r::VA_OUT_OF_RANGE));
    }
    Ok(end)
}

/// VM_BIND of `[bo_offset, bo_offset + size)` of an object of `bo_size` bytes at `va` with
/// `access`: access, size, the object offset's alignment, the VA range, the object range.
/// Returns the end of the VA range.
pub const fn bind(
    va: u64,
    bo_offset: u64,
    size: u64,
    access: u32,
    bo_size: u64,
) -> Result<u64, Refusal> {
    if access == 0 || access & !(VM_ACCESS_READ | VM_ACCESS_WRITE) != 0 {
        return Err(Refusal::new(r::ACCESS_INVALID));
    }
    if size == 0 {
        return Err(Refusal::new(r::SIZE_ZERO));
    }
    if !page_aligned(bo_offset) {
        return Err(Refusal::new(r::UNALIGNED));
    }
    let end = match va_range(va, size) {
        Ok(end) => end,
        Err(e) => return Err(e),
    };
    match bo_offset.checked_add(size) {
        Some(bo_end) if bo_end <= bo_size => Ok(end),
        _ => Err(Refusal::new(r::BO_RANGE)),
    }
}

/// VM_UNBIND of `[va, va + size)`: size, then the VA range. Returns its end.
pub const fn unbind(va: u64, size: u64) -> Result<u64, Refusal> {
    if size == 0 {
        return Err(Refusal::new(r::SIZE_ZERO));
    }
    va_range(va, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_limit_admits_65536_and_refuses_the_next_with_enospc() {
        assert_eq!(MAX_MAPPINGS, 65536);
        assert_eq!(mapping_limit(0), Ok(()));
        assert_eq!(mapping_limit(MAX_MAPPINGS - 1), Ok(()));
        let e = mapping_limit(MAX_MAPPINGS).unwrap_err();
        assert_eq!(
            (e.errno, e.reason),
            (crate::rules::refusal::errno::ENOSPC, r::OBJECT_LIMIT)
        );
        assert!(mapping_limit(usize::MAX).is_err());
    }

    const VA: u64 = version::VA_START;
    const P: u64 = version::PAGE_SIZE;

    #[test]
    fn bind_checks_in_order() {
        assert_eq!(bind(VA, 0, P, 0, P), Err(Refusal::new(r::ACCESS_INVALID)));
        assert_eq!(bind(VA, 0, P, 4, P), Err(Refusal::new(r::ACCESS_INVALID)));
        assert_eq!(
            bind(VA + 1, 1, 0, VM_ACCESS_READ, P),
            Err(Refusal::new(r::SIZE_ZERO))
        );
        assert_eq!(
            bind(VA + 1, 1, P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::UNALIGNED))
        );
        assert_eq!(
            bind(VA + 1, 0, P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::UNALIGNED))
        );
        assert_eq!(
            bind(0, 0, P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::VA_OUT_OF_RANGE))
        );
        assert_eq!(
            bind(u64::MAX - P + 1, 0, 2 * P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::VA_OUT_OF_RANGE))
        );
        assert_eq!(
            bind(VA, P, P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::BO_RANGE))
        );
        assert_eq!(
            bind(VA, 0, P, VM_ACCESS_READ | VM_ACCESS_WRITE, P),
            Ok(VA + P)
        );
    }

    #[test]
    fn tables_needed_counts_missing_tables_per_level() {
        const GIB: u64 = 1 << 30;
        const MIB2: u64 = 2 << 20;
        // Empty address space: top + L2 + L1 + L0 for one page.
        assert_eq!(tables_needed(VA, VA + P, false, 100, |_, _| false), 4);
        // Every table there: nothing.
        assert_eq!(tables_needed(VA, VA + P, true, 100, |_, _| true), 0);
        // Only the leaf table missing.
        assert_eq!(tables_needed(VA, VA + P, true, 100, |l, _| l > 0), 1);
        // A range across a 2 MiB boundary needs two leaf tables.
        assert_eq!(
            tables_needed(MIB2 - P, MIB2 + P, true, 100, |l, _| l > 0),
            2
        );
        // At a 1 GiB stride every bind needs an L1 and an L0 table.
        assert_eq!(
            tables_needed(5 * GIB, 5 * GIB + P, true, 100, |l, _| l == 2),
            2
        );
        // The count stops just past the cap.
        assert_eq!(tables_needed(VA, VA + 64 * MIB2, true, 3, |l, _| l > 0), 4);
    }

    #[test]
    fn pt_budget_refuses_past_the_limit() {
        assert_eq!(pt_budget(MAX_PT_TABLES - 2, 2), Ok(()));
        assert_eq!(
            pt_budget(MAX_PT_TABLES - 1, 2),
            Err(Refusal::new(r::PT_LIMIT))
        );
        assert_eq!(pt_budget(usize::MAX, 1), Err(Refusal::new(r::PT_LIMIT)));
        assert_eq!(Refusal::new(r::PT_LIMIT).errno, 28);
        assert_eq!(pt_check(VA, VA + P, 0, false, |_, _| false), Ok(4));
        assert_eq!(
            pt_check(VA, VA + P, MAX_PT_TABLES - 1, true, |l, _| l > 0),
            Ok(1)
        );
        assert_eq!(
            pt_check(VA, VA + P, MAX_PT_TABLES, true, |l, _| l > 0),
            Err(Refusal::new(r::PT_LIMIT))
        );
    }

    #[test]
    fn unbind_checks_in_order() {
        assert_eq!(unbind(VA + 1, 0), Err(Refusal::new(r::SIZE_ZERO)));
        assert_eq!(unbind(VA + 1, P), Err(Refusal::new(r::UNALIGNED)));
        assert_eq!(
            unbind(version::VA_END, P),
            Err(Refusal::new(r::VA_OUT_OF_RANGE))
        );
        assert_eq!(unbind(VA, P), Ok(VA + P));
    }
}
