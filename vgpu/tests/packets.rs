//! Every packet, executed by the device and checked against plain Rust references.

mod common;

use common::*;
use vgpu::model::Step;
use vgpu::uapi::packet::{self, GemmArgs};
use vgpu::uapi::{regs, ring};

const SLOT: usize = 1;
const Q: usize = 0;
const JOB: u64 = 0x77;
const FENCE_VALUE: u64 = 0xF00D;

fn setup() -> H {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(Q, 16, 1);
    h
}

/// Runs `words` as one job on queue 0 and checks it completed cleanly.
fn run_ok(h: &mut H, words: &[u32]) {
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        words,
        ring::DESC_FLAG_FENCE,
        FENCE_AREA,
        FENCE_VALUE,
        JOB,
    );
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.r32(regs::FAULT_STATUS), 0);
    assert_eq!(h.mem().peek_u64(FENCE_AREA), FENCE_VALUE);
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_IDLE);
    assert_eq!(h.qr(Q, regs::Q_DONE_COUNT), 1);
    assert_eq!(h.qr(Q, regs::Q_HEAD), 1);
}

#[test]
fn nop_packets_short_and_long() {
    let mut h = setup();
    // A 20-word NOP whose body is garbage, between two 1-word NOPs.
    let mut long = vec![packet::header(packet::OP_NOP, 0, 20)];
    long.extend((0..19).map(|i| 0xDEAD_0000 | i));
    let words = cat(&[&packet::encode_nop(), &long, &packet::encode_nop()]);
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &words,
        ring::DESC_FLAG_FENCE,
        FENCE_AREA,
        5,
        JOB,
    );
    assert_eq!(h.dev.step(), Step::Progress); // descriptor fetch and the first NOP
    assert_eq!(
        h.dev.mmio_read64(regs::queue_base(Q) + regs::Q_CUR_JOB),
        JOB
    );
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_RUNNING);
    assert_eq!(h.qr(Q, regs::Q_CUR_OFFSET), 4);
    assert_eq!(h.dev.step(), Step::Progress);
    assert_eq!(h.qr(Q, regs::Q_CUR_OFFSET), 84);
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 0);
    assert_eq!(h.dev.step(), Step::Progress); // last NOP, completes the descriptor
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 5);
    assert_eq!(h.qr(Q, regs::Q_HEAD), 1);
    assert_eq!(h.qr(Q, regs::Q_DONE_COUNT), 1);
    assert_eq!(h.dev.mmio_read64(regs::queue_base(Q) + regs::Q_CUR_JOB), 0);
    assert_eq!(h.qr(Q, regs::Q_CUR_OFFSET), 0);
    assert_eq!(h.dev.step(), Step::Idle);
    // No IRQ flag: no JOB_DONE.
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), 0);
}

#[test]
fn nop_descriptor_with_fence_and_irq() {
    let mut h = setup();
    let d = ring::Desc {
        kind: ring::DESC_NOP,
        flags: ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ,
        fence_pa: FENCE_AREA + 8,
        value: 0x1122_3344_5566_7788,
        job_id: 3,
        ..Default::default()
    };
    h.push(Q, &d);
    assert_eq!(h.dev.step(), Step::Progress);
    assert_eq!(h.mem().peek_u64(FENCE_AREA + 8), 0x1122_3344_5566_7788);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::irq_job_done(Q));
    assert_eq!(h.qr(Q, regs::Q_DONE_COUNT), 1);
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn empty_exec_descriptor_completes() {
    let mut h = setup();
    h.push(
        Q,
        &exec_desc(
            SLOT as u32,
            CMD_VA,
            0,
            ring::DESC_FLAG_FENCE,
            FENCE_AREA,
            9,
            1,
        ),
    );
    assert_eq!(h.dev.step(), Step::Progress);
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 9);
    assert_eq!(h.qr(Q, regs::Q_HEAD), 1);
    assert_eq!(h.dev.step(), Step::Idle);
}

