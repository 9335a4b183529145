//! Submission and synchronisation: batches of command buffers go to the KMD in as few ioctls as
//! the UAPI allows (one per `MAX_CMDBUFS`), and fences are (context, sequence number) pairs
//! waited on with an absolute deadline, so a wait interrupted and restarted keeps its budget.

use crate::cmdbuf::CmdBuf;
use crate::context::Context;
use crate::errmap::Op;
use crate::error::{detail::mono_ns, umdResult, UmdError, UmdResult};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use uapi::ioctl::{Cmdbuf, Fence, MAX_CMDBUFS};

/// Jobs kept in a context's in-flight list before a submit polls the KMD to retire them.
const RETIRE_POLL_THRESHOLD: usize = 64;

/// Submits `cmdbufs` as one job on `ctx` after every fence in `waits`; returns the job's seqno.
pub fn submit(
    ctx: &Arc<Context>,
    cmdbufs: &[Arc<CmdBuf>],
    waits: &[(Arc<Context>, u64)],
) -> UmdResult<u64> {
    let dev = &ctx.device;
    dev.check().map_err(|e| e.ctx(ctx.id))?;
    if cmdbufs.is_empty() {
        return Err(UmdError::new(
            umdResult::UMD_ERR_INVALID_ARGUMENT,
            "umdSubmit with 0 command buffers.",
        )
        .ctx(ctx.id));
    }
    if waits.len() > uapi::ioctl::MAX_IN_FENCES as usize {
        return Err(UmdError::new(
            umdResult::UMD_ERR_INVALID_ARGUMENT,
            format!(
                "{} wait fences; at most {} per submit.",
                waits.len(),
                uapi::ioctl::MAX_IN_FENCES
            ),
        )
        .ctx(ctx.id));
    }
    let mut fences = Vec::with_capacity(waits.len());
    for (i, (wctx, seqno)) in waits.iter().enumerate() {
        if !Arc::ptr_eq(&wctx.device, dev) {
            return Err(UmdError::new(
                umdResult::UMD_ERR_SUBMIT_BAD_WAIT_FENCE,
                format!("wait fence #{i} belongs to context {} on another device (or another open of it).", wctx.id),
            )
            .ctx(ctx.id));
        }
        if *seqno > 0 {
            fences.push(Fence {
                ctx_id: wctx.kmd_id,
                flags: 0,
                seqno: *seqno,
            });
        }
    }
    let mut keep = Vec::with_capacity(cmdbufs.len());
    let mut checks = Vec::with_capacity(cmdbufs.len());
    let mut descs = Vec::with_capacity(cmdbufs.len());
    for (i, cb) in cmdbufs.iter().enumerate() {
        if !Arc::ptr_eq(&cb.ctx.device, dev) {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_HANDLE,
                format!(
                    "command buffer #{i} was created on another device (or another open of it)."
                ),
            )
            .ctx(ctx.id));
        }
        // A command buffer belongs to the context it was created on: its lifetime (it goes with
        // that context) and its accounting are that context's.
        if !Arc::ptr_eq(&cb.ctx, ctx) {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_ARGUMENT,
                format!(
                    "cmdbufs[{i}] was created on context {}, not on context {}: submit it on its own context, or create a command buffer on this one (umdCmdBufCreate).",
                    cb.ctx.id, ctx.id
                ),
            )
            .ctx(ctx.id));
        }
        let (buf, size, accesses) = cb.submittable().map_err(|e| UmdError {
            message: format!("command buffer #{i}: {}", e.message),
            ..e
        })?;
        descs.push(Cmdbuf {
            va: buf.va,
            size,
            flags: 0,
        });
        checks.push((i, accesses, buf.block()));
        keep.push(buf);
    }
    // Use-after-free and out-of-bounds detection, and reuse gating: every block the job uses is
    // pinned now and stamped with the job's fence once the kernel accepted it.
    let list: Vec<(usize, &[crate::memory::pool::Access], u32)> =
        checks.iter().map(|(i, a, b)| (*i, &a[..], *b)).collect();
    let pinned = ctx
        .pool
        .check_and_pin(dev, &list)
        .map_err(|e| e.ctx(ctx.id))?;
    let seqno = match submit_chunks(ctx, &descs, &fences) {
        Ok(seqno) => {
            ctx.pool.stamp(&pinned, ctx.acct, seqno);
            seqno
        }
        Err(Failed {
            error,
            queued: None,
        }) => {
            ctx.pool.unpin(&pinned);
            return Err(error);
        }
        Err(Failed {
            error,
            queued: Some(last),
        }) => {
            // Earlier parts are in the rings and may still run: the blocks they use stay
            // pinned until their fence, and their command buffers stay alive, exactly as for a
            // submit that succeeded; the caller learns that only a part was queued.
            ctx.pool.stamp(&pinned, ctx.acct, last);
            ctx.last_seqno.store(last, Ordering::Release);
            ctx.keep_inflight(last, keep);
            return Err(error);
        }
    };
    ctx.last_seqno.store(seqno, Ordering::Release);
    if ctx.keep_inflight(seqno, keep) > RETIRE_POLL_THRESHOLD {
        if let Ok(s) = ctx.state() {
            ctx.retire(s.completed_seqno);
        }
    }
    // INFO, like alloc and free: with the default file level the log names every job, so the
    // last job before a hang or a device loss can be found in it (`umd-log last-job`). Through
    // the typed front end (docs/logging.md, "Two front ends"): tens of nanoseconds, against the
    // microseconds of the submit itself.
    crate::record!(
        INFO,
        "submit",
        ctx = ctx.id,
        seqno,
        cmdbufs = cmdbufs.len(),
        waits = waits.len(),
    );
    Ok(seqno)
}

