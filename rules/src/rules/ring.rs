//! Ring arithmetic on free-running 32-bit indices.

/// Descriptors per hardware ring (64 KiB of ring memory per queue).
pub const RING_ENTRIES: u32 = 1024;
/// Fence slots (one u64 per live context) in the fence page: the device's context limit.
pub const FENCE_SLOTS: u32 = 512;

/// Wrapping "`a` is at or after `b`".
pub const fn at_or_after(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) >= 0
}

/// Whether `need` more descriptors fit in a ring whose oldest unretired descriptor is `head`
/// and whose next free one is `tail`.
pub const fn fits(head: u32, tail: u32, need: usize) -> bool {
    tail.wrapping_sub(head) as usize + need <= RING_ENTRIES as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn indices_wrap() {
        assert!(at_or_after(5, 5));
        assert!(at_or_after(0, u32::MAX));
        assert!(!at_or_after(u32::MAX, 0));
        assert!(fits(u32::MAX - 10, 5, RING_ENTRIES as usize - 16));
        assert!(!fits(u32::MAX - 10, 5, RING_ENTRIES as usize - 15));
    }
}
