// SPDX-License-Identifier: GPL-2.0
//! Crash dumps: on every fault, hang and device loss, a text snapshot of the event (format in
//! docs/kmd.md, "Device coredump"), published twice: as the device's devcoredump
//! (`/sys/class/devcoredump/devcd<N>/data`, `coredump.rs`), and kept in memory (the last 8) as
//! `crashdumps/crash-<n>` in the device's debugfs directory, for history (docs/debugfs.md).
//!
//! A dump is built while the device still shows the event (before the engine reset clears the
//! fault registers): the registers, the ring, the job's packets read back through the job's own
//! page tables, and the page-table walk of the faulting address.

mod sections;

use core::ffi::c_void;

use kernel::{
    bindings,
    prelude::*,
    str::CString,
    sync::{aref::ARef, Arc, ArcBorrow},
};

use crate::{
    driver::AigpuDevice,
    gpu::{queue_priority, FaultInfo, Gpu, Sched, KERNEL_SLOT, RING_ENTRIES},
    rules::{names::prio_name, report::HangFacts},
    text::Text,
    tprint,
    uapi::{packet, regs, ring},
};
use sections::{context_line, header, innocent, packet_name, page_walk, read_words, registers};

/// Dumps kept (older ones are dropped; `status` counts them all).
const MAX_DUMPS: usize = 8;
/// Most words of a command buffer read back into a dump.
const MAX_WORDS: usize = 4096;
/// Most packets listed per dump.
const MAX_PACKETS: usize = 128;

/// One crash dump.
pub(crate) struct Dump {
    pub(crate) seq: u64,
    pub(crate) kind: &'static str,
    pub(crate) ctx: u32,
    /// `time_wall` as text (for `crashdumps/list`).
    pub(crate) time: KVec<u8>,
    pub(crate) text: KVec<u8>,
}

/// The dumps of one device and their debugfs files.
pub(crate) struct Dumps {
    /// Oldest first, with each one's debugfs file (null if it could not be created).
    pub(crate) list: KVec<(Arc<Dump>, *mut bindings::dentry)>,
    /// Dumps taken since load.
    pub(crate) total: u64,
    /// `crashdumps/` (null before debugfs is set up and after it is torn down).
    pub(crate) dir: *mut bindings::dentry,
    /// The DRM device, from its first open until teardown: the devcoredump's device and the
    /// sender of the wedged event (`coredump.rs`, `wedged.rs`). A reference cycle (the device
    /// owns the `Gpu` that owns this) that [`detach_debugfs`] breaks.
    pub(crate) drm: Option<ARef<AigpuDevice>>,
    /// Set by [`detach_debugfs`]: the device is going away, [`attach_device`] does nothing.
    pub(crate) detached: bool,
}

// SAFETY: the dentry pointers are only used under the `Dumps` mutex, with the debugfs API that
// may be called from any thread.
unsafe impl Send for Dumps {}

impl Dumps {
    pub(crate) fn new() -> Self {
        Self {
            list: KVec::new(),
            total: 0,
            dir: core::ptr::null_mut(),
            drm: None,
            detached: false,
        }
    }
}

/// Remembers the DRM device of `gpu` (called at every open; the first one counts).
pub(crate) fn attach_device(gpu: &Gpu, dev: &AigpuDevice) {
    let mut d = gpu.dumps.lock();
    if d.drm.is_none() && !d.detached {
        d.drm = Some(dev.into());
    }
}