/// A submit that failed in its part `queued.is_some()`: the parts before it are queued (their
/// last fence is `queued`).
struct Failed {
    error: UmdError,
    queued: Option<u64>,
}

/// The kernel submits (one per `MAX_CMDBUFS` command buffers); the last one's seqno. A part the
/// kernel refused because a signal interrupted its wait for ring space queued nothing (docs/kmd.md,
/// SUBMIT): the first part's interruption is the caller's (`UMD_ERR_SYNC_INTERRUPTED`, nothing
/// queued); a later part is submitted again, so that a signal never leaves a batch half queued.
fn submit_chunks(ctx: &Arc<Context>, descs: &[Cmdbuf], fences: &[Fence]) -> Result<u64, Failed> {
    let dev = &ctx.device;
    let mut seqno = 0;
    let parts = descs.len().div_ceil(MAX_CMDBUFS as usize);
    for (n, chunk) in descs.chunks(MAX_CMDBUFS as usize).enumerate() {
        let ins: &[Fence] = if n == 0 { fences } else { &[] };
        let attempt = loop {
            match dev.backend.submit(ctx.kmd_id, chunk, ins, 0) {
                Err(e) if e.reason == uapi::reason::INTERRUPTED && n > 0 => continue,
                r => break r,
            }
        };
        let queued = (n > 0).then_some(seqno);
        seqno = attempt.map_err(|e| {
            let index = n * MAX_CMDBUFS as usize + e.bad_index as usize;
            let what = match e.reason {
                uapi::reason::PACKET_MALFORMED | uapi::reason::PACKET_HANG_DISABLED => {
                    format!(
                        "submit (command buffer #{index}, packet at byte offset {})",
                        e.bad_offset
                    )
                }
                uapi::reason::CMDBUF_BAD | uapi::reason::CMDBUF_NOT_MAPPED => {
                    format!("submit (command buffer #{index})")
                }
                uapi::reason::FENCE_CTX_INVALID | uapi::reason::FENCE_NOT_SUBMITTED => {
                    format!("submit (wait fence #{})", e.bad_index)
                }
                _ => "submit".to_string(),
            };
            let mut err = dev.fail(Op::Submit, e, &what).ctx(ctx.id);
            if err.code == umdResult::UMD_ERR_CTX_DEPENDENCY_FAILED {
                err.message = match ctx.state() {
                    // The context itself is lost: a job of it waited on a failed producer.
                    Ok(s) if s.ban == uapi::ioctl::BAN_DEPENDENCY => format!(
                        "context {} is lost: {}; it accepts no more work. {}",
                        ctx.id,
                        ctx.loss_story().0,
                        err.message
                    ),
                    // Refused before anything was queued: wait fence #i names a failed producer.
                    _ => match fences.get(e.bad_index as usize) {
                        Some(f) => format!(
                            "submit refused, nothing was queued: wait fence #{} is {}; this context is unharmed, the producer's must be recreated. {}",
                            e.bad_index,
                            crate::context::dependency_story(dev, f.ctx_id, f.seqno),
                            err.message
                        ),
                        None => err.message,
                    },
                };
            }
            if err.code == umdResult::UMD_ERR_CTX_LOST {
                let (story, va) = ctx.loss_story();
                err.message = format!(
                    "context {} is lost: {story}; it accepts no more work. {}",
                    ctx.id, err.message
                );
                err.fault_va = va;
            }
            if let Some(last) = queued {
                let first = n * MAX_CMDBUFS as usize;
                err.message = format!(
                    "only part of the batch was queued: command buffers 0..{first} (parts 1..{n} of {parts}) are queued as fence seqno {last} and may still run; command buffers {first}..{} were not. {}",
                    descs.len(),
                    err.message
                );
            }
            Failed { error: err, queued }
        })?;
    }
    Ok(seqno)
}

