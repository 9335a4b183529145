// SPDX-License-Identifier: GPL-2.0
//! Contexts (queues of work with their own seqno timeline): per-file bookkeeping and the
//! context ioctls.
//!
//! This version has no ring or device behind the contexts yet: CTX_CREATE / CTX_DESTROY /
//! CTX_STATE keep the per-file table (ids, priorities, limits); SUBMIT validates its arguments
//! and the context, then fails with `EOPNOTSUPP`; WAIT validates and, since nothing was ever
//! submitted, only seqno 0 (trivially signalled) succeeds.

use kernel::{prelude::*, rbtree::RBTree};

use crate::{
    driver::{DrmFile, RegDevice},
    ioctl::{check_flags, check_pad, fail, Fail, IoctlResult},
    uapi::{ioctl as u, reason},
};

/// One context.
pub(crate) struct Ctx {
    #[allow(dead_code)]
    priority: u32,
    /// Last submitted seqno.
    submitted: u64,
    /// Last completed seqno.
    completed: u64,
}

/// The contexts of one file.
pub(crate) struct Contexts {
    ctxs: RBTree<u32, Ctx>,
    count: usize,
    next_id: u32,
}

impl Contexts {
    pub(crate) fn new() -> Self {
        Self {
            ctxs: RBTree::new(),
            count: 0,
            next_id: 1,
        }
    }

    fn get(&self, id: u32) -> Result<&Ctx, Fail> {
        self.ctxs.get(&id).ok_or(fail(EINVAL, reason::CTX_INVALID))
    }

    /// A fresh non-zero id not in use (ids wrap, skipping live ones).
    fn alloc_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if self.ctxs.get(&id).is_none() {
                return id;
            }
        }
    }
}

/// CTX_CREATE: a context with a priority; at most `MAX_CONTEXTS` per file.
pub(crate) fn ctx_create(_dev: &RegDevice, req: &mut u::CtxCreate, file: &DrmFile) -> IoctlResult {
    check_flags(req.flags, 0)?;
    if req.priority > u::PRIORITY_HIGH {
        return Err(fail(EINVAL, reason::PRIORITY_INVALID));
    }
    let mut ctxs = file.inner().get_ref().ctxs.lock();
    if ctxs.count >= u::MAX_CONTEXTS as usize {
        return Err(fail(EBUSY, reason::CTX_LIMIT));
    }
    let id = ctxs.alloc_id();
    let ctx = Ctx {
        priority: req.priority,
        submitted: 0,
        completed: 0,
    };
    ctxs.ctxs
        .try_create_and_insert(id, ctx, GFP_KERNEL)
        .map_err(|e| fail(e, reason::OUT_OF_MEMORY))?;
    ctxs.count += 1;
    req.ctx_id = id;
    Ok(())
}

/// CTX_DESTROY: nothing can be pending yet, so the context goes at once.
pub(crate) fn ctx_destroy(_dev: &RegDevice, req: &mut u::CtxDestroy, file: &DrmFile) -> IoctlResult {
    check_flags(req.flags, 0)?;
    check_pad(req.pad)?;
    let mut ctxs = file.inner().get_ref().ctxs.lock();
    ctxs.get(req.ctx_id)?;
    ctxs.ctxs.remove(&req.ctx_id);
    ctxs.count -= 1;
    Ok(())
}

/// CTX_STATE: reset status, fault and progress of a context.
pub(crate) fn ctx_state(_dev: &RegDevice, req: &mut u::CtxState, file: &DrmFile) -> IoctlResult {
    check_flags(req.flags, 0)?;
    check_pad(req.pad)?;
    let ctxs = file.inner().get_ref().ctxs.lock();
    let ctx = ctxs.get(req.ctx_id)?;
    *req = u::CtxState {
        ctx_id: req.ctx_id,
        flags: 0,
        reset_status: u::RESET_NONE,
        fault_type: 0,
        fault_va: 0,
        fault_access: 0,
        hung: 0,
        fault_offset: 0,
        completed_seqno: ctx.completed,
        submitted_seqno: ctx.submitted,
        reason: 0,
        pad: 0,
    };
    Ok(())
}

/// SUBMIT: argument checks, then `EOPNOTSUPP` (no ring in this version).
pub(crate) fn submit(_dev: &RegDevice, req: &mut u::Submit, file: &DrmFile) -> IoctlResult {
    check_flags(req.flags, u::SUBMIT_FLAG_NO_BLOCK)?;
    if req.num_cmdbufs == 0 || req.num_cmdbufs > u::MAX_CMDBUFS {
        return Err(fail(EINVAL, reason::CMDBUF_COUNT));
    }
    if req.num_in_fences > u::MAX_IN_FENCES {
        return Err(fail(EINVAL, reason::FENCE_COUNT));
    }
    file.inner().get_ref().ctxs.lock().get(req.ctx_id)?;
    Err(fail(EOPNOTSUPP, reason::NONE))
}

/// WAIT: only already-signalled seqnos exist (nothing can be submitted yet).
pub(crate) fn wait(_dev: &RegDevice, req: &mut u::Wait, file: &DrmFile) -> IoctlResult {
    check_flags(req.flags, 0)?;
    check_pad(req.pad)?;
    let ctxs = file.inner().get_ref().ctxs.lock();
    let ctx = ctxs.get(req.ctx_id)?;
    if req.seqno > ctx.submitted {
        return Err(fail(EINVAL, reason::FENCE_NOT_SUBMITTED));
    }
    req.completed_seqno = ctx.completed;
    Ok(())
}