/// Builds the dump of an event on `queue` while the device still shows it. `job` is the job id
/// the device reported (`FAULT_JOB` or `Q_CUR_JOB`); `fault` is set for faults, `hang` for hangs
/// (the `hang` line: `rules::report::HangFacts`).
pub(crate) fn build(
    gpu: &Gpu,
    st: &Sched,
    kind: &'static str,
    queue: usize,
    job: u64,
    fault: Option<FaultInfo>,
    hang: Option<&HangFacts>,
) -> Option<Dump> {
    let seq = next_seq(gpu);
    let hw = &gpu.hw;
    let qb = regs::queue_base(queue);
    let head = hw.read32(qb + regs::Q_HEAD);
    let cur_offset = match fault {
        Some(f) => f.offset,
        None => u64::from(hw.read32(qb + regs::Q_CUR_OFFSET)),
    };
    let the_job = st.queues.get(queue).and_then(|q| q.jobs.iter().find(|j| j.view.id == job));
    let ctx_id = the_job.map_or(0, |j| j.view.ctx);
    let ctx = st.contexts.get(&ctx_id);
    let client = the_job.and_then(|j| st.clients.get(&j.file));

    let mut time = Text::new();
    let mut t = header(gpu, seq, kind, &mut time);
    match (the_job, client) {
        (Some(j), Some(c)) => tprint!(&mut t, "process pid={} comm={} client={}\n", c.pid, c.comm, j.file),
        _ => tprint!(&mut t, "process pid=0 comm=? client=0\n"),
    }
    if let Some(c) = ctx {
        context_line(ctx_id, c, &mut t);
    } else {
        tprint!(&mut t, "context ctx=0 queue={} prio={}\n", queue, prio_name(queue_priority(queue)));
    }
    if let Some(f) = fault {
        tprint!(
            &mut t,
            "fault type={} access={} va={:#x} offset={} job={}\n",
            regs::fault_kind_name(f.kind),
            regs::access_name(f.access),
            f.va,
            f.offset,
            job
        );
    } else if let Some(h) = hang {
        tprint!(&mut t, "hang job={} {}\n", job, h);
    }
    let tail = st.queues.get(queue).map_or(0, |q| q.state.tail);
    let ring_base = gpu.rings.get(queue).map_or(0, |r| {
        #[allow(clippy::useless_conversion)]
        u64::from(r.dma_address())
    });
    tprint!(
        &mut t,
        "ring queue={} head={} tail={} base={:#x} size={}\n",
        queue,
        head,
        tail,
        ring_base,
        RING_ENTRIES
    );

    // The job's executing command buffer (the descriptor at the ring head) and its packets.
    let bus = hw.bus();
    let mut walk_root = 0u64;
    let mut walk_va = fault.map(|f| f.va);
    if let Some(j) = the_job {
        let idx = head.wrapping_sub(j.start) as usize;
        let mut cmdbuf = 0usize;
        let mut exec = None;
        for (i, d) in j.descs.iter().enumerate() {
            if d.kind == ring::DESC_EXEC {
                if i == idx {
                    exec = Some((cmdbuf, *d));
                }
                cmdbuf += 1;
            }
        }
        if let Some((n, d)) = exec {
            let root = if d.as_slot as usize == KERNEL_SLOT {
                hw.read64(regs::as_pt_base(KERNEL_SLOT))
            } else {
                client.map_or(0, |c| c.pt_root)
            };
            walk_root = root;
            tprint!(
                &mut t,
                "job id={} seqno={} cmdbuf={} va={:#x} size={}{}\n",
                j.view.id,
                j.view.seqno,
                n,
                d.cmd_va,
                d.cmd_size,
                if d.as_slot as usize == KERNEL_SLOT { " injected=1" } else { "" }
            );
            tprint!(&mut t, "packets:\n");
            let want = ((d.cmd_size / 4) as usize).min(MAX_WORDS);
            let mut words = KVec::new();
            if words.resize(want, 0u32, GFP_KERNEL).is_ok() {
                let got = read_words(bus, root, d.cmd_va, &mut words);
                let mut at = 0usize;
                let mut listed = 0;
                while at < got && listed < MAX_PACKETS {
                    let off = at * 4;
                    let mark = if off as u64 == cur_offset {
                        if fault.is_some() { "   <- fault" } else { "   <- executing" }
                    } else {
                        ""
                    };
                    let remaining = (d.cmd_size as usize / 4).saturating_sub(at);
                    match packet::packet_words(words[at], remaining) {
                        Ok(n) if at + n <= got || packet::header_opcode(words[at]) == packet::OP_NOP => {
                            let slice = &words[at..(at + n).min(got)];
                            let decoded = if packet::header_opcode(words[at]) == packet::OP_NOP {
                                Ok(packet::Packet::Nop { words: n })
                            } else {
                                packet::decode(slice, true)
                            };
                            tprint!(&mut t, "  +{:04x} ", off);
                            match decoded {
                                Ok(p) => packet_name(&p, &mut t),
                                Err(m) => tprint!(&mut t, "?? header={:#010x} ({})", words[at], m.describe()),
                            }
                            tprint!(&mut t, "{}\n", mark);
                            at += n;
                        }
                        _ => {
                            tprint!(&mut t, "  +{:04x} ?? header={:#010x}{}\n", off, words[at], mark);
                            break;
                        }
                    }
                    listed += 1;
                }
                if got < (d.cmd_size / 4) as usize && got < want {
                    tprint!(&mut t, "  (command buffer not readable past +{:04x})\n", got * 4);
                } else if at < (d.cmd_size / 4) as usize {
                    tprint!(&mut t, "  ...\n");
                }
            }
            if walk_va.is_none() {
                walk_va = Some(d.cmd_va + cur_offset);
            }
        } else {
            tprint!(&mut t, "job id={} seqno={} descriptor={} (not a command buffer)\n", j.view.id, j.view.seqno, idx);
        }
    }
    if let Some(va) = walk_va {
        let f_kind = fault.map_or(0, |f| f.kind);
        let va_based = fault.is_none()
            || matches!(f_kind, regs::FAULT_UNMAPPED | regs::FAULT_PERMISSION | regs::FAULT_BAD_PTE | regs::FAULT_BUS_ERROR | regs::FAULT_MALFORMED_PACKET);
        if walk_root != 0 && va_based {
            page_walk(bus, walk_root, va, &mut t);
        }
    }
    innocent(st, ctx_id, &mut t);
    registers(gpu, queue, &mut t);
    Some(Dump {
        seq,
        kind,
        ctx: ctx_id,
        time: time.into_bytes(),
        text: t.into_bytes(),
    })
}

