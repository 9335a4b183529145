// SPDX-License-Identifier: GPL-2.0
//! The sections of a crash dump (format in docs/kmd.md, "Device coredump"): the header with the
//! versions and times, the decoded packets, the command words read back and the page-table walk
//! through an address space, the register file, the guilty and innocent context lines. Each
//! writes text only; which sections a dump has, and when it is taken, is `dump.rs`'s.

use kernel::bindings;

use crate::{
    gpu::{Gpu, Sched},
    hw::mono_ns,
    model::{mmu, PhysMem},
    rules::names::prio_name,
    text::Text,
    tprint,
    uapi::{packet, pte, regs, version},
};

/// Prints the wall-clock time as `2026-11-29T02:13:07.123456Z`.
pub(super) fn wall_iso(out: &mut Text) {
    let mut ts = bindings::timespec64::default();
    let mut tm = bindings::tm::default();
    // SAFETY: both are valid out-structs for these calls.
    unsafe {
        bindings::ktime_get_real_ts64(&mut ts);
        bindings::time64_to_tm(ts.tv_sec, 0, &mut tm);
    }
    tprint!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
        tm.tm_year + 1900,
        tm.tm_mon + 1,
        tm.tm_mday,
        tm.tm_hour,
        tm.tm_min,
        tm.tm_sec,
        ts.tv_nsec / 1000
    );
}

/// The running kernel's release (`uname -r`).
pub(super) fn kernel_release(out: &mut Text) {
    // `struct uts_namespace` is opaque to bindgen; it starts with `struct new_utsname name`,
    // whose fields are six `char[65]` arrays (include/uapi/linux/utsname.h): `sysname`,
    // `nodename`, then `release`.
    const LEN: usize = 65;
    // `init_uts_ns` is the kernel's static, exported UTS namespace (taking its address is safe);
    // the reads below rely on this: its first 3 * 65
    // bytes are `sysname`, `nodename` and `release` (NUL-terminated, not changed after boot; the
    // structure is only reordered under CONFIG_RANDSTRUCT, which these kernels do not set).
    let base = core::ptr::addr_of!(bindings::init_uts_ns).cast::<u8>();
    for i in 0..LEN - 1 {
        // SAFETY: inside `release`, as above.
        let c = unsafe { base.add(2 * LEN + i).read() };
        if c == 0 {
            break;
        }
        out.push_bytes(&[if c.is_ascii_graphic() { c } else { b'?' }]);
    }
}

pub(super) fn packet_name(p: &packet::Packet, out: &mut Text) {
    use packet::Packet as P;
    match *p {
        P::Nop { words } => tprint!(out, "NOP words={}", words),
        P::Copy { src, dst, size } => tprint!(out, "COPY src={:#x} dst={:#x} size={}", src, dst, size),
        P::Fill { dst, size, pattern } => {
            tprint!(out, "FILL dst={:#x} size={} pattern={:#010x}", dst, size, pattern)
        }
        P::Gemm { a, b, c, m, n, k, lda, ldb, ldc, accumulate } => tprint!(
            out,
            "GEMM_I8 a={:#x} b={:#x} c={:#x} m={} n={} k={} lda={} ldb={} ldc={} accumulate={}",
            a,
            b,
            c,
            m,
            n,
            k,
            lda,
            ldb,
            ldc,
            u32::from(accumulate)
        ),
        P::Eltwise { op, count, a, b, dst, scale, shift } => tprint!(
            out,
            "ELTWISE op={} count={} a={:#x} b={:#x} dst={:#x} scale={} shift={}",
            op,
            count,
            a,
            b,
            dst,
            scale,
            shift
        ),
        P::Timestamp { dst } => tprint!(out, "TIMESTAMP dst={:#x}", dst),
        P::Fence { dst, value, irq } => tprint!(out, "FENCE dst={:#x} value={} irq={}", dst, value, u32::from(irq)),
        P::WaitMem { addr, value } => tprint!(out, "WAIT_MEM addr={:#x} value={}", addr, value),
        P::Hang => tprint!(out, "HANG"),
    }
}

/// Reads up to `out.len()` words at `va` through the address space at `root` (stops at the first
/// page the device could not read); returns how many were read.
pub(super) fn read_words(bus: &crate::bus::Bus, root: u64, va: u64, out: &mut [u32]) -> usize {
    let mut n = 0;
    let mut buf = [0u8; 4];
    while n < out.len() {
        let Some(cur) = va.checked_add(4 * n as u64) else { break };
        let Ok(pa) = mmu::walk(bus, root, cur, regs::ACCESS_FETCH) else { break };
        if bus.read(pa, &mut buf).is_err() {
            break;
        }
        out[n] = u32::from_le_bytes(buf);
        n += 1;
    }
    n
}

