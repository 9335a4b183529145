//! Simulated GEM objects: physically contiguous ranges of the simulated memory, freed when the
//! last reference (handle or mapping) goes away — as shmem objects are refcounted in the kernel.

use super::physmem::PhysRegion;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// One buffer object.
pub struct SimBo {
    /// First PA.
    pub pa: u64,
    /// Bytes (page multiple).
    pub size: u64,
    mem: Arc<PhysRegion>,
    /// The owning client's byte counter (debugfs `clients` mem=).
    owner_bytes: Arc<AtomicU64>,
}

impl SimBo {
    /// Allocates `size` bytes (already page-rounded) or returns `None` when memory is short.
    pub fn new(mem: &Arc<PhysRegion>, size: u64, owner_bytes: &Arc<AtomicU64>) -> Option<SimBo> {
        let pa = mem.alloc(size)?;
        owner_bytes.fetch_add(size, Ordering::Relaxed);
        Some(SimBo {
            pa,
            size,
            mem: mem.clone(),
            owner_bytes: owner_bytes.clone(),
        })
    }
}

impl Drop for SimBo {
    fn drop(&mut self) {
        self.owner_bytes.fetch_sub(self.size, Ordering::Relaxed);
        self.mem.free(self.pa, self.size);
    }
}
