//! Unit tests of the page-table walk and the TLB, on memory the test lays out by hand.

mod common;

use common::*;
use vgpu::model::mmu::{walk, Fault, Tlb};
use vgpu::uapi::{pte, regs};

const ROOT: u64 = 0x1000;
const L2: u64 = 0x2000;
const L1: u64 = 0x3000;
const L0: u64 = 0x4000;
const PAGE_PA: u64 = 0x9000;
/// L3 index 1, L2 index 2, L1 index 3, L0 index 4, offset 0x567.
const VA: u64 = (1 << 39) | (2 << 30) | (3 << 21) | (4 << 12) | 0x567;

fn tables(leaf: u64) -> TestMem {
    let m = TestMem::new();
    m.poke_u64(ROOT + 8, pte::table(L2));
    m.poke_u64(L2 + 2 * 8, pte::table(L1));
    m.poke_u64(L1 + 3 * 8, pte::table(L0));
    m.poke_u64(L0 + 4 * 8, leaf);
    m
}

fn f(kind: u32, access: u32, addr: u64) -> Result<u64, Fault> {
    Err(Fault::new(kind, access, addr))
}

#[test]
fn translates_with_offset() {
    let m = tables(pte::page(PAGE_PA, pte::READ | pte::WRITE));
    assert_eq!(walk(&m, ROOT, VA, regs::ACCESS_READ), Ok(0x9567));
    assert_eq!(walk(&m, ROOT, VA, regs::ACCESS_WRITE), Ok(0x9567));
    assert_eq!(walk(&m, ROOT, VA, regs::ACCESS_FETCH), Ok(0x9567));
    assert_eq!(walk(&m, ROOT, VA & !0xFFF, regs::ACCESS_READ), Ok(0x9000));
    assert_eq!(walk(&m, ROOT, VA | 0xFFF, regs::ACCESS_READ), Ok(0x9FFF));
    // Low bits of the table base are ignored.
    assert_eq!(walk(&m, ROOT | 0xABC, VA, regs::ACCESS_READ), Ok(0x9567));
    assert_eq!(m.accesses.get(), 24, "four entry reads per walk");
}

#[test]
fn permissions() {
    let ro = tables(pte::page(PAGE_PA, pte::READ));
    assert_eq!(walk(&ro, ROOT, VA, regs::ACCESS_READ), Ok(0x9567));
    assert_eq!(walk(&ro, ROOT, VA, regs::ACCESS_FETCH), Ok(0x9567));
    assert_eq!(
        walk(&ro, ROOT, VA, regs::ACCESS_WRITE),
        f(regs::FAULT_PERMISSION, regs::ACCESS_WRITE, VA)
    );
    let wo = tables(pte::page(PAGE_PA, pte::WRITE));
    assert_eq!(walk(&wo, ROOT, VA, regs::ACCESS_WRITE), Ok(0x9567));
    assert_eq!(
        walk(&wo, ROOT, VA, regs::ACCESS_READ),
        f(regs::FAULT_PERMISSION, regs::ACCESS_READ, VA)
    );
    assert_eq!(
        walk(&wo, ROOT, VA, regs::ACCESS_FETCH),
        f(regs::FAULT_PERMISSION, regs::ACCESS_FETCH, VA)
    );
    let none = tables(pte::page(PAGE_PA, 0));
    assert_eq!(
        walk(&none, ROOT, VA, regs::ACCESS_READ),
        f(regs::FAULT_PERMISSION, regs::ACCESS_READ, VA)
    );
}

#[test]
fn unmapped_at_every_level_and_above_48_bits() {
    let m = tables(pte::page(PAGE_PA, pte::READ));
    let read = regs::ACCESS_READ;
    // Neighbours whose entry is missing at L0, L1, L2 and L3 respectively.
    for va in [VA + 0x1000, VA + (1 << 21), VA + (1 << 30), VA + (1 << 39)] {
        assert_eq!(
            walk(&m, ROOT, va, read),
            f(regs::FAULT_UNMAPPED, read, va),
            "{va:#x}"
        );
    }
    for va in [1u64 << 48, VA | 1 << 48, VA | 1 << 63, u64::MAX] {
        assert_eq!(
            walk(&m, ROOT, va, read),
            f(regs::FAULT_UNMAPPED, read, va),
            "{va:#x}"
        );
    }
    assert_eq!(
        m.accesses.get(),
        4 + 3 + 2 + 1,
        "VAs above 48 bits read no entry"
    );
}

