//! Register block, interrupts, rings, scheduling, reset and loss.

mod common;

use common::*;
use vgpu::model::Step;
use vgpu::uapi::packet;
use vgpu::uapi::regs;
use vgpu::uapi::ring::{self, Desc};

const SLOT: usize = 3;

#[test]
fn identification_registers() {
    let mut h = H::new();
    assert_eq!(h.r32(regs::ID), 0x4149_4750);
    assert_eq!(h.r32(regs::HW_VERSION), 0x0001_0000);
    assert_eq!(h.r32(regs::CAPS), 0x1F);
    assert_eq!(h.r32(regs::NUM_QUEUES_REG), 4);
    assert_eq!(h.r32(regs::NUM_AS_SLOTS_REG), 16);
    assert_eq!(h.r32(regs::STATUS), 0);
    assert_eq!(h.r32(regs::FAULT_STATUS), 0);
    assert_eq!(h.r32(regs::DEBUG_CTRL), 0);
    for q in 0..4 {
        assert_eq!(h.qr(q, regs::Q_STATE), regs::QSTATE_IDLE);
        assert_eq!(h.qr(q, regs::Q_CTRL), 0);
    }
    assert_eq!(h.dev.step(), Step::Idle);
    assert!(!h.dev.busy());
}

#[test]
fn unknown_write_only_and_misaligned_offsets_read_zero() {
    let mut h = H::new();
    for off in [
        0x018,
        0x030,
        0x064,
        0x0FC,
        0x10C,
        0x300,
        0x500,
        0x43C,
        0xFFC,
        0x1000,
        usize::MAX - 3,
    ] {
        h.w32(off, 0xFFFF_FFFF);
        assert_eq!(h.r32(off), 0, "offset {off:#x}");
    }
    h.w32(regs::IRQ_ACK, 0xFFFF_FFFF);
    assert_eq!(h.r32(regs::IRQ_ACK), 0);
    assert_eq!(h.r32(regs::RESET), 0);
    assert_eq!(h.qr(0, regs::Q_DOORBELL), 0);
    assert_eq!(h.r32(regs::ID + 1), 0);
    assert_eq!(h.dev.mmio_read64(usize::MAX - 3), 0);
    // Read-only registers ignore writes.
    h.w32(regs::ID, 0);
    h.w32(regs::IRQ_RAWSTAT, 0xFFFF_FFFF);
    h.qw(1, regs::Q_HEAD, 5);
    h.qw(1, regs::Q_STATE, 4);
    assert_eq!(h.r32(regs::ID), regs::ID_VALUE);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), 0);
    assert_eq!(h.qr(1, regs::Q_HEAD), 0);
    assert_eq!(h.qr(1, regs::Q_STATE), 0);
}

#[test]
fn rw_registers_keep_defined_bits() {
    let mut h = H::new();
    h.w32(regs::DEBUG_CTRL, 0xFFFF_FFFF);
    assert_eq!(h.r32(regs::DEBUG_CTRL), 1);
    h.w32(regs::IRQ_MASK, 0xFFFF_FFFF);
    assert_eq!(h.r32(regs::IRQ_MASK), 0x0007_010F);
    h.w32(regs::as_config(15), 0xFFFF_FFFF);
    assert_eq!(h.r32(regs::as_config(15)), 1);
    h.qw(3, regs::Q_CTRL, 0xFFFF_FFFF);
    assert_eq!(h.qr(3, regs::Q_CTRL), 0x31);
    h.qw(3, regs::Q_RING_SIZE, 1024);
    assert_eq!(h.qr(3, regs::Q_RING_SIZE), 1024);
    h.qw(3, regs::Q_TAIL, 77);
    assert_eq!(h.qr(3, regs::Q_TAIL), 77);
}

