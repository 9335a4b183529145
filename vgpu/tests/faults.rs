//! Every fault type, with exact FAULT_STATUS / FAULT_ADDR / FAULT_OFFSET / FAULT_JOB values,
//! and how faults affect the other queues.

mod common;

use common::*;
use vgpu::model::Step;
use vgpu::uapi::packet::{self, GemmArgs};
use vgpu::uapi::ring::{self, Desc};
use vgpu::uapi::{pte, regs};

const SLOT: usize = 5;
const Q: usize = 2;
const JOB: u64 = 0x1234_5678_9ABC_DEF0;

fn setup() -> H {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(Q, 8, 1);
    h
}

fn status(kind: u32, access: u32) -> u32 {
    regs::fault_status(kind, access, Q as u32, SLOT as u32)
}

/// Runs `words` on queue `Q` (after a leading NOP, so the faulting packet sits at offset 4) and
/// expects it to fault: returns the latched fault registers.
fn run_fault(h: &mut H, packet: &[u32]) -> (u32, u64, u32, u64) {
    let words = cat(&[&packet::encode_nop(), packet]);
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &words,
        ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ,
        FENCE_AREA,
        1,
        JOB,
    );
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_FAULTED);
    assert_eq!(h.qr(Q, regs::Q_HEAD), 0);
    assert_eq!(h.qr(Q, regs::Q_DONE_COUNT), 0);
    assert_eq!(h.qr(Q, regs::Q_CUR_OFFSET), 4);
    assert_eq!(
        h.dev.mmio_read64(regs::queue_base(Q) + regs::Q_CUR_JOB),
        JOB
    );
    assert_eq!(
        h.mem().peek_u64(FENCE_AREA),
        0,
        "no fence for a faulted job"
    );
    assert_eq!(h.r32(regs::STATUS), regs::STATUS_FAULT);
    assert!(!h.dev.busy());
    h.fault()
}

fn expect_irq(h: &mut H, cause: u32) {
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), cause);
    assert!(h.dev.irq_line());
}

// ---- UNMAPPED -------------------------------------------------------------------------------

#[test]
fn unmapped_source() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    let f = run_fault(
        &mut h,
        &packet::encode_copy(DATA_VA + 0x10_0000, DATA_VA, 16),
    );
    assert_eq!(
        f,
        (
            status(regs::FAULT_UNMAPPED, regs::ACCESS_READ),
            DATA_VA + 0x10_0000,
            4,
            JOB
        )
    );
    expect_irq(&mut h, regs::IRQ_FAULT);
}

#[test]
fn unmapped_hole_in_the_middle_of_a_copy() {
    let mut h = setup();
    let src = DATA_VA;
    let dst = DATA_VA + 0x10_0000;
    h.map(SLOT, src, PAGE, R);
    h.map(SLOT, src + 2 * PAGE, PAGE, R); // src + PAGE is the hole
    h.map(SLOT, dst, 3 * PAGE, RW);
    let f = run_fault(&mut h, &packet::encode_copy(src + 100, dst, 3 * PAGE - 200));
    assert_eq!(
        f,
        (
            status(regs::FAULT_UNMAPPED, regs::ACCESS_READ),
            src + PAGE,
            4,
            JOB
        )
    );
}

#[test]
fn unmapped_hole_in_the_destination() {
    let mut h = setup();
    let src = DATA_VA;
    let dst = DATA_VA + 0x10_0000;
    h.map(SLOT, src, 3 * PAGE, R);
    h.map(SLOT, dst, 2 * PAGE, RW); // dst + 2 pages unmapped
    let f = run_fault(&mut h, &packet::encode_fill(dst + 8, 3 * PAGE - 16, 7));
    assert_eq!(
        f,
        (
            status(regs::FAULT_UNMAPPED, regs::ACCESS_WRITE),
            dst + 2 * PAGE,
            4,
            JOB
        )
    );
}

#[test]
fn unmapped_top_of_48_bit_space() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    let top = (1u64 << 48) - PAGE;
    let f = run_fault(&mut h, &packet::encode_copy(top, DATA_VA, PAGE));
    assert_eq!(
        f,
        (status(regs::FAULT_UNMAPPED, regs::ACCESS_READ), top, 4, JOB)
    );
}

