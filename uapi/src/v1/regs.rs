//! Register block of the aigpu virtual GPU (docs/hw-spec.md §2-§3, §7).

/// Size of the MMIO block in bytes.
pub const MMIO_SIZE: usize = 0x1000;
/// Number of hardware queues.
pub const NUM_QUEUES: usize = 4;
/// Number of address-space slots.
pub const NUM_AS_SLOTS: usize = 16;

/// `ID` register (RO).
pub const ID: usize = 0x000;
/// Value of `ID`: "AIGP".
pub const ID_VALUE: u32 = 0x4149_4750;
/// `HW_VERSION` (RO): major << 16 | minor.
pub const HW_VERSION: usize = 0x004;
/// Value of `HW_VERSION`: 1.0.
pub const HW_VERSION_VALUE: u32 = 1 << 16;
/// `CAPS` (RO).
pub const CAPS: usize = 0x008;
/// `NUM_QUEUES` register (RO).
pub const NUM_QUEUES_REG: usize = 0x00C;
/// `NUM_AS_SLOTS` register (RO).
pub const NUM_AS_SLOTS_REG: usize = 0x010;
/// `DEBUG_CTRL` (RW).
pub const DEBUG_CTRL: usize = 0x014;
/// `DEBUG_CTRL` bit: HANG packets are executed (otherwise malformed).
pub const DEBUG_CTRL_HANG: u32 = 1 << 0;

/// `IRQ_RAWSTAT` (RO).
pub const IRQ_RAWSTAT: usize = 0x020;
/// `IRQ_MASK` (RW).
pub const IRQ_MASK: usize = 0x024;
/// `IRQ_STATUS` (RO) = rawstat & mask.
pub const IRQ_STATUS: usize = 0x028;
/// `IRQ_ACK` (W1C).
pub const IRQ_ACK: usize = 0x02C;
/// IRQ cause: a descriptor of queue `q` with the IRQ flag completed.
pub const fn irq_job_done(q: usize) -> u32 {
    1 << q
}
/// IRQ causes of all queues' job completions.
pub const IRQ_JOB_DONE_ALL: u32 = (1 << NUM_QUEUES) - 1;
/// IRQ cause: a FENCE packet with the IRQ flag executed.
pub const IRQ_FENCE: u32 = 1 << 8;
/// IRQ cause: a queue faulted.
pub const IRQ_FAULT: u32 = 1 << 16;
/// IRQ cause: an uncorrectable memory error.
pub const IRQ_MEM_ERROR: u32 = 1 << 17;
/// IRQ cause: engine reset completed.
pub const IRQ_RESET_DONE: u32 = 1 << 18;
/// Every defined cause.
pub const IRQ_ALL: u32 = IRQ_JOB_DONE_ALL | IRQ_FENCE | IRQ_FAULT | IRQ_MEM_ERROR | IRQ_RESET_DONE;

/// `RESET` (WO).
pub const RESET: usize = 0x040;
/// Value for `RESET`: reset every queue.
pub const RESET_ENGINE: u32 = 1;
/// `STATUS` (RO).
pub const STATUS: usize = 0x044;
/// `STATUS` bit: some queue is executing.
pub const STATUS_BUSY: u32 = 1 << 0;
/// `STATUS` bit: a fault is latched.
pub const STATUS_FAULT: u32 = 1 << 1;
/// `STATUS` bit: the device is lost (reads of a lost device return all ones anyway).
pub const STATUS_LOST: u32 = 1 << 2;
/// What every register reads as once the device has fallen off the bus.
pub const LOST_READ_VALUE: u32 = 0xFFFF_FFFF;

/// `MMU_INVALIDATE` (WO): a mask of address-space slots (bit s = slot s) whose cached
/// translations the device drops (hw-spec §5). Takes effect before the write completes.
pub const MMU_INVALIDATE: usize = 0x048;
/// `MMU_INVALIDATE` value: every slot.
pub const MMU_INVALIDATE_ALL: u32 = (1 << NUM_AS_SLOTS) - 1;

/// `FAULT_STATUS` (RO).
pub const FAULT_STATUS: usize = 0x060;
/// `FAULT_STATUS` bit: the fault registers are valid.
pub const FAULT_VALID: u32 = 1 << 31;
/// `FAULT_ADDR` (RO, 64-bit).
pub const FAULT_ADDR: usize = 0x068;
/// `FAULT_OFFSET` (RO).
pub const FAULT_OFFSET: usize = 0x070;
/// `FAULT_JOB` (RO, 64-bit).
pub const FAULT_JOB: usize = 0x078;
/// `TIMESTAMP` (RO, 64-bit), ns.
pub const TIMESTAMP: usize = 0x080;

/// Fault type: translation miss.
pub const FAULT_UNMAPPED: u32 = 1;
/// Fault type: access not permitted by the page.
pub const FAULT_PERMISSION: u32 = 2;
/// Fault type: malformed page-table entry.
pub const FAULT_BAD_PTE: u32 = 3;
/// Fault type: malformed packet.
pub const FAULT_MALFORMED_PACKET: u32 = 4;
/// Fault type: malformed descriptor.
pub const FAULT_BAD_DESCRIPTOR: u32 = 5;
/// Fault type: uncorrectable memory error.
pub const FAULT_BUS_ERROR: u32 = 6;

