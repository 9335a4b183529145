//! Programming the device: what the driver writes into its registers to make it run the driver's
//! work, at start, after every engine reset and after a power cycle, and when a file's address
//! space takes a slot or work is queued.
//!
//! The order is docs/hw-spec.md's: interrupts unmasked first (so nothing raised after the rings
//! start is missed), `DEBUG_CTRL` (0 after a reset, §2), the address-space slots (a reset keeps
//! them, power-on does not; rewriting one drops its cached translations, §5, which a reset has
//! done anyway), then each ring's `Q_RING_BASE`, `Q_RING_SIZE` and only then `Q_CTRL` (enable),
//! before any doorbell (§2). A reset leaves head and tail at 0 (§8), so the driver rewrites its
//! queued work from ring index 0 and rings the doorbell afterwards ([`doorbell`]).

use super::queue::queue_priority;
use super::ring::RING_ENTRIES;
use crate::uapi::regs;

/// Register writes, as each driver reaches its device: aigpu.ko through `Hw` (`kmd/hw.rs`), the
/// simulator through the device model's MMIO.
pub trait Registers {
    /// Writes the 32-bit register at byte `offset`.
    fn write32(&mut self, offset: usize, value: u32);
    /// Writes the 64-bit register at byte `offset` (low word first, hw-spec §2).
    fn write64(&mut self, offset: usize, value: u64);
}

/// Makes the device run the driver's work: interrupts, `DEBUG_CTRL.HANG` when `hang` (the HANG
/// packet is allowed), each address space of `spaces` (slot, top-level table) enabled, and the
/// rings at `rings` (bus addresses, queue 0 first) enabled with their queue's priority. The
/// queues' tails are the caller's: after this, [`doorbell`] each queue with work.
pub fn program(
    r: &mut impl Registers,
    hang: bool,
    spaces: impl IntoIterator<Item = (usize, u64)>,
    rings: impl IntoIterator<Item = u64>,
) {
    r.write32(regs::IRQ_MASK, regs::IRQ_ALL);
    r.write32(
        regs::DEBUG_CTRL,
        if hang { regs::DEBUG_CTRL_HANG } else { 0 },
    );
    for (slot, root) in spaces {
        bind_space(r, slot, root);
    }
    for (q, base) in rings.into_iter().enumerate() {
        let b = regs::queue_base(q);
        r.write64(b + regs::Q_RING_BASE, base);
        r.write32(b + regs::Q_RING_SIZE, RING_ENTRIES);
        r.write32(
            b + regs::Q_CTRL,
            regs::Q_CTRL_ENABLE | (queue_priority(q) << regs::Q_CTRL_PRIO_SHIFT),
        );
    }
}

/// Points address-space slot `slot` at the top-level table `root` and enables it (the device
/// forgets the slot's old translations, hw-spec §5).
pub fn bind_space(r: &mut impl Registers, slot: usize, root: u64) {
    r.write64(regs::as_pt_base(slot), root);
    r.write32(regs::as_config(slot), regs::AS_ENABLED);
}

/// Disables address-space slot `slot` (its file is gone): a descriptor naming it faults.
pub fn unbind_space(r: &mut impl Registers, slot: usize) {
    r.write32(regs::as_config(slot), 0);
}

/// Tells queue `queue` that descriptors up to `tail` are written.
pub fn doorbell(r: &mut impl Registers, queue: usize, tail: u32) {
    let b = regs::queue_base(queue);
    r.write32(b + regs::Q_TAIL, tail);
    r.write32(b + regs::Q_DOORBELL, 1);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uapi::ioctl::{PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL};

    /// Records the writes (offset, value, width).
    struct Log {
        w: [(usize, u64, u8); 32],
        n: usize,
    }
    impl Log {
        fn new() -> Self {
            Self {
                w: [(0, 0, 0); 32],
                n: 0,
            }
        }
        fn writes(&self) -> &[(usize, u64, u8)] {
            &self.w[..self.n]
        }
    }
    impl Registers for Log {
        fn write32(&mut self, offset: usize, value: u32) {
            self.w[self.n] = (offset, value.into(), 32);
            self.n += 1;
        }
        fn write64(&mut self, offset: usize, value: u64) {
            self.w[self.n] = (offset, value, 64);
            self.n += 1;
        }
    }

    #[test]
    fn the_sequence_of_hw_spec_in_order() {
        let mut log = Log::new();
        let rings = [0x10_0000, 0x20_0000, 0x30_0000, 0x40_0000];
        program(&mut log, true, [(15, 0x9000), (2, 0x5000)], rings);
        let prio = |p: u32| u64::from(regs::Q_CTRL_ENABLE | (p << regs::Q_CTRL_PRIO_SHIFT));
        let w = log.writes();
        assert_eq!(w.len(), 2 + 2 * 2 + 4 * 3);
        assert_eq!(
            w[..6],
            [
                (regs::IRQ_MASK, regs::IRQ_ALL.into(), 32),
                (regs::DEBUG_CTRL, regs::DEBUG_CTRL_HANG.into(), 32),
                (regs::as_pt_base(15), 0x9000, 64),
                (regs::as_config(15), regs::AS_ENABLED.into(), 32),
                (regs::as_pt_base(2), 0x5000, 64),
                (regs::as_config(2), regs::AS_ENABLED.into(), 32),
            ]
        );
        let priorities = [
            PRIORITY_HIGH,
            PRIORITY_NORMAL,
            PRIORITY_NORMAL,
            PRIORITY_LOW,
        ];
        for (q, (base, p)) in rings.into_iter().zip(priorities).enumerate() {
            let b = regs::queue_base(q);
            let ring = (b + regs::Q_RING_BASE, base, 64);
            let size = (b + regs::Q_RING_SIZE, RING_ENTRIES.into(), 32);
            let ctrl = (b + regs::Q_CTRL, prio(p), 32);
            assert_eq!(w[6 + 3 * q..9 + 3 * q], [ring, size, ctrl], "queue {q}");
        }
    }

    #[test]
    fn without_hang_debugging_debug_ctrl_is_0() {
        let mut log = Log::new();
        program(&mut log, false, [], [0x1000]);
        assert_eq!(log.writes()[1], (regs::DEBUG_CTRL, 0, 32));
        assert_eq!(log.writes().len(), 2 + 3);
    }

    #[test]
    fn slots_and_doorbells() {
        let mut log = Log::new();
        bind_space(&mut log, 4, 0x7000);
        unbind_space(&mut log, 4);
        doorbell(&mut log, 1, 9);
        let q1 = regs::queue_base(1);
        assert_eq!(
            log.writes(),
            [
                (regs::as_pt_base(4), 0x7000, 64),
                (regs::as_config(4), regs::AS_ENABLED.into(), 32),
                (regs::as_config(4), 0, 32),
                (q1 + regs::Q_TAIL, 9, 32),
                (q1 + regs::Q_DOORBELL, 1, 32),
            ]
        );
    }
}