#[test]
fn copy_unaligned_across_pages() {
    let mut h = setup();
    let src = DATA_VA;
    let dst = DATA_VA + 0x10_0000;
    h.map(SLOT, src, 3 * PAGE, R);
    h.map(SLOT, dst, 4 * PAGE, RW);
    let data = Lcg(1).bytes(3 * PAGE as usize);
    h.write_va(SLOT, src, &data);
    run_ok(&mut h, &packet::encode_copy(src + 100, dst + 3000, 9000));
    let out = h.read_va(SLOT, dst, 4 * PAGE as usize);
    assert_eq!(&out[3000..12000], &data[100..9100]);
    assert!(out[..3000].iter().all(|&b| b == 0));
    assert!(out[12000..].iter().all(|&b| b == 0));
}

#[test]
fn copy_one_byte() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    h.write_va(SLOT, DATA_VA + 4095, &[0xAB]);
    run_ok(&mut h, &packet::encode_copy(DATA_VA + 4095, DATA_VA, 1));
    assert_eq!(h.read_va(SLOT, DATA_VA, 2), vec![0xAB, 0]);
}

#[test]
fn fill_pattern_across_pages() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, 3 * PAGE, RW);
    run_ok(&mut h, &packet::encode_fill(DATA_VA + 8, 8200, 0xDEAD_BEEF));
    let out = h.read_va(SLOT, DATA_VA, 3 * PAGE as usize);
    assert_eq!(&out[..8], &[0; 8]);
    for i in 0..8200 / 4 {
        let w = &out[8 + 4 * i..12 + 4 * i];
        assert_eq!(w, &[0xEF, 0xBE, 0xAD, 0xDE], "word {i}");
    }
    assert!(out[8208..].iter().all(|&b| b == 0));
}

#[test]
fn tiny_fill_across_a_page() {
    // The 8-byte path still splits its access at the page boundary.
    let mut h = setup();
    h.map(SLOT, DATA_VA, 2 * PAGE, RW);
    h.write_va(SLOT, DATA_VA + PAGE - 8, &[0x5A; 16]);
    run_ok(
        &mut h,
        &packet::encode_fill(DATA_VA + PAGE - 4, 8, 0x0403_0201),
    );
    assert_eq!(
        h.read_va(SLOT, DATA_VA + PAGE - 8, 16),
        vec![0x5A, 0x5A, 0x5A, 0x5A, 1, 2, 3, 4, 1, 2, 3, 4, 0x5A, 0x5A, 0x5A, 0x5A]
    );
}

#[test]
fn fill_sizes_around_the_small_buffer() {
    // Fills of at most 8 bytes are written from the pattern itself, of at most 64 bytes from a
    // small buffer, longer ones through the 512-byte chunk: all write exactly `size` bytes of
    // the pattern, nothing before or after.
    for size in [4u64, 8, 12, 60, 64, 68, 508, 512, 516] {
        let mut h = setup();
        h.map(SLOT, DATA_VA, PAGE, RW);
        h.write_va(SLOT, DATA_VA, &[0x5A; 600]);
        run_ok(&mut h, &packet::encode_fill(DATA_VA + 4, size, 0x0403_0201));
        let out = h.read_va(SLOT, DATA_VA, 600);
        let end = 4 + size as usize;
        assert_eq!(&out[..4], &[0x5A; 4], "size {size}: before");
        for (i, w) in out[4..end].chunks_exact(4).enumerate() {
            assert_eq!(w, &[1, 2, 3, 4], "size {size}: word {i}");
        }
        assert!(out[end..].iter().all(|&b| b == 0x5A), "size {size}: after");
    }
}