/// Access type: read.
pub const ACCESS_READ: u32 = 0;
/// Access type: write.
pub const ACCESS_WRITE: u32 = 1;
/// Access type: command fetch.
pub const ACCESS_FETCH: u32 = 2;

/// Packs the `FAULT_STATUS` register.
pub const fn fault_status(kind: u32, access: u32, queue: u32, slot: u32) -> u32 {
    FAULT_VALID | (kind & 0xF) | ((access & 0x3) << 4) | ((queue & 0xF) << 8) | ((slot & 0xF) << 12)
}
/// Fault type from `FAULT_STATUS`.
pub const fn fault_kind(status: u32) -> u32 {
    status & 0xF
}
/// Access type from `FAULT_STATUS`.
pub const fn fault_access(status: u32) -> u32 {
    (status >> 4) & 0x3
}
/// Queue from `FAULT_STATUS`.
pub const fn fault_queue(status: u32) -> u32 {
    (status >> 8) & 0xF
}
/// Address-space slot from `FAULT_STATUS`.
pub const fn fault_slot(status: u32) -> u32 {
    (status >> 12) & 0xF
}
/// Name of a fault type, for logs and dumps.
pub const fn fault_kind_name(kind: u32) -> &'static str {
    match kind {
        FAULT_UNMAPPED => "unmapped",
        FAULT_PERMISSION => "permission",
        FAULT_BAD_PTE => "bad-pte",
        FAULT_MALFORMED_PACKET => "malformed-packet",
        FAULT_BAD_DESCRIPTOR => "bad-descriptor",
        FAULT_BUS_ERROR => "bus-error",
        _ => "none",
    }
}
/// Name of an access type, for logs and dumps.
pub const fn access_name(access: u32) -> &'static str {
    match access {
        ACCESS_READ => "read",
        ACCESS_WRITE => "write",
        ACCESS_FETCH => "fetch",
        _ => "unknown",
    }
}

/// `AS_PT_BASE` of slot `s` (RW, 64-bit).
pub const fn as_pt_base(s: usize) -> usize {
    0x100 + 16 * s
}
/// `AS_CONFIG` of slot `s` (RW).
pub const fn as_config(s: usize) -> usize {
    0x108 + 16 * s
}
/// `AS_CONFIG` bit: slot enabled.
pub const AS_ENABLED: u32 = 1;

/// Base of queue `q`'s register window.
pub const fn queue_base(q: usize) -> usize {
    0x400 + 64 * q
}
/// Queue register: ring PA (64-bit).
pub const Q_RING_BASE: usize = 0x00;
/// Queue register: ring size in descriptors.
pub const Q_RING_SIZE: usize = 0x08;
/// Queue register: head (device-owned).
pub const Q_HEAD: usize = 0x0C;
/// Queue register: tail (driver-owned).
pub const Q_TAIL: usize = 0x10;
/// Queue register: doorbell.
pub const Q_DOORBELL: usize = 0x14;
/// Queue register: control (enable, priority).
pub const Q_CTRL: usize = 0x18;
/// Queue register: state.
pub const Q_STATE: usize = 0x1C;
/// Queue register: job id in execution (64-bit).
pub const Q_CUR_JOB: usize = 0x20;
/// Queue register: packet offset in execution.
pub const Q_CUR_OFFSET: usize = 0x28;
/// Queue register: descriptors completed since reset.
pub const Q_DONE_COUNT: usize = 0x2C;
/// Queue register (64-bit): while `Q_STATE` is waiting, the address waited on: a WAIT_MEM
/// packet's VA (in the descriptor's slot) or a WAIT descriptor's `fence_pa`; 0 otherwise.
pub const Q_WAIT_ADDR: usize = 0x30;
/// Queue register (64-bit): while `Q_STATE` is waiting, the value waited for (the wait ends when
/// the u64 at `Q_WAIT_ADDR` is at least this); 0 otherwise.
pub const Q_WAIT_VALUE: usize = 0x38;
/// `Q_CTRL` bit: queue enabled.
pub const Q_CTRL_ENABLE: u32 = 1;
/// `Q_CTRL` priority field shift (2 bits).
pub const Q_CTRL_PRIO_SHIFT: u32 = 4;
/// Largest ring, in descriptors.
pub const RING_MAX_ENTRIES: u32 = 4096;

/// `Q_STATE`: idle.
pub const QSTATE_IDLE: u32 = 0;
/// `Q_STATE`: executing.
pub const QSTATE_RUNNING: u32 = 1;
/// `Q_STATE`: waiting on memory.
pub const QSTATE_WAITING: u32 = 2;
/// `Q_STATE`: hung (HANG packet).
pub const QSTATE_HUNG: u32 = 3;
/// `Q_STATE`: stopped by a fault.
pub const QSTATE_FAULTED: u32 = 4;
/// Name of a queue state, for logs and dumps.
pub const fn qstate_name(state: u32) -> &'static str {
    match state {
        QSTATE_IDLE => "idle",
        QSTATE_RUNNING => "running",
        QSTATE_WAITING => "waiting",
        QSTATE_HUNG => "hung",
        QSTATE_FAULTED => "faulted",
        _ => "unknown",
    }
}
