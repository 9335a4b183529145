//! Unit tests of the page-table walk and the TLB, on memory the test lays out by hand.

mod common;

use common::*;
use vgpu::model::mmu::{walk, DevTlb, Fault, Tlb};
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

#[test]
fn device_tlb_keeps_translations_until_invalidated() {
    let m = tables(pte::page(PAGE_PA, pte::READ | pte::WRITE));
    let tlb = DevTlb::new();
    let read = regs::ACCESS_READ;
    assert_eq!(tlb.translate(&m, 3, ROOT, VA, read), Ok(0x9567));
    assert_eq!(m.accesses.get(), 4);
    assert_eq!(
        tlb.translate(&m, 3, ROOT, VA + 0x10, regs::ACCESS_WRITE),
        Ok(0x9577)
    );
    assert_eq!(m.accesses.get(), 4, "cached, with both rights");
    // The tables change without an invalidation: the device still uses the old page (the
    // driver's duty, hw-spec §5).
    m.poke_u64(L0 + 4 * 8, pte::page(0xC000, pte::READ | pte::WRITE));
    assert_eq!(tlb.translate(&m, 3, ROOT, VA, read), Ok(0x9567));
    // Another slot's invalidation leaves it; its own drops it.
    tlb.invalidate(!(1 << 3));
    assert_eq!(tlb.translate(&m, 3, ROOT, VA, read), Ok(0x9567));
    assert_eq!(m.accesses.get(), 4);
    tlb.invalidate(1 << 3);
    assert_eq!(tlb.translate(&m, 3, ROOT, VA, read), Ok(0xC567));
    assert_eq!(m.accesses.get(), 8, "walked again after the invalidation");
    // Entries are per slot: the same VA in another slot is walked through that slot's tables.
    assert_eq!(tlb.translate(&m, 4, ROOT, VA, read), Ok(0xC567));
    assert_eq!(m.accesses.get(), 12);
    // An unmapped VA is never cached: it faults each time, and a later mapping needs no
    // invalidation.
    m.poke_u64(L0 + 5 * 8, 0);
    assert_eq!(
        tlb.translate(&m, 3, ROOT, VA + 0x1000, read),
        f(regs::FAULT_UNMAPPED, read, VA + 0x1000)
    );
    m.poke_u64(L0 + 5 * 8, pte::page(0xD000, pte::READ));
    assert_eq!(tlb.translate(&m, 3, ROOT, VA + 0x1000, read), Ok(0xD567));
}

#[test]
fn device_tlb_checks_rights_on_a_hit() {
    let m = tables(pte::page(PAGE_PA, pte::READ));
    let tlb = DevTlb::new();
    assert_eq!(
        tlb.translate(&m, 0, ROOT, VA, regs::ACCESS_FETCH),
        Ok(0x9567)
    );
    assert_eq!(m.accesses.get(), 4);
    // Cached read-only: a write walks again and faults as the walk does.
    assert_eq!(
        tlb.translate(&m, 0, ROOT, VA, regs::ACCESS_WRITE),
        f(regs::FAULT_PERMISSION, regs::ACCESS_WRITE, VA)
    );
    assert_eq!(m.accesses.get(), 8);
    // Made writable (a new right needs no invalidation: the miss walks and replaces the entry).
    m.poke_u64(L0 + 4 * 8, pte::page(PAGE_PA, pte::READ | pte::WRITE));
    assert_eq!(
        tlb.translate(&m, 0, ROOT, VA, regs::ACCESS_WRITE),
        Ok(0x9567)
    );
    assert_eq!(
        tlb.translate(&m, 0, ROOT, VA, regs::ACCESS_READ),
        Ok(0x9567)
    );
    assert_eq!(m.accesses.get(), 12);
}

#[test]
fn device_tlb_holds_two_pages_per_set_least_recently_used_out() {
    // Pages 16 apart share a set (the set index folds VA bits 4 and up): the third evicts the
    // least recently used of the first two.
    let m = tables(pte::page(PAGE_PA, pte::READ));
    let base = VA & !0x1F_FFFF; // L0 index 0 of the same L0 table
    let pages = [0u64, 0x11, 0x22];
    for (i, p) in pages.iter().enumerate() {
        m.poke_u64(
            L0 + p * 8,
            pte::page(0x10_0000 + (i as u64) * 0x1000, pte::READ),
        );
    }
    let va = |p: u64| base + (p << 12);
    let tlb = DevTlb::new();
    let read = regs::ACCESS_READ;
    for p in pages {
        tlb.translate(&m, 0, ROOT, va(p), read).expect("mapped");
    }
    assert_eq!(m.accesses.get(), 12);
    // Most recent two (0x11, 0x22) hit; page 0 was evicted.
    tlb.translate(&m, 0, ROOT, va(0x22), read).expect("mapped");
    tlb.translate(&m, 0, ROOT, va(0x11), read).expect("mapped");
    assert_eq!(m.accesses.get(), 12);
    tlb.translate(&m, 0, ROOT, va(0), read).expect("mapped");
    assert_eq!(m.accesses.get(), 16);
    // 0x11 was used after 0x22, so 0x22 went out.
    tlb.translate(&m, 0, ROOT, va(0x11), read).expect("mapped");
    assert_eq!(m.accesses.get(), 16);
    tlb.translate(&m, 0, ROOT, va(0x22), read).expect("mapped");
    assert_eq!(m.accesses.get(), 20);
}
