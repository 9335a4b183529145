//! Long packets yield (hw-spec §6, "Long packets"): a packet of more than a step's work
//! (`exec::STEP_WORK`) runs over several steps, resuming where it stopped, with the same result
//! as in one go; between its steps the host's rounds end (so its watchdog can declare the job
//! hung) and a higher-priority queue runs; a fault in a later step is reported like any other.

mod common;

use common::*;
use vgpu::model::exec::STEP_WORK;
use vgpu::model::Step;
use vgpu::uapi::packet::{self, GemmArgs};
use vgpu::uapi::{regs, ring};

const SLOT: usize = 1;
const LOW: usize = 0;
const HIGH: usize = 1;
const JOB: u64 = 0x51;

fn setup() -> H {
    let mut h = H::new();
    h.enable_slot(SLOT);
    h.setup_queue(LOW, 16, 0);
    h.setup_queue(HIGH, 16, 2);
    h
}

/// Steps until the device stops making progress; the number of steps that made progress.
fn steps_to_idle(h: &mut H) -> u64 {
    let mut n = 0;
    loop {
        match h.dev.step() {
            Step::Progress => n += 1,
            _ => return n,
        }
        assert!(n < 1_000_000, "never idle");
    }
}

fn submit(h: &mut H, q: usize, cmd_va: u64, words: &[u32], fence_pa: u64, job: u64) {
    h.submit_words(
        q,
        SLOT,
        cmd_va,
        words,
        ring::DESC_FLAG_FENCE,
        fence_pa,
        1,
        job,
    );
}

