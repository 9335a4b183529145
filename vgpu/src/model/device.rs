//! The device: its register block (hw-spec §2), interrupts (§3), queues and descriptor rings
//! (§4), fault latching (§7), engine reset and loss (§8) and the test-only fault injection hooks
//! (§9). Page-table walks live in `mmu.rs`, packet execution in `exec.rs`.

use super::exec::{self, Outcome, Space};
use super::mem::{read_u64, write_u64, Bus, Clock, PhysMem};
use super::mmu::{DevTlb, Fault, Tlb};
use crate::uapi::packet::Packet;
use crate::uapi::ring::{self, Desc};
use crate::uapi::{regs, version};

/// `CAPS` register value: GEMM_I8, ELTWISE, WAIT_MEM, TIMESTAMP and HANG_DEBUG (bits 0-4). The
/// register bits are the low bits of the UAPI capability word (hw-spec §2).
const CAPS_VALUE: u32 = (version::CAP_GEMM_I8
    | version::CAP_ELTWISE
    | version::CAP_WAIT_MEM
    | version::CAP_TIMESTAMP
    | version::CAP_HANG_DEBUG) as u32;

// High words of the 64-bit registers (the low word is at the register's offset).
const FAULT_ADDR_HI: usize = regs::FAULT_ADDR + 4;
const FAULT_JOB_HI: usize = regs::FAULT_JOB + 4;
const TIMESTAMP_HI: usize = regs::TIMESTAMP + 4;
const Q_RING_BASE_HI: usize = regs::Q_RING_BASE + 4;
const Q_CUR_JOB_HI: usize = regs::Q_CUR_JOB + 4;
const Q_WAIT_ADDR_HI: usize = regs::Q_WAIT_ADDR + 4;
const Q_WAIT_VALUE_HI: usize = regs::Q_WAIT_VALUE + 4;
// Address-space slot window: 16 bytes per slot.
const AS_FIRST: usize = regs::as_pt_base(0);
const AS_END: usize = regs::as_pt_base(regs::NUM_AS_SLOTS);
const AS_STRIDE: usize = regs::as_pt_base(1) - regs::as_pt_base(0);
const AS_PT_BASE_LO: usize = 0;
const AS_PT_BASE_HI: usize = 4;
const AS_CONFIG_OFF: usize = regs::as_config(0) - regs::as_pt_base(0);
// Queue window: 64 bytes per queue.
const Q_FIRST: usize = regs::queue_base(0);
const Q_END: usize = regs::queue_base(regs::NUM_QUEUES);
const Q_STRIDE: usize = regs::queue_base(1) - regs::queue_base(0);
/// `Q_CTRL` bits that exist: enable and the two priority bits.
const Q_CTRL_MASK: u32 = regs::Q_CTRL_ENABLE | (0x3 << regs::Q_CTRL_PRIO_SHIFT);
/// Highest priority value (`Q_CTRL` priority 3 is scheduled as 2).
const PRIO_MAX: u32 = 2;
/// Descriptor flags that exist.
const DESC_FLAGS_ALL: u32 = ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ;

/// What one call of [`Device::step`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do: no queue has work (or the device is lost).
    Idle,
    /// Work was done: a packet executed, a descriptor was fetched or completed, a wait was
    /// satisfied, or a queue faulted or hung.
    Progress,
    /// Nothing could run: every queue with work is waiting on memory, hung, or disabled mid-job.
    Stalled,
}

/// What one call of [`Device::run_round`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Round {
    /// Steps that made progress, including the one that raised the interrupt line.
    pub steps: u64,
    /// What the last step did ([`Step::Progress`] when the round ended on a limit or on the
    /// interrupt line with work possibly left).
    pub last: Step,
}

/// One address-space slot.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// `AS_PT_BASE`.
    pt_base: u64,
    /// Low word written, waiting for the high word.
    pt_base_lo: u32,
    /// `AS_CONFIG`.
    config: u32,
}

/// What an executing descriptor is blocked on.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// Not blocked.
    None,
    /// A WAIT descriptor whose condition is unmet.
    Desc,
    /// A WAIT_MEM packet (re-executed on every check) of `bytes` bytes.
    Mem { packet: Packet, bytes: u32 },
    /// A long packet of `bytes` bytes that yielded after a step's work (`exec::STEP_WORK`):
    /// the queue is running, and its next step resumes the packet at `at`.
    Resume { packet: Packet, bytes: u32, at: u64 },
}

/// The descriptor a queue is executing.
#[derive(Clone, Copy, Debug)]
struct Active {
    desc: Desc,
    /// `AS_PT_BASE` of the descriptor's slot, sampled at fetch.
    pt_base: u64,
    wait: Wait,
}

