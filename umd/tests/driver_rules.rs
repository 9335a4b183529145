//! The driver's rules (the `rules` crate) as user space sees them, against whichever backend
//! `UMD_BACKEND` selects: the simulator on the host, aigpu.ko in the QEMU guest (which runs this
//! binary with `UMD_BACKEND=kmd`). Every scenario asserts exact errnos, reasons, context state
//! and memory contents, so the two drivers cannot drift apart unnoticed.
//!
//! - a job whose in-fence will never signal does not run, and the failure reaches every job
//!   that depends on it, directly or through other contexts (`dep_`);
//! - a submit naming a fence of an already failed producer is refused, and its context lives on;
//! - a destroyed producer's fence slot is not reused while a queued wait reads it (`ctx_`);
//! - address-space slots: the sixteenth file with work fails fast under `NO_BLOCK` (`slot_`);
//! - a device that falls off the bus is lost at once, and the next open once no context is left
//!   on it power-cycles it (`lost_`).
//!
//! Test names start with the area, so the guest can pick areas.

use libc::{EAGAIN, ECANCELED, ENODEV};
use uapi::ioctl::{
    Cmdbuf, Fence, BAN_DEPENDENCY, BAN_FAULT, RESET_GUILTY, RESET_NONE, SUBMIT_FLAG_NO_BLOCK,
    VM_ACCESS_READ as R, VM_ACCESS_WRITE as W,
};
use uapi::packet;
use uapi::reason as r;
use umd::backend::{select, Backend};

#[path = "backend_util.rs"]
mod backend_util;
use backend_util::expect_err_at;

const PAGE: u64 = 4096;
const VA: u64 = 0x4000_0000;
/// A VA no test maps (inside the usable range).
const UNMAPPED: u64 = VA + 0x3f00_0000;

fn open_index(index: u32) -> Box<dyn Backend> {
    if std::env::var_os("UMD_BACKEND").is_none() {
        std::env::set_var("UMD_BACKEND", "sim");
        // Device 1 for the scenarios that break their device (the guest loads two as well).
        std::env::set_var("UMD_SIM_DEVICES", "2");
    }
    let resolved = select::resolve().expect("backend resolves");
    select::open(&resolved, index).expect("device opens")
}

fn open() -> Box<dyn Backend> {
    open_index(0)
}

/// The scenarios share their device, and an engine reset is device-wide: one scenario's fault
/// would mark another's queued jobs innocent (`reset_status`). They run one at a time, as the
/// guest runs this binary (`--test-threads=1`, tests/guest/init.sh).
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(|p| p.into_inner())
}

fn deadline() -> u64 {
    umd::error::detail::mono_ns() + 10_000_000_000
}

/// An object of one page bound read-write at `va`.
fn buffer(b: &dyn Backend, va: u64) -> u32 {
    let h = b.gem_create(PAGE).expect("create");
    b.vm_bind(h, va, 0, PAGE, R | W).expect("bind");
    h
}

/// A command buffer holding `words`, bound readable at `va`.
fn cmdbuf(b: &dyn Backend, va: u64, words: &[u32]) -> Cmdbuf {
    let h = b.gem_create(PAGE).expect("create");
    let m = b.gem_mmap(h, PAGE).expect("mmap");
    // SAFETY: the mapping holds PAGE >= 4 * words.len() bytes.
    unsafe { std::ptr::copy_nonoverlapping(words.as_ptr() as *const u8, m.ptr, words.len() * 4) };
    b.gem_munmap(m).expect("munmap");
    b.vm_bind(h, va, 0, PAGE, R).expect("bind");
    Cmdbuf {
        va,
        size: words.len() as u32 * 4,
        flags: 0,
    }
}

fn write_u64(b: &dyn Backend, h: u32, v: u64) {
    let m = b.gem_mmap(h, PAGE).expect("mmap");
    // SAFETY: the mapping holds a page; u64 stores are aligned at its start.
    unsafe { std::ptr::write_volatile(m.ptr as *mut u64, v) };
    b.gem_munmap(m).expect("munmap");
}