#[test]
fn sixty_four_bit_registers_latch_on_high_word() {
    let mut h = H::new();
    let off = regs::as_pt_base(9);
    h.w32(off, 0x1234_5000);
    assert_eq!(
        h.dev.mmio_read64(off),
        0,
        "low word alone does not take effect"
    );
    h.w32(off + 4, 0xAB);
    assert_eq!(h.dev.mmio_read64(off), 0xAB_1234_5000);
    h.dev.mmio_write64(off, 0x0000_00FF_FFFF_F000);
    assert_eq!(h.dev.mmio_read64(off), 0x0000_00FF_FFFF_F000);
    assert_eq!(h.r32(off), 0xFFFF_F000);
    assert_eq!(h.r32(off + 4), 0xFF);
    let rb = regs::queue_base(2) + regs::Q_RING_BASE;
    h.w32(rb, 0x40);
    assert_eq!(h.dev.mmio_read64(rb), 0);
    h.w32(rb + 4, 1);
    assert_eq!(h.dev.mmio_read64(rb), 0x1_0000_0040);
}

#[test]
fn timestamp_register_latches_high_word_on_low_read() {
    let mut h = H::new();
    h.clock.0.set(0x0000_0001_FFFF_FFF0);
    let lo = h.r32(regs::TIMESTAMP);
    h.clock.0.set(0x0000_0002_0000_0005); // the clock moves between the two reads
    let hi = h.r32(regs::TIMESTAMP + 4);
    assert_eq!((lo, hi), (0xFFFF_FFF0, 1));
    assert_eq!(h.dev.mmio_read64(regs::TIMESTAMP), 0x0000_0002_0000_0005);
}

#[test]
fn irq_raw_mask_status_ack() {
    let mut h = H::new();
    h.w32(regs::IRQ_MASK, 0);
    h.enable_slot(SLOT);
    h.setup_queue(1, 4, 1);
    h.setup_queue(2, 4, 1);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    let d = exec_desc(SLOT as u32, CMD_VA, 4, ring::DESC_FLAG_IRQ, 0, 0, 1);
    h.push(1, &d);
    h.push(2, &d);
    assert_eq!(h.run(), Step::Idle);
    // Raised but masked: RAWSTAT shows them, STATUS and the line do not.
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), 0b110);
    assert_eq!(h.r32(regs::IRQ_STATUS), 0);
    assert!(!h.dev.irq_line());
    h.w32(regs::IRQ_MASK, regs::irq_job_done(2) | regs::IRQ_FAULT);
    assert_eq!(h.r32(regs::IRQ_STATUS), 0b100);
    assert!(h.dev.irq_line());
    // W1C: only the written bits clear; acking an unmasked-but-pending bit works too.
    h.w32(regs::IRQ_ACK, 0b100);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), 0b010);
    assert_eq!(h.r32(regs::IRQ_STATUS), 0);
    assert!(!h.dev.irq_line());
    h.w32(regs::IRQ_ACK, 0);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), 0b010);
    h.w32(regs::IRQ_MASK, regs::IRQ_ALL);
    assert!(h.dev.irq_line());
    h.w32(regs::IRQ_ACK, 0xFFFF_FFFF);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), 0);
    assert!(!h.dev.irq_line());
}

#[test]
fn ring_wraps_around() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(1, 4, 1);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    let mut value = 0;
    // 11 rounds; the last fills the ring completely (tail - head == size).
    for round in 0..11u64 {
        let n = if round == 10 { 4 } else { 3 };
        for _ in 0..n {
            value += 1;
            h.push(
                1,
                &exec_desc(
                    SLOT as u32,
                    CMD_VA,
                    4,
                    ring::DESC_FLAG_FENCE,
                    FENCE_AREA,
                    value,
                    value,
                ),
            );
        }
        assert_eq!(h.run(), Step::Idle);
        assert_eq!(h.mem().peek_u64(FENCE_AREA), value);
        assert_eq!(h.qr(1, regs::Q_HEAD), value as u32);
        assert_eq!(h.qr(1, regs::Q_DONE_COUNT), value as u32);
    }
    assert_eq!(value, 34);
    assert_eq!(h.qr(1, regs::Q_STATE), regs::QSTATE_IDLE);
    assert_eq!(h.r32(regs::FAULT_STATUS), 0);
}

#[test]
fn head_and_tail_are_free_running_across_u32_wrap() {
    // After a reset head = 0; the driver's tail wraps from u32::MAX to 0 naturally. Simulate a
    // long-running queue by submitting in a ring of 2 with tail values crossing 2^32 is not
    // reachable quickly, so check the arithmetic at small scale: tail - head == size is full.
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 2, 1);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    for i in 0..2u64 {
        h.push(
            0,
            &exec_desc(
                SLOT as u32,
                CMD_VA,
                4,
                ring::DESC_FLAG_FENCE,
                FENCE_AREA,
                i + 10,
                0,
            ),
        );
    }
    assert_eq!(h.qr(0, regs::Q_TAIL), 2);
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(0, regs::Q_HEAD), 2);
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 11);
}