#[test]
fn unmapped_command_buffer_at_or_above_2_pow_48() {
    for cmd_va in [1u64 << 48, 0xFFFF_8000_0000_0000, u64::MAX - 3] {
        let mut h = setup();
        h.push(Q, &exec_desc(SLOT as u32, cmd_va, 4, 0, 0, 0, JOB));
        assert_eq!(h.run(), Step::Idle);
        assert_eq!(
            h.fault(),
            (
                status(regs::FAULT_UNMAPPED, regs::ACCESS_FETCH),
                cmd_va,
                0,
                JOB
            ),
            "cmd_va {cmd_va:#x}"
        );
    }
}

#[test]
fn unmapped_command_buffer_continues_into_a_hole() {
    let mut h = setup();
    // One page of NOPs, the command buffer claims two.
    let words = vec![packet::encode_nop()[0]; 1024];
    h.cmdbuf(SLOT, CMD_VA, &words);
    h.push(Q, &exec_desc(SLOT as u32, CMD_VA, 8192, 0, 0, 0, JOB));
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(
        h.fault(),
        (
            status(regs::FAULT_UNMAPPED, regs::ACCESS_FETCH),
            CMD_VA + PAGE,
            4096,
            JOB
        )
    );
}

// ---- PERMISSION -----------------------------------------------------------------------------

#[test]
fn permission_write_to_read_only() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, R);
    let f = run_fault(&mut h, &packet::encode_fill(DATA_VA + 64, 64, 1));
    assert_eq!(
        f,
        (
            status(regs::FAULT_PERMISSION, regs::ACCESS_WRITE),
            DATA_VA + 64,
            4,
            JOB
        )
    );
    assert_eq!(h.read_va(SLOT, DATA_VA + 64, 4), vec![0; 4]);
}

#[test]
fn permission_read_of_write_only() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, W);
    h.map(SLOT, DATA_VA + PAGE, PAGE, RW);
    let f = run_fault(&mut h, &packet::encode_copy(DATA_VA + 8, DATA_VA + PAGE, 8));
    assert_eq!(
        f,
        (
            status(regs::FAULT_PERMISSION, regs::ACCESS_READ),
            DATA_VA + 8,
            4,
            JOB
        )
    );
}

#[test]
fn permission_fetch_of_write_only_command_buffer() {
    let mut h = setup();
    h.map(SLOT, CMD_VA, PAGE, W);
    h.write_words(SLOT, CMD_VA, &packet::encode_nop());
    h.push(Q, &exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, JOB));
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(
        h.fault(),
        (
            status(regs::FAULT_PERMISSION, regs::ACCESS_FETCH),
            CMD_VA,
            0,
            JOB
        )
    );
}

#[test]
fn permission_gemm_accumulate_reads_c() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, R); // A and B
    h.map(SLOT, DATA_VA + PAGE, PAGE, W); // C write-only
    let g = GemmArgs {
        a: DATA_VA,
        b: DATA_VA + 64,
        c: DATA_VA + PAGE + 16,
        m: 2,
        n: 2,
        k: 2,
        lda: 2,
        ldb: 2,
        ldc: 2,
        accumulate: true,
    };
    let f = run_fault(&mut h, &packet::encode_gemm(&g));
    assert_eq!(
        f,
        (
            status(regs::FAULT_PERMISSION, regs::ACCESS_READ),
            DATA_VA + PAGE + 16,
            4,
            JOB
        )
    );
}

#[test]
fn permission_gemm_writes_read_only_c() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, 2 * PAGE, R);
    let g = GemmArgs {
        a: DATA_VA,
        b: DATA_VA + 64,
        c: DATA_VA + PAGE + 16,
        m: 2,
        n: 2,
        k: 2,
        lda: 2,
        ldb: 2,
        ldc: 2,
        accumulate: false,
    };
    let f = run_fault(&mut h, &packet::encode_gemm(&g));
    assert_eq!(
        f,
        (
            status(regs::FAULT_PERMISSION, regs::ACCESS_WRITE),
            DATA_VA + PAGE + 16,
            4,
            JOB
        )
    );
}

// ---- BAD_PTE --------------------------------------------------------------------------------