#[test]
fn packet_body_across_a_page_of_the_command_buffer() {
    // The header and the first body word lie in one page, the rest in the next: the fetch reads
    // what its page holds in one access and the rest in a second one.
    let cva = CMD_VA + PAGE - 8;
    let words = packet::encode_fill(DATA_VA, 8, 0xCAFE_F00D);
    for mapped_second in [true, false] {
        let mut h = setup();
        h.map(SLOT, DATA_VA, PAGE, RW);
        h.map(SLOT, CMD_VA, PAGE, R);
        if mapped_second {
            h.map(SLOT, CMD_VA + PAGE, PAGE, R);
        }
        h.write_words(SLOT, cva, &words[..2]);
        if mapped_second {
            h.write_words(SLOT, CMD_VA + PAGE, &words[2..]);
        }
        let size = (words.len() * 4) as u32;
        h.push(Q, &exec_desc(SLOT as u32, cva, size, 0, 0, 0, JOB));
        h.run();
        if mapped_second {
            assert_eq!(h.r32(regs::FAULT_STATUS), 0);
            assert_eq!(
                h.read_va(SLOT, DATA_VA, 12),
                [0x0D, 0xF0, 0xFE, 0xCA, 0x0D, 0xF0, 0xFE, 0xCA, 0, 0, 0, 0]
            );
        } else {
            let (status, addr, offset, job) = h.fault();
            assert_eq!(
                (
                    regs::fault_kind(status),
                    regs::fault_access(status),
                    addr,
                    offset,
                    job
                ),
                (
                    regs::FAULT_UNMAPPED,
                    regs::ACCESS_FETCH,
                    CMD_VA + PAGE,
                    0,
                    JOB
                )
            );
            assert_eq!(
                h.read_va(SLOT, DATA_VA, 4),
                [0; 4],
                "nothing of the packet ran"
            );
        }
    }
}

/// Plain reference: C[i][j] = (acc ? C0[i][j] : 0) + sum A[i][l]*B[l][j], wrapping int32.
fn gemm_ref(g: &GemmArgs, a: &[u8], b: &[u8], c0: &[i32]) -> Vec<i32> {
    let mut c = c0.to_vec();
    for i in 0..g.m as usize {
        for j in 0..g.n as usize {
            let mut s: i32 = if g.accumulate {
                c0[i * g.ldc as usize + j]
            } else {
                0
            };
            for l in 0..g.k as usize {
                let x = a[i * g.lda as usize + l] as i8 as i32;
                let y = b[l * g.ldb as usize + j] as i8 as i32;
                s = s.wrapping_add(x * y);
            }
            c[i * g.ldc as usize + j] = s;
        }
    }
    c
}

fn round_up(x: u64) -> u64 {
    x.div_ceil(PAGE) * PAGE
}

