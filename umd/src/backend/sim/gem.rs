//! Simulated GEM objects: physically contiguous ranges of the simulated memory, freed when the
//! last reference (handle or mapping) goes away — as shmem objects are refcounted in the kernel.

use super::physmem::PhysRegion;
use std::sync::Arc;

/// One buffer object.
pub struct SimBo {
    /// First PA.
    pub pa: u64,
    /// Bytes (page multiple).
    pub size: u64,
    mem: Arc<PhysRegion>,
}

impl SimBo {
    /// Allocates `size` bytes (already page-rounded) or returns `None` when memory is short.
    pub fn new(mem: &Arc<PhysRegion>, size: u64) -> Option<SimBo> {
        let pa = mem.alloc(size)?;
        Some(SimBo {
            pa,
            size,
            mem: mem.clone(),
        })
    }
}

impl Drop for SimBo {
    fn drop(&mut self) {
        self.mem.free(self.pa, self.size);
    }
}
