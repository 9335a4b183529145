//! Shared test harness: a Vec-backed physical memory that checks every device access stays in
//! one page, a settable clock, page-table building and ring submission helpers.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use vgpu::model::{BusError, Clock, Device, PhysMem, Step};
use vgpu::uapi::ring::{self, Desc};
use vgpu::uapi::{pte, regs};

/// Bytes of test memory.
pub const MEM_SIZE: u64 = 32 << 20;
pub const PAGE: u64 = 4096;
/// Where queue q's ring lives (room for 4096 descriptors each).
pub const RING_AREA: u64 = 0x10_0000;
/// Fences (physical) live here.
pub const FENCE_AREA: u64 = 0x50_0000;
/// First page handed out by the page allocator.
pub const ALLOC_START: u64 = 0x60_0000;

/// VA of the first command buffer the helpers create.
pub const CMD_VA: u64 = 0x4000_0000;
/// VA of test data.
pub const DATA_VA: u64 = 0x8000_0000;

pub const R: u64 = pte::READ;
pub const W: u64 = pte::WRITE;
pub const RW: u64 = pte::READ | pte::WRITE;

/// Physical memory for the device. Panics (fails the test) if the device ever issues an empty
/// access or one crossing a 4 KiB page; returns `BusError` past the end.
pub struct TestMem {
    bytes: RefCell<Vec<u8>>,
    /// Device accesses so far.
    pub accesses: Cell<u64>,
}

impl TestMem {
    pub fn new() -> Self {
        TestMem {
            bytes: RefCell::new(vec![0; MEM_SIZE as usize]),
            accesses: Cell::new(0),
        }
    }

    fn range(pa: u64, len: usize) -> Result<std::ops::Range<usize>, BusError> {
        assert!(len > 0, "empty device access at {pa:#x}");
        assert!(
            pa % PAGE + len as u64 <= PAGE,
            "device access crosses a page: pa={pa:#x} len={len}"
        );
        let end = pa.checked_add(len as u64).ok_or(BusError)?;
        if end > MEM_SIZE {
            return Err(BusError);
        }
        Ok(pa as usize..end as usize)
    }

    /// CPU-side write (no page rule).
    pub fn poke(&self, pa: u64, data: &[u8]) {
        self.bytes.borrow_mut()[pa as usize..pa as usize + data.len()].copy_from_slice(data);
    }
    /// CPU-side read.
    pub fn peek(&self, pa: u64, len: usize) -> Vec<u8> {
        self.bytes.borrow()[pa as usize..pa as usize + len].to_vec()
    }
    pub fn poke_u64(&self, pa: u64, v: u64) {
        self.poke(pa, &v.to_le_bytes());
    }
    pub fn peek_u64(&self, pa: u64) -> u64 {
        u64::from_le_bytes(self.peek(pa, 8).try_into().unwrap())
    }
}

impl Default for TestMem {
    fn default() -> Self {
        Self::new()
    }
}

impl PhysMem for TestMem {
    fn read(&self, pa: u64, buf: &mut [u8]) -> Result<(), BusError> {
        let r = Self::range(pa, buf.len())?;
        self.accesses.set(self.accesses.get() + 1);
        buf.copy_from_slice(&self.bytes.borrow()[r]);
        Ok(())
    }
    fn write(&self, pa: u64, data: &[u8]) -> Result<(), BusError> {
        let r = Self::range(pa, data.len())?;
        self.accesses.set(self.accesses.get() + 1);
        self.bytes.borrow_mut()[r].copy_from_slice(data);
        Ok(())
    }
}

/// A clock the test sets.
#[derive(Clone, Default)]
pub struct FakeClock(pub Rc<Cell<u64>>);

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.0.get()
    }
}

pub type Dev = Device<TestMem, FakeClock>;

/// A device plus the driver-side bookkeeping of the tests.
pub struct H {
    pub dev: Dev,
    pub clock: FakeClock,
    next_page: u64,
    roots: [u64; regs::NUM_AS_SLOTS],
}

impl Default for H {
    fn default() -> Self {
        Self::new()
    }
}

impl H {
    /// A device with all interrupt causes unmasked and no queue set up.
    pub fn new() -> Self {
        let clock = FakeClock::default();
        let mut dev = Device::new(TestMem::new(), clock.clone());
        dev.mmio_write32(regs::IRQ_MASK, regs::IRQ_ALL);
        H {
            dev,
            clock,
            next_page: ALLOC_START,
            roots: [0; regs::NUM_AS_SLOTS],
        }
    }

    pub fn mem(&self) -> &TestMem {
        self.dev.mem()
    }

