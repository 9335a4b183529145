//! The MMU: the four-level page-table walk of hw-spec §5, and the one-entry TLB the executor
//! keeps per packet operand.

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
            let needed = if access == regs::ACCESS_WRITE {
                pte::WRITE
            } else {
                pte::READ
            };
            if entry & needed == 0 {
                return Err(fault(regs::FAULT_PERMISSION));
            }
            return Ok(pte::addr(entry) | (va & PAGE_MASK));
        }
    }
    // Not reached: level 0 always returns above.
    Err(fault(regs::FAULT_UNMAPPED))
}

/// A one-entry translation cache for one operand of one packet: the last page translated and
/// the access it was checked for. It lives no longer than the packet, so the device never keeps
/// a translation across descriptors (hw-spec §5).
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
        let vpn = va >> pte::PAGE_SHIFT;
        if let Some((cached_vpn, page_pa, cached_access)) = self.entry {
            if cached_vpn == vpn && cached_access == access {
                return Ok(page_pa | (va & PAGE_MASK));
            }
        }
        let pa = walk(mem, pt_base, va, access)?;
        self.entry = Some((vpn, pa & !PAGE_MASK, access));
        Ok(pa)
    }
}
