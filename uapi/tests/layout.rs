//! Pure-Rust checks of the contract: struct layouts (literal sizes, alignments and offsets),
//! ioctl numbers, packet encode/decode round trips and every `Malformed` case, descriptor
//! encoding, and reason-code uniqueness.

use std::collections::BTreeSet;
use std::mem::{align_of, offset_of, size_of};

use uapi::ioctl::*;
use uapi::packet::{self, decode, GemmArgs, Malformed, Packet};
use uapi::ring::{self, Desc};
use uapi::{pte, reason, regs};

/// `layout!(Type, size, align, field => offset, ...)`.
macro_rules! layout {
    ($ty:ty, $size:expr, $align:expr, $($f:ident => $off:expr),* $(,)?) => {{
        assert_eq!(size_of::<$ty>(), $size, "size of {}", stringify!($ty));
        assert_eq!(align_of::<$ty>(), $align, "alignment of {}", stringify!($ty));
        $(assert_eq!(offset_of!($ty, $f), $off, "{}.{}", stringify!($ty), stringify!($f));)*
    }};
}

#[test]
fn struct_layouts() {
    layout!(Query, 96, 8,
        flags => 0, reason => 4, uapi_major => 8, uapi_minor => 12, driver_major => 16,
        driver_minor => 20, driver_patch => 24, num_queues => 28, caps => 32, va_start => 40,
        va_end => 48, page_size => 56, max_cmdbufs => 60, mem_total => 64, mem_used => 72,
        max_bo_size => 80, max_in_fences => 88, max_contexts => 92);
    layout!(GemCreate, 24, 8, size => 0, flags => 8, handle => 12, reason => 16, pad => 20);
    layout!(GemMmapOffset, 24, 8, handle => 0, flags => 4, offset => 8, reason => 16, pad => 20);
    layout!(VmBind, 40, 8,
        handle => 0, flags => 4, va => 8, bo_offset => 16, size => 24, access => 32,
        reason => 36);
    layout!(VmUnbind, 24, 8, flags => 0, reason => 4, va => 8, size => 16);
    layout!(CtxCreate, 16, 4, flags => 0, priority => 4, ctx_id => 8, reason => 12);
    layout!(CtxDestroy, 16, 4, ctx_id => 0, flags => 4, reason => 8, pad => 12);
    layout!(Cmdbuf, 16, 8, va => 0, size => 8, flags => 12);
    layout!(Fence, 16, 8, ctx_id => 0, flags => 4, seqno => 8);
    layout!(Submit, 56, 8,
        ctx_id => 0, flags => 4, cmdbufs => 8, in_fences => 16, num_cmdbufs => 24,
        num_in_fences => 28, out_seqno => 32, reason => 40, bad_index => 44,
        bad_offset => 48);
    layout!(Wait, 40, 8,
        ctx_id => 0, flags => 4, seqno => 8, timeout_ns => 16, completed_seqno => 24,
        reason => 32, pad => 36);
    layout!(CtxState, 80, 8,
        ctx_id => 0, flags => 4, reset_status => 8, fault_type => 12, fault_va => 16,
        fault_access => 24, hung => 28, fault_offset => 32, completed_seqno => 40,
        submitted_seqno => 48, reason => 56, pad => 60, ban => 64, dep_ctx_id => 68,
        dep_seqno => 72);
    layout!(Desc, 64, 8,
        kind => 0, flags => 4, as_slot => 8, cmd_size => 12, cmd_va => 16, fence_pa => 24,
        value => 32, job_id => 40, reserved => 48);
}