    pub fn r32(&mut self, off: usize) -> u32 {
        self.dev.mmio_read32(off)
    }
    pub fn w32(&mut self, off: usize, v: u32) {
        self.dev.mmio_write32(off, v)
    }
    pub fn qr(&mut self, q: usize, reg: usize) -> u32 {
        self.dev.mmio_read32(regs::queue_base(q) + reg)
    }
    pub fn qw(&mut self, q: usize, reg: usize, v: u32) {
        self.dev.mmio_write32(regs::queue_base(q) + reg, v)
    }

    /// A zeroed page; pages are handed out with a one-page gap so that VA-contiguous pages are
    /// never PA-contiguous.
    pub fn alloc_page(&mut self) -> u64 {
        let pa = self.next_page;
        self.next_page += 2 * PAGE;
        assert!(self.next_page <= MEM_SIZE, "test memory exhausted");
        pa
    }

    /// Creates slot `slot`'s address space (empty root table) and enables the slot.
    pub fn enable_slot(&mut self, slot: usize) -> u64 {
        let root = self.alloc_page();
        self.roots[slot] = root;
        self.dev.mmio_write64(regs::as_pt_base(slot), root);
        self.w32(regs::as_config(slot), regs::AS_ENABLED);
        root
    }

    pub fn root(&self, slot: usize) -> u64 {
        self.roots[slot]
    }

    /// PA of the table at `level` (3 = root) covering `va`, creating tables above as needed.
    pub fn table_for(&mut self, slot: usize, va: u64, level: usize) -> u64 {
        let mut table = self.roots[slot];
        assert_ne!(table, 0, "slot {slot} has no address space");
        for l in (level + 1..pte::LEVELS).rev() {
            let epa = table + pte::index(va, l) as u64 * 8;
            let e = self.mem().peek_u64(epa);
            table = if e & pte::VALID != 0 {
                pte::addr(e)
            } else {
                let t = self.alloc_page();
                self.mem().poke_u64(epa, pte::table(t));
                t
            };
        }
        table
    }

    /// PA of the entry at `level` for `va`.
    pub fn entry_pa(&mut self, slot: usize, va: u64, level: usize) -> u64 {
        self.table_for(slot, va, level) + pte::index(va, level) as u64 * 8
    }

    /// Writes a raw entry at `level` for `va` (creating the tables above).
    pub fn set_entry(&mut self, slot: usize, va: u64, level: usize, entry: u64) {
        let pa = self.entry_pa(slot, va, level);
        self.mem().poke_u64(pa, entry);
        // As a driver must (hw-spec §5): the device may hold the old translation.
        self.w32(regs::MMU_INVALIDATE, 1 << slot);
    }

    /// Maps `va` (page aligned) to the page at `pa`.
    pub fn map_page(&mut self, slot: usize, va: u64, pa: u64, access: u64) {
        self.set_entry(slot, va, 0, pte::page(pa, access));
    }

    /// Maps `[va, va + size)` (page aligned start) to fresh pages; returns their PAs.
    pub fn map(&mut self, slot: usize, va: u64, size: u64, access: u64) -> Vec<u64> {
        assert_eq!(va % PAGE, 0);
        let mut pas = Vec::new();
        let mut off = 0;
        while off < size {
            let pa = self.alloc_page();
            self.map_page(slot, va + off, pa, access);
            pas.push(pa);
            off += PAGE;
        }
        pas
    }

    /// CPU-side translation through the test's tables (panics if unmapped).
    pub fn va_to_pa(&self, slot: usize, va: u64) -> u64 {
        let mut table = self.roots[slot];
        for l in (0..pte::LEVELS).rev() {
            let e = self.mem().peek_u64(table + pte::index(va, l) as u64 * 8);
            assert!(e & pte::VALID != 0, "va {va:#x} unmapped at level {l}");
            table = pte::addr(e);
        }
        table + va % PAGE
    }

    /// CPU-side write through the slot's mapping (ignores permissions).
    pub fn write_va(&mut self, slot: usize, va: u64, data: &[u8]) {
        let mut done = 0;
        while done < data.len() {
            let cur = va + done as u64;
            let n = ((PAGE - cur % PAGE) as usize).min(data.len() - done);
            let pa = self.va_to_pa(slot, cur);
            self.mem().poke(pa, &data[done..done + n]);
            done += n;
        }
    }