#[test]
fn doorbell_samples_tail() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 8, 1);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    h.write_desc(0, 0, &exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, 1));
    h.qw(0, regs::Q_TAIL, 1);
    assert_eq!(h.dev.step(), Step::Idle, "no doorbell yet");
    assert_eq!(h.qr(0, regs::Q_STATE), regs::QSTATE_IDLE);
    h.qw(0, regs::Q_DOORBELL, 0);
    assert_eq!(h.qr(0, regs::Q_STATE), regs::QSTATE_RUNNING);
    assert!(h.dev.busy());
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(0, regs::Q_HEAD), 1);
}

#[test]
fn disabled_queue_does_not_run() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 8, 1);
    h.qw(0, regs::Q_CTRL, 0);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    h.push(0, &exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, 1));
    assert_eq!(h.dev.step(), Step::Idle);
    assert_eq!(h.qr(0, regs::Q_HEAD), 0);
    h.qw(0, regs::Q_CTRL, regs::Q_CTRL_ENABLE);
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(0, regs::Q_HEAD), 1);
}

/// Which queue each step worked on, found by comparing (head, offset, job) before and after.
fn trace(h: &mut H, steps: usize) -> Vec<usize> {
    let snap = |h: &mut H| -> Vec<(u32, u32, u64)> {
        (0..4)
            .map(|q| {
                (
                    h.qr(q, regs::Q_HEAD),
                    h.qr(q, regs::Q_CUR_OFFSET),
                    h.dev.mmio_read64(regs::queue_base(q) + regs::Q_CUR_JOB),
                )
            })
            .collect()
    };
    let mut out = Vec::new();
    for _ in 0..steps {
        let before = snap(h);
        assert_eq!(h.dev.step(), Step::Progress);
        let after = snap(h);
        let changed: Vec<usize> = (0..4).filter(|&q| before[q] != after[q]).collect();
        assert_eq!(changed.len(), 1, "one step, one queue");
        out.push(changed[0]);
    }
    out
}

