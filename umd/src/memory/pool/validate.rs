//! Submit validation: every memory access of the command buffers of a submit is checked against
//! the pool's blocks (freed memory, past the end of a buffer), and the blocks they use are pinned
//! until the kernel has accepted the job and [`Pool::stamp`] recorded its fence on them (module
//! documentation of [`super`]).

use super::*;

impl Pool {
    /// Checks every access of the command buffers about to be submitted and pins the blocks
    /// they use. `cmdbufs`: (index in the submit, accesses sorted by VA, the block holding the
    /// packets). On success the caller must [`Pool::stamp`] or [`Pool::unpin`] the result.
    pub fn check_and_pin(
        &self,
        dev: &Device,
        cmdbufs: &[(usize, &[Access], u32)],
    ) -> UmdResult<Vec<u32>> {
        let _ = dev;
        let mut g = self.lock();
        let inner = &mut *g;
        let mut pinned: Vec<u32> = Vec::with_capacity(cmdbufs.len() * 2);
        for &(i, accesses, own) in cmdbufs {
            if inner.pin(own) {
                pinned.push(own);
            }
            let mut cur: (u64, u64) = (1, 0); // [start, end) of the last live block checked
            for a in accesses {
                if a.len == 0 || (a.va >= cur.0 && a.va.saturating_add(a.len) <= cur.1) {
                    continue;
                }
                match inner.check_and_pin_access(i, a) {
                    Ok(Some((id, start, end))) => {
                        pinned.push(id);
                        cur = (start, end);
                    }
                    Ok(None) => {}
                    Err(e) => {
                        inner.unpin(&pinned);
                        return Err(e);
                    }
                }
            }
        }
        Ok(pinned)
    }

    /// Records that the job `seqno` of the context with account `acct` uses `pinned`, and
    /// unpins them.
    pub fn stamp(&self, pinned: &[u32], acct: u32, seqno: u64) {
        let mut g = self.lock();
        let inner = &mut *g;
        inner.pin_epoch += 1;
        let Some(tl) = inner
            .accounts
            .get(acct as usize)
            .map(|a| a.timeline.clone())
        else {
            return;
        };
        for &id in pinned {
            if inner.state(id) == Some(State::Cached) {
                inner.with_slot(id, |s| {
                    s.pins = s.pins.saturating_sub(1);
                    match s.uses.iter_mut().find(|u| u.0 == acct) {
                        Some(u) => u.1 = u.1.max(seqno),
                        None => s.uses.push((acct, seqno, tl.clone())),
                    }
                });
                continue;
            }
            let b = &mut inner.blocks[id as usize];
            b.pins = b.pins.saturating_sub(1);
            match b.uses.iter_mut().find(|(s, _)| *s == acct) {
                Some(u) => u.1 = u.1.max(seqno),
                None => b.uses.push((acct, seqno)),
            }
        }
    }

    /// Unpins blocks of a submit that failed.
    pub fn unpin(&self, pinned: &[u32]) {
        self.lock().unpin(pinned);
    }
}

impl Inner {
    pub(super) fn unpin(&mut self, pinned: &[u32]) {
        self.pin_epoch += 1;
        for &id in pinned {
            if self.state(id) == Some(State::Cached) {
                self.with_slot(id, |s| s.pins = s.pins.saturating_sub(1));
            } else {
                let b = &mut self.blocks[id as usize];
                b.pins = b.pins.saturating_sub(1);
            }
        }
    }

    /// [`Inner::check_access`], and pins the live block the access lies in. A block delegated to
    /// a context's cache can be freed by its owner without the pool mutex, between the check
    /// (which reads its cache slot) and the pin (which locks that slot again); the pin then
    /// fails, and the access is checked again: now it reports the use after free. A block
    /// freed and handed out again in that window is live again, and pinning it is right.
    pub(super) fn check_and_pin_access(
        &mut self,
        i: usize,
        a: &Access,
    ) -> UmdResult<Option<(u32, u64, u64)>> {
        for _ in 0..4 {
            match self.check_access(i, a)? {
                Some((id, start, end)) => {
                    if self.pin(id) {
                        return Ok(Some((id, start, end)));
                    }
                }
                None => return Ok(None),
            }
        }
        // Freed and reallocated under the check four times in a row: the application frees
        // and allocates this memory while submitting work that uses it.
        Err(UmdError::new(
            umdResult::UMD_ERR_MEM_USE_AFTER_FREE,
            format!(
                "command buffer #{i} accesses {:#x}..{:#x}, memory that another thread freed and reallocated \
                 while this submit was checking it (four times in a row); the submit was not made",
                a.va,
                a.va.saturating_add(a.len)
            ),
        ))
    }

    /// Pins live block `id` (a submit is checking it); false if it is not live.
    pub(super) fn pin(&mut self, id: u32) -> bool {
        match self.state(id) {
            Some(State::Live) => {
                self.blocks[id as usize].pins += 1;
                true
            }
            Some(State::Cached) => self
                .with_slot(id, |s| {
                    s.pins += s.live as u32;
                    s.live
                })
                .unwrap_or(false),
            _ => false,
        }
    }

    /// Checks one access; `Some((block, start, end))` when it lies in a live buffer.
    pub(super) fn check_access(&self, i: usize, a: &Access) -> UmdResult<Option<(u32, u64, u64)>> {
        let rw = if a.write { "writes" } else { "reads" };
        let what = format!(
            "command buffer #{i}: the packet at byte offset {} {rw} [{:#x}, {:#x})",
            a.offset,
            a.va,
            a.va.saturating_add(a.len)
        );
        let Some(id) = self.lookup(a.va) else {
            return match self.ghost_at(a.va, false) {
                Some(g) => Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_USE_AFTER_FREE,
                    format!(
                        "{what}, memory of {}; the pool has since returned it to the kernel. Free a buffer only after the last submit that uses it (the pool already defers reuse until that job's fence signals).",
                        g.describe()
                    ),
                )
                .fault_va(a.va)),
                None => Ok(None),
            };
        };
        let (b, ghost) = self.view(id);
        let start = self.segs[b.seg as usize].va + b.offset;
        match b.state {
            State::Live => {
                let end = start + b.requested;
                if a.va.saturating_add(a.len) <= end {
                    return Ok(Some((id, start, end)));
                }
                Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_OUT_OF_BOUNDS,
                    format!(
                        "{what}, which runs {} bytes past the end of buffer {} ({} bytes at VA {start:#x}, allocated on context {}). Pool buffers share kernel objects, so this would silently read or corrupt a neighbour instead of faulting.",
                        a.va.saturating_add(a.len) - end,
                        b.buffer,
                        b.requested,
                        b.ctx_id
                    ),
                )
                .fault_va(end))
            }
            _ => match ghost.as_ref().or_else(|| self.ghost_at(a.va, false)) {
                Some(g) => Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_USE_AFTER_FREE,
                    format!(
                        "{what}, memory of {}. Free a buffer only after the last submit that uses it (the pool already defers reuse until that job's fence signals).",
                        g.describe()
                    ),
                )
                .fault_va(a.va)),
                None => Err(UmdError::new(
                    umdResult::UMD_ERR_MEM_OUT_OF_BOUNDS,
                    format!(
                        "{what}, which is pool memory not allocated to any live buffer (never allocated, or freed more than {GHOSTS} frees ago)."
                    ),
                )
                .fault_va(a.va)),
            },
        }
    }
}
