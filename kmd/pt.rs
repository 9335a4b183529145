// SPDX-License-Identifier: GPL-2.0
//! GPU page-table pages (docs/hw-spec.md section 5, `uapi::pte`).
//!
//! Four levels (L3 top .. L0 leaves), 512 eight-byte entries per 4 KiB table. Each table is a
//! DMA-coherent page of the GPU's (faux) device, so the address written into the parent entry is
//! the bus address the device sees (on this machine's direct mapping, the physical address).
//! Next to the hardware table, every L3/L2/L1 table keeps the kernel-side owners of its children,
//! so tearing down a subtree frees exactly the pages it allocated. Tables are written only under
//! the owning address space's lock, by VM bind / unbind.
//!
//! Memory accounting (docs/kmd.md, "Page-table budget"): every allocation here is made with
//! `GFP_KERNEL_ACCOUNT`, so the memory cgroup of the process that binds is charged: the
//! children arrays (kmalloc) always; the table itself when the DMA layer takes it from the page
//! allocator, as dma-direct does for a single page (kernel/dma/direct.c; memory from a CMA area or
//! a restricted DMA pool is not charged). Callers count the tables they allocate and free
//! (`tables` arguments) against the address space's budget, `rules::vm::MAX_PT_TABLES`.

use kernel::{
    device,
    dma::Coherent,
    prelude::*,
    sync::{atomic::Relaxed, Arc},
};

use crate::{bus::Bus, driver::Stats, uapi::pte};

/// Size of one page-table page, in bytes.
const TABLE_BYTES: usize = pte::ENTRIES * core::mem::size_of::<u64>();
const _: () = assert!(TABLE_BYTES == 4096);

/// One page-table page and, for L3..L1, the tables its entries point to.
pub(crate) struct PtPage {
    /// The hardware table.
    table: Coherent<[u64; pte::ENTRIES]>,
    /// Level of this table (3 = top, 0 = leaves).
    level: usize,
    /// Owners of the next-level tables (empty for L0); `children[i]` is set exactly when
    /// entry `i` is a valid table entry.
    children: KVec<Option<KBox<PtPage>>>,
    /// Number of valid entries.
    live: usize,
    /// Device-wide counters (`pt_pages`).
    stats: Arc<Stats>,
    /// The device's memory registry: the table is reachable by the device while it exists.
    bus: Arc<Bus>,
}

impl PtPage {
    /// Allocates a zeroed (all entries invalid) table of `level` on `dev` and makes it reachable
    /// by the device through `bus`.
    pub(crate) fn new(
        dev: &device::Device<device::Bound>,
        level: usize,
        stats: &Arc<Stats>,
        bus: &Arc<Bus>,
    ) -> Result<Self> {
        let table = Coherent::<[u64; pte::ENTRIES]>::zeroed(dev, GFP_KERNEL_ACCOUNT)?;
        let mut children = KVec::new();
        if level > 0 {
            children.reserve(pte::ENTRIES, GFP_KERNEL_ACCOUNT)?;
            for _ in 0..pte::ENTRIES {
                children.push(None, GFP_KERNEL_ACCOUNT)?;
            }
        }
        #[allow(clippy::useless_conversion)]
        let dma = u64::from(table.dma_address());
        // SAFETY: the table is 4 KiB of coherent memory owned by the `PtPage` built below, whose
        // `Drop` unregisters it before `table` is freed.
        unsafe { bus.register_table(dma, table.as_mut_ptr().cast::<u8>())? };
        stats.pt_pages.fetch_add(1, Relaxed);
        Ok(Self {
            table,
            level,
            children,
            live: 0,
            stats: stats.clone(),
            bus: bus.clone(),
        })
    }

    /// Bus address of the table (what a parent entry or `AS_PT_BASE` holds).
    pub(crate) fn dma_address(&self) -> u64 {
        #[allow(clippy::useless_conversion)]
        u64::from(self.table.dma_address())
    }

    /// Whether no entry is valid.
    pub(crate) fn is_empty(&self) -> bool {
        self.live == 0
    }

    fn read(&self, idx: usize) -> u64 {
        if idx >= pte::ENTRIES {
            return 0;
        }
        // SAFETY: `idx < ENTRIES`, so the element is inside the allocation, which lives as long
        // as `self`. Accesses are serialized by the address space lock (`&self` here, `&mut self`
        // for writers); the device only reads tables while a job of this address space runs,
        // and none can run while bind / unbind change them (hw-spec section 5).
        unsafe { self.table.as_ptr().cast::<u64>().add(idx).read_volatile() }
    }

    fn write(&mut self, idx: usize, entry: u64) {
        if idx >= pte::ENTRIES {
            return;
        }
        // SAFETY: as in `read`; `&mut self` makes this the only accessor on the CPU side.
        unsafe { self.table.as_mut_ptr().cast::<u64>().add(idx).write_volatile(entry) };
    }