/// One hardware queue.
#[derive(Clone, Copy, Debug, Default)]
struct Queue {
    ring_base: u64,
    ring_base_lo: u32,
    ring_size: u32,
    head: u32,
    /// `Q_TAIL` as written by the driver.
    tail: u32,
    /// `Q_TAIL` as sampled by the last doorbell: the device runs up to here.
    tail_seen: u32,
    ctrl: u32,
    active: Option<Active>,
    hung: bool,
    faulted: bool,
    cur_job: u64,
    cur_offset: u32,
    done_count: u32,
    /// The command-fetch TLB: the last page this queue fetched packets from, kept across
    /// packets and command buffers (batches of command buffers come from a few pages), valid
    /// while `tlb_tag` matches (same slot and table, no invalidation of the device's
    /// translation cache since): a hit skips the [`DevTlb`] lookup, whose hash and tag checks
    /// were a tenth of a one-packet command buffer's cost under emulation. Part of the device's
    /// translation cache (hw-spec §5): invalidated with it.
    fetch_tlb: Tlb,
    /// The data TLB of the packets with one memory operand (FILL, TIMESTAMP, FENCE, WAIT_MEM:
    /// see `exec::execute`), kept the same way.
    data_tlb: Tlb,
    /// (slot, `AS_PT_BASE`, `DevTlb::generation`) `fetch_tlb` and `data_tlb` were filled under.
    tlb_tag: (u32, u64, u64),
}

impl Queue {
    #[inline]
    fn enabled(&self) -> bool {
        self.ctrl & regs::Q_CTRL_ENABLE != 0
    }

    #[inline]
    fn prio(&self) -> u32 {
        core::cmp::min((self.ctrl >> regs::Q_CTRL_PRIO_SHIFT) & 0x3, PRIO_MAX)
    }

    #[inline]
    fn pending(&self) -> bool {
        self.tail_seen != self.head
    }

    /// May make progress in a step (a waiting queue is re-checked).
    #[inline]
    fn runnable(&self) -> bool {
        self.enabled() && !self.faulted && !self.hung && (self.active.is_some() || self.pending())
    }

    fn state(&self) -> u32 {
        if self.faulted {
            regs::QSTATE_FAULTED
        } else if self.hung {
            regs::QSTATE_HUNG
        } else if let Some(Active {
            wait: Wait::Desc | Wait::Mem { .. },
            ..
        }) = self.active
        {
            regs::QSTATE_WAITING
        } else if self.active.is_some() || (self.enabled() && self.pending()) {
            regs::QSTATE_RUNNING
        } else {
            regs::QSTATE_IDLE
        }
    }

    /// `Q_WAIT_ADDR` and `Q_WAIT_VALUE`: what a waiting queue waits for, (0, 0) otherwise.
    fn wait_on(&self) -> (u64, u64) {
        match self.active {
            Some(Active {
                wait: Wait::Desc,
                desc,
                ..
            }) if !self.faulted && !self.hung => (desc.fence_pa, desc.value),
            Some(Active {
                wait:
                    Wait::Mem {
                        packet: Packet::WaitMem { addr, value },
                        ..
                    },
                ..
            }) if !self.faulted && !self.hung => (addr, value),
            _ => (0, 0),
        }
    }

    fn busy(&self) -> bool {
        matches!(
            self.state(),
            regs::QSTATE_RUNNING | regs::QSTATE_WAITING | regs::QSTATE_HUNG
        )
    }
}

/// Where a queue's ring is and how far it goes (what a descriptor fetch needs of the queue).
struct RingPos {
    ring_base: u64,
    ring_size: u32,
    head: u32,
    tail_seen: u32,
}

/// The latched `FAULT_*` registers.
#[derive(Clone, Copy, Debug, Default)]
struct FaultRegs {
    status: u32,
    addr: u64,
    offset: u32,
    job: u64,
}

/// Everything but the memory and the clock, so a step can borrow those while mutating this.
#[derive(Clone, Copy, Debug, Default)]
struct State {
    queues: [Queue; regs::NUM_QUEUES],
    slots: [Slot; regs::NUM_AS_SLOTS],
    debug_ctrl: u32,
    irq_raw: u32,
    irq_mask: u32,
    fault: FaultRegs,
    lost: bool,
    fail_next_reset: bool,
    fail_next_access: bool,
    /// Round-robin position per priority: the queue after the one of that priority served last.
    rr_next: [usize; PRIO_MAX as usize + 1],
    /// `TIMESTAMP` sampled when its low word was read; the high word reads from here.
    ts_latch: u64,
    /// The last step ran part of a long packet (`exec::Outcome::Partial`, or a resumed one):
    /// a step of up to `exec::STEP_WORK`, far more than a short packet's.
    long_step: bool,
}