#[test]
fn priority_order() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 8, 0); // low
    h.setup_queue(1, 8, 1); // normal
    h.setup_queue(2, 8, 2); // high
    h.setup_queue(3, 8, 1); // normal
                            // Three NOPs: fetch with the first packet, then 2 packets (the last
                            // completes) = 3 steps per job.
    h.cmdbuf(SLOT, CMD_VA, &[packet::encode_nop()[0]; 3]);
    for q in [0, 1, 3, 2] {
        h.push(
            q,
            &exec_desc(SLOT as u32, CMD_VA, 12, 0, 0, 0, q as u64 + 1),
        );
    }
    let t = trace(&mut h, 12);
    assert_eq!(t, vec![2, 2, 2, 1, 3, 1, 3, 1, 3, 0, 0, 0]);
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn round_robin_among_equals() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    for q in 0..4 {
        h.setup_queue(q, 8, 2);
    }
    h.cmdbuf(SLOT, CMD_VA, &[packet::encode_nop()[0]; 2]);
    for q in [3, 1, 0] {
        h.push(q, &exec_desc(SLOT as u32, CMD_VA, 8, 0, 0, 0, 7));
    }
    let t = trace(&mut h, 6);
    assert_eq!(t, vec![0, 1, 3, 0, 1, 3]);
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn round_robin_skips_a_waiting_equal_and_keeps_its_turn_order() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    for q in 0..3 {
        h.setup_queue(q, 8, 2);
    }
    h.cmdbuf(SLOT, CMD_VA, &[packet::encode_nop()[0]; 2]);
    h.push(0, &exec_desc(SLOT as u32, CMD_VA, 8, 0, 0, 0, 1));
    h.push(1, &wait_desc(FENCE_AREA, 1, 2));
    h.push(2, &exec_desc(SLOT as u32, CMD_VA, 8, 0, 0, 0, 3));
    // Queue 1's fetch of its WAIT is progress; after that its unmet wait passes the turn to the
    // next runnable equal (2), and the turn after queue 2 wraps round to queue 0.
    let t = trace(&mut h, 5);
    assert_eq!(t, vec![0, 1, 2, 0, 2]);
    assert_eq!(h.run(), Step::Stalled);
    assert_eq!(h.qr(1, regs::Q_STATE), regs::QSTATE_WAITING);
    h.mem().poke_u64(FENCE_AREA, 1);
    assert_eq!(trace(&mut h, 1), vec![1]);
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn waiting_high_priority_queue_does_not_block_lower_ones() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 8, 2);
    h.setup_queue(1, 8, 0);
    h.push(0, &wait_desc(FENCE_AREA, 1, 5));
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    h.push(
        1,
        &exec_desc(
            SLOT as u32,
            CMD_VA,
            4,
            ring::DESC_FLAG_FENCE,
            FENCE_AREA + 8,
            2,
            6,
        ),
    );
    assert_eq!(h.run(), Step::Stalled);
    assert_eq!(h.qr(0, regs::Q_STATE), regs::QSTATE_WAITING);
    assert_eq!(h.dev.mmio_read64(regs::queue_base(0) + regs::Q_CUR_JOB), 5);
    // A WAIT descriptor: its fence_pa and value.
    assert_eq!(
        h.dev.mmio_read64(regs::queue_base(0) + regs::Q_WAIT_ADDR),
        FENCE_AREA
    );
    assert_eq!(
        h.dev.mmio_read64(regs::queue_base(0) + regs::Q_WAIT_VALUE),
        1
    );
    assert_eq!(
        h.dev.mmio_read64(regs::queue_base(1) + regs::Q_WAIT_ADDR),
        0
    );
    assert_eq!(h.qr(1, regs::Q_STATE), regs::QSTATE_IDLE);
    assert_eq!(h.mem().peek_u64(FENCE_AREA + 8), 2);
    h.mem().poke_u64(FENCE_AREA, 1);
    assert_eq!(h.dev.step(), Step::Progress);
    assert_eq!(h.qr(0, regs::Q_STATE), regs::QSTATE_IDLE);
    assert_eq!(h.qr(0, regs::Q_DONE_COUNT), 1);
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn cross_queue_wait_on_another_queues_fence() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 8, 1);
    h.setup_queue(1, 8, 1);
    h.map(SLOT, DATA_VA, PAGE, RW);
    // Queue 1: wait for queue 0's fence to reach 7, then copy what queue 0 wrote.
    h.push(1, &wait_desc(FENCE_AREA, 7, 10));
    let copy = packet::encode_copy(DATA_VA, DATA_VA + 64, 8);
    let copy_va = CMD_VA + 0x10_0000;
    let size = h.cmdbuf(SLOT, copy_va, &copy);
    h.push(
        1,
        &exec_desc(
            SLOT as u32,
            copy_va,
            size,
            ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ,
            FENCE_AREA + 8,
            1,
            11,
        ),
    );
    assert_eq!(h.run(), Step::Stalled);
    assert_eq!(h.qr(1, regs::Q_STATE), regs::QSTATE_WAITING);
    assert_eq!(h.qr(1, regs::Q_HEAD), 0);
    // A lower fence value is not enough.
    h.mem().poke_u64(FENCE_AREA, 6);
    assert_eq!(h.run(), Step::Stalled);
    // Queue 0 fills and signals 7.
    let fill = packet::encode_fill(DATA_VA, 8, 0xCAFE_F00D);
    let size = h.cmdbuf(SLOT, CMD_VA, &fill);
    h.push(
        0,
        &exec_desc(
            SLOT as u32,
            CMD_VA,
            size,
            ring::DESC_FLAG_FENCE,
            FENCE_AREA,
            7,
            20,
        ),
    );
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(1, regs::Q_HEAD), 2);
    assert_eq!(h.mem().peek_u64(FENCE_AREA + 8), 1);
    assert_eq!(
        h.read_va(SLOT, DATA_VA + 64, 8),
        vec![0x0D, 0xF0, 0xFE, 0xCA, 0x0D, 0xF0, 0xFE, 0xCA]
    );
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::irq_job_done(1));
}