#[test]
fn bad_entries() {
    let w = regs::ACCESS_WRITE;
    let rw = pte::READ | pte::WRITE;
    let bad = f(regs::FAULT_BAD_PTE, w, VA);
    for leaf in [
        pte::page(PAGE_PA, rw) | pte::TABLE,
        pte::page(PAGE_PA, rw) | 1 << 4,
        pte::page(PAGE_PA, rw) | 1 << 11,
        pte::page(PAGE_PA, rw) | 1 << 52,
        pte::page(PAGE_PA, rw) | 1 << 63,
    ] {
        assert_eq!(walk(&tables(leaf), ROOT, VA, w), bad, "leaf {leaf:#x}");
    }
    // Table entries: TABLE missing, READ or WRITE set, reserved bits.
    for (pa, idx, entry) in [
        (ROOT, 1, pte::VALID | L2),
        (L2, 2, pte::table(L1) | pte::READ),
        (L1, 3, pte::table(L0) | pte::WRITE),
        (L1, 3, pte::table(L0) | 1 << 7),
        (ROOT, 1, pte::table(L2) | 1 << 55),
    ] {
        let m = tables(pte::page(PAGE_PA, rw));
        m.poke_u64(pa + idx * 8, entry);
        assert_eq!(walk(&m, ROOT, VA, w), bad, "entry {entry:#x} at {pa:#x}");
    }
    // An invalid entry is unmapped whatever else is set in it.
    let m = tables(pte::page(PAGE_PA, rw));
    m.poke_u64(L2 + 16, (pte::table(L1) | 1 << 60) & !pte::VALID);
    assert_eq!(walk(&m, ROOT, VA, w), f(regs::FAULT_UNMAPPED, w, VA));
}

#[test]
fn table_outside_memory_is_a_bus_error() {
    let m = tables(pte::page(PAGE_PA, pte::READ));
    m.poke_u64(L1 + 3 * 8, pte::table(MEM_SIZE + 0x1000));
    assert_eq!(
        walk(&m, ROOT, VA, regs::ACCESS_READ),
        f(regs::FAULT_BUS_ERROR, regs::ACCESS_READ, VA)
    );
}

#[test]
fn tlb_caches_one_page_per_access_type() {
    let m = tables(pte::page(PAGE_PA, pte::READ | pte::WRITE));
    m.poke_u64(L0 + 5 * 8, pte::page(0xB000, pte::READ));
    let mut tlb = Tlb::new();
    let read = regs::ACCESS_READ;
    assert_eq!(tlb.translate(&m, ROOT, VA, read), Ok(0x9567));
    assert_eq!(m.accesses.get(), 4);
    assert_eq!(tlb.translate(&m, ROOT, VA - 0x567, read), Ok(0x9000));
    assert_eq!(tlb.translate(&m, ROOT, VA + 0xA98, read), Ok(0x9FFF));
    assert_eq!(m.accesses.get(), 4, "same page: no walk");
    assert_eq!(tlb.translate(&m, ROOT, VA + 0x1000, read), Ok(0xB567));
    assert_eq!(m.accesses.get(), 8, "new page: walked");
    // A different access type walks again (and is checked).
    assert_eq!(
        tlb.translate(&m, ROOT, VA + 0x1000, regs::ACCESS_WRITE),
        f(regs::FAULT_PERMISSION, regs::ACCESS_WRITE, VA + 0x1000)
    );
    assert_eq!(m.accesses.get(), 12);
    // A fault does not replace the cached entry.
    assert_eq!(tlb.translate(&m, ROOT, VA + 0x1004, read), Ok(0xB56B));
    assert_eq!(m.accesses.get(), 12);
}