/// The aigpu virtual GPU: registers, queues, MMU and packet engine over the host's memory `M`,
/// with time from `C`. Fixed-size state only (`regs::NUM_QUEUES` queues, `regs::NUM_AS_SLOTS`
/// slots); nothing allocates.
pub struct Device<M: PhysMem, C: Clock> {
    mem: M,
    clock: C,
    st: State,
    /// Cached translations of every slot (hw-spec §5).
    tlb: DevTlb,
}

impl<M: PhysMem, C: Clock> Device<M, C> {
    /// A device in its power-on state: queues disabled and idle, slots zero, interrupts masked,
    /// `DEBUG_CTRL` 0 (HANG disabled).
    pub fn new(mem: M, clock: C) -> Self {
        Device {
            mem,
            clock,
            st: State::default(),
            tlb: DevTlb::new(),
        }
    }

    /// The memory the device works on.
    pub fn mem(&self) -> &M {
        &self.mem
    }

    /// Reads the 32-bit register at byte `offset` of the MMIO block. Unknown, write-only and
    /// misaligned offsets read 0; every read of a lost device returns `0xFFFF_FFFF`. Reading the
    /// low word of `TIMESTAMP` samples the clock and latches the value the high word returns, so
    /// a low-then-high read never tears.
    pub fn mmio_read32(&mut self, offset: usize) -> u32 {
        let st = &mut self.st;
        if st.lost {
            return regs::LOST_READ_VALUE;
        }
        if !offset.is_multiple_of(4) {
            return 0;
        }
        match offset {
            regs::ID => regs::ID_VALUE,
            regs::HW_VERSION => regs::HW_VERSION_VALUE,
            regs::CAPS => CAPS_VALUE,
            regs::NUM_QUEUES_REG => regs::NUM_QUEUES as u32,
            regs::NUM_AS_SLOTS_REG => regs::NUM_AS_SLOTS as u32,
            regs::DEBUG_CTRL => st.debug_ctrl,
            regs::IRQ_RAWSTAT => st.irq_raw,
            regs::IRQ_MASK => st.irq_mask,
            regs::IRQ_STATUS => st.irq_raw & st.irq_mask,
            regs::STATUS => {
                let mut s = 0;
                if st.queues.iter().any(Queue::busy) {
                    s |= regs::STATUS_BUSY;
                }
                if st.fault.status & regs::FAULT_VALID != 0 {
                    s |= regs::STATUS_FAULT;
                }
                s
            }
            regs::FAULT_STATUS => st.fault.status,
            regs::FAULT_ADDR => st.fault.addr as u32,
            FAULT_ADDR_HI => (st.fault.addr >> 32) as u32,
            regs::FAULT_OFFSET => st.fault.offset,
            regs::FAULT_JOB => st.fault.job as u32,
            FAULT_JOB_HI => (st.fault.job >> 32) as u32,
            regs::TIMESTAMP => {
                st.ts_latch = self.clock.now_ns();
                st.ts_latch as u32
            }
            TIMESTAMP_HI => (st.ts_latch >> 32) as u32,
            AS_FIRST..AS_END => {
                let rel = offset - AS_FIRST;
                let Some(slot) = st.slots.get(rel / AS_STRIDE) else {
                    return 0;
                };
                match rel % AS_STRIDE {
                    AS_PT_BASE_LO => slot.pt_base as u32,
                    AS_PT_BASE_HI => (slot.pt_base >> 32) as u32,
                    AS_CONFIG_OFF => slot.config,
                    _ => 0,
                }
            }
            Q_FIRST..Q_END => {
                let rel = offset - Q_FIRST;
                let Some(q) = st.queues.get(rel / Q_STRIDE) else {
                    return 0;
                };
                match rel % Q_STRIDE {
                    regs::Q_RING_BASE => q.ring_base as u32,
                    Q_RING_BASE_HI => (q.ring_base >> 32) as u32,
                    regs::Q_RING_SIZE => q.ring_size,
                    regs::Q_HEAD => q.head,
                    regs::Q_TAIL => q.tail,
                    regs::Q_CTRL => q.ctrl,
                    regs::Q_STATE => q.state(),
                    regs::Q_CUR_JOB => q.cur_job as u32,
                    Q_CUR_JOB_HI => (q.cur_job >> 32) as u32,
                    regs::Q_CUR_OFFSET => q.cur_offset,
                    regs::Q_DONE_COUNT => q.done_count,
                    regs::Q_WAIT_ADDR => q.wait_on().0 as u32,
                    Q_WAIT_ADDR_HI => (q.wait_on().0 >> 32) as u32,
                    regs::Q_WAIT_VALUE => q.wait_on().1 as u32,
                    Q_WAIT_VALUE_HI => (q.wait_on().1 >> 32) as u32,
                    _ => 0,
                }
            }
            _ => 0,
        }
    }