#[test]
fn wait_descriptor_already_met_completes_at_once() {
    let mut h = H::new();
    h.setup_queue(0, 8, 1);
    h.mem().poke_u64(FENCE_AREA, 100);
    h.push(
        0,
        &Desc {
            flags: ring::DESC_FLAG_IRQ,
            ..wait_desc(FENCE_AREA, 100, 1)
        },
    );
    assert_eq!(h.dev.step(), Step::Progress);
    assert_eq!(h.qr(0, regs::Q_HEAD), 1);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::irq_job_done(0));
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn reset_clears_queues_and_faults_keeps_slots() {
    let mut h = H::new();
    let root = h.enable_slot(SLOT);
    h.setup_queue(0, 8, 2);
    h.setup_queue(1, 8, 1);
    h.cmdbuf(SLOT, CMD_VA, &[packet::header(0x66, 0, 1)]);
    h.push(0, &exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, 1));
    h.push(1, &wait_desc(FENCE_AREA, 1, 2));
    h.push(1, &wait_desc(FENCE_AREA, 1, 3));
    assert_eq!(h.run(), Step::Stalled);
    assert_eq!(h.r32(regs::STATUS), regs::STATUS_BUSY | regs::STATUS_FAULT);
    assert_eq!(h.qr(0, regs::Q_STATE), regs::QSTATE_FAULTED);
    assert_eq!(h.qr(1, regs::Q_STATE), regs::QSTATE_WAITING);
    h.w32(regs::IRQ_ACK, regs::IRQ_ALL);
    h.w32(regs::RESET, 2); // not RESET_ENGINE: ignored
    assert_eq!(h.qr(0, regs::Q_STATE), regs::QSTATE_FAULTED);
    h.w32(regs::RESET, regs::RESET_ENGINE);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::IRQ_RESET_DONE);
    assert_eq!(h.r32(regs::STATUS), 0);
    assert_eq!(h.fault(), (0, 0, 0, 0));
    for q in 0..2 {
        assert_eq!(h.qr(q, regs::Q_STATE), regs::QSTATE_IDLE);
        assert_eq!(h.qr(q, regs::Q_HEAD), 0);
        assert_eq!(h.qr(q, regs::Q_TAIL), 0);
        assert_eq!(h.qr(q, regs::Q_CTRL), 0);
        assert_eq!(h.qr(q, regs::Q_DONE_COUNT), 0);
        assert_eq!(h.qr(q, regs::Q_CUR_OFFSET), 0);
        assert_eq!(h.dev.mmio_read64(regs::queue_base(q) + regs::Q_CUR_JOB), 0);
    }
    assert_eq!(h.dev.mmio_read64(regs::as_pt_base(SLOT)), root);
    assert_eq!(h.r32(regs::as_config(SLOT)), regs::AS_ENABLED);
    assert_eq!(h.dev.step(), Step::Idle);
    assert!(!h.dev.busy());
    // The fence appearing later does not resurrect dropped work.
    h.mem().poke_u64(FENCE_AREA, 1);
    assert_eq!(h.dev.step(), Step::Idle);
    // Re-programmed, the queue runs again.
    h.setup_queue(1, 8, 1);
    h.push(1, &wait_desc(FENCE_AREA, 1, 4));
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(1, regs::Q_DONE_COUNT), 1);
}