#[test]
fn bad_pte_cases() {
    // An L3 index of its own (VA bit 39), so breaking its upper levels leaves the command
    // buffer's tables alone.
    let va = 1u64 << 39;
    let data_pa = 0x40_0000;
    let cases: &[(&str, usize, u64)] = &[
        (
            "leaf reserved bit 4",
            0,
            pte::page(data_pa, pte::READ | pte::WRITE) | 1 << 4,
        ),
        (
            "leaf reserved bit 63",
            0,
            pte::page(data_pa, pte::READ | pte::WRITE) | 1 << 63,
        ),
        (
            "leaf with TABLE",
            0,
            pte::page(data_pa, pte::READ | pte::WRITE) | pte::TABLE,
        ),
        ("L1 without TABLE", 1, pte::VALID | pte::READ | data_pa),
        ("L2 table with READ", 2, pte::table(data_pa) | pte::READ),
        ("L2 table with WRITE", 2, pte::table(data_pa) | pte::WRITE),
        ("L3 reserved bit 52", 3, pte::table(data_pa) | 1 << 52),
        ("L3 without TABLE", 3, pte::VALID | data_pa),
    ];
    for (what, level, entry) in cases {
        let mut h = setup();
        h.map(SLOT, va, PAGE, RW);
        h.set_entry(SLOT, va, *level, *entry);
        let f = run_fault(&mut h, &packet::encode_fill(va + 32, 4, 1));
        assert_eq!(
            f,
            (
                status(regs::FAULT_BAD_PTE, regs::ACCESS_WRITE),
                va + 32,
                4,
                JOB
            ),
            "{what}"
        );
    }
}

#[test]
fn invalid_entry_is_unmapped_whatever_its_other_bits() {
    let va = 1u64 << 39;
    let mut h = setup();
    h.map(SLOT, va, PAGE, RW);
    h.set_entry(SLOT, va, 1, pte::table(0x40_0000) & !pte::VALID | 1 << 60);
    let f = run_fault(&mut h, &packet::encode_fill(va, 4, 1));
    assert_eq!(
        f,
        (status(regs::FAULT_UNMAPPED, regs::ACCESS_WRITE), va, 4, JOB)
    );
}

// ---- MALFORMED_PACKET -----------------------------------------------------------------------

#[test]
fn malformed_packets() {
    let mut copy_flags = packet::encode_copy(DATA_VA, DATA_VA + PAGE, 8);
    copy_flags[0] = packet::header(packet::OP_COPY, 1, 7);
    let mut fence_flags = packet::encode_fence(DATA_VA, 1, true);
    fence_flags[0] = packet::header(packet::OP_FENCE, 3, 5);
    let mut copy_short = packet::encode_copy(DATA_VA, DATA_VA + PAGE, 8).to_vec();
    copy_short[0] = packet::header(packet::OP_COPY, 0, 6);
    copy_short.pop();
    let mut long_fill = vec![packet::header(packet::OP_FILL, 0, 20)];
    long_fill.extend([0; 19]);
    let gemm = |m, lda| {
        packet::encode_gemm(&GemmArgs {
            a: DATA_VA,
            b: DATA_VA,
            c: DATA_VA + PAGE,
            m,
            n: 4,
            k: 4,
            lda,
            ldb: 4,
            ldc: 4,
            accumulate: false,
        })
        .to_vec()
    };
    let cases: Vec<(&str, Vec<u32>)> = vec![
        ("unknown opcode", vec![packet::header(0x42, 0, 1)]),
        ("zero length", vec![packet::header(packet::OP_COPY, 0, 0)]),
        ("NOP with flags", vec![packet::header(packet::OP_NOP, 1, 1)]),
        ("COPY with 6 words", copy_short),
        ("FILL with 20 words", long_fill),
        ("COPY unknown flag", copy_flags.to_vec()),
        ("FENCE unknown flag", fence_flags.to_vec()),
        ("FILL size 3", packet::encode_fill(DATA_VA, 3, 0).to_vec()),
        ("FILL size 0", packet::encode_fill(DATA_VA, 0, 0).to_vec()),
        (
            "COPY overlap",
            packet::encode_copy(DATA_VA, DATA_VA + 4, 8).to_vec(),
        ),
        (
            "COPY past 2^48",
            packet::encode_copy(DATA_VA, (1 << 48) - 4, 8).to_vec(),
        ),
        ("GEMM m = 0", gemm(0, 4)),
        ("GEMM lda < k", gemm(4, 3)),
        ("GEMM m = 4097", gemm(4097, 4)),
        (
            "ELTWISE op 4",
            packet::encode_eltwise(4, 1, DATA_VA, DATA_VA, DATA_VA, 0, 0).to_vec(),
        ),
        (
            "ELTWISE count 0",
            packet::encode_eltwise(0, 0, DATA_VA, DATA_VA, DATA_VA, 0, 0).to_vec(),
        ),
        (
            "RELU with b",
            packet::encode_eltwise(2, 1, DATA_VA, 8, DATA_VA, 0, 0).to_vec(),
        ),
        (
            "REQUANT shift 63",
            packet::encode_eltwise(3, 1, DATA_VA, 0, DATA_VA, 1, 63).to_vec(),
        ),
        (
            "TIMESTAMP misaligned",
            packet::encode_timestamp(DATA_VA + 4).to_vec(),
        ),
        (
            "WAIT_MEM misaligned",
            packet::encode_wait_mem(DATA_VA + 1, 0).to_vec(),
        ),
    ];
    for (what, words) in cases {
        let mut h = setup();
        h.map(SLOT, DATA_VA, 2 * PAGE, RW);
        let f = run_fault(&mut h, &words);
        assert_eq!(
            f,
            (
                status(regs::FAULT_MALFORMED_PACKET, regs::ACCESS_FETCH),
                CMD_VA + 4,
                4,
                JOB
            ),
            "{what}"
        );
        expect_irq(&mut h, regs::IRQ_FAULT);
    }
}