/// Runs one GEMM on random data (C pre-filled with random values, so that padding columns and
/// the accumulate input are checked too) and compares every element of C with `gemm_ref`.
#[allow(clippy::too_many_arguments)]
fn gemm_case(m: u32, n: u32, k: u32, lda: u32, ldb: u32, ldc: u32, accumulate: bool, seed: u64) {
    let mut h = setup();
    let a_len = (m * lda) as usize;
    let b_len = (k * ldb) as usize;
    let c_elems = (m * ldc) as usize;
    let a_va = DATA_VA;
    let b_va = a_va + round_up(a_len as u64) + PAGE; // an unmapped page between operands
    let c_va = b_va + round_up(b_len as u64) + PAGE;
    h.map(SLOT, a_va, round_up(a_len as u64), R);
    h.map(SLOT, b_va, round_up(b_len as u64), R);
    h.map(SLOT, c_va, round_up(c_elems as u64 * 4), RW);
    let mut rng = Lcg(seed);
    let a = rng.bytes(a_len);
    let b = rng.bytes(b_len);
    let c0: Vec<i32> = (0..c_elems).map(|_| rng.next_u32() as i32).collect();
    h.write_va(SLOT, a_va, &a);
    h.write_va(SLOT, b_va, &b);
    let c0_bytes: Vec<u8> = c0.iter().flat_map(|v| v.to_le_bytes()).collect();
    h.write_va(SLOT, c_va, &c0_bytes);
    let g = GemmArgs {
        a: a_va,
        b: b_va,
        c: c_va,
        m,
        n,
        k,
        lda,
        ldb,
        ldc,
        accumulate,
    };
    run_ok(&mut h, &packet::encode_gemm(&g));
    let out = h.read_va(SLOT, c_va, c_elems * 4);
    let got: Vec<i32> = out
        .chunks_exact(4)
        .map(|w| i32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    let want = gemm_ref(&g, &a, &b, &c0);
    for (idx, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(
            g,
            w,
            "C element {idx} (row {}, col {})",
            idx / ldc as usize,
            idx % ldc as usize
        );
    }
}

#[test]
fn gemm_small_with_leading_dims() {
    gemm_case(5, 7, 9, 12, 10, 11, false, 11);
}

#[test]
fn gemm_accumulate_with_leading_dims() {
    gemm_case(5, 7, 9, 12, 10, 11, true, 12);
}

#[test]
fn gemm_multi_tile_and_chunk() {
    // n > 128 columns per tile, k > 256 elements per A chunk, odd strides.
    gemm_case(3, 300, 600, 601, 305, 300, true, 13);
}

#[test]
fn gemm_1x1x1() {
    gemm_case(1, 1, 1, 1, 1, 1, false, 14);
}

#[test]
fn gemm_256_cube() {
    gemm_case(256, 256, 256, 256, 256, 256, false, 15);
}

#[test]
fn gemm_known_values_and_wrap() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    // A = [[1, 2], [-3, 4]], B = [[5, 6], [7, -128]], C (ldc 3) pre-set for accumulation.
    let a = [1u8, 2, (-3i8) as u8, 4];
    let b = [5u8, 6, 7, (-128i8) as u8];
    let c0 = [i32::MAX, 10, 99, -1, 0, 77];
    h.write_va(SLOT, DATA_VA, &a);
    h.write_va(SLOT, DATA_VA + 0x100, &b);
    let c0b: Vec<u8> = c0.iter().flat_map(|v| v.to_le_bytes()).collect();
    h.write_va(SLOT, DATA_VA + 0x200, &c0b);
    let g = GemmArgs {
        a: DATA_VA,
        b: DATA_VA + 0x100,
        c: DATA_VA + 0x200,
        m: 2,
        n: 2,
        k: 2,
        lda: 2,
        ldb: 2,
        ldc: 3,
        accumulate: true,
    };
    run_ok(&mut h, &packet::encode_gemm(&g));
    let out: Vec<i32> = h
        .read_va(SLOT, DATA_VA + 0x200, 24)
        .chunks_exact(4)
        .map(|w| i32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    // Row 0: 1*5+2*7 = 19, 1*6+2*(-128) = -250; row 1: -15+28 = 13, -18-512 = -530.
    assert_eq!(out, vec![i32::MIN + 18, -240, 99, 12, -530, 77]);
}

fn words_le(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i32s(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|w| i32::from_le_bytes(w.try_into().unwrap()))
        .collect()
}

/// 100 values (two chunks of 64) starting with the interesting ones.
fn elt_inputs(seed: u64) -> (Vec<i32>, Vec<i32>) {
    let mut a = vec![i32::MAX, i32::MIN, -1, 0, 1, 65536, -7, 46341];
    let mut b = vec![1, -1, -1, 5, i32::MIN, 65536, 3, 46341];
    let mut rng = Lcg(seed);
    while a.len() < 100 {
        a.push(rng.next_u32() as i32);
        b.push(rng.next_u32() as i32);
    }
    (a, b)
}

fn eltwise_run(op: u32, a: &[i32], b: &[i32], scale: i32, shift: u32) -> Vec<u8> {
    let mut h = setup();
    let (a_va, b_va, d_va) = (DATA_VA, DATA_VA + 0x10_0000, DATA_VA + 0x20_0000);
    h.map(SLOT, a_va, PAGE, R);
    h.map(SLOT, b_va, PAGE, R);
    h.map(SLOT, d_va, PAGE, RW);
    h.write_va(SLOT, a_va, &words_le(a));
    h.write_va(SLOT, b_va, &words_le(b));
    h.write_va(SLOT, d_va, &[0x5A; 4096]);
    let with_b = op == packet::ELT_ADD || op == packet::ELT_MUL;
    let pkt = packet::encode_eltwise(
        op,
        a.len() as u32,
        a_va,
        if with_b { b_va } else { 0 },
        d_va,
        scale,
        shift,
    );
    run_ok(&mut h, &pkt);
    h.read_va(SLOT, d_va, 4096)
}

#[test]
fn eltwise_add_wraps() {
    let (a, b) = elt_inputs(21);
    let out = eltwise_run(packet::ELT_ADD, &a, &b, 0, 0);
    let got = i32s(&out[..400]);
    assert_eq!(
        &got[..8],
        &[i32::MIN, i32::MAX, -2, 5, i32::MIN + 1, 131072, -4, 92682]
    );
    for i in 0..100 {
        assert_eq!(got[i], a[i].wrapping_add(b[i]), "element {i}");
    }
    assert!(out[400..].iter().all(|&x| x == 0x5A));
}

#[test]
fn eltwise_mul_wraps() {
    let (a, b) = elt_inputs(22);
    let out = eltwise_run(packet::ELT_MUL, &a, &b, 0, 0);
    let got = i32s(&out[..400]);
    // 65536^2 = 2^32 wraps to 0; 46341^2 = 2147488281 wraps to -2147479015.
    assert_eq!(
        &got[..8],
        &[i32::MAX, i32::MIN, 1, 0, i32::MIN, 0, -21, -2147479015]
    );
    for i in 0..100 {
        assert_eq!(got[i], a[i].wrapping_mul(b[i]), "element {i}");
    }
    assert!(out[400..].iter().all(|&x| x == 0x5A));
}

#[test]
fn eltwise_relu() {
    let (a, _) = elt_inputs(23);
    let out = eltwise_run(packet::ELT_RELU, &a, &[], 0, 0);
    let got = i32s(&out[..400]);
    assert_eq!(&got[..8], &[i32::MAX, 0, 0, 0, 1, 65536, 0, 46341]);
    for i in 0..100 {
        assert_eq!(got[i], a[i].max(0), "element {i}");
    }
    assert!(out[400..].iter().all(|&x| x == 0x5A));
}

#[test]
fn eltwise_requant_round_half_up_and_clamp() {
    // (a values, scale, shift, expected int8 results)
    let cases: &[(&[i32], i32, u32, &[i8])] = &[
        // x/2: 1.5 -> 2, -1.5 -> -1, 0.5 -> 1, -0.5 -> 0, 2.5 -> 3, -2.5 -> -2.
        (
            &[3, -3, 1, -1, 5, -5, 0, 254],
            1,
            1,
            &[2, -1, 1, 0, 3, -2, 0, 127],
        ),
        // x/4: 1.25 -> 1, -1.25 -> -1, -1.5 -> -1, -1.75 -> -2, 1.75 -> 2.
        (
            &[5, -5, -6, -7, 7, -512, -513, -514],
            1,
            2,
            &[1, -1, -1, -2, 2, -128, -128, -128],
        ),
        // shift 0: plain clamp at -128 / 127.
        (
            &[127, 128, -128, -129, 1000, -1000, i32::MAX, i32::MIN],
            1,
            0,
            &[127, 127, -128, -128, 127, -128, 127, -128],
        ),
        // Negative scale: 100*-3 = -300, /8 = -37.5 -> -37; 7*-3/8 = -2.625 -> -3.
        (&[100, 7, -100, 0], -3, 3, &[-37, -3, 38, 0]),
        // Extremes in 64 bits: MIN*MIN = 2^62, /2^62 = 1; MAX*MIN/2^62 = -0.99.. -> -1.
        (&[i32::MIN, i32::MAX, 1 << 20], i32::MIN, 62, &[1, -1, 0]),
    ];
    for (a, scale, shift, want) in cases {
        let out = eltwise_run(packet::ELT_REQUANT, a, &[], *scale, *shift);
        let got: Vec<i8> = out[..a.len()].iter().map(|&x| x as i8).collect();
        assert_eq!(&got[..], *want, "scale {scale} shift {shift}");
        for (x, g) in a.iter().zip(&got) {
            assert_eq!(*g, packet::requant(*x, *scale, *shift));
        }
        assert!(out[a.len()..].iter().all(|&x| x == 0x5A), "wrote past dst");
    }
}

#[test]
fn eltwise_requant_many_elements() {
    let (a, _) = elt_inputs(24);
    let out = eltwise_run(packet::ELT_REQUANT, &a, &[], 3, 20);
    for i in 0..100 {
        let want = ((a[i] as i64 * 3 + (1 << 19)) >> 20).clamp(-128, 127) as i8;
        assert_eq!(out[i] as i8, want, "element {i}");
    }
    assert!(out[100..].iter().all(|&x| x == 0x5A));
}

#[test]
fn timestamp_packet_writes_clock() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    h.clock.0.set(0x0123_4567_89AB_CDEF);
    run_ok(&mut h, &packet::encode_timestamp(DATA_VA + 16));
    assert_eq!(
        h.read_va(SLOT, DATA_VA + 16, 8),
        0x0123_4567_89AB_CDEFu64.to_le_bytes().to_vec()
    );
    assert_eq!(h.read_va(SLOT, DATA_VA + 8, 8), vec![0; 8]);
}

