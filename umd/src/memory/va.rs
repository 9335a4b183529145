//! GPU virtual address allocator for one address space: first fit over a free list, page
//! granular, with a guard page after every range so a linear overrun faults instead of landing
//! silently in the next buffer.

use std::collections::BTreeMap;

const PAGE: u64 = uapi::PAGE_SIZE;

/// Free VA ranges of one address space.
pub struct VaSpace {
    free: BTreeMap<u64, u64>,
}

impl VaSpace {
    /// The whole usable range `[start, end)`.
    pub fn new(start: u64, end: u64) -> VaSpace {
        let mut free = BTreeMap::new();
        if end > start {
            free.insert(start, end - start);
        }
        VaSpace { free }
    }

    /// Reserves `size` bytes (page multiple) aligned to `align` (power of two >= page), plus one
    /// guard page. Returns the VA.
    pub fn alloc(&mut self, size: u64, align: u64) -> Option<u64> {
        let need = size.checked_add(PAGE)?;
        let (start, len, va) = self.free.iter().find_map(|(&s, &l)| {
            let va = s.checked_next_multiple_of(align)?;
            (va.checked_add(need)? <= s + l).then_some((s, l, va))
        })?;
        self.free.remove(&start);
        if va > start {
            self.free.insert(start, va - start);
        }
        let end = va + need;
        if end < start + len {
            self.free.insert(end, start + len - end);
        }
        Some(va)
    }

    /// Returns a range reserved by [`VaSpace::alloc`] with the same `size`.
    pub fn free(&mut self, va: u64, size: u64) {
        let (mut s, mut l) = (va, size + PAGE);
        if let Some((&ps, &pl)) = self.free.range(..va).next_back() {
            if ps + pl == va {
                self.free.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.free.get(&(va + size + PAGE)) {
            self.free.remove(&(va + size + PAGE));
            l += nl;
        }
        self.free.insert(s, l);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn alloc_aligns_guards_and_coalesces() {
        let mut v = VaSpace::new(0x10_0000, 0x100_0000);
        let a = v.alloc(0x1000, 0x1000).unwrap();
        assert_eq!(a, 0x10_0000);
        let b = v.alloc(0x2000, 0x1_0000).unwrap();
        assert_eq!(b, 0x11_0000);
        v.free(a, 0x1000);
        v.free(b, 0x2000);
        assert_eq!(v.free.len(), 1);
        assert_eq!(v.free.get(&0x10_0000), Some(&0xF0_0000));
        assert_eq!(v.alloc(0x1000_0000, 0x1000), None);
    }
}
