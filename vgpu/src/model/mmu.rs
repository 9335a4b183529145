//! The MMU: the four-level page-table walk of hw-spec §5, the device's translation cache
//! ([`DevTlb`], kept across descriptors until the driver invalidates it) and the one-entry TLB
//! the executor keeps per packet operand in front of it.

use core::cell::Cell;

use super::mem::{read_u64, PhysMem};
use crate::uapi::{pte, regs};

/// Bytes in a GPU page.
pub const PAGE_SIZE: u64 = 1 << pte::PAGE_SHIFT;
const PAGE_MASK: u64 = PAGE_SIZE - 1;

/// A fault as the device reports it in `FAULT_STATUS` / `FAULT_ADDR`: what went wrong, for
/// which kind of access, at which address (a VA, or a PA for descriptor and fence accesses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Fault type, `regs::FAULT_*`.
    pub kind: u32,
    /// Access type, `regs::ACCESS_*`.
    pub access: u32,
    /// The address that faulted.
    pub addr: u64,
}

impl Fault {
    /// A fault of type `kind` for an `access` at `addr`.
    pub const fn new(kind: u32, access: u32, addr: u64) -> Self {
        Fault { kind, access, addr }
    }
}

/// Translates `va` through the address space whose top-level (L3) table is at `pt_base`, for an
/// access of type `access` (`regs::ACCESS_*`; a fetch needs `READ` like a read), and returns the
/// physical address of the byte at `va`.
///
/// The low 12 bits of `pt_base` are ignored (the table is 4 KiB aligned). Faults, with
/// `addr = va`: `UNMAPPED` for VA bits 63:48 set or an entry without `VALID`; `BAD_PTE` for
/// reserved bits, a wrong `TABLE` bit for the level or `READ`/`WRITE` in a table entry;
/// `PERMISSION` for a leaf lacking the needed right; `BUS_ERROR` when reading an entry fails.
pub fn walk<M: PhysMem + ?Sized>(
    mem: &M,
    pt_base: u64,
    va: u64,
    access: u32,
) -> Result<u64, Fault> {
    let leaf = walk_leaf(mem, pt_base, va, access)?;
    check_rights(leaf, va, access)?;
    Ok(pte::addr(leaf) | (va & PAGE_MASK))
}

/// The right a leaf needs for `access`.
#[inline]
fn needed_right(access: u32) -> u64 {
    if access == regs::ACCESS_WRITE {
        pte::WRITE
    } else {
        pte::READ
    }
}

/// `PERMISSION` unless `leaf` grants what `access` needs.
#[inline]
fn check_rights(leaf: u64, va: u64, access: u32) -> Result<(), Fault> {
    if leaf & needed_right(access) == 0 {
        return Err(Fault::new(regs::FAULT_PERMISSION, access, va));
    }
    Ok(())
}

/// The walk of [`walk`] up to the valid, well-formed leaf entry for `va` (rights unchecked).
fn walk_leaf<M: PhysMem + ?Sized>(
    mem: &M,
    pt_base: u64,
    va: u64,
    access: u32,
) -> Result<u64, Fault> {
    let fault = |kind| Fault::new(kind, access, va);
    if va >> pte::VA_BITS != 0 {
        return Err(fault(regs::FAULT_UNMAPPED));
    }
    let mut table = pt_base & pte::ADDR_MASK;
    for level in (0..pte::LEVELS).rev() {
        // `table` is 4 KiB aligned and the index is below 512: the OR cannot carry.
        let entry_pa = table | ((pte::index(va, level) as u64) << 3);
        let entry = read_u64(mem, entry_pa).map_err(|_| fault(regs::FAULT_BUS_ERROR))?;
        if entry & pte::VALID == 0 {
            return Err(fault(regs::FAULT_UNMAPPED));
        }
        if entry & pte::RESERVED_MASK != 0 {
            return Err(fault(regs::FAULT_BAD_PTE));
        }
        let is_table = entry & pte::TABLE != 0;
        if level > 0 {
            if !is_table || entry & (pte::READ | pte::WRITE) != 0 {
                return Err(fault(regs::FAULT_BAD_PTE));
            }
            table = pte::addr(entry);
        } else {
            if is_table {
                return Err(fault(regs::FAULT_BAD_PTE));
            }
            return Ok(entry);
        }
    }
    // Not reached: level 0 always returns above.
    Err(fault(regs::FAULT_UNMAPPED))
}

/// A one-entry translation cache for one operand of one packet: the last page translated and
/// the access it was checked for. It lives no longer than the packet, except a queue's
/// command-fetch TLB, which is dropped whenever the [`DevTlb`] behind it is invalidated.
#[derive(Clone, Copy, Debug, Default)]
pub struct Tlb {
    /// (VA page number, PA of the page, access type) of the last walk.
    entry: Option<(u64, u64, u32)>,
}

impl Tlb {
    /// An empty TLB.
    pub const fn new() -> Self {
        Tlb { entry: None }
    }

    /// Like [`walk`], but a VA in the same page as the previous successful translation (for the
    /// same access type) is served from the cache; any other page is walked again.
    pub fn translate<M: PhysMem + ?Sized>(
        &mut self,
        mem: &M,
        pt_base: u64,
        va: u64,
        access: u32,
    ) -> Result<u64, Fault> {
        self.translate_via(va, access, |va| walk(mem, pt_base, va, access))
    }