/// Takes the next dump number.
fn next_seq(gpu: &Gpu) -> u64 {
    let mut d = gpu.dumps.lock();
    d.total += 1;
    d.total
}

/// The context whose fault or hang led to a failed reset: still guilty with its jobs in a ring
/// (the reset drops them only after the device answered). None for a loss out of the blue.
pub(crate) fn guilty_of_loss(st: &Sched) -> Option<u32> {
    st.contexts
        .iter()
        .find(|(_, c)| c.state.reset_status == crate::uapi::ioctl::RESET_GUILTY && c.state.inflight > 0)
        .map(|(id, _)| *id)
}

/// The dump of a device loss (the engine did not come back from a reset, or the device fell off
/// the bus), taken when the driver gives the device up: the guilty context when a fault or hang
/// led to the reset, the contexts whose work is dropped, the registers as they read now.
pub(crate) fn build_lost(gpu: &Gpu, st: &Sched) -> Dump {
    let seq = next_seq(gpu);
    let guilty = guilty_of_loss(st);
    let mut time = Text::new();
    let mut t = header(gpu, seq, "lost", &mut time);
    let ctx_id = guilty.unwrap_or(0);
    match guilty.and_then(|g| st.contexts.get(&g)).and_then(|c| st.clients.get(&c.client).map(|k| (c, k))) {
        Some((c, k)) => {
            tprint!(&mut t, "process pid={} comm={} client={}\n", k.pid, k.comm, c.client);
            context_line(ctx_id, c, &mut t);
        }
        None => tprint!(&mut t, "process pid=0 comm=? client=0\ncontext ctx=0\n"),
    }
    tprint!(&mut t, "lost id={:#010x} expected={:#010x}\n", gpu.hw.read32(regs::ID), regs::ID_VALUE);
    innocent(st, ctx_id, &mut t);
    registers(gpu, 0, &mut t);
    Dump {
        seq,
        kind: "lost",
        ctx: ctx_id,
        time: time.into_bytes(),
        text: t.into_bytes(),
    }
}