    /// Writes the 32-bit register at byte `offset`. Writes to read-only, unknown or misaligned
    /// offsets, and every write to a lost device, are ignored. A 64-bit register takes the
    /// value when its high word is written (with the low word written before).
    pub fn mmio_write32(&mut self, offset: usize, value: u32) {
        let st = &mut self.st;
        if st.lost || !offset.is_multiple_of(4) {
            return;
        }
        match offset {
            regs::DEBUG_CTRL => st.debug_ctrl = value & regs::DEBUG_CTRL_HANG,
            regs::IRQ_MASK => st.irq_mask = value & regs::IRQ_ALL,
            regs::IRQ_ACK => st.irq_raw &= !value,
            regs::RESET if value == regs::RESET_ENGINE => {
                st.reset();
                self.tlb.invalidate(regs::MMU_INVALIDATE_ALL);
            }
            regs::MMU_INVALIDATE => self.tlb.invalidate(value),
            AS_FIRST..AS_END => {
                let rel = offset - AS_FIRST;
                let index = rel / AS_STRIDE;
                let Some(slot) = st.slots.get_mut(index) else {
                    return;
                };
                match rel % AS_STRIDE {
                    AS_PT_BASE_LO => slot.pt_base_lo = value,
                    AS_PT_BASE_HI => {
                        slot.pt_base = u64::from(slot.pt_base_lo) | (u64::from(value) << 32);
                        // A slot given another address space forgets the old one's pages.
                        self.tlb.invalidate(1 << index);
                    }
                    AS_CONFIG_OFF => {
                        slot.config = value & regs::AS_ENABLED;
                        self.tlb.invalidate(1 << index);
                    }
                    _ => {}
                }
            }
            Q_FIRST..Q_END => {
                let rel = offset - Q_FIRST;
                let Some(q) = st.queues.get_mut(rel / Q_STRIDE) else {
                    return;
                };
                match rel % Q_STRIDE {
                    regs::Q_RING_BASE => q.ring_base_lo = value,
                    Q_RING_BASE_HI => {
                        q.ring_base = u64::from(q.ring_base_lo) | (u64::from(value) << 32)
                    }
                    regs::Q_RING_SIZE => q.ring_size = value,
                    regs::Q_TAIL => q.tail = value,
                    regs::Q_DOORBELL => q.tail_seen = q.tail,
                    regs::Q_CTRL => q.ctrl = value & Q_CTRL_MASK,
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// Reads a 64-bit register: the low word, then the high word.
    pub fn mmio_read64(&mut self, offset: usize) -> u64 {
        let lo = self.mmio_read32(offset);
        let hi = match offset.checked_add(4) {
            Some(hi_offset) => self.mmio_read32(hi_offset),
            None if self.st.lost => regs::LOST_READ_VALUE,
            None => 0,
        };
        u64::from(lo) | (u64::from(hi) << 32)
    }

    /// Writes a 64-bit register: the low word, then the high word (which latches the value).
    pub fn mmio_write64(&mut self, offset: usize, value: u64) {
        self.mmio_write32(offset, value as u32);
        if let Some(hi_offset) = offset.checked_add(4) {
            self.mmio_write32(hi_offset, (value >> 32) as u32);
        }
    }

    /// Queue `q`'s `Q_HEAD`, `Q_STATE` and `Q_CUR_JOB` in one call, exactly as the three register
    /// reads would return them (all ones when the device is lost; zeros for a queue that does not
    /// exist): what a host mirrors after every round, without four register dispatches per queue.
    pub fn queue_status(&self, q: usize) -> (u32, u32, u64) {
        if self.st.lost {
            let all = regs::LOST_READ_VALUE;
            return (all, all, u64::from(all) | (u64::from(all) << 32));
        }
        self.st
            .queues
            .get(q)
            .map_or((0, 0, 0), |x| (x.head, x.state(), x.cur_job))
    }

    /// One round of a device thread: [`Device::step`] until a step makes no progress, the
    /// interrupt line is raised (the host must deliver it before running on), `max_steps`
    /// steps ran, or `stop_early(steps so far, long)` returns true (asked after every step that
    /// made progress; a host uses it for a time budget; `long`: that step ran part of a long
    /// packet, hw-spec §6, so it is worth a look at the clock however few steps ran). Both hosts (the simulator and aigpu.ko) run
    /// their device threads with this, so what a round and its step count mean cannot differ
    /// between them (their debugfs `steps` and `busy_us` are per round).
    pub fn run_round(
        &mut self,
        max_steps: u64,
        mut stop_early: impl FnMut(u64, bool) -> bool,
    ) -> Round {
        let mut round = Round {
            steps: 0,
            last: Step::Idle,
        };
        while round.steps < max_steps {
            round.last = self.step();
            if round.last != Step::Progress {
                break;
            }
            round.steps += 1;
            if self.irq_line() || stop_early(round.steps, self.st.long_step) {
                break;
            }
        }
        round
    }

    /// Lets the device run: executes at most one packet, or one descriptor boundary action
    /// (fetch, completion, a satisfied wait), on one queue; the fetch of an EXEC descriptor also
    /// executes its first packet. Queues are considered highest priority first, round robin among
    /// equal priorities; a waiting queue re-checks its memory and, if still unmet, lets the next
    /// queue run.
    pub fn step(&mut self) -> Step {
        if self.st.lost {
            return Step::Idle;
        }
        let bus = Bus::new(&self.mem, self.st.fail_next_access);
        let progressed = self.st.step(&bus, &self.clock, &self.tlb);
        self.st.fail_next_access = bus.fail_pending();
        if progressed {
            Step::Progress
        } else if self.busy() {
            Step::Stalled
        } else {
            Step::Idle
        }
    }

    /// The interrupt line: asserted while `IRQ_STATUS` (= `IRQ_RAWSTAT & IRQ_MASK`) is non-zero.
    /// Never asserted once the device is lost.
    pub fn irq_line(&self) -> bool {
        !self.st.lost && self.st.irq_raw & self.st.irq_mask != 0
    }

    /// Whether any queue has work: running, waiting or hung (not idle, not faulted).
    pub fn busy(&self) -> bool {
        !self.st.lost && self.st.queues.iter().any(Queue::busy)
    }

    /// Fault injection: the next device memory access (descriptor fetch, page-table walk, packet
    /// fetch, data, fence) fails; the queue making it faults with `BUS_ERROR` and `MEM_ERROR` is
    /// raised. Survives an engine reset until consumed.
    pub fn inject_bus_error(&mut self) {
        self.st.fail_next_access = true;
    }

    /// Fault injection: the next engine reset fails and the device is lost.
    pub fn inject_reset_failure(&mut self) {
        self.st.fail_next_reset = true;
    }

    /// Fault injection: the device falls off the bus now (lost: reads return all ones, writes are
    /// ignored, nothing runs, no interrupt is raised again).
    pub fn fall_off_bus(&mut self) {
        self.st.lost = true;
    }
}

impl State {
    fn raise(&mut self, cause: u32) {
        self.irq_raw |= cause;
    }

    /// `RESET` <- `RESET_ENGINE` (hw-spec §8): every queue stops (the descriptor in execution is
    /// dropped), head = tail = 0, queues disabled, done counts 0, `FAULT_*` cleared, then
    /// `RESET_DONE`. Ring base and size, slots, `DEBUG_CTRL`, `IRQ_MASK` and pending interrupt
    /// causes are kept. With a reset failure injected, the device is lost instead.
    fn reset(&mut self) {
        if self.fail_next_reset {
            self.fail_next_reset = false;
            self.lost = true;
            return;
        }
        for q in self.queues.iter_mut() {
            *q = Queue {
                ring_base: q.ring_base,
                ring_size: q.ring_size,
                ..Queue::default()
            };
        }
        self.fault = FaultRegs::default();
        self.rr_next = [0; PRIO_MAX as usize + 1];
        self.raise(regs::IRQ_RESET_DONE);
    }

    /// Stops queue `q` on `fault`; latches `FAULT_*` unless a fault is already latched; raises
    /// `MEM_ERROR` for a bus error, `FAULT` otherwise.
    fn fault(&mut self, q: usize, fault: Fault, job: u64, slot: u32, offset: u32) {
        if let Some(queue) = self.queues.get_mut(q) {
            queue.faulted = true;
            queue.cur_job = job;
            queue.cur_offset = offset;
        }
        if self.fault.status & regs::FAULT_VALID == 0 {
            self.fault = FaultRegs {
                status: regs::fault_status(fault.kind, fault.access, q as u32, slot),
                addr: fault.addr,
                offset,
                job,
            };
        }
        self.raise(if fault.kind == regs::FAULT_BUS_ERROR {
            regs::IRQ_MEM_ERROR
        } else {
            regs::IRQ_FAULT
        });
    }

    fn step<M: PhysMem + ?Sized, C: Clock + ?Sized>(
        &mut self,
        bus: &Bus<'_, M>,
        clock: &C,
        tlb: &DevTlb,
    ) -> bool {
        self.long_step = false;
        // Which queues may run, per priority, in one pass: running one queue never changes
        // whether another one is runnable, so the masks stay valid for this whole step.
        let mut runnable = [0u32; PRIO_MAX as usize + 1];
        for (q, queue) in self.queues.iter().enumerate() {
            if queue.runnable() {
                if let Some(m) = runnable.get_mut(queue.prio() as usize) {
                    *m |= 1 << q;
                }
            }
        }
        for prio in (0..=PRIO_MAX).rev() {
            let mask = runnable.get(prio as usize).copied().unwrap_or(0);
            if mask == 0 {
                continue;
            }
            let start = self.rr_next.get(prio as usize).copied().unwrap_or(0) % regs::NUM_QUEUES;
            // The runnable queues in round-robin order from `start`, one set bit each: visiting
            // only those (instead of every position) was a tenth of a step's own cost.
            let all = (1u32 << regs::NUM_QUEUES) - 1;
            let mut order = ((mask >> start) | (mask << (regs::NUM_QUEUES - start))) & all;
            while order != 0 {
                let q = (start + order.trailing_zeros() as usize) % regs::NUM_QUEUES;
                order &= order - 1;
                if self.run_queue(q, bus, clock, tlb) {
                    if let Some(next) = self.rr_next.get_mut(prio as usize) {
                        *next = (q + 1) % regs::NUM_QUEUES;
                    }
                    return true;
                }
            }
        }
        false
    }

    /// One action on runnable queue `q`; false if it is waiting and still unmet.
    fn run_queue<M: PhysMem + ?Sized, C: Clock + ?Sized>(
        &mut self,
        q: usize,
        bus: &Bus<'_, M>,
        clock: &C,
        tlb: &DevTlb,
    ) -> bool {
        let Some(queue) = self.queues.get(q) else {
            return false;
        };
        let Some(active) = queue.active.as_ref() else {
            // An EXEC descriptor runs its first packet in the step that fetches it: a one-packet
            // command buffer is one step, not two (the step is the unit of the device thread's
            // work under emulation, and most of its cost is per step).
            if self.fetch_descriptor(q, bus) {
                self.run_packet(q, bus, clock, tlb);
            }
            return true;
        };
        if let Wait::None = active.wait {
            // The common case, before anything is copied out of the queue.
            self.run_packet(q, bus, clock, tlb);
            return true;
        }
        let active = *active;
        let offset = queue.cur_offset;
        let desc = active.desc;
        match active.wait {
            Wait::Desc => match desc_wait_met(bus, &desc) {
                Ok(true) => self.complete(q, bus),
                Ok(false) => return false,
                Err(f) => st_fault_desc(self, q, f, &desc, 0),
            },
            Wait::Mem { packet, bytes } => {
                let space = Space {
                    mem: bus,
                    slot: desc.as_slot,
                    pt_base: active.pt_base,
                    tlb,
                };
                match exec::execute(&space, clock, &packet, &mut Tlb::new(), 0) {
                    Ok(Outcome::Waiting) => return false,
                    Ok(_) => {
                        self.set_wait(q, Wait::None);
                        self.advance(q, bytes, bus);
                    }
                    Err(f) => self.fault(q, f, desc.job_id, desc.as_slot, offset),
                }
            }
            Wait::Resume { packet, bytes, at } => {
                let space = Space {
                    mem: bus,
                    slot: desc.as_slot,
                    pt_base: active.pt_base,
                    tlb,
                };
                let mut data_tlb = Tlb::new();
                match exec::execute(&space, clock, &packet, &mut data_tlb, at) {
                    Ok(Outcome::Partial(next)) => {
                        self.long_step = true;
                        self.set_wait(
                            q,
                            Wait::Resume {
                                packet,
                                bytes,
                                at: next,
                            },
                        )
                    }
                    Ok(_) => {
                        self.long_step = true;
                        self.set_wait(q, Wait::None);
                        self.advance(q, bytes, bus);
                    }
                    Err(f) => self.fault(q, f, desc.job_id, desc.as_slot, offset),
                }
            }
            Wait::None => {}
        }
        true
    }

    /// Fetches and executes the packet at queue `q`'s current offset in its active EXEC
    /// descriptor.
    fn run_packet<M: PhysMem + ?Sized, C: Clock + ?Sized>(
        &mut self,
        q: usize,
        bus: &Bus<'_, M>,
        clock: &C,
        tlb: &DevTlb,
    ) {
        let Some((active, offset)) = self
            .queues
            .get(q)
            .and_then(|queue| queue.active.map(|a| (a, queue.cur_offset)))
        else {
            return;
        };
        let desc = &active.desc;
        let space = Space {
            mem: bus,
            slot: desc.as_slot,
            pt_base: active.pt_base,
            tlb,
        };
        let hang_enabled = self.debug_ctrl & regs::DEBUG_CTRL_HANG != 0;
        let tag = (desc.as_slot, active.pt_base, tlb.generation());
        let Some(queue) = self.queues.get_mut(q) else {
            return;
        };
        if queue.tlb_tag != tag {
            queue.fetch_tlb = Tlb::new();
            queue.data_tlb = Tlb::new();
            queue.tlb_tag = tag;
        }
        // A fault of the fetch or of the execution is handled alike (at the packet's offset).
        let done = exec::fetch(
            &space,
            desc.cmd_va,
            desc.cmd_size,
            offset,
            hang_enabled,
            &mut queue.fetch_tlb,
        )
        .and_then(|f| {
            exec::execute(&space, clock, &f.packet, &mut queue.data_tlb, 0)
                .map(|outcome| (f, outcome))
        });
        match done {
            Ok((f, Outcome::Done)) => self.advance(q, f.bytes, bus),
            Ok((f, Outcome::FenceIrq)) => {
                self.raise(regs::IRQ_FENCE);
                self.advance(q, f.bytes, bus);
            }
            Ok((f, Outcome::Waiting)) => self.set_wait(
                q,
                Wait::Mem {
                    packet: f.packet,
                    bytes: f.bytes,
                },
            ),
            Ok((f, Outcome::Partial(at))) => {
                self.long_step = true;
                self.set_wait(
                    q,
                    Wait::Resume {
                        packet: f.packet,
                        bytes: f.bytes,
                        at,
                    },
                )
            }
            Ok((_, Outcome::Hang)) => {
                if let Some(queue) = self.queues.get_mut(q) {
                    queue.hung = true;
                }
            }
            Err(f) => self.fault(q, f, desc.job_id, desc.as_slot, offset),
        }
    }

    fn set_wait(&mut self, q: usize, wait: Wait) {
        if let Some(active) = self
            .queues
            .get_mut(q)
            .and_then(|queue| queue.active.as_mut())
        {
            active.wait = wait;
        }
    }

    /// Moves queue `q` past a packet of `bytes` bytes; completes the descriptor at its end.
    fn advance<M: PhysMem + ?Sized>(&mut self, q: usize, bytes: u32, bus: &Bus<'_, M>) {
        let Some(queue) = self.queues.get_mut(q) else {
            return;
        };
        queue.cur_offset = queue.cur_offset.saturating_add(bytes);
        let end = queue.active.map_or(0, |a| a.desc.cmd_size);
        if queue.cur_offset >= end {
            self.complete(q, bus);
        }
    }

    /// Completes queue `q`'s descriptor: the fence (`DESC_FLAG_FENCE`, not for WAIT), then
    /// `JOB_DONE(q)` (`DESC_FLAG_IRQ`), then head and done count advance.
    fn complete<M: PhysMem + ?Sized>(&mut self, q: usize, bus: &Bus<'_, M>) {
        let Some(queue) = self.queues.get_mut(q) else {
            return;
        };
        let Some(active) = queue.active else {
            return;
        };
        let d = active.desc;
        let offset = queue.cur_offset;
        let fence = d.kind != ring::DESC_WAIT && d.flags & ring::DESC_FLAG_FENCE != 0;
        if fence && write_u64(bus, d.fence_pa, d.value).is_err() {
            let f = Fault::new(regs::FAULT_BUS_ERROR, regs::ACCESS_WRITE, d.fence_pa);
            st_fault_desc(self, q, f, &d, offset);
            return;
        }
        if let Some(queue) = self.queues.get_mut(q) {
            queue.head = queue.head.wrapping_add(1);
            queue.done_count = queue.done_count.wrapping_add(1);
            queue.active = None;
            queue.cur_job = 0;
            queue.cur_offset = 0;
        }
        if d.flags & ring::DESC_FLAG_IRQ != 0 {
            self.raise(regs::irq_job_done(q));
        }
    }

    /// Fetches and checks the descriptor at queue `q`'s head, and performs what can be done at
    /// once: a NOP completes, a WAIT completes or starts waiting, an EXEC becomes active (an
    /// empty one completes). True when an EXEC with packets became active.
    fn fetch_descriptor<M: PhysMem + ?Sized>(&mut self, q: usize, bus: &Bus<'_, M>) -> bool {
        // The four fields needed, not a copy of the whole queue (its active descriptor is most
        // of it, and this runs once per command buffer).
        let Some(queue) = self.queues.get(q).map(|x| RingPos {
            ring_base: x.ring_base,
            ring_size: x.ring_size,
            head: x.head,
            tail_seen: x.tail_seen,
        }) else {
            return false;
        };
        let fetch = regs::ACCESS_FETCH;
        let size = queue.ring_size;
        let ring_ok = size.is_power_of_two()
            && (2..=regs::RING_MAX_ENTRIES).contains(&size)
            && queue.ring_base % ring::DESC_SIZE as u64 == 0
            && queue.tail_seen.wrapping_sub(queue.head) <= size;
        let index = u64::from(queue.head & size.wrapping_sub(1));
        let pa = queue
            .ring_base
            .checked_add(index * ring::DESC_SIZE as u64)
            .filter(|_| ring_ok);
        let Some(pa) = pa else {
            // Ring registers out of range (size not a power of two in 2..=4096, base not 64-byte
            // aligned) or more descriptors queued than the ring holds.
            let f = Fault::new(regs::FAULT_BAD_DESCRIPTOR, fetch, queue.ring_base);
            self.fault(q, f, 0, 0, 0);
            return false;
        };
        let mut bytes = [0u8; ring::DESC_SIZE];
        if bus.read(pa, &mut bytes).is_err() {
            self.fault(q, Fault::new(regs::FAULT_BUS_ERROR, fetch, pa), 0, 0, 0);
            return false;
        }
        let d = Desc::from_bytes(&bytes);
        let bad = Fault::new(regs::FAULT_BAD_DESCRIPTOR, fetch, pa);
        let fence_ok = d.flags & ring::DESC_FLAG_FENCE == 0 || d.fence_pa.is_multiple_of(8);
        let mut pt_base = 0;
        let valid = d.reserved == [0, 0]
            && d.flags & !DESC_FLAGS_ALL == 0
            && match d.kind {
                ring::DESC_NOP => fence_ok,
                ring::DESC_WAIT => {
                    d.flags & ring::DESC_FLAG_FENCE == 0 && d.fence_pa.is_multiple_of(8)
                }
                ring::DESC_EXEC => match self.slots.get(d.as_slot as usize) {
                    Some(slot) if slot.config & regs::AS_ENABLED != 0 => {
                        pt_base = slot.pt_base;
                        fence_ok
                            && d.cmd_va.is_multiple_of(4)
                            && d.cmd_size.is_multiple_of(4)
                            && d.cmd_size <= ring::MAX_CMD_SIZE
                    }
                    _ => false,
                },
                _ => false,
            };
        if !valid {
            st_fault_desc(self, q, bad, &d, 0);
            return false;
        }
        let wait = if d.kind == ring::DESC_WAIT {
            Wait::Desc
        } else {
            Wait::None
        };
        if let Some(queue) = self.queues.get_mut(q) {
            queue.active = Some(Active {
                desc: d,
                pt_base,
                wait,
            });
            queue.cur_job = d.job_id;
            queue.cur_offset = 0;
        }
        match d.kind {
            ring::DESC_WAIT => match desc_wait_met(bus, &d) {
                Ok(true) => self.complete(q, bus),
                Ok(false) => {}
                Err(f) => st_fault_desc(self, q, f, &d, 0),
            },
            ring::DESC_EXEC if d.cmd_size > 0 => return true,
            _ => self.complete(q, bus),
        }
        false
    }
}

/// Faults queue `q` on a descriptor-level access of descriptor `d`.
fn st_fault_desc(st: &mut State, q: usize, f: Fault, d: &Desc, offset: u32) {
    st.fault(q, f, d.job_id, d.as_slot, offset);
}

/// Whether a WAIT descriptor's condition holds: the u64 at `fence_pa` is at least `value`.
fn desc_wait_met<M: PhysMem + ?Sized>(bus: &Bus<'_, M>, d: &Desc) -> Result<bool, Fault> {
    read_u64(bus, d.fence_pa)
        .map(|v| v >= d.value)
        .map_err(|_| Fault::new(regs::FAULT_BUS_ERROR, regs::ACCESS_READ, d.fence_pa))
}