#[test]
fn lost_device_reads_all_ones() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 8, 1);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    h.push(
        0,
        &exec_desc(SLOT as u32, CMD_VA, 4, ring::DESC_FLAG_IRQ, 0, 0, 1),
    );
    h.dev.fall_off_bus();
    for off in [
        regs::ID,
        regs::STATUS,
        regs::IRQ_STATUS,
        regs::FAULT_STATUS,
        0x018,
        0xFFC,
        0x5000,
    ] {
        assert_eq!(h.r32(off), 0xFFFF_FFFF, "offset {off:#x}");
    }
    assert_eq!(h.dev.mmio_read64(regs::TIMESTAMP), u64::MAX);
    assert_eq!(h.qr(0, regs::Q_HEAD), 0xFFFF_FFFF);
    assert_eq!(h.dev.step(), Step::Idle);
    assert!(!h.dev.busy());
    assert!(!h.dev.irq_line());
    // Writes are ignored, reset included.
    h.w32(regs::RESET, regs::RESET_ENGINE);
    assert_eq!(h.r32(regs::ID), 0xFFFF_FFFF);
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn failed_reset_makes_the_device_lost() {
    let mut h = H::new();
    h.w32(regs::DEBUG_CTRL, 1);
    h.enable_slot(SLOT);
    h.setup_queue(0, 8, 1);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_hang());
    h.push(0, &exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, 1));
    assert_eq!(h.run(), Step::Stalled);
    assert_eq!(h.qr(0, regs::Q_STATE), regs::QSTATE_HUNG);
    h.dev.inject_reset_failure();
    h.w32(regs::RESET, regs::RESET_ENGINE);
    assert_eq!(h.r32(regs::ID), 0xFFFF_FFFF);
    assert_eq!(h.r32(regs::STATUS), 0xFFFF_FFFF);
    assert!(!h.dev.irq_line());
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn reset_failure_is_consumed_by_one_reset_only_when_injected() {
    let mut h = H::new();
    h.w32(regs::RESET, regs::RESET_ENGINE);
    assert_eq!(h.r32(regs::ID), regs::ID_VALUE);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::IRQ_RESET_DONE);
    h.w32(regs::IRQ_ACK, regs::IRQ_RESET_DONE);
    h.dev.inject_reset_failure();
    assert_eq!(
        h.r32(regs::ID),
        regs::ID_VALUE,
        "injection alone changes nothing"
    );
    h.w32(regs::RESET, regs::RESET_ENGINE);
    assert_eq!(h.r32(regs::ID), 0xFFFF_FFFF);
}

/// The patterns of `translations_outlive_jobs_until_invalidated`'s jobs, one per job.
const TLB_JOBS: [u32; 8] = [0xA, 0xB, 0xC, 0xD, 0xE, 0xF, 0x10, 0x11];

/// Maps every job's command buffer (a 16-byte FILL of its pattern at DATA_VA) up front: mapping
/// invalidates the slot, as a driver does, and the test needs table changes that do not.
fn map_fill_jobs(h: &mut H) -> Vec<u32> {
    (0..TLB_JOBS.len())
        .map(|n| {
            let cva = CMD_VA + n as u64 * 0x1_0000;
            h.cmdbuf(SLOT, cva, &packet::encode_fill(DATA_VA, 16, TLB_JOBS[n]))
        })
        .collect()
}

/// Runs job `n` of `map_fill_jobs` on queue 0 until the device stops.
fn run_fill_job(h: &mut H, sizes: &[u32], n: usize) {
    let cva = CMD_VA + n as u64 * 0x1_0000;
    h.push(0, &exec_desc(SLOT as u32, cva, sizes[n], 0, 0, 0, n as u64));
    h.run();
}