#[test]
fn fence_packet_without_irq() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    run_ok(
        &mut h,
        &packet::encode_fence(DATA_VA + 8, 0xAAAA_BBBB_CCCC_DDDD, false),
    );
    assert_eq!(
        h.read_va(SLOT, DATA_VA + 8, 8),
        0xAAAA_BBBB_CCCC_DDDDu64.to_le_bytes().to_vec()
    );
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), 0);
    assert!(!h.dev.irq_line());
}

#[test]
fn fence_packet_with_irq() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    let words = cat(&[
        &packet::encode_fence(DATA_VA, 1, true),
        &packet::encode_fence(DATA_VA + 8, 2, false),
    ]);
    h.submit_words(Q, SLOT, CMD_VA, &words, 0, 0, 0, JOB);
    assert_eq!(h.dev.step(), Step::Progress); // descriptor fetch and the FENCE with IRQ
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::IRQ_FENCE);
    assert!(h.dev.irq_line());
    assert_eq!(h.read_va(SLOT, DATA_VA, 8), 1u64.to_le_bytes().to_vec());
    assert_eq!(h.read_va(SLOT, DATA_VA + 8, 8), vec![0; 8]);
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.read_va(SLOT, DATA_VA + 8, 8), 2u64.to_le_bytes().to_vec());
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::IRQ_FENCE);
}