#[test]
fn ioctl_numbers() {
    assert_eq!(DRM_IOCTL_BASE, 0x64);
    assert_eq!(DRM_COMMAND_BASE, 0x40);
    assert_eq!(iowr(0, 0), 0xC000_6440);
    assert_eq!(iowr(0x3F, 0x3FFF), 0xFFFF_647F);
    assert_eq!(iowr(1, 0x4000), 0xC000_6441, "size is 14 bits");
    assert_eq!(IOCTL_QUERY, 0xC060_6440);
    assert_eq!(IOCTL_GEM_CREATE, 0xC018_6441);
    assert_eq!(IOCTL_GEM_MMAP_OFFSET, 0xC018_6442);
    assert_eq!(IOCTL_VM_BIND, 0xC028_6443);
    assert_eq!(IOCTL_VM_UNBIND, 0xC018_6444);
    assert_eq!(IOCTL_CTX_CREATE, 0xC010_6445);
    assert_eq!(IOCTL_CTX_DESTROY, 0xC010_6446);
    assert_eq!(IOCTL_SUBMIT, 0xC038_6447);
    assert_eq!(IOCTL_WAIT, 0xC028_6448);
    assert_eq!(IOCTL_CTX_STATE, 0xC050_6449);
    let nrs = [
        NR_QUERY,
        NR_GEM_CREATE,
        NR_GEM_MMAP_OFFSET,
        NR_VM_BIND,
        NR_VM_UNBIND,
        NR_CTX_CREATE,
        NR_CTX_DESTROY,
        NR_SUBMIT,
        NR_WAIT,
        NR_CTX_STATE,
    ];
    assert_eq!(nrs, [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(NUM_IOCTLS, 10);
}

#[test]
fn reason_codes_are_unique_and_named() {
    let values: BTreeSet<u32> = reason::ALL.iter().map(|r| r.0).collect();
    let names: BTreeSet<&str> = reason::ALL.iter().map(|r| r.1).collect();
    let texts: BTreeSet<&str> = reason::ALL.iter().map(|r| r.2).collect();
    assert_eq!(reason::ALL.len(), 37);
    assert_eq!(values.len(), 37, "duplicate reason value");
    assert_eq!(names.len(), 37, "duplicate reason name");
    assert_eq!(texts.len(), 37, "duplicate reason text");
    // Dense 0..=36, in order.
    for (i, r) in reason::ALL.iter().enumerate() {
        assert_eq!(r.0, i as u32, "{}", r.1);
        assert_eq!(reason::name(r.0), r.1);
        assert_eq!(reason::text(r.0), r.2);
    }
    assert_eq!(reason::NONE, 0);
    assert_eq!(reason::VA_OVERLAP, 10);
    assert_eq!(reason::PACKET_MALFORMED, 21);
    assert_eq!(reason::OBJECT_LIMIT, 32);
    // UAPI 1.1.
    assert_eq!(reason::AS_SLOTS_BUSY, 33);
    assert_eq!(reason::DEVICE_CTX_LIMIT, 34);
    // UAPI 1.2.
    assert_eq!(reason::DEP_FAILED, 35);
    // UAPI 1.3.
    assert_eq!(reason::PT_LIMIT, 36);
    assert_eq!(reason::name(10), "VA_OVERLAP");
    assert_eq!(reason::name(37), "UNKNOWN");
    assert_eq!(reason::text(u32::MAX), "unknown reason");
}

#[test]
fn descriptor_bytes_round_trip() {
    let d = Desc {
        kind: ring::DESC_EXEC,
        flags: ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ,
        as_slot: 0x0B,
        cmd_size: 0x1234,
        cmd_va: 0x0102_0304_0506_0708,
        fence_pa: 0x1112_1314_1516_1718,
        value: 0x2122_2324_2526_2728,
        job_id: 0x3132_3334_3536_3738,
        reserved: [0x4142_4344_4546_4748, 0x5152_5354_5556_5758],
    };
    let b = d.to_bytes();
    assert_eq!(
        &b[0..16],
        &[1, 0, 0, 0, 3, 0, 0, 0, 0x0B, 0, 0, 0, 0x34, 0x12, 0, 0]
    );
    assert_eq!(&b[16..24], &[8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(
        &b[56..64],
        &[0x58, 0x57, 0x56, 0x55, 0x54, 0x53, 0x52, 0x51]
    );
    assert_eq!(Desc::from_bytes(&b), d);
}

#[test]
fn register_helpers() {
    let s = regs::fault_status(regs::FAULT_PERMISSION, regs::ACCESS_WRITE, 3, 15);
    assert_eq!(s, 0x8000_F312);
    assert_eq!(regs::fault_kind(s), 2);
    assert_eq!(regs::fault_access(s), 1);
    assert_eq!(regs::fault_queue(s), 3);
    assert_eq!(regs::fault_slot(s), 15);
    assert_eq!(regs::as_pt_base(15), 0x1F0);
    assert_eq!(regs::as_config(15), 0x1F8);
    assert_eq!(regs::queue_base(3), 0x4C0);
    assert_eq!(regs::IRQ_ALL, 0x0007_010F);
    assert_eq!(pte::table(0x1234_5000), 0x1234_5009);
    assert_eq!(
        pte::page(0x1234_5FFF, pte::READ | pte::WRITE | pte::TABLE),
        0x1234_5007
    );
    assert_eq!(pte::index(0xFFFF_FFFF_F000, 3), 511);
    assert_eq!(pte::index(1 << 39 | 2 << 30 | 3 << 21 | 4 << 12, 1), 3);
    assert_eq!(pte::RESERVED_MASK, 0xFFF0_0000_0000_0FF0);
    assert_eq!(pte::ADDR_MASK, 0x000F_FFFF_FFFF_F000);
}

// ---- Packets --------------------------------------------------------------------------------

#[test]
fn packet_round_trips() {
    let copy = packet::encode_copy(0x1000, 0x2_0000_0000, 0x30);
    assert_eq!(copy, [0x0007_0001, 0x1000, 0, 0, 2, 0x30, 0]);
    assert_eq!(
        decode(&copy, false),
        Ok(Packet::Copy {
            src: 0x1000,
            dst: 0x2_0000_0000,
            size: 0x30
        })
    );
    let fill = packet::encode_fill(0x4000, 8, 0xDEAD_BEEF);
    assert_eq!(fill[0], 0x0006_0002);
    assert_eq!(
        decode(&fill, false),
        Ok(Packet::Fill {
            dst: 0x4000,
            size: 8,
            pattern: 0xDEAD_BEEF
        })
    );
    let g = GemmArgs {
        a: 0x1_0000,
        b: 0x2_0000,
        c: 0x3_0000,
        m: 2,
        n: 3,
        k: 4,
        lda: 5,
        ldb: 6,
        ldc: 7,
        accumulate: true,
    };
    let gemm = packet::encode_gemm(&g);
    assert_eq!(gemm[0], 0x000D_0103);
    assert_eq!(
        decode(&gemm, false),
        Ok(Packet::Gemm {
            a: 0x1_0000,
            b: 0x2_0000,
            c: 0x3_0000,
            m: 2,
            n: 3,
            k: 4,
            lda: 5,
            ldb: 6,
            ldc: 7,
            accumulate: true,
        })
    );
    let g2 = packet::encode_gemm(&GemmArgs {
        accumulate: false,
        ..g
    });
    assert_eq!(g2[0], 0x000D_0003);
    let elt = packet::encode_eltwise(packet::ELT_REQUANT, 9, 0x100, 0, 0x200, -5, 7);
    assert_eq!(elt[0], 0x000B_0004);
    assert_eq!(elt[9], 0xFFFF_FFFB);
    assert_eq!(
        decode(&elt, false),
        Ok(Packet::Eltwise {
            op: 3,
            count: 9,
            a: 0x100,
            b: 0,
            dst: 0x200,
            scale: -5,
            shift: 7
        })
    );
    let add = packet::encode_eltwise(packet::ELT_ADD, 1, 0x100, 0x300, 0x200, 0, 0);
    assert_eq!(
        decode(&add, false),
        Ok(Packet::Eltwise {
            op: 0,
            count: 1,
            a: 0x100,
            b: 0x300,
            dst: 0x200,
            scale: 0,
            shift: 0
        })
    );
    let ts = packet::encode_timestamp(0xFFFF_FFFF_FFF8);
    assert_eq!(ts, [0x0003_0005, 0xFFFF_FFF8, 0xFFFF]);
    assert_eq!(
        decode(&ts, false),
        Ok(Packet::Timestamp {
            dst: 0xFFFF_FFFF_FFF8
        })
    );
    let fence = packet::encode_fence(0x8, u64::MAX, true);
    assert_eq!(fence, [0x0005_0106, 8, 0, u32::MAX, u32::MAX]);
    assert_eq!(
        decode(&fence, false),
        Ok(Packet::Fence {
            dst: 8,
            value: u64::MAX,
            irq: true
        })
    );
    assert_eq!(
        decode(&packet::encode_fence(0x10, 5, false), false),
        Ok(Packet::Fence {
            dst: 0x10,
            value: 5,
            irq: false
        })
    );
    let wait = packet::encode_wait_mem(0x18, 0x1_0000_0001);
    assert_eq!(wait, [0x0005_0007, 0x18, 0, 1, 1]);
    assert_eq!(
        decode(&wait, false),
        Ok(Packet::WaitMem {
            addr: 0x18,
            value: 0x1_0000_0001
        })
    );
    assert_eq!(packet::encode_nop(), [0x0001_0000]);
    assert_eq!(
        decode(&packet::encode_nop(), false),
        Ok(Packet::Nop { words: 1 })
    );
    let long_nop = [packet::header(packet::OP_NOP, 0, 4), 1, 2, 3];
    assert_eq!(decode(&long_nop, false), Ok(Packet::Nop { words: 4 }));
    assert_eq!(packet::encode_hang(), [0x0001_007F]);
    assert_eq!(decode(&packet::encode_hang(), true), Ok(Packet::Hang));
}

#[test]
fn packet_header_helpers() {
    let h = packet::header(0xAB, 0xCD, 0xEF01);
    assert_eq!(h, 0xEF01_CDAB);
    assert_eq!(packet::header_opcode(h), 0xAB);
    assert_eq!(packet::header_flags(h), 0xCD);
    assert_eq!(packet::header_words(h), 0xEF01);
    assert_eq!(packet::packet_words(packet::header(0, 0, 7), 7), Ok(7));
    assert_eq!(
        packet::packet_words(packet::header(0, 0, 7), 6),
        Err(Malformed::Truncated)
    );
    assert_eq!(
        packet::packet_words(packet::header(0, 0, 0), 6),
        Err(Malformed::ZeroLength)
    );
}

#[test]
fn packet_boundary_values_decode() {
    // Largest ranges that still fit the 48-bit space.
    let top = 1u64 << 48;
    assert!(decode(&packet::encode_copy(top - 8, 0, 8), false).is_ok());
    assert!(decode(&packet::encode_fill(top - 4, 4, 0), false).is_ok());
    assert!(decode(&packet::encode_fence(top - 8, 0, false), false).is_ok());
    // Adjacent, non-overlapping copy regions.
    assert!(decode(&packet::encode_copy(0x1000, 0x1010, 0x10), false).is_ok());
    assert!(decode(&packet::encode_copy(0x1010, 0x1000, 0x10), false).is_ok());
    // GEMM at the dimension limit and with the exact leading dimensions.
    let g = GemmArgs {
        a: 0,
        b: 0,
        c: 0,
        m: 4096,
        n: 4096,
        k: 4096,
        lda: 4096,
        ldb: 4096,
        ldc: 4096,
        accumulate: false,
    };
    assert!(decode(&packet::encode_gemm(&g), false).is_ok());
    assert!(decode(&packet::encode_eltwise(3, 1, 0, 0, 0, 1, 62), false).is_ok());
}

fn operand(words: &[u32]) -> bool {
    matches!(decode(words, true), Err(Malformed::Operand { .. }))
}

#[test]
fn every_malformed_case() {
    use Malformed::*;
    // Structural errors.
    assert_eq!(decode(&[], false), Err(Truncated));
    assert_eq!(
        decode(&[packet::header(packet::OP_COPY, 0, 0)], false),
        Err(ZeroLength)
    );
    assert_eq!(
        decode(&[packet::header(0x42, 0, 1)], false),
        Err(UnknownOpcode(0x42))
    );
    assert_eq!(
        decode(&[packet::header(0x08, 0, 1)], false),
        Err(UnknownOpcode(0x08))
    );
    assert_eq!(
        decode(&[packet::header(0xFF, 0, 1)], false),
        Err(UnknownOpcode(0xFF))
    );
    let copy = packet::encode_copy(0, 0x100, 8);
    assert_eq!(
        decode(&copy[..6], false),
        Err(BadLength {
            expected: 7,
            found: 6
        })
    );
    let mut copy8 = copy.to_vec();
    copy8.push(0);
    assert_eq!(
        decode(&copy8, false),
        Err(BadLength {
            expected: 7,
            found: 8
        })
    );
    assert_eq!(
        decode(&[packet::header(packet::OP_HANG, 0, 2), 0], true),
        Err(BadLength {
            expected: 1,
            found: 2
        })
    );
    // Flags.
    let mut c = copy;
    c[0] = packet::header(packet::OP_COPY, 1, 7);
    assert_eq!(decode(&c, false), Err(UnknownFlags(1)));
    let mut f = packet::encode_fence(8, 1, true);
    f[0] = packet::header(packet::OP_FENCE, 0x81, 5);
    assert_eq!(decode(&f, false), Err(UnknownFlags(0x81)));
    let mut g = packet::encode_gemm(&GemmArgs {
        m: 1,
        n: 1,
        k: 1,
        lda: 1,
        ldb: 1,
        ldc: 1,
        ..Default::default()
    });
    g[0] = packet::header(packet::OP_GEMM_I8, 2, 13);
    assert_eq!(decode(&g, false), Err(UnknownFlags(2)));
    assert_eq!(
        decode(&[packet::header(packet::OP_NOP, 4, 1)], false),
        Err(UnknownFlags(4))
    );
    assert_eq!(
        decode(&[packet::header(packet::OP_HANG, 1, 1)], true),
        Err(UnknownFlags(1))
    );
    // HANG.
    assert_eq!(decode(&packet::encode_hang(), false), Err(HangDisabled));

    // Operands: COPY.
    let top = 1u64 << 48;
    assert!(operand(&packet::encode_copy(0, 0x100, 0)));
    assert!(operand(&packet::encode_copy(top - 4, 0, 8)));
    assert!(operand(&packet::encode_copy(0, top - 4, 8)));
    assert!(operand(&packet::encode_copy(u64::MAX, 0, 2)));
    assert!(operand(&packet::encode_copy(0x1000, 0x1008, 0x10)));
    assert!(operand(&packet::encode_copy(0x1008, 0x1000, 0x10)));
    assert!(operand(&packet::encode_copy(0x1000, 0x1000, 1)));
    // FILL.
    assert!(operand(&packet::encode_fill(0, 0, 0)));
    assert!(operand(&packet::encode_fill(0, 6, 0)));
    assert!(operand(&packet::encode_fill(top - 4, 8, 0)));
    // GEMM.
    let base = GemmArgs {
        a: 0,
        b: 0x1000,
        c: 0x2000,
        m: 4,
        n: 4,
        k: 4,
        lda: 4,
        ldb: 4,
        ldc: 4,
        accumulate: false,
    };
    for bad in [
        GemmArgs { m: 0, ..base },
        GemmArgs { n: 0, ..base },
        GemmArgs { k: 0, ..base },
        GemmArgs { m: 4097, ..base },
        GemmArgs { n: 4097, ..base },
        GemmArgs { k: 4097, ..base },
        GemmArgs { lda: 3, ..base },
        GemmArgs { ldb: 3, ..base },
        GemmArgs { ldc: 3, ..base },
        GemmArgs {
            a: top - 15,
            ..base
        },
        GemmArgs {
            b: top - 15,
            ..base
        },
        GemmArgs {
            c: top - 60,
            ..base
        },
        GemmArgs {
            m: 4096,
            // A spans 4095 * (2^32 - 1) + 4 = 0xFFE_FFFF_F005 bytes.
            lda: u32::MAX,
            a: 0xF100_0000_0000,
            ..base
        },
    ] {
        assert!(operand(&packet::encode_gemm(&bad)), "{bad:?}");
    }
    assert!(!operand(&packet::encode_gemm(&GemmArgs {
        c: top - 64,
        ..base
    })));
    // ELTWISE.
    assert!(operand(&packet::encode_eltwise(4, 1, 0, 0, 0, 0, 0)));
    assert!(operand(&packet::encode_eltwise(u32::MAX, 1, 0, 0, 0, 0, 0)));
    assert!(operand(&packet::encode_eltwise(0, 0, 0, 0, 0, 0, 0)));
    assert!(operand(&packet::encode_eltwise(2, 1, 0, 4, 0, 0, 0)));
    assert!(operand(&packet::encode_eltwise(3, 1, 0, 4, 0, 1, 0)));
    assert!(operand(&packet::encode_eltwise(3, 1, 0, 0, 0, 1, 63)));
    assert!(operand(&packet::encode_eltwise(0, 1, 0, 0, 0, 1, 0)));
    assert!(operand(&packet::encode_eltwise(1, 1, 0, 0, 0, 0, 1)));
    assert!(operand(&packet::encode_eltwise(0, 2, top - 4, 0, 0, 0, 0)));
    assert!(operand(&packet::encode_eltwise(0, 2, 0, top - 4, 0, 0, 0)));
    assert!(operand(&packet::encode_eltwise(2, 2, 0, 0, top - 4, 0, 0)));
    // REQUANT writes bytes: 2 elements fit in the last 2 bytes, RELU's 8 do not.
    assert!(!operand(&packet::encode_eltwise(3, 2, 0, 0, top - 2, 1, 0)));
    assert!(operand(&packet::encode_eltwise(2, 2, 0, 0, top - 2, 0, 0)));
    // TIMESTAMP, FENCE, WAIT_MEM: 8-byte aligned, inside 48 bits.
    for dst in [4, 1, top, u64::MAX - 7] {
        assert!(operand(&packet::encode_timestamp(dst)), "{dst:#x}");
        assert!(operand(&packet::encode_fence(dst, 0, false)), "{dst:#x}");
        assert!(operand(&packet::encode_wait_mem(dst, 0)), "{dst:#x}");
    }
}

#[test]
fn requant_reference() {
    assert_eq!(packet::requant(3, 1, 1), 2);
    assert_eq!(packet::requant(-3, 1, 1), -1);
    assert_eq!(packet::requant(-7, 1, 2), -2);
    assert_eq!(packet::requant(1000, 1, 0), 127);
    assert_eq!(packet::requant(-1000, 1, 0), -128);
    assert_eq!(packet::requant(i32::MIN, i32::MIN, 62), 1);
    assert_eq!(packet::requant(i32::MAX, i32::MAX, 62), 1);
    assert_eq!(packet::requant(i32::MIN, i32::MAX, 62), -1);
}