fn words(b: &dyn Backend, h: u32, n: usize) -> Vec<u32> {
    let m = b.gem_mmap(h, PAGE).expect("mmap");
    let mut out = vec![0u32; n];
    // SAFETY: the mapping holds PAGE >= 4 * n bytes.
    unsafe { std::ptr::copy_nonoverlapping(m.ptr, out.as_mut_ptr() as *mut u8, n * 4) };
    b.gem_munmap(m).expect("munmap");
    out
}

fn fence(ctx_id: u32, seqno: u64) -> Fence {
    Fence {
        ctx_id,
        flags: 0,
        seqno,
    }
}

/// Producer A waits for a flag, then reads unmapped memory (a page fault). B's job waits on A's
/// fence, C's on B's. Once A faults, neither B's nor C's job runs: their waits fail with
/// `DEP_FAILED`, their state names the producer they waited for, their output stays untouched,
/// and later submits on them, or naming A's failed fence, are refused. A context that only
/// names a failed fence in a refused submit is not harmed.
#[test]
fn dep_failure_reaches_every_dependent_job_and_nothing_runs_on_garbage() {
    let _one = one_at_a_time();
    let b = open();
    let (a, bb, c) = (
        b.ctx_create(1).expect("A"),
        b.ctx_create(1).expect("B"),
        b.ctx_create(1).expect("C"),
    );
    let base = VA + 0x0100_0000;
    let flag = buffer(&*b, base);
    let out = buffer(&*b, base + 0x1000);
    let mut wa = packet::encode_wait_mem(base, 1).to_vec();
    wa.extend_from_slice(&packet::encode_copy(UNMAPPED, base + 0x1000, 64));
    let sa = b
        .submit(a, &[cmdbuf(&*b, base + 0x10_0000, &wa)], &[], 0)
        .expect("submit A");
    let fill_b = cmdbuf(
        &*b,
        base + 0x11_0000,
        &packet::encode_fill(base + 0x1000, 64, 0xb0b0_b0b0),
    );
    let sb = b
        .submit(bb, &[fill_b], &[fence(a, sa)], 0)
        .expect("submit B after A");
    let fill_c = cmdbuf(
        &*b,
        base + 0x12_0000,
        &packet::encode_fill(base + 0x1040, 64, 0xc0c0_c0c0),
    );
    let sc = b
        .submit(c, &[fill_c], &[fence(bb, sb)], 0)
        .expect("submit C after B");
    write_u64(&*b, flag, 1);

    expect_err_at(b.wait(a, sa, deadline()), ECANCELED, r::CTX_LOST, 0);
    expect_err_at(b.wait(bb, sb, deadline()), ECANCELED, r::DEP_FAILED, 0);
    expect_err_at(b.wait(c, sc, deadline()), ECANCELED, r::DEP_FAILED, 0);
    assert_eq!(
        words(&*b, out, 32),
        vec![0; 32],
        "a job that depends on a failed producer ran"
    );

    let s = b.ctx_state(a).expect("state A");
    assert_eq!(
        (s.ban, s.reset_status, s.fault_type, s.fault_va),
        (
            BAN_FAULT,
            RESET_GUILTY,
            uapi::regs::FAULT_UNMAPPED,
            UNMAPPED
        ),
        "{s:?}"
    );
    let s = b.ctx_state(bb).expect("state B");
    assert_eq!(
        (
            s.ban,
            s.dep_ctx_id,
            s.dep_seqno,
            s.reset_status,
            s.hung,
            s.fault_type
        ),
        (BAN_DEPENDENCY, a, sa, RESET_NONE, 0, 0),
        "{s:?}"
    );
    assert_eq!((s.submitted_seqno, s.completed_seqno), (sb, sb - 1));
    let s = b.ctx_state(c).expect("state C");
    assert_eq!(
        (s.ban, s.dep_ctx_id, s.dep_seqno),
        (BAN_DEPENDENCY, bb, sb),
        "{s:?}"
    );

    // Every later use fails with the same reason.
    let again = cmdbuf(&*b, base + 0x13_0000, &packet::encode_nop());
    expect_err_at(b.submit(bb, &[again], &[], 0), ECANCELED, r::DEP_FAILED, 0);
    expect_err_at(b.submit(a, &[again], &[], 0), ECANCELED, r::CTX_BANNED, 0);
    // A fresh context naming the failed fence is refused (in-fence 1 named) and keeps working.
    let d = b.ctx_create(2).expect("D");
    let sd0 = b.submit(d, &[again], &[], 0).expect("D's first job");
    expect_err_at(
        b.submit(d, &[again], &[fence(d, sd0), fence(a, sa)], 0),
        ECANCELED,
        r::DEP_FAILED,
        1,
    );
    let sd = b.submit(d, &[again], &[], 0).expect("D still works");
    assert_eq!(b.wait(d, sd, deadline()).expect("D's wait"), sd);
    // A fence of the failed producer that signalled before the failure still counts as done.
    for ctx in [a, bb, c, d] {
        b.ctx_destroy(ctx).expect("destroy");
    }
}