#[test]
fn malformed_truncated_packet() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, 2 * PAGE, RW);
    // The COPY's 7 words are in memory, but the command buffer ends after 5 of them.
    let words = cat(&[
        &packet::encode_nop(),
        &packet::encode_copy(DATA_VA, DATA_VA + PAGE, 8),
    ]);
    h.cmdbuf(SLOT, CMD_VA, &words);
    h.push(Q, &exec_desc(SLOT as u32, CMD_VA, 24, 0, 0, 0, JOB));
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(
        h.fault(),
        (
            status(regs::FAULT_MALFORMED_PACKET, regs::ACCESS_FETCH),
            CMD_VA + 4,
            4,
            JOB
        )
    );
}

// ---- BAD_DESCRIPTOR -------------------------------------------------------------------------

#[test]
fn bad_descriptors() {
    let good = exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, JOB);
    let cases: Vec<(&str, Desc)> = vec![
        ("unknown kind", Desc { kind: 3, ..good }),
        (
            "reserved[0]",
            Desc {
                reserved: [1, 0],
                ..good
            },
        ),
        (
            "reserved[1]",
            Desc {
                reserved: [0, 1 << 63],
                ..good
            },
        ),
        (
            "unknown flag",
            Desc {
                flags: 1 << 2,
                ..good
            },
        ),
        ("disabled slot", Desc { as_slot: 6, ..good }),
        (
            "slot out of range",
            Desc {
                as_slot: 16,
                ..good
            },
        ),
        (
            "slot far out of range",
            Desc {
                as_slot: 0xFFFF_FFF5,
                ..good
            },
        ),
        (
            "misaligned cmd_va",
            Desc {
                cmd_va: CMD_VA + 2,
                ..good
            },
        ),
        (
            "misaligned cmd_size",
            Desc {
                cmd_size: 6,
                ..good
            },
        ),
        (
            "cmd_size above 1 MiB",
            Desc {
                cmd_size: ring::MAX_CMD_SIZE + 4,
                ..good
            },
        ),
        (
            "misaligned fence",
            Desc {
                flags: ring::DESC_FLAG_FENCE,
                fence_pa: FENCE_AREA + 4,
                ..good
            },
        ),
        (
            "WAIT with FENCE flag",
            Desc {
                flags: ring::DESC_FLAG_FENCE,
                ..wait_desc(FENCE_AREA, 0, JOB)
            },
        ),
        ("WAIT misaligned", wait_desc(FENCE_AREA + 2, 0, JOB)),
    ];
    for (what, d) in cases {
        let mut h = setup();
        h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
        let pa = h.push(Q, &d);
        assert_eq!(h.run(), Step::Idle, "{what}");
        assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_FAULTED, "{what}");
        assert_eq!(
            h.fault(),
            (
                regs::fault_status(
                    regs::FAULT_BAD_DESCRIPTOR,
                    regs::ACCESS_FETCH,
                    Q as u32,
                    d.as_slot
                ),
                pa,
                0,
                JOB
            ),
            "{what}"
        );
        assert_eq!(
            h.dev.mmio_read64(regs::queue_base(Q) + regs::Q_CUR_JOB),
            JOB
        );
        expect_irq(&mut h, regs::IRQ_FAULT);
    }
}