    /// CPU-side read through the slot's mapping.
    pub fn read_va(&self, slot: usize, va: u64, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len);
        while out.len() < len {
            let cur = va + out.len() as u64;
            let n = ((PAGE - cur % PAGE) as usize).min(len - out.len());
            out.extend(self.mem().peek(self.va_to_pa(slot, cur), n));
        }
        out
    }

    pub fn write_words(&mut self, slot: usize, va: u64, words: &[u32]) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.write_va(slot, va, &bytes);
    }

    /// Maps a read-only command buffer at `va` holding `words`; returns its size in bytes.
    pub fn cmdbuf(&mut self, slot: usize, va: u64, words: &[u32]) -> u32 {
        let size = (words.len() * 4) as u64;
        self.map(slot, va, size.div_ceil(PAGE) * PAGE, R);
        self.write_words(slot, va, words);
        size as u32
    }

    /// Ring PA of queue `q`.
    pub fn ring_pa(q: usize) -> u64 {
        RING_AREA + q as u64 * 0x4_0000
    }

    /// Programs queue `q`: ring base, size, then enable with `prio`.
    pub fn setup_queue(&mut self, q: usize, size: u32, prio: u32) {
        self.dev
            .mmio_write64(regs::queue_base(q) + regs::Q_RING_BASE, Self::ring_pa(q));
        self.qw(q, regs::Q_RING_SIZE, size);
        self.qw(
            q,
            regs::Q_CTRL,
            regs::Q_CTRL_ENABLE | (prio << regs::Q_CTRL_PRIO_SHIFT),
        );
    }

    /// Writes `d` at the tail of queue `q`'s ring without advancing the tail.
    pub fn write_desc(&mut self, q: usize, index: u32, d: &Desc) {
        let size = self.qr(q, regs::Q_RING_SIZE);
        let pa = Self::ring_pa(q) + u64::from(index % size) * 64;
        self.mem().poke(pa, &d.to_bytes());
    }

    /// Appends `d` to queue `q`'s ring, advances the tail and rings the doorbell. Returns the
    /// PA the descriptor was written at.
    pub fn push(&mut self, q: usize, d: &Desc) -> u64 {
        let tail = self.qr(q, regs::Q_TAIL);
        let size = self.qr(q, regs::Q_RING_SIZE);
        self.write_desc(q, tail, d);
        self.qw(q, regs::Q_TAIL, tail.wrapping_add(1));
        self.qw(q, regs::Q_DOORBELL, 1);
        Self::ring_pa(q) + u64::from(tail % size) * 64
    }

    /// Steps until the device stops making progress; returns the final step result.
    pub fn run(&mut self) -> Step {
        for _ in 0..10_000_000 {
            let s = self.dev.step();
            if s != Step::Progress {
                return s;
            }
        }
        panic!("device never stopped making progress");
    }

    /// Latched fault registers: (FAULT_STATUS, FAULT_ADDR, FAULT_OFFSET, FAULT_JOB).
    pub fn fault(&mut self) -> (u32, u64, u32, u64) {
        (
            self.r32(regs::FAULT_STATUS),
            self.dev.mmio_read64(regs::FAULT_ADDR),
            self.r32(regs::FAULT_OFFSET),
            self.dev.mmio_read64(regs::FAULT_JOB),
        )
    }

    /// Maps `words` as a command buffer at `CMD_VA` in `slot` and queues it on `q` (which must
    /// be set up), with the given descriptor flags, fence and job id. Returns the size.
    #[allow(clippy::too_many_arguments)]
    pub fn submit_words(
        &mut self,
        q: usize,
        slot: usize,
        cmd_va: u64,
        words: &[u32],
        flags: u32,
        fence_pa: u64,
        value: u64,
        job_id: u64,
    ) -> u32 {
        let size = self.cmdbuf(slot, cmd_va, words);
        self.push(
            q,
            &exec_desc(slot as u32, cmd_va, size, flags, fence_pa, value, job_id),
        );
        size
    }
}

/// An EXEC descriptor.
#[allow(clippy::too_many_arguments)]
pub fn exec_desc(
    slot: u32,
    cmd_va: u64,
    cmd_size: u32,
    flags: u32,
    fence_pa: u64,
    value: u64,
    job_id: u64,
) -> Desc {
    Desc {
        kind: ring::DESC_EXEC,
        flags,
        as_slot: slot,
        cmd_size,
        cmd_va,
        fence_pa,
        value,
        job_id,
        reserved: [0; 2],
    }
}

/// A WAIT descriptor.
pub fn wait_desc(fence_pa: u64, value: u64, job_id: u64) -> Desc {
    Desc {
        kind: ring::DESC_WAIT,
        fence_pa,
        value,
        job_id,
        ..Desc::default()
    }
}

/// Concatenates packets.
pub fn cat(parts: &[&[u32]]) -> Vec<u32> {
    parts.iter().flat_map(|p| p.iter().copied()).collect()
}

/// A deterministic pseudo-random byte stream.
pub struct Lcg(pub u64);
impl Lcg {
    pub fn next_u32(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u32() as u8).collect()
    }
}