fn gemm_ref(g: &GemmArgs, a: &[u8], b: &[u8]) -> Vec<i32> {
    let mut c = vec![0i32; (g.m * g.ldc) as usize];
    for i in 0..g.m as usize {
        for j in 0..g.n as usize {
            let mut s = 0i32;
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

/// A GEMM of 64 x 300 x 1024 (19.7 M multiply-accumulates, 75 x STEP_WORK) runs over many
/// steps and gives exactly the reference result.
#[test]
fn a_long_gemm_resumes_over_many_steps_with_the_same_result() {
    let mut h = setup();
    let (m, n, k) = (64u32, 300u32, 1024u32);
    let (a_va, b_va, c_va) = (DATA_VA, DATA_VA + 0x10_0000, DATA_VA + 0x20_0000);
    h.map(SLOT, a_va, 0x10_0000, R);
    h.map(SLOT, b_va, 0x10_0000, R);
    h.map(SLOT, c_va, 0x10_0000, RW);
    let mut rng = Lcg(7);
    let a = rng.bytes((m * k) as usize);
    let b = rng.bytes((k * n) as usize);
    h.write_va(SLOT, a_va, &a);
    h.write_va(SLOT, b_va, &b);
    let g = GemmArgs {
        a: a_va,
        b: b_va,
        c: c_va,
        m,
        n,
        k,
        lda: k,
        ldb: n,
        ldc: n,
        accumulate: false,
    };
    submit(
        &mut h,
        LOW,
        CMD_VA,
        &packet::encode_gemm(&g),
        FENCE_AREA,
        JOB,
    );
    let steps = steps_to_idle(&mut h);
    // 128-column tiles of 128 x 1024 MACs, two per step: 64 rows x 3 tiles = 96 steps (plus the
    // completion), far from the one step a whole packet used to take.
    assert!(steps >= 96, "{steps} steps");
    assert!(u64::from(m) * u64::from(n) * u64::from(k) > 64 * STEP_WORK);
    assert_eq!(h.r32(regs::FAULT_STATUS), 0);
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 1);
    let out = h.read_va(SLOT, c_va, (m * n * 4) as usize);
    let got: Vec<i32> = out
        .chunks_exact(4)
        .map(|w| i32::from_le_bytes(w.try_into().unwrap()))
        .collect();
    assert_eq!(got, gemm_ref(&g, &a, &b));
}

/// A 4 MiB FILL is 16 steps of STEP_WORK bytes; every byte is written.
#[test]
fn a_long_fill_yields_every_step_work_bytes() {
    let mut h = setup();
    let size = 4u64 << 20;
    h.map(SLOT, DATA_VA, size, RW);
    submit(
        &mut h,
        LOW,
        CMD_VA,
        &packet::encode_fill(DATA_VA, size, 0xA5A5_5A5A),
        FENCE_AREA,
        JOB,
    );
    let steps = steps_to_idle(&mut h);
    assert_eq!(size / STEP_WORK, 16);
    assert!((16..=18).contains(&steps), "{steps} steps");
    let out = h.read_va(SLOT, DATA_VA, size as usize);
    assert!(out
        .chunks_exact(4)
        .all(|w| w == 0xA5A5_5A5Au32.to_le_bytes()));
    assert_eq!(h.mem().peek_u64(FENCE_AREA), 1);
}

/// While a long low-priority packet runs, a high-priority job submitted after it completes
/// first: the device picks the highest-priority runnable queue at every step.
#[test]
fn a_high_priority_job_runs_between_the_steps_of_a_long_packet() {
    let mut h = setup();
    let size = 8u64 << 20;
    h.map(SLOT, DATA_VA, size, RW);
    h.map(SLOT, DATA_VA + 0x100_0000, PAGE, RW);
    submit(
        &mut h,
        LOW,
        CMD_VA,
        &packet::encode_fill(DATA_VA, size, 1),
        FENCE_AREA,
        JOB,
    );
    for _ in 0..3 {
        assert_eq!(h.dev.step(), Step::Progress);
    }
    assert_eq!(h.qr(LOW, regs::Q_STATE), regs::QSTATE_RUNNING);
    submit(
        &mut h,
        HIGH,
        CMD_VA + 0x10_0000,
        &packet::encode_fill(DATA_VA + 0x100_0000, 64, 2),
        FENCE_AREA + 8,
        JOB + 1,
    );
    for _ in 0..3 {
        assert_eq!(h.dev.step(), Step::Progress);
    }
    assert_eq!(
        h.qr(HIGH, regs::Q_DONE_COUNT),
        1,
        "the high-priority job waited"
    );
    assert_eq!(h.mem().peek_u64(FENCE_AREA + 8), 1);
    assert_eq!(
        h.qr(LOW, regs::Q_DONE_COUNT),
        0,
        "the long fill is still running"
    );
    steps_to_idle(&mut h);
    assert_eq!(h.qr(LOW, regs::Q_DONE_COUNT), 1);
}

/// A fault in a later step of a long packet is latched like any other: the packet's offset, the
/// faulting VA, the job; the queue stops.
#[test]
fn a_fault_in_a_later_step_is_reported_at_the_packet() {
    let mut h = setup();
    let mapped = 1u64 << 20;
    h.map(SLOT, DATA_VA, mapped, RW);
    // The fill runs 2 MiB: its fifth step reaches the unmapped second MiB.
    let words = cat(&[
        &packet::encode_fill(DATA_VA, 64, 3),
        &packet::encode_fill(DATA_VA, 2 * mapped, 4),
    ]);
    submit(&mut h, LOW, CMD_VA, &words, FENCE_AREA, JOB);
    let steps = steps_to_idle(&mut h);
    assert!(steps >= 4, "{steps} steps");
    let (status, addr, offset, job) = h.fault();
    assert_ne!(status, 0);
    assert_eq!(addr, DATA_VA + mapped);
    assert_eq!(
        offset,
        (packet::encode_fill(DATA_VA, 64, 3).len() * 4) as u32
    );
    assert_eq!(job, JOB);
    assert_eq!(h.qr(LOW, regs::Q_STATE), regs::QSTATE_FAULTED);
    assert_eq!(
        h.mem().peek_u64(FENCE_AREA),
        0,
        "no fence for a faulted job"
    );
}

/// A host's round is told which steps ran part of a long packet (so that it looks at its
/// clock after each of them): a long FILL's steps are, a short packet's step is not.
#[test]
fn run_round_flags_the_steps_of_a_long_packet() {
    let mut h = setup();
    h.map(SLOT, DATA_VA, 1 << 20, RW);
    submit(
        &mut h,
        LOW,
        CMD_VA,
        &packet::encode_fill(DATA_VA, 64, 9),
        FENCE_AREA,
        JOB,
    );
    let mut seen = Vec::new();
    h.dev.run_round(64, |_, long| {
        seen.push(long);
        false
    });
    assert!(!seen.is_empty() && seen.iter().all(|&l| !l), "{seen:?}");
    h.w32(regs::IRQ_ACK, regs::IRQ_ALL);
    submit(
        &mut h,
        LOW,
        CMD_VA + 0x10_0000,
        &packet::encode_fill(DATA_VA, 1 << 20, 9),
        FENCE_AREA + 8,
        JOB + 1,
    );
    let mut seen = Vec::new();
    h.dev.run_round(3, |_, long| {
        seen.push(long);
        false
    });
    assert_eq!(seen, [true, true, true]);
}
