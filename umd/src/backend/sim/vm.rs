//! One GPU address space of the simulated KMD: 4-level page tables in simulated physical memory,
//! in the format of docs/hw-spec.md §5, written only by bind/unbind. Mirrors the kernel driver's
//! `kmd/vm.rs`: the same validation order, errno and reason for each failure.

use super::gem::SimBo;
use super::physmem::PhysRegion;
use crate::backend::{KmdError, KmdResult};
use std::collections::BTreeMap;
use std::sync::Arc;
use uapi::ioctl::{VM_ACCESS_READ, VM_ACCESS_WRITE};
use uapi::pte;
use uapi::reason as r;

const PAGE: u64 = uapi::PAGE_SIZE;

/// One bound range.
pub struct Mapping {
    /// Bytes.
    pub size: u64,
    /// The object (kept alive while mapped).
    pub bo: Arc<SimBo>,
    /// Offset into the object.
    pub bo_offset: u64,
    /// `VM_ACCESS_*`.
    pub access: u32,
}

/// An address space.
pub struct Vm {
    mem: Arc<PhysRegion>,
    /// PA of the top (L3) table.
    pub root: u64,
    /// va -> mapping, non-overlapping.
    pub mappings: BTreeMap<u64, Mapping>,
    /// Page-table pages in use (for stats and leak checks).
    pub table_pages: u64,
}

impl Vm {
    /// A new, empty address space (one zeroed top-level table).
    pub fn new(mem: Arc<PhysRegion>) -> KmdResult<Vm> {
        let root = mem.alloc(PAGE).ok_or(KmdError::refused(r::OUT_OF_MEMORY))?;
        Ok(Vm {
            mem,
            root,
            mappings: BTreeMap::new(),
            table_pages: 1,
        })
    }

    /// Maps `[bo_offset, bo_offset+size)` of `bo` at `va`.
    pub fn bind(
        &mut self,
        bo: Arc<SimBo>,
        va: u64,
        bo_offset: u64,
        size: u64,
        access: u32,
    ) -> KmdResult<()> {
        // The argument rules are the driver's (`rules::vm`), aigpu.ko's too.
        let end = rules::vm::bind(va, bo_offset, size, access, bo.size)?;
        if self.overlaps(va, end) {
            return Err(KmdError::refused(r::VA_OVERLAP));
        }
        rules::vm::mapping_limit(self.mappings.len())?;
        // The page-table budget, before any table is allocated (`rules::vm::pt_check`, as
        // aigpu.ko's `kmd/vm.rs`). The top-level table always exists here and counts as held,
        // as the kernel's does once its first bind made it.
        rules::vm::pt_check(va, end, self.table_pages as usize, true, |level, v| {
            self.has_table(level, v)
        })?;
        let mut bits = 0;
        if access & VM_ACCESS_READ != 0 {
            bits |= pte::READ;
        }
        if access & VM_ACCESS_WRITE != 0 {
            bits |= pte::WRITE;
        }
        for i in 0..size / PAGE {
            let page_va = va + i * PAGE;
            let pa = bo.pa + bo_offset + i * PAGE;
            if let Err(e) = self.set_leaf(page_va, pte::page(pa, bits)) {
                // Roll back what was written so a failed bind leaves no partial mapping.
                for j in 0..i {
                    let _ = self.set_leaf(va + j * PAGE, 0);
                }
                self.prune(va, va + i * PAGE);
                return Err(e);
            }
        }
        self.mappings.insert(
            va,
            Mapping {
                size,
                bo,
                bo_offset,
                access,
            },
        );
        Ok(())
    }

    /// Removes exactly the mapping `[va, va+size)`.
    pub fn unbind(&mut self, va: u64, size: u64) -> KmdResult<Arc<SimBo>> {
        rules::vm::unbind(va, size)?;
        match self.mappings.get(&va) {
            Some(m) if m.size == size => {}
            _ => return Err(KmdError::refused(r::VA_NOT_MAPPED)),
        }
        let m = self
            .mappings
            .remove(&va)
            .ok_or(KmdError::refused(r::VA_NOT_MAPPED))?;
        for i in 0..size / PAGE {
            let _ = self.set_leaf(va + i * PAGE, 0);
        }
        self.prune(va, va + size);
        Ok(m.bo)
    }