/// Waits up to `timeout_ns` (relative; `u64::MAX` forever) for `seqno` on `ctx`.
pub fn wait(ctx: &Context, seqno: u64, timeout_ns: u64) -> UmdResult<()> {
    ctx.device.check().map_err(|e| e.ctx(ctx.id).seqno(seqno))?;
    if seqno == 0 {
        return Ok(());
    }
    let deadline = mono_ns().saturating_add(timeout_ns);
    let waited = match ctx.enter_wait() {
        Some(_counted) => ctx.device.backend.wait(ctx.kmd_id, seqno, deadline),
        // Closing already: what the driver says about a destroyed context.
        None => Err(crate::backend::KmdError::new(
            libc::EINVAL,
            uapi::reason::CTX_INVALID,
        )),
    };
    match waited {
        Ok(done) => {
            ctx.retire(done);
            // The completion side of the job story (failures are logged by `wait_error`); the
            // non-blocking query is not logged, as callers poll with it.
            crate::record!(INFO, "wait done", ctx = ctx.id, seqno, completed = done);
            Ok(())
        }
        Err(e) => match ctx.closed_by() {
            Some(by) if crate::errmap::code_for(Op::Wait, &e) != umdResult::UMD_ERR_DEVICE_LOST => {
                Err(closed_error(ctx, seqno, by, e))
            }
            _ => Err(wait_error(ctx, seqno, timeout_ns, e)),
        },
    }
}

/// A wait that failed because another thread tore its context down (docs/libumd.md, "Closing
/// under a blocked wait"): whatever the driver said (a destroyed context, a hang the destroy
/// waited for, an interrupted or timed-out sleep) the fence will never signal now.
#[track_caller]
fn closed_error(
    ctx: &Context,
    seqno: u64,
    by: crate::context::ClosedBy,
    e: crate::backend::KmdError,
) -> UmdError {
    UmdError::new(
        umdResult::UMD_ERR_INVALID_HANDLE,
        format!(
            "wait for fence (context {}, seqno {seqno}): {}; the fence will never signal (the driver said {}).",
            ctx.id,
            by.sentence(),
            e.describe()
        ),
    )
    .kmd(e.errno, e.reason)
    .ctx(ctx.id)
    .seqno(seqno)
}

/// Non-blocking: `UMD_SUCCESS` when signalled, `UMD_STATUS_NOT_READY` otherwise.
pub fn query(ctx: &Context, seqno: u64) -> UmdResult<umdResult> {
    ctx.device.check().map_err(|e| e.ctx(ctx.id).seqno(seqno))?;
    if seqno == 0 {
        return Ok(umdResult::UMD_SUCCESS);
    }
    match ctx.device.backend.wait(ctx.kmd_id, seqno, 0) {
        Ok(done) => {
            ctx.retire(done);
            Ok(umdResult::UMD_SUCCESS)
        }
        Err(e) if e.errno == libc::ETIMEDOUT => Ok(umdResult::UMD_STATUS_NOT_READY),
        Err(e) => Err(wait_error(ctx, seqno, 0, e)),
    }
}

#[track_caller]
fn wait_error(ctx: &Context, seqno: u64, timeout_ns: u64, e: crate::backend::KmdError) -> UmdError {
    let what = format!("wait for fence (context {}, seqno {seqno})", ctx.id);
    let mut err = ctx.device.fail(Op::Wait, e, &what).ctx(ctx.id).seqno(seqno);
    match err.code {
        umdResult::UMD_ERR_SYNC_TIMEOUT => {
            let done = ctx.state().map(|s| s.completed_seqno).unwrap_or(0);
            err.message = format!(
                "fence (context {}, seqno {seqno}) not signalled within {} ms; the context has completed up to seqno {done}; the work is still running (a hang is declared only after the driver's job timeout). {}",
                ctx.id,
                timeout_ns / 1_000_000,
                err.message
            );
        }
        umdResult::UMD_ERR_CTX_DEPENDENCY_FAILED => {
            // Its jobs will never run: blocks they used may be reused.
            ctx.timeline.lost.store(true, Ordering::Release);
            err.message = format!(
                "context {} was lost: {}; fence seqno {seqno} will never signal. {}",
                ctx.id,
                ctx.loss_story().0,
                err.message
            );
        }
        umdResult::UMD_ERR_CTX_LOST => {
            // Its jobs will never run again: blocks they used may be reused.
            ctx.timeline.lost.store(true, Ordering::Release);
            let (story, va) = ctx.loss_story();
            err.message = format!(
                "context {} was lost: {story}; fence seqno {seqno} will never signal. {}",
                ctx.id, err.message
            );
            err.fault_va = va;
        }
        umdResult::UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED => {
            err.message = format!(
                "fence seqno {seqno} was never submitted on context {} (last submitted: {}). {}",
                ctx.id,
                ctx.last_seqno.load(Ordering::Acquire),
                err.message
            );
        }
        _ => {}
    }
    err
}
