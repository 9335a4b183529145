// SPDX-License-Identifier: GPL-2.0
//! The context and execution ioctls: CTX_CREATE / CTX_DESTROY / CTX_STATE, SUBMIT and WAIT.
//!
//! Argument checks and the reading of command buffers through the file's address space live
//! here; the checks themselves are the driver's rules (`rules/src/rules/submit.rs`, which the
//! simulator backend runs too), and the contexts, rings, fences and waits are the device's
//! (`gpu/`), shared by every file.

use kernel::{
    alloc::KVVec,
    prelude::*,
    uaccess::{UserPtr, UserSlice},
};

use crate::{
    driver::{DrmFile, RegDevice},
    ioctl::{check_pad, refuse, Fail, IoctlResult},
    rules::{flags::NoFlags, names::Priority, submit, Refusal},
    uapi::{
        ioctl::{self as u, Cmdbuf, Fence},
        reason,
    },
    vm::Vm,
};

/// CTX_CREATE: a context with a priority; at most `MAX_CONTEXTS` per file.
pub(crate) fn ctx_create(_dev: &RegDevice, req: &mut u::CtxCreate, file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    Priority::try_from(req.priority)?;
    let f = file.inner();
    req.ctx_id = f.gpu.ctx_create(f.client, req.priority)?;
    Ok(())
}

/// CTX_DESTROY: waits for the context's pending work (bounded by the job timeout), then destroys
/// it.
pub(crate) fn ctx_destroy(_dev: &RegDevice, req: &mut u::CtxDestroy, file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    check_pad(req.pad)?;
    let f = file.inner();
    f.gpu.ctx_destroy(f.client, req.ctx_id)
}

/// CTX_STATE: reset status, fault and progress of a context.
pub(crate) fn ctx_state(_dev: &RegDevice, req: &mut u::CtxState, file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    check_pad(req.pad)?;
    let f = file.inner();
    *req = f.gpu.ctx_state(f.client, req.ctx_id)?;
    Ok(())
}

/// WAIT: sleeps until the fence signals, the absolute deadline passes, a signal arrives
/// (`EINTR`/restart + `INTERRUPTED`), the context is lost (`ECANCELED` + `CTX_LOST`) or the device
/// is lost (`ENODEV` + `DEVICE_LOST`).
pub(crate) fn wait(_dev: &RegDevice, req: &mut u::Wait, file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    check_pad(req.pad)?;
    let f = file.inner();
    req.completed_seqno = f.gpu.wait(f.client, req.ctx_id, req.seqno, req.timeout_ns)?;
    Ok(())
}

/// Bytes of one `Cmdbuf` / `Fence` array element.
const ELEM: usize = 16;
const _: () = assert!(core::mem::size_of::<Cmdbuf>() == ELEM && core::mem::size_of::<Fence>() == ELEM);

/// Copies `n` 16-byte elements from user space in one copy (a copy per element costs a user
/// access window each, which a 256-buffer submit felt under emulation) and decodes each with
/// `parse`.
fn read_user_array<T>(addr: u64, n: u32, parse: impl Fn(&[u8]) -> T) -> Result<KVec<T>, Fail> {
    let n = n as usize;
    let oom = |_| refuse(reason::OUT_OF_MEMORY);
    let mut out = KVec::with_capacity(n, GFP_KERNEL).map_err(oom)?;
    if n == 0 {
        return Ok(out);
    }
    let addr = usize::try_from(addr).map_err(|_| refuse(reason::BAD_USER_POINTER))?;
    let mut raw = KVec::with_capacity(n * ELEM, GFP_KERNEL).map_err(oom)?;
    UserSlice::new(UserPtr::from_addr(addr), n * ELEM)
        .read_all(&mut raw, GFP_KERNEL)
        .map_err(|_| refuse(reason::BAD_USER_POINTER))?;
    for e in raw.chunks_exact(ELEM) {
        // Cannot fail: `n` elements of capacity were reserved above.
        out.push(parse(e), GFP_KERNEL).map_err(oom)?;
    }
    Ok(out)
}

// Fixed-size reads (`first_chunk`): a slice `copy_from_slice` is an out-of-line call and a
// `memcpy` in the kernel's size-optimised build, three per command buffer here.
fn le32(b: &[u8], at: usize) -> u32 {
    b.get(at..).and_then(|s| s.first_chunk::<4>()).map_or(0, |c| u32::from_le_bytes(*c))
}

fn le64(b: &[u8], at: usize) -> u64 {
    b.get(at..).and_then(|s| s.first_chunk::<8>()).map_or(0, |c| u64::from_le_bytes(*c))
}

/// Checks every command buffer (`rules::submit`, the simulator's checks): shape, mapped
/// readable, every packet well formed per the decoder the device uses. Operand addresses are
/// left to the GPU's MMU (a bad one is a page fault of this context when the work runs).
fn validate(vm: &Vm, cmdbufs: &[Cmdbuf], hang: bool) -> Result<(), Fail> {
    let mut words = KVVec::new();
    let mut cache = vm.fetch_cache();
    for (i, cb) in cmdbufs.iter().enumerate() {
        let i = i as u32;
        submit::cmdbuf_shape(i, cb)?;
        if words.is_empty() {
            words
                .resize(submit::scratch_words(cmdbufs), 0u32, GFP_KERNEL)
                .map_err(|_| Fail::from(Refusal::new(reason::OUT_OF_MEMORY).at(i)))?;
        }
        let n_words = (cb.size / 4) as usize;
        let Some(w) = words.get_mut(..n_words) else {
            return Err(Refusal::new(reason::CMDBUF_BAD).at(i).into());
        };
        if cache.read_words(cb.va, w).is_err() {
            return Err(Refusal::new(reason::CMDBUF_NOT_MAPPED).at(i).into());
        }
        submit::packet_stream(i, w, hang)?;
    }
    Ok(())
}

/// SUBMIT: many command buffers as one job on a context, after in-fences of other contexts of
/// the file; returns the job's seqno in `out_seqno`. On failure `bad_index` / `bad_offset` name
/// the offending command buffer (or in-fence) and packet.
pub(crate) fn submit(_dev: &RegDevice, req: &mut u::Submit, file: &DrmFile) -> IoctlResult {
    req.out_seqno = 0;
    req.bad_index = 0;
    req.bad_offset = 0;
    match submit_job(req, file) {
        Ok(seqno) => {
            req.out_seqno = seqno;
            Ok(())
        }
        Err(e) => {
            req.bad_index = e.index;
            req.bad_offset = e.offset;
            Err(e)
        }
    }
}

fn submit_job(req: &u::Submit, file: &DrmFile) -> Result<u64, Fail> {
    let flags = submit::arguments(req.flags, req.num_cmdbufs, req.num_in_fences)?;
    let cmdbufs = read_user_array(req.cmdbufs, req.num_cmdbufs, |b| Cmdbuf {
        va: le64(b, 0),
        size: le32(b, 8),
        flags: le32(b, 12),
    })?;
    let fences = read_user_array(req.in_fences, req.num_in_fences, |b| Fence {
        ctx_id: le32(b, 0),
        flags: le32(b, 4),
        seqno: le64(b, 8),
    })?;
    let f = file.inner();
    let pt_root = {
        let vm = f.vm.lock();
        validate(&vm, &cmdbufs, f.gpu.cfg.hang_debug)?;
        // Validation read the buffers through the tables, so the top-level table exists.
        vm.root_pa().ok_or(refuse(reason::CMDBUF_NOT_MAPPED))?
    };
    f.gpu.queue_job(f.client, pt_root, req.ctx_id, &cmdbufs, &fences, flags)
}