/// The page-table walk of `va` from `root`, entry by entry.
pub(super) fn page_walk(bus: &crate::bus::Bus, root: u64, va: u64, out: &mut Text) {
    tprint!(out, "pagewalk va={:#x} root={:#x}", va, root);
    let mut table = root & pte::ADDR_MASK;
    for level in (0..pte::LEVELS).rev() {
        let at = table + 8 * pte::index(va, level) as u64;
        let Some(e) = bus.read_u64(at) else {
            tprint!(out, " l{}=? -> table not readable at level {}\n", level, level);
            return;
        };
        tprint!(out, " l{}={:#x}", level, e);
        if e & pte::VALID == 0 {
            tprint!(out, " -> unmapped at level {}\n", level);
            return;
        }
        if e & pte::RESERVED_MASK != 0 || (level > 0) != (e & pte::TABLE != 0) {
            tprint!(out, " -> bad entry at level {}\n", level);
            return;
        }
        if level == 0 {
            let r = if e & pte::READ != 0 { "r" } else { "-" };
            let w = if e & pte::WRITE != 0 { "w" } else { "-" };
            tprint!(out, "|valid{}{} -> pa={:#x}\n", r, w, pte::addr(e) + (va & 0xfff));
            return;
        }
        tprint!(out, "|valid");
        table = pte::addr(e);
    }
    tprint!(out, "\n");
}

/// The `context` line of the guilty context `id`.
pub(super) fn context_line(id: u32, c: &crate::gpu::Ctx, t: &mut Text) {
    tprint!(
        t,
        "context ctx={} queue={} prio={} submitted={} completed={}\n",
        id,
        c.state.queue,
        prio_name(c.state.priority),
        c.state.submitted,
        c.state.completed
    );
}

/// The first lines of a dump: number, versions, time (also written to `time`), kind.
pub(super) fn header(gpu: &Gpu, seq: u64, kind: &str, time: &mut Text) -> Text {
    let mut t = Text::new();
    tprint!(&mut t, "aigpu crash dump {}\n", seq);
    tprint!(&mut t, "kernel=");
    kernel_release(&mut t);
    tprint!(
        &mut t,
        " driver={}.{}.{} uapi={}.{} device={}\n",
        version::DRIVER_VERSION.0,
        version::DRIVER_VERSION.1,
        version::DRIVER_VERSION.2,
        version::UAPI_MAJOR,
        version::UAPI_MINOR,
        gpu.name.to_str().unwrap_or("aigpu")
    );
    wall_iso(time);
    tprint!(&mut t, "time_wall=");
    t.push_bytes(time.as_bytes());
    tprint!(&mut t, " time_mono_ns={}\n", mono_ns());
    tprint!(&mut t, "kind={}\n", kind);
    t
}

/// One `innocent` line per other context with work in a ring (the engine reset that follows
/// resubmits it, or drops it when the device is lost).
pub(super) fn innocent(st: &Sched, guilty: u32, t: &mut Text) {
    for (id, c) in st.contexts.iter() {
        if *id == guilty || c.state.inflight == 0 {
            continue;
        }
        let (pid, comm) = Gpu::owner(st, *id);
        tprint!(
            t,
            "innocent ctx={} client={} pid={} comm={} queue={} prio={} inflight={}\n",
            id,
            c.client,
            pid,
            comm,
            c.state.queue,
            prio_name(c.state.priority),
            c.state.inflight
        );
    }
}

/// The registers, on one line after `registers:` (readers take that line), and `end`.
pub(super) fn registers(gpu: &Gpu, queue: usize, t: &mut Text) {
    let hw = &gpu.hw;
    let qb = regs::queue_base(queue);
    tprint!(t, "registers:\n ");
    let named: [(&str, usize); 6] = [
        ("IRQ_RAWSTAT", regs::IRQ_RAWSTAT),
        ("IRQ_MASK", regs::IRQ_MASK),
        ("STATUS", regs::STATUS),
        ("FAULT_STATUS", regs::FAULT_STATUS),
        ("FAULT_OFFSET", regs::FAULT_OFFSET),
        ("DEBUG_CTRL", regs::DEBUG_CTRL),
    ];
    for (n, off) in named {
        tprint!(t, " {}={:#010x}", n, hw.read32(off));
    }
    tprint!(t, " FAULT_ADDR={:#x} FAULT_JOB={}", hw.read64(regs::FAULT_ADDR), hw.read64(regs::FAULT_JOB));
    let qregs: [(&str, usize); 5] = [
        ("HEAD", regs::Q_HEAD),
        ("TAIL", regs::Q_TAIL),
        ("STATE", regs::Q_STATE),
        ("CUR_OFFSET", regs::Q_CUR_OFFSET),
        ("DONE_COUNT", regs::Q_DONE_COUNT),
    ];
    for (n, off) in qregs {
        tprint!(t, " Q{}_{}={}", queue, n, hw.read32(qb + off));
    }
    tprint!(t, " Q{}_CUR_JOB={}\n", queue, hw.read64(qb + regs::Q_CUR_JOB));
    tprint!(t, "end\n");
}