/// The failure is decided by the fence value: a consumer waiting for a producer's fence that
/// signalled before the producer failed runs normally.
#[test]
fn dep_a_fence_that_signalled_before_the_failure_still_counts() {
    let _one = one_at_a_time();
    let b = open();
    let (a, c) = (b.ctx_create(1).expect("A"), b.ctx_create(1).expect("C"));
    let base = VA + 0x0200_0000;
    let out = buffer(&*b, base);
    let nop = cmdbuf(&*b, base + 0x10_0000, &packet::encode_nop());
    let s1 = b.submit(a, &[nop], &[], 0).expect("A 1");
    assert_eq!(b.wait(a, s1, deadline()).expect("A 1 done"), s1);
    let bad = cmdbuf(
        &*b,
        base + 0x11_0000,
        &packet::encode_copy(UNMAPPED, base, 64),
    );
    let s2 = b.submit(a, &[bad], &[], 0).expect("A 2");
    expect_err_at(b.wait(a, s2, deadline()), ECANCELED, r::CTX_LOST, 0);
    let fill = cmdbuf(&*b, base + 0x12_0000, &packet::encode_fill(base, 64, 7));
    let sc = b
        .submit(c, &[fill], &[fence(a, s1)], 0)
        .expect("C after A's good fence");
    assert_eq!(b.wait(c, sc, deadline()).expect("C runs"), sc);
    assert_eq!(words(&*b, out, 16), vec![7; 16]);
    expect_err_at(
        b.submit(c, &[fill], &[fence(a, s2)], 0),
        ECANCELED,
        r::DEP_FAILED,
        0,
    );
    b.ctx_destroy(a).expect("destroy A");
    b.ctx_destroy(c).expect("destroy C");
}

/// Producer P is destroyed while consumer C's queued job still waits on P's fence (a `WAIT`
/// descriptor behind C's own stalled job), and a new context is created at once. P's fence slot
/// is not handed to the new context while that `WAIT` may still read it (`rules::FenceSlots`):
/// C's job runs once its queue gets there, on P's value, instead of stalling on the new owner's
/// 0 until the job timeout bans C.
#[test]
fn ctx_a_destroyed_producers_fence_slot_waits_for_the_wait_that_reads_it() {
    let _one = one_at_a_time();
    let b = open();
    let (p, c) = (b.ctx_create(1).expect("P"), b.ctx_create(1).expect("C"));
    let base = VA + 0x0600_0000;
    let (flag_p, flag_c) = (buffer(&*b, base), buffer(&*b, base + 0x1000));
    let out = buffer(&*b, base + 0x2000);
    let wait_p = cmdbuf(&*b, base + 0x10_0000, &packet::encode_wait_mem(base, 1));
    let sp = b.submit(p, &[wait_p], &[], 0).expect("P");
    let wait_c = cmdbuf(
        &*b,
        base + 0x11_0000,
        &packet::encode_wait_mem(base + 0x1000, 1),
    );
    b.submit(c, &[wait_c], &[], 0).expect("C stalls");
    let fill = cmdbuf(
        &*b,
        base + 0x12_0000,
        &packet::encode_fill(base + 0x2000, 64, 0xc0c0_c0c0),
    );
    let sc = b.submit(c, &[fill], &[fence(p, sp)], 0).expect("C after P");
    write_u64(&*b, flag_p, 1);
    assert_eq!(b.wait(p, sp, deadline()).expect("P done"), sp);
    b.ctx_destroy(p).expect("destroy P");
    let n = b.ctx_create(1).expect("a new context");
    write_u64(&*b, flag_c, 1);
    assert_eq!(b.wait(c, sc, deadline()).expect("C runs"), sc);
    assert_eq!(words(&*b, out, 16), vec![0xc0c0_c0c0; 16]);
    b.ctx_destroy(n).expect("destroy the new one");
    b.ctx_destroy(c).expect("destroy C");
}

