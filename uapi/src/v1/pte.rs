//! GPU page-table entry format (docs/hw-spec.md §5). Written only by the KMD (or the simulator's
//! KMD half), read only by the device's MMU walk.

/// Entry is valid.
pub const VALID: u64 = 1 << 0;
/// Leaf: the page may be read.
pub const READ: u64 = 1 << 1;
/// Leaf: the page may be written.
pub const WRITE: u64 = 1 << 2;
/// Set in L3/L2/L1 entries (they point to the next table), clear in L0 entries.
pub const TABLE: u64 = 1 << 3;
/// Bits that must be zero in every entry.
pub const RESERVED_MASK: u64 = (0xFFF << 52) | (0xFF << 4);
/// Bits holding the physical address (`PA >> 12 << 12`).
pub const ADDR_MASK: u64 = ((1u64 << 52) - 1) & !0xFFF;

/// Number of levels (L3 is the top, L0 holds page entries).
pub const LEVELS: usize = 4;
/// Entries per table.
pub const ENTRIES: usize = 512;
/// log2 of the page size.
pub const PAGE_SHIFT: u32 = 12;
/// Bits of VA the MMU translates.
pub const VA_BITS: u32 = 48;

/// Index into the table at `level` (0..=3) for `va`.
pub const fn index(va: u64, level: usize) -> usize {
    ((va >> (PAGE_SHIFT as u64 + 9 * level as u64)) & 0x1FF) as usize
}

/// A table entry (L3/L2/L1) pointing at the table at physical address `pa`.
pub const fn table(pa: u64) -> u64 {
    (pa & ADDR_MASK) | TABLE | VALID
}

/// A leaf entry (L0) mapping the page at `pa` with the given `READ`/`WRITE` bits.
pub const fn page(pa: u64, access: u64) -> u64 {
    (pa & ADDR_MASK) | (access & (READ | WRITE)) | VALID
}

/// The physical address an entry points at.
pub const fn addr(entry: u64) -> u64 {
    entry & ADDR_MASK
}