#[test]
fn bad_ring_registers() {
    for (size, base) in [
        (3, H::ring_pa(Q)),
        (8192, H::ring_pa(Q)),
        (0, H::ring_pa(Q)),
        (8, H::ring_pa(Q) + 32),
    ] {
        let mut h = setup();
        h.qw(Q, regs::Q_RING_SIZE, size);
        h.dev
            .mmio_write64(regs::queue_base(Q) + regs::Q_RING_BASE, base);
        h.qw(Q, regs::Q_TAIL, 1);
        h.qw(Q, regs::Q_DOORBELL, 1);
        assert_eq!(h.run(), Step::Idle);
        assert_eq!(
            h.fault(),
            (
                regs::fault_status(regs::FAULT_BAD_DESCRIPTOR, regs::ACCESS_FETCH, Q as u32, 0),
                base,
                0,
                0
            ),
            "size {size} base {base:#x}"
        );
    }
}

#[test]
fn tail_beyond_ring_size_is_bad_descriptor() {
    let mut h = setup();
    h.qw(Q, regs::Q_TAIL, 9); // ring of 8
    h.qw(Q, regs::Q_DOORBELL, 1);
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(
        h.fault(),
        (
            regs::fault_status(regs::FAULT_BAD_DESCRIPTOR, regs::ACCESS_FETCH, Q as u32, 0),
            H::ring_pa(Q),
            0,
            0
        )
    );
}

// ---- BUS_ERROR ------------------------------------------------------------------------------

#[test]
fn injected_bus_error_on_descriptor_fetch() {
    let mut h = setup();
    h.cmdbuf(SLOT, CMD_VA, &packet::encode_nop());
    h.dev.inject_bus_error();
    let pa = h.push(Q, &exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, JOB));
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(
        h.fault(),
        (
            regs::fault_status(regs::FAULT_BUS_ERROR, regs::ACCESS_FETCH, Q as u32, 0),
            pa,
            0,
            0
        )
    );
    expect_irq(&mut h, regs::IRQ_MEM_ERROR);
}

#[test]
fn injected_bus_error_on_packet_fetch_is_one_shot() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    let words = cat(&[&packet::encode_nop(), &packet::encode_fill(DATA_VA, 4, 9)]);
    h.submit_words(Q, SLOT, CMD_VA, &words, 0, 0, 0, JOB);
    assert_eq!(h.dev.step(), Step::Progress); // descriptor and its first packet, the NOP
    h.dev.inject_bus_error();
    assert_eq!(h.dev.step(), Step::Progress); // FILL: its fetch walk fails
    assert_eq!(
        h.fault(),
        (
            status(regs::FAULT_BUS_ERROR, regs::ACCESS_FETCH),
            CMD_VA + 4,
            4,
            JOB
        )
    );
    expect_irq(&mut h, regs::IRQ_MEM_ERROR);
    // After a reset the same work runs: the injected error was consumed.
    h.w32(regs::RESET, regs::RESET_ENGINE);
    h.w32(regs::IRQ_ACK, regs::IRQ_ALL);
    h.setup_queue(Q, 8, 1);
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &words,
        ring::DESC_FLAG_FENCE,
        FENCE_AREA,
        3,
        JOB,
    );
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 3);
    assert_eq!(h.read_va(SLOT, DATA_VA, 4), vec![9, 0, 0, 0]);
    assert_eq!(h.r32(regs::FAULT_STATUS), 0);
}

#[test]
fn bus_error_on_data_page_outside_memory() {
    let mut h = setup();
    h.map_page(SLOT, DATA_VA, MEM_SIZE + 0x10_0000, RW);
    let f = run_fault(&mut h, &packet::encode_fill(DATA_VA + 8, 4, 1));
    assert_eq!(
        f,
        (
            status(regs::FAULT_BUS_ERROR, regs::ACCESS_WRITE),
            DATA_VA + 8,
            4,
            JOB
        )
    );
    expect_irq(&mut h, regs::IRQ_MEM_ERROR);
}