#[test]
fn descriptor_fence_and_job_done_irq() {
    let mut h = setup();
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &packet::encode_nop(),
        ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ,
        FENCE_AREA + 16,
        42,
        JOB,
    );
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.mem().peek_u64(FENCE_AREA + 16), 42);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::irq_job_done(Q));
    assert_eq!(h.r32(regs::IRQ_STATUS), regs::irq_job_done(Q));
}

#[test]
fn wait_mem_stalls_until_memory_reaches_value() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    h.write_va(SLOT, DATA_VA, &3u64.to_le_bytes());
    let words = cat(&[
        &packet::encode_nop(),
        &packet::encode_wait_mem(DATA_VA, 5),
        &packet::encode_fence(DATA_VA + 8, 9, false),
    ]);
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &words,
        ring::DESC_FLAG_FENCE,
        FENCE_AREA,
        1,
        JOB,
    );
    assert_eq!(h.run(), Step::Stalled);
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_WAITING);
    assert_eq!(h.qr(Q, regs::Q_CUR_OFFSET), 4);
    assert_eq!(
        h.dev.mmio_read64(regs::queue_base(Q) + regs::Q_CUR_JOB),
        JOB
    );
    let qb = regs::queue_base(Q);
    assert_eq!(h.dev.mmio_read64(qb + regs::Q_WAIT_ADDR), DATA_VA);
    assert_eq!(h.dev.mmio_read64(qb + regs::Q_WAIT_VALUE), 5);
    assert!(h.dev.busy());
    assert_eq!(h.r32(regs::STATUS), regs::STATUS_BUSY);
    for _ in 0..10 {
        assert_eq!(h.dev.step(), Step::Stalled);
    }
    h.write_va(SLOT, DATA_VA, &4u64.to_le_bytes());
    assert_eq!(h.dev.step(), Step::Stalled);
    assert_eq!(h.read_va(SLOT, DATA_VA + 8, 8), vec![0; 8]);
    h.write_va(SLOT, DATA_VA, &5u64.to_le_bytes());
    assert_eq!(h.dev.step(), Step::Progress); // WAIT_MEM satisfied
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_RUNNING);
    assert_eq!(h.qr(Q, regs::Q_CUR_OFFSET), 24);
    assert_eq!(h.dev.mmio_read64(qb + regs::Q_WAIT_ADDR), 0, "not waiting");
    assert_eq!(h.dev.mmio_read64(qb + regs::Q_WAIT_VALUE), 0);
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.read_va(SLOT, DATA_VA + 8, 8), 9u64.to_le_bytes().to_vec());
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 1);
    assert!(!h.dev.busy());
}