/// Fifteen files each hold an address-space slot with a job blocked on the device; a sixteenth
/// file's `NO_BLOCK` submit fails at once with `EAGAIN` + `AS_SLOTS_BUSY` (its ring has room),
/// and once the others' work finishes its submit goes through. Every file is set up before the
/// first blocked job is submitted, so the blocked jobs stay well inside the job timeout even in
/// the emulated guest (a job waiting that long would be a hang, and its slot freed by the reset).
#[test]
fn slot_the_sixteenth_busy_file_fails_fast_with_as_slots_busy() {
    let _one = one_at_a_time();
    let slots = uapi::regs::NUM_AS_SLOTS - 1;
    let base = VA + 0x0300_0000;
    let mut files = Vec::new();
    for _ in 0..slots {
        let b = open();
        let c = b.ctx_create(1).expect("ctx");
        let flag = buffer(&*b, base);
        let wait = cmdbuf(&*b, base + 0x10_0000, &packet::encode_wait_mem(base, 1));
        files.push((b, c, flag, wait));
    }
    let last = open();
    let c = last.ctx_create(1).expect("ctx");
    let nop = cmdbuf(&*last, base + 0x10_0000, &packet::encode_nop());
    let mut seqnos = Vec::new();
    for (i, (b, c, _, wait)) in files.iter().enumerate() {
        let s = b
            .submit(*c, &[*wait], &[], 0)
            .unwrap_or_else(|e| panic!("file {i}: {}", e.describe()));
        seqnos.push(s);
    }
    let refused = last.submit(c, &[nop], &[], SUBMIT_FLAG_NO_BLOCK);
    for ((b, c, flag, _), s) in files.iter().zip(&seqnos) {
        write_u64(&**b, *flag, 1);
        assert_eq!(b.wait(*c, *s, deadline()).expect("released"), *s);
    }
    expect_err_at(refused, EAGAIN, r::AS_SLOTS_BUSY, 0);
    let s = last
        .submit(c, &[nop], &[], SUBMIT_FLAG_NO_BLOCK)
        .expect("a slot is free again");
    assert_eq!(last.wait(c, s, deadline()).expect("wait"), s);
}

/// A device that falls off the bus is lost at once: the next context create, object create and
/// submit fail with `ENODEV` + `DEVICE_LOST`, without waiting for a job to notice.
#[test]
fn lost_a_device_off_the_bus_fails_every_call_at_once() {
    let _one = one_at_a_time();
    let b = open_index(1);
    let c = b.ctx_create(1).expect("ctx");
    let base = VA + 0x0400_0000;
    let nop = cmdbuf(&*b, base, &packet::encode_nop());
    let s = b.submit(c, &[nop], &[], 0).expect("submit");
    assert_eq!(b.wait(c, s, deadline()).expect("wait"), s);
    b.debug_inject(3).expect("fall off the bus");
    let t = std::time::Instant::now();
    expect_err_at(b.ctx_create(1), ENODEV, r::DEVICE_LOST, 0);
    expect_err_at(b.gem_create(PAGE), ENODEV, r::DEVICE_LOST, 0);
    expect_err_at(b.submit(c, &[nop], &[], 0), ENODEV, r::DEVICE_LOST, 0);
    expect_err_at(b.wait(c, s + 1, deadline()), ENODEV, r::DEVICE_LOST, 0);
    assert!(
        t.elapsed() < std::time::Duration::from_millis(500),
        "took {:?}",
        t.elapsed()
    );
}