#[test]
fn translations_outlive_jobs_until_invalidated() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 16, 1);
    let pages: Vec<u64> = (0..5).map(|_| h.alloc_page()).collect();
    h.map_page(SLOT, DATA_VA, pages[0], RW);
    let sizes = map_fill_jobs(&mut h);
    let leaf = h.entry_pa(SLOT, DATA_VA, 0);
    let word = |h: &H, page: u64| u32::from_le_bytes(h.mem().peek(page, 4).try_into().unwrap());
    let point_at = |h: &H, page: u64| h.mem().poke_u64(leaf, vgpu::uapi::pte::page(page, RW));
    run_fill_job(&mut h, &sizes, 0);
    assert_eq!(word(&h, pages[0]), 0xA);
    // The leaf changes behind the device's back (no invalidation): the next job still writes
    // the old page. This is the contract the driver must keep (hw-spec §5).
    point_at(&h, pages[1]);
    run_fill_job(&mut h, &sizes, 1);
    assert_eq!((word(&h, pages[0]), word(&h, pages[1])), (0xB, 0));
    // MMU_INVALIDATE of the other slots keeps it; of this slot drops it. It reads as zero.
    h.w32(
        regs::MMU_INVALIDATE,
        !(1 << SLOT) & regs::MMU_INVALIDATE_ALL,
    );
    run_fill_job(&mut h, &sizes, 2);
    assert_eq!((word(&h, pages[0]), word(&h, pages[1])), (0xC, 0));
    h.w32(regs::MMU_INVALIDATE, 1 << SLOT);
    assert_eq!(h.r32(regs::MMU_INVALIDATE), 0);
    run_fill_job(&mut h, &sizes, 3);
    assert_eq!((word(&h, pages[0]), word(&h, pages[1])), (0xC, 0xD));
    // Rewriting the slot's AS_PT_BASE (even with the same table) drops its translations.
    point_at(&h, pages[2]);
    let root = h.root(SLOT);
    h.dev.mmio_write64(regs::as_pt_base(SLOT), root);
    run_fill_job(&mut h, &sizes, 4);
    assert_eq!((word(&h, pages[1]), word(&h, pages[2])), (0xD, 0xE));
    // So does AS_CONFIG.
    point_at(&h, pages[3]);
    h.w32(regs::as_config(SLOT), regs::AS_ENABLED);
    run_fill_job(&mut h, &sizes, 5);
    assert_eq!((word(&h, pages[2]), word(&h, pages[3])), (0xE, 0xF));
    // And an engine reset (which also stops the queues: set up again).
    point_at(&h, pages[4]);
    h.w32(regs::RESET, regs::RESET_ENGINE);
    h.setup_queue(0, 16, 1);
    run_fill_job(&mut h, &sizes, 6);
    assert_eq!((word(&h, pages[3]), word(&h, pages[4])), (0xF, 0x10));
    assert_eq!(h.r32(regs::FAULT_STATUS), 0);
    // A leaf removed and invalidated faults (nothing negative was cached either).
    h.mem().poke_u64(leaf, 0);
    h.w32(regs::MMU_INVALIDATE, regs::MMU_INVALIDATE_ALL);
    run_fill_job(&mut h, &sizes, 7);
    let (status, addr, _, job) = h.fault();
    assert_eq!(
        (
            regs::fault_kind(status),
            regs::fault_access(status),
            addr,
            job
        ),
        (regs::FAULT_UNMAPPED, regs::ACCESS_WRITE, DATA_VA, 7)
    );
    assert_eq!(word(&h, pages[4]), 0x10);
}

/// The same contract for command fetch, whose last page a queue keeps across command buffers
/// (its fetch TLB): a command page remapped behind the device's back still runs the old commands;
/// `MMU_INVALIDATE`, a slot's `AS_PT_BASE` or `AS_CONFIG` write and an engine reset each make the
/// next command buffer at the same VA run from the new page.
#[test]
fn command_fetch_translations_are_dropped_with_the_device_tlb() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 16, 1);
    h.map(SLOT, DATA_VA, PAGE, RW);
    let size = h.cmdbuf(SLOT, CMD_VA, &packet::encode_fill(DATA_VA, 4, 0xA));
    let old_page = h.va_to_pa(SLOT, CMD_VA);
    let new_page = h.alloc_page();
    let fill_b: Vec<u8> = packet::encode_fill(DATA_VA, 4, 0xB)
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .collect();
    h.mem().poke(new_page, &fill_b);
    let leaf = h.entry_pa(SLOT, CMD_VA, 0);
    let point_at = |h: &H, page: u64| h.mem().poke_u64(leaf, vgpu::uapi::pte::page(page, R));
    let mut job = 0;
    let mut run = |h: &mut H| {
        job += 1;
        h.mem().poke(h.va_to_pa(SLOT, DATA_VA), &[0; 4]);
        h.push(0, &exec_desc(SLOT as u32, CMD_VA, size, 0, 0, 0, job));
        assert_eq!(h.run(), Step::Idle);
        u32::from_le_bytes(h.read_va(SLOT, DATA_VA, 4).try_into().unwrap())
    };
    assert_eq!(run(&mut h), 0xA);
    point_at(&h, new_page);
    assert_eq!(run(&mut h), 0xA, "no invalidation: the cached command page");
    h.w32(regs::MMU_INVALIDATE, 1 << SLOT);
    assert_eq!(run(&mut h), 0xB, "MMU_INVALIDATE");
    point_at(&h, old_page);
    let root = h.root(SLOT);
    h.dev.mmio_write64(regs::as_pt_base(SLOT), root);
    assert_eq!(run(&mut h), 0xA, "AS_PT_BASE");
    point_at(&h, new_page);
    h.w32(regs::as_config(SLOT), regs::AS_ENABLED);
    assert_eq!(run(&mut h), 0xB, "AS_CONFIG");
    point_at(&h, old_page);
    h.w32(regs::RESET, regs::RESET_ENGINE);
    h.setup_queue(0, 16, 1);
    assert_eq!(run(&mut h), 0xA, "engine reset");
    assert_eq!(h.r32(regs::FAULT_STATUS), 0);
}