    /// Maps the 4 KiB page at bus address `pa` at `va` with the leaf bits `access`
    /// (`pte::READ` / `pte::WRITE`), allocating intermediate tables on `dev` as needed (each
    /// one counted in `tables`). `self` must be the top (L3) table. The VA must not be mapped yet.
    pub(crate) fn map_page(
        &mut self,
        dev: &device::Device<device::Bound>,
        va: u64,
        pa: u64,
        access: u64,
        tables: &mut usize,
    ) -> Result {
        let idx = pte::index(va, self.level);
        if self.level == 0 {
            if self.read(idx) & pte::VALID != 0 {
                return Err(EEXIST);
            }
            self.write(idx, pte::page(pa, access));
            self.live += 1;
            return Ok(());
        }
        if self.children.get(idx).is_none_or(|c| c.is_none()) {
            let child = KBox::new(PtPage::new(dev, self.level - 1, &self.stats, &self.bus)?, GFP_KERNEL_ACCOUNT)?;
            *tables += 1;
            let entry = pte::table(child.dma_address());
            let slot = self.children.get_mut(idx).ok_or(EINVAL)?;
            *slot = Some(child);
            self.write(idx, entry);
            self.live += 1;
        }
        match self.children.get_mut(idx) {
            Some(Some(child)) => child.map_page(dev, va, pa, access, tables),
            _ => Err(EINVAL),
        }
    }

    /// Whether the table of `level` covering `va` exists (`self` counts for its own level).
    /// For the budget check of a bind (`rules::vm::pt_check`).
    pub(crate) fn has_table(&self, level: usize, va: u64) -> bool {
        if self.level == level {
            return true;
        }
        if self.level < level {
            return false;
        }
        match self.children.get(pte::index(va, self.level)) {
            Some(Some(child)) => child.has_table(level, va),
            _ => false,
        }
    }

    /// Teardown of a whole address space (`Vm`'s drop): clears the valid leaves at VAs from
    /// `*from` on, in VA order, storing their bus addresses in `out[*n..]`, and frees every table
    /// below `self` that becomes empty (each one counted off `tables`). `base` is the first VA
    /// `self` covers. Returns `true` if it stopped because `out` is full, with `*from` set to the
    /// VA of the first leaf not cleared; `false` once every leaf from `*from` on is cleared.
    pub(crate) fn drain_leaves(
        &mut self,
        base: u64,
        from: &mut u64,
        out: &mut [u64],
        n: &mut usize,
        tables: &mut usize,
    ) -> bool {
        let shift = u64::from(pte::PAGE_SHIFT) + 9 * self.level as u64;
        let first = if *from > base {
            ((*from - base) >> shift) as usize
        } else {
            0
        };
        for idx in first..pte::ENTRIES {
            let va = base + ((idx as u64) << shift);
            if self.level == 0 {
                let leaf = self.read(idx);
                if leaf & pte::VALID == 0 {
                    continue;
                }
                let Some(slot) = out.get_mut(*n) else {
                    *from = va;
                    return true;
                };
                *slot = pte::addr(leaf);
                *n += 1;
                self.write(idx, 0);
                self.live -= 1;
                continue;
            }
            let (stopped, empty) = match self.children.get_mut(idx) {
                Some(Some(child)) => {
                    let stopped = child.drain_leaves(va, from, out, n, tables);
                    (stopped, child.is_empty())
                }
                _ => continue,
            };
            if empty {
                // Invalidate the entry before the table it points to is freed.
                self.write(idx, 0);
                if let Some(slot) = self.children.get_mut(idx) {
                    *slot = None;
                }
                self.live -= 1;
                *tables -= 1;
            }
            if stopped {
                return true;
            }
        }
        false
    }

    /// Unmaps the page at `va` (if mapped) and frees the tables that become empty, except
    /// `self` (each one counted off `tables`). Returns whether `self` is now empty.
    pub(crate) fn unmap_page(&mut self, va: u64, tables: &mut usize) -> bool {
        let idx = pte::index(va, self.level);
        if self.level == 0 {
            if self.read(idx) & pte::VALID != 0 {
                self.write(idx, 0);
                self.live -= 1;
            }
            return self.is_empty();
        }
        let child_empty = match self.children.get_mut(idx) {
            Some(Some(child)) => child.unmap_page(va, tables),
            _ => return self.is_empty(),
        };
        if child_empty {
            // Invalidate the entry before the table it points to is freed.
            self.write(idx, 0);
            if let Some(slot) = self.children.get_mut(idx) {
                *slot = None;
            }
            self.live -= 1;
            *tables -= 1;
        }
        self.is_empty()
    }

    /// Number of tables in this subtree, `self` included (for self-checks).
    pub(crate) fn table_count(&self) -> usize {
        1 + self
            .children
            .iter()
            .map(|c| c.as_deref().map_or(0, PtPage::table_count))
            .sum::<usize>()
    }

    /// The leaf entry for `va`, or 0 if unmapped (for self-checks).
    pub(crate) fn lookup(&self, va: u64) -> u64 {
        let idx = pte::index(va, self.level);
        if self.level == 0 {
            return self.read(idx);
        }
        match self.children.get(idx) {
            Some(Some(child)) => child.lookup(va),
            _ => 0,
        }
    }
}

impl Drop for PtPage {
    fn drop(&mut self) {
        // The device can no longer reach the table once this returns; the children are freed
        // with `self.children` (each unregistering itself), the table with `self.table`.
        self.bus.unregister(self.dma_address());
        self.stats.pt_pages.fetch_sub(1, Relaxed);
    }
}