#[test]
fn bus_error_on_fence_write() {
    let mut h = setup();
    let fence = MEM_SIZE + 8;
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &cat(&[&packet::encode_nop(), &packet::encode_nop()]),
        ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ,
        fence,
        1,
        JOB,
    );
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(
        h.fault(),
        (
            status(regs::FAULT_BUS_ERROR, regs::ACCESS_WRITE),
            fence,
            8,
            JOB
        )
    );
    assert_eq!(h.qr(Q, regs::Q_HEAD), 0);
    expect_irq(&mut h, regs::IRQ_MEM_ERROR); // no JOB_DONE
}

#[test]
fn bus_error_on_wait_descriptor() {
    let mut h = setup();
    let pa = h.push(Q, &wait_desc(MEM_SIZE, 1, JOB));
    let _ = pa;
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(
        h.fault(),
        (
            regs::fault_status(regs::FAULT_BUS_ERROR, regs::ACCESS_READ, Q as u32, 0),
            MEM_SIZE,
            0,
            JOB
        )
    );
}

// ---- Interaction between queues -------------------------------------------------------------

#[test]
fn other_queue_keeps_running_while_one_is_faulted() {
    let mut h = setup();
    h.setup_queue(0, 8, 1);
    h.map(SLOT, DATA_VA, PAGE, RW);
    // Queue Q faults on an unknown opcode.
    h.submit_words(Q, SLOT, CMD_VA, &[packet::header(0x55, 0, 1)], 0, 0, 0, JOB);
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_FAULTED);
    // Queue 0 still runs, several jobs; Q stays faulted even when its doorbell rings again.
    let cmd2 = CMD_VA + 0x10_0000;
    h.cmdbuf(SLOT, cmd2, &packet::encode_fill(DATA_VA, 8, 0x0102_0304));
    for i in 0..3 {
        h.push(
            0,
            &exec_desc(
                SLOT as u32,
                cmd2,
                24,
                ring::DESC_FLAG_FENCE,
                FENCE_AREA + 8,
                i + 1,
                100 + i,
            ),
        );
        h.push(Q, &exec_desc(SLOT as u32, CMD_VA, 4, 0, 0, 0, 200 + i));
        assert_eq!(h.run(), Step::Idle);
        assert_eq!(h.mem().peek_u64(FENCE_AREA + 8), i + 1);
    }
    assert_eq!(h.qr(0, regs::Q_DONE_COUNT), 3);
    assert_eq!(h.qr(0, regs::Q_STATE), regs::QSTATE_IDLE);
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_FAULTED);
    assert_eq!(h.read_va(SLOT, DATA_VA, 8), vec![4, 3, 2, 1, 4, 3, 2, 1]);
    assert_eq!(
        h.fault(),
        (
            status(regs::FAULT_MALFORMED_PACKET, regs::ACCESS_FETCH),
            CMD_VA,
            0,
            JOB
        )
    );
}

#[test]
fn only_the_first_fault_is_latched() {
    let mut h = setup();
    h.enable_slot(7);
    h.setup_queue(1, 8, 1);
    h.submit_words(Q, SLOT, CMD_VA, &[packet::header(0x55, 0, 1)], 0, 0, 0, JOB);
    assert_eq!(h.run(), Step::Idle);
    h.w32(regs::IRQ_ACK, regs::IRQ_FAULT);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), 0);
    // A second queue faults in another slot: it stops, the FAULT_* registers keep the first.
    h.push(1, &exec_desc(7, 1 << 40, 4, 0, 0, 0, 99));
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(1, regs::Q_STATE), regs::QSTATE_FAULTED);
    assert_eq!(h.dev.mmio_read64(regs::queue_base(1) + regs::Q_CUR_JOB), 99);
    assert_eq!(
        h.fault(),
        (
            status(regs::FAULT_MALFORMED_PACKET, regs::ACCESS_FETCH),
            CMD_VA,
            0,
            JOB
        )
    );
    // The second fault still raises the cause.
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::IRQ_FAULT);
    // After a reset the fault registers are free again.
    h.w32(regs::RESET, regs::RESET_ENGINE);
    assert_eq!(h.fault(), (0, 0, 0, 0));
    h.setup_queue(1, 8, 1);
    h.push(1, &exec_desc(7, 1 << 40, 4, 0, 0, 0, 99));
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(
        h.fault(),
        (
            regs::fault_status(regs::FAULT_UNMAPPED, regs::ACCESS_FETCH, 1, 7),
            1 << 40,
            0,
            99
        )
    );
}