/// A lost device works again once no context is left on it: the next open power-cycles it
/// (`rules::lost::power_cycles_at_open`), even while a file that saw the loss is still open (a
/// process whose CPU mappings keep its file); that file stays lost, and an open while a context
/// still lives on the device is lost from the start.
#[test]
fn lost_the_next_open_power_cycles_a_device_no_context_is_left_on() {
    let _one = one_at_a_time();
    let a = open_index(1);
    let ca = a.ctx_create(1).expect("ctx");
    a.debug_inject(3).expect("fall off the bus");
    expect_err_at(a.ctx_create(1), ENODEV, r::DEVICE_LOST, 0);
    let resolved = select::resolve().expect("backend resolves");
    match select::open(&resolved, 1) {
        Err(e) => {
            assert_eq!(e.code, umd::umdResult::UMD_ERR_DEVICE_LOST, "{}", e.message);
            // Both backends say when it works again, in the rule's own words.
            assert!(
                e.message.contains(rules::lost::WORKS_AGAIN),
                "{}",
                e.message
            );
        }
        Ok(b) => panic!(
            "a lost device with a live context opened: query {:?}",
            b.query()
        ),
    }
    a.ctx_destroy(ca)
        .expect("a context destroy works on a lost device");
    let b = open_index(1);
    let cb = b
        .ctx_create(1)
        .expect("a context on the power-cycled device");
    let base = VA + 0x0800_0000;
    let out = buffer(&*b, base);
    let fill = cmdbuf(
        &*b,
        base + PAGE,
        &packet::encode_fill(base, 64, 0x600d_d00d),
    );
    let s = b.submit(cb, &[fill], &[], 0).expect("submit");
    assert_eq!(b.wait(cb, s, deadline()).expect("wait"), s);
    assert_eq!(words(&*b, out, 16), vec![0x600d_d00du32; 16]);
    // The file that saw the loss stays lost.
    expect_err_at(a.query(), ENODEV, r::DEVICE_LOST, 0);
    expect_err_at(a.gem_create(PAGE), ENODEV, r::DEVICE_LOST, 0);
    expect_err_at(a.ctx_create(1), ENODEV, r::DEVICE_LOST, 0);
    expect_err_at(a.wait(ca, 1, deadline()), ENODEV, r::DEVICE_LOST, 0);
    expect_err_at(a.ctx_state(ca), ENODEV, r::DEVICE_LOST, 0);
}

/// VM_UNBIND's arguments are checked before the mapping is looked up (`rules::vm::unbind`), in
/// the documented order, on both drivers.
#[test]
fn vm_unbind_checks_its_arguments_before_the_lookup() {
    let _one = one_at_a_time();
    use libc::EINVAL;
    let b = open();
    let va = VA + 0x0500_0000;
    expect_err_at(b.vm_unbind(va + 1, 0), EINVAL, r::SIZE_ZERO, 0);
    expect_err_at(b.vm_unbind(va + 1, PAGE), EINVAL, r::UNALIGNED, 0);
    expect_err_at(b.vm_unbind(va, PAGE + 1), EINVAL, r::UNALIGNED, 0);
    expect_err_at(b.vm_unbind(0, PAGE), EINVAL, r::VA_OUT_OF_RANGE, 0);
    expect_err_at(
        b.vm_unbind(u64::MAX - PAGE + 1, 2 * PAGE),
        EINVAL,
        r::VA_OUT_OF_RANGE,
        0,
    );
    expect_err_at(b.vm_unbind(va, PAGE), EINVAL, r::VA_NOT_MAPPED, 0);
    let h = buffer(&*b, va);
    expect_err_at(b.vm_unbind(va, 2 * PAGE), EINVAL, r::VA_NOT_MAPPED, 0);
    b.vm_unbind(va, PAGE).expect("unbind");
    b.gem_close(h).expect("close");
}