    /// The mapping containing `va`, if any, with the VA it starts at.
    pub fn lookup(&self, va: u64) -> Option<(u64, &Mapping)> {
        let (&start, m) = self.mappings.range(..=va).next_back()?;
        (va < start + m.size).then_some((start, m))
    }

    /// True when `[va, va+len)` is entirely mapped with at least `access`.
    pub fn covers(&self, mut va: u64, len: u64, access: u32) -> bool {
        let Some(end) = va.checked_add(len) else {
            return false;
        };
        while va < end {
            match self.lookup(va) {
                Some((start, m)) if m.access & access == access => va = start + m.size,
                _ => return false,
            }
        }
        true
    }

    fn overlaps(&self, va: u64, end: u64) -> bool {
        if let Some((&s, m)) = self.mappings.range(..end).next_back() {
            return s + m.size > va;
        }
        false
    }

    /// Whether the table of `level` (0 = leaf table) covering `va` exists.
    fn has_table(&self, level: usize, va: u64) -> bool {
        let mut table = self.root;
        let mut l = pte::LEVELS - 1;
        while l > level {
            let e = self
                .mem
                .read_u64(table + 8 * pte::index(va, l) as u64)
                .unwrap_or(0);
            if e & pte::VALID == 0 {
                return false;
            }
            table = pte::addr(e);
            l -= 1;
        }
        true
    }

    /// Page-table pages held, the top-level table included (what the budget counts).
    pub fn tables(&self) -> u64 {
        self.table_pages
    }

    /// Writes the L0 entry for `va`, creating intermediate tables as needed (only when setting).
    fn set_leaf(&mut self, va: u64, entry: u64) -> KmdResult<()> {
        let mut table = self.root;
        for level in (1..pte::LEVELS).rev() {
            let slot = table + 8 * pte::index(va, level) as u64;
            let e = self.mem.read_u64(slot).unwrap_or(0);
            table = if e & pte::VALID != 0 {
                pte::addr(e)
            } else {
                if entry == 0 {
                    return Ok(());
                }
                let t = self
                    .mem
                    .alloc(PAGE)
                    .ok_or(KmdError::refused(r::OUT_OF_MEMORY))?;
                self.table_pages += 1;
                self.mem.write_u64(slot, pte::table(t));
                t
            };
        }
        self.mem
            .write_u64(table + 8 * pte::index(va, 0) as u64, entry);
        Ok(())
    }

    /// Frees every table below the root that became empty in `[va, end)`.
    fn prune(&mut self, va: u64, end: u64) {
        let mut page = va & !(PAGE - 1);
        while page < end {
            self.prune_path(page);
            // Skip to the next L0 table's range: one prune per 2 MiB is enough.
            page = (page | ((PAGE << 9) - 1)) + 1;
        }
    }

    fn prune_path(&mut self, va: u64) {
        // Collect the table chain root -> L0 for va.
        let mut chain = [(0u64, 0u64); pte::LEVELS];
        let mut table = self.root;
        for level in (1..pte::LEVELS).rev() {
            let slot = table + 8 * pte::index(va, level) as u64;
            let e = self.mem.read_u64(slot).unwrap_or(0);
            if e & pte::VALID == 0 {
                return;
            }
            table = pte::addr(e);
            chain[level - 1] = (slot, table);
        }
        // From the L0 table upwards: free a table whose 512 entries are all zero.
        for &(parent_slot, t) in chain.iter().take(pte::LEVELS - 1) {
            if !self.table_empty(t) {
                return;
            }
            self.mem.write_u64(parent_slot, 0);
            self.mem.free(t, PAGE);
            self.table_pages -= 1;
        }
    }

    fn table_empty(&self, t: u64) -> bool {
        let mut buf = [0u8; PAGE as usize];
        if self.mem_read(t, &mut buf).is_err() {
            return false;
        }
        buf.iter().all(|&b| b == 0)
    }

    fn mem_read(&self, pa: u64, buf: &mut [u8]) -> Result<(), vgpu::model::BusError> {
        vgpu::model::PhysMem::read(&*self.mem, pa, buf)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        let vas: Vec<(u64, u64)> = self.mappings.iter().map(|(&v, m)| (v, m.size)).collect();
        for (va, size) in vas {
            let _ = self.unbind(va, size);
        }
        self.mem.free(self.root, PAGE);
    }
}