    /// Like [`Tlb::translate`], with `miss(va)` translating a VA this entry does not hold (the
    /// device's [`DevTlb`], or a walk).
    #[inline]
    pub fn translate_via(
        &mut self,
        va: u64,
        access: u32,
        miss: impl FnOnce(u64) -> Result<u64, Fault>,
    ) -> Result<u64, Fault> {
        let vpn = va >> pte::PAGE_SHIFT;
        if let Some((cached_vpn, page_pa, cached_access)) = self.entry {
            if cached_vpn == vpn && cached_access == access {
                return Ok(page_pa | (va & PAGE_MASK));
            }
        }
        let pa = miss(va)?;
        self.entry = Some((vpn, pa & !PAGE_MASK, access));
        Ok(pa)
    }
}

/// Sets of the device's translation cache (a power of two); each holds two entries.
pub const DEV_TLB_SETS: usize = 16;

/// One cached leaf translation: `tag` = VA page number | (slot + 1) << 40 (0: empty; a VA page
/// number has at most 36 bits), `page` = PA of the page | the leaf's `READ`/`WRITE` bits (a page
/// address has its low 12 bits clear).
#[derive(Clone, Copy, Debug, Default)]
struct DevTlbEntry {
    tag: u64,
    page: u64,
}

/// The device's translation cache (hw-spec §5): leaf translations of every address-space slot,
/// kept across descriptors; two-way set associative with LRU replacement. A hit skips the
/// four-level walk (four memory reads); only successful translations are cached, so a new
/// mapping needs no invalidation, but a changed or removed one does: `MMU_INVALIDATE`, or a
/// write of the slot's `AS_PT_BASE` / `AS_CONFIG`, or an engine reset. Interior mutability,
/// because packet execution reaches memory through a shared [`Space`](super::exec::Space).
#[derive(Debug, Default)]
pub struct DevTlb {
    /// Per set: way 0 (most recently used), way 1.
    sets: [[Cell<DevTlbEntry>; 2]; DEV_TLB_SETS],
    /// Invalidations so far: a [`Tlb`] kept across packets (a queue's command fetch) is valid
    /// only while this has not moved since it was filled.
    generation: Cell<u64>,
}

impl DevTlb {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn tag(slot: u32, vpn: u64) -> u64 {
        vpn | ((u64::from(slot) + 1) << 40)
    }

    fn set(slot: u32, vpn: u64) -> usize {
        // Higher VA bits folded in, so that pages a power-of-two stride apart (a command buffer
        // and its data at the same offset of two buffers) do not share a set; slots offset so
        // that two processes using the same VAs do not evict each other.
        let h = vpn ^ (vpn >> 4) ^ (vpn >> 8) ^ (vpn >> 16) ^ u64::from(slot).wrapping_mul(5);
        (h as usize) & (DEV_TLB_SETS - 1)
    }

    /// The invalidation count (see `generation`).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.get()
    }

    /// Drops every translation of the slots whose bit is set in `mask`.
    pub fn invalidate(&self, mask: u32) {
        self.generation.set(self.generation.get().wrapping_add(1));
        for e in self.sets.iter().flatten() {
            let tag = e.get().tag;
            if tag == 0 {
                continue;
            }
            let slot = (tag >> 40).wrapping_sub(1);
            if slot < 32 && mask & (1 << slot) != 0 {
                e.set(DevTlbEntry::default());
            }
        }
    }

    /// Translates `va` of slot `slot` (top-level table at `pt_base`) for `access`: from the cache
    /// when it holds the page with the needed right, else by [`walk`], whose result is cached.
    /// Faults are those of [`walk`]: a cached entry lacking the right is walked again.
    pub fn translate<M: PhysMem + ?Sized>(
        &self,
        mem: &M,
        slot: u32,
        pt_base: u64,
        va: u64,
        access: u32,
    ) -> Result<u64, Fault> {
        let vpn = va >> pte::PAGE_SHIFT;
        let tag = Self::tag(slot, vpn);
        let set = self.sets.get(Self::set(slot, vpn));
        if let Some([mru, lru]) = set {
            let (a, b) = (mru.get(), lru.get());
            if a.tag == tag && a.page & needed_right(access) != 0 {
                return Ok((a.page & !PAGE_MASK) | (va & PAGE_MASK));
            }
            if b.tag == tag && b.page & needed_right(access) != 0 {
                mru.set(b);
                lru.set(a);
                return Ok((b.page & !PAGE_MASK) | (va & PAGE_MASK));
            }
        }
        let leaf = walk_leaf(mem, pt_base, va, access)?;
        check_rights(leaf, va, access)?;
        let page = pte::addr(leaf);
        if let Some([mru, lru]) = set {
            let a = mru.get();
            // A stale copy of this page (its rights changed) is replaced, not kept twice.
            if a.tag != tag {
                lru.set(a);
            }
            mru.set(DevTlbEntry {
                tag,
                page: page | (leaf & (pte::READ | pte::WRITE)),
            });
        }
        let pa = page | (va & PAGE_MASK);
        Ok(pa)
    }
}