#[test]
fn wait_mem_compares_all_64_bits_unsigned() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, PAGE, RW);
    // Low word larger than the target's, high word smaller: not reached.
    h.write_va(SLOT, DATA_VA, &0x0000_0000_FFFF_FFFFu64.to_le_bytes());
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &packet::encode_wait_mem(DATA_VA, 0x1_0000_0000),
        ring::DESC_FLAG_FENCE,
        FENCE_AREA,
        1,
        JOB,
    );
    assert_eq!(h.run(), Step::Stalled);
    h.write_va(SLOT, DATA_VA, &u64::MAX.to_le_bytes());
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 1);
}

#[test]
fn hang_enabled_hangs_until_reset() {
    let mut h = setup();
    h.w32(regs::DEBUG_CTRL, regs::DEBUG_CTRL_HANG);
    assert_eq!(h.r32(regs::DEBUG_CTRL), regs::DEBUG_CTRL_HANG);
    h.map(SLOT, DATA_VA, PAGE, RW);
    let words = cat(&[
        &packet::encode_nop(),
        &packet::encode_hang(),
        &packet::encode_fence(DATA_VA, 1, false),
    ]);
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &words,
        ring::DESC_FLAG_FENCE,
        FENCE_AREA,
        1,
        JOB,
    );
    assert_eq!(h.run(), Step::Stalled);
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_HUNG);
    assert_eq!(h.qr(Q, regs::Q_CUR_OFFSET), 4);
    for _ in 0..100 {
        assert_eq!(h.dev.step(), Step::Stalled);
    }
    assert!(h.dev.busy());
    assert_eq!(h.r32(regs::STATUS), regs::STATUS_BUSY);
    assert_eq!(h.r32(regs::FAULT_STATUS), 0);
    assert_eq!(h.read_va(SLOT, DATA_VA, 8), vec![0; 8]);
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 0);
    h.w32(regs::RESET, regs::RESET_ENGINE);
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_IDLE);
    assert_eq!(h.r32(regs::IRQ_RAWSTAT), regs::IRQ_RESET_DONE);
    assert!(!h.dev.busy());
    assert_eq!(h.dev.step(), Step::Idle);
    // The debug control survives the engine reset.
    assert_eq!(h.r32(regs::DEBUG_CTRL), regs::DEBUG_CTRL_HANG);
}

#[test]
fn hang_disabled_is_malformed() {
    let mut h = setup();
    let words = cat(&[&packet::encode_nop(), &packet::encode_hang()]);
    h.submit_words(
        Q,
        SLOT,
        CMD_VA,
        &words,
        ring::DESC_FLAG_FENCE,
        FENCE_AREA,
        1,
        JOB,
    );
    assert_eq!(h.run(), Step::Idle);
    assert_eq!(h.qr(Q, regs::Q_STATE), regs::QSTATE_FAULTED);
    assert_eq!(
        h.fault(),
        (
            regs::fault_status(
                regs::FAULT_MALFORMED_PACKET,
                regs::ACCESS_FETCH,
                Q as u32,
                SLOT as u32
            ),
            CMD_VA + 4,
            4,
            JOB
        )
    );
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 0);
}