/// A device thread's round (`Device::run_round`, what both hosts run): it ends on the interrupt
/// line with the step that raised it counted, after `max_steps`, or when `stop_early` (asked
/// with the count so far) says so; with nothing left it reports `Idle` and no steps.
#[test]
fn run_round_counts_steps_and_ends_on_the_interrupt_line() {
    let mut h = H::new();
    h.w32(regs::IRQ_MASK, regs::IRQ_ALL);
    h.enable_slot(SLOT);
    h.setup_queue(0, 16, 1);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    for job in 1..=5u64 {
        let flags = if job == 3 { ring::DESC_FLAG_IRQ } else { 0 };
        h.push(0, &exec_desc(SLOT as u32, CMD_VA, 4, flags, 0, 0, job));
    }
    let r = h.dev.run_round(64, |_, _| false);
    assert_eq!((r.steps, r.last), (3, Step::Progress));
    assert!(h.dev.irq_line());
    assert_eq!(h.qr(0, regs::Q_HEAD), 3);
    h.w32(regs::IRQ_ACK, regs::IRQ_ALL);

    let r = h.dev.run_round(1, |_, _| false);
    assert_eq!((r.steps, r.last), (1, Step::Progress));

    let mut asked = Vec::new();
    let r = h.dev.run_round(64, |n, _| {
        asked.push(n);
        true
    });
    assert_eq!((r.steps, r.last), (1, Step::Progress));
    assert_eq!(asked, [1]);
    assert_eq!(h.qr(0, regs::Q_HEAD), 5);

    let r = h.dev.run_round(64, |_, _| panic!("asked without progress"));
    assert_eq!((r.steps, r.last), (0, Step::Idle));
    assert!(!h.dev.irq_line());
}

/// `Device::queue_status` (what aigpu.ko mirrors after every round) returns exactly what the
/// Q_HEAD, Q_STATE and Q_CUR_JOB register reads return: for running, waiting and idle queues, a
/// queue that does not exist (zeros), and a lost device (all ones).
#[test]
fn queue_status_matches_the_register_reads() {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(0, 16, 1);
    h.setup_queue(1, 16, 1);
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    let flag = h.alloc_page();
    h.map_page(SLOT, DATA_VA, flag, RW);
    let wait_va = CMD_VA + 0x1000;
    let size = h.cmdbuf(SLOT, wait_va, &packet::encode_wait_mem(DATA_VA, 1));
    h.push(
        0,
        &exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, 0x1_0000_0007),
    );
    h.push(
        1,
        &exec_desc(SLOT as u32, wait_va, size, 0, 0, 0, 0x2_0000_0009),
    );
    let check = |h: &mut H, when: &str| {
        for q in 0..regs::NUM_QUEUES {
            let want = (
                h.qr(q, regs::Q_HEAD),
                h.qr(q, regs::Q_STATE),
                u64::from(h.qr(q, regs::Q_CUR_JOB))
                    | (u64::from(h.qr(q, regs::Q_CUR_JOB + 4)) << 32),
            );
            assert_eq!(h.dev.queue_status(q), want, "queue {q} {when}");
        }
    };
    check(&mut h, "before running");
    h.run();
    // Queue 0 done, queue 1 waiting on memory with its job current.
    assert_eq!(h.dev.queue_status(1).1, regs::QSTATE_WAITING);
    assert_eq!(h.dev.queue_status(1).2, 0x2_0000_0009);
    check(&mut h, "with a waiting queue");
    assert_eq!(h.dev.queue_status(regs::NUM_QUEUES), (0, 0, 0));
    h.dev.fall_off_bus();
    let all = regs::LOST_READ_VALUE;
    assert_eq!(
        h.dev.queue_status(0),
        (all, all, u64::from(all) | (u64::from(all) << 32))
    );
    check(&mut h, "lost");
}