/// Publishes `d` as the device's devcoredump, keeps it and publishes it as
/// `crashdumps/crash-<n>`; drops the oldest beyond the limit.
pub(crate) fn publish(gpu: &Gpu, d: Dump) {
    let Ok(d) = Arc::new(d, GFP_KERNEL) else { return };
    let mut dumps = gpu.dumps.lock();
    crate::coredump::publish(&dumps, &d.text);
    let mut dentry = core::ptr::null_mut();
    if !dumps.dir.is_null() {
        if let Ok(name) = CString::try_from_fmt(fmt!("crash-{}", d.seq)) {
            // SAFETY: `dir` is the live `crashdumps` directory (cleared before the device's debugfs
            // tree is removed, under this lock); the file's data is the dump, kept alive by the
            // list until the file is removed (below, or with the tree).
            dentry = unsafe {
                bindings::debugfs_create_file_full(
                    name.as_char_ptr(),
                    0o400,
                    dumps.dir,
                    Arc::as_ptr(&d).cast_mut().cast(),
                    core::ptr::null(),
                    crate::debugfs::crash_fops(),
                )
            };
            if crate::debugfs::is_err(dentry) {
                dentry = core::ptr::null_mut();
            }
        }
    }
    if dumps.list.push((d, dentry), GFP_KERNEL).is_err() {
        return;
    }
    while dumps.list.len() > MAX_DUMPS {
        let Ok((old, dentry)) = dumps.list.remove(0) else { break };
        if !dentry.is_null() && !dumps.dir.is_null() {
            // SAFETY: the file was created above and not removed yet (the tree is still there:
            // `dir` is set); removal waits for the file's in-flight operations, after which no
            // new open can reach `old`.
            unsafe { bindings::debugfs_remove(dentry) };
        }
        drop(old);
    }
}

/// `open` of a `crash-<n>` file: takes a reference on the dump for the open file.
///
/// # Safety
///
/// Called by debugfs with the file's inode, whose private data is a dump kept alive by the list.
pub(crate) unsafe extern "C" fn crash_open(inode: *mut bindings::inode, file: *mut bindings::file) -> core::ffi::c_int {
    // SAFETY: debugfs calls `open` only while the file exists, and the list keeps the dump alive
    // until the file is removed (removal waits for this call).
    let arc: Arc<Dump> = unsafe { ArcBorrow::from_raw((*inode).i_private.cast::<Dump>()) }.into();
    // SAFETY: `file` is the file being opened.
    unsafe { (*file).private_data = Arc::into_raw(arc).cast_mut().cast::<c_void>() };
    0
}

/// `read` of a `crash-<n>` file.
///
/// # Safety
///
/// `file` was opened by [`crash_open`].
pub(crate) unsafe extern "C" fn crash_read(
    file: *mut bindings::file,
    buf: *mut kernel::ffi::c_char,
    count: usize,
    pos: *mut bindings::loff_t,
) -> isize {
    // SAFETY: `private_data` holds the dump reference taken at open.
    let d = unsafe { &*(*file).private_data.cast::<Dump>() };
    // SAFETY: copies at most `count` bytes of the dump text to the user buffer.
    unsafe { bindings::simple_read_from_buffer(buf.cast(), count, pos, d.text.as_ptr().cast(), d.text.len()) }
}

/// `release` of a `crash-<n>` file: drops the open file's reference.
///
/// # Safety
///
/// `file` was opened by [`crash_open`].
pub(crate) unsafe extern "C" fn crash_release(_inode: *mut bindings::inode, file: *mut bindings::file) -> core::ffi::c_int {
    // SAFETY: `private_data` holds the reference taken at open, given back exactly once here.
    drop(unsafe { Arc::from_raw((*file).private_data.cast::<Dump>()) });
    0
}

/// `crashdumps/list`.
pub(crate) fn render_list(gpu: &Gpu, out: &mut Text) {
    let d = gpu.dumps.lock();
    for (dump, _) in d.list.iter() {
        tprint!(out, "crash-{} time=", dump.seq);
        out.push_bytes(&dump.time);
        tprint!(out, " kind={} ctx={}\n", dump.kind, dump.ctx);
    }
}

/// Forgets the debugfs files (the device's debugfs tree is about to be removed with them) and
/// the DRM device (which is about to be unregistered), after removing a pending devcoredump.
pub(crate) fn detach_debugfs(gpu: &Gpu) {
    let drm = {
        let mut d = gpu.dumps.lock();
        d.dir = core::ptr::null_mut();
        for e in d.list.iter_mut() {
            e.1 = core::ptr::null_mut();
        }
        d.detached = true;
        d.drm.take()
    };
    // Outside the lock: the last reference to the DRM device may go here.
    if let Some(drm) = drm {
        crate::coredump::remove(&drm);
    }
}
