//! Fence-gated reuse: a block freed while a submitted job may still use it waits on the pending
//! list until every fence that used it has signalled (or its context is gone or lost), then goes
//! back to the bins.

use super::*;

impl Inner {
    /// What changes whenever a pending block may have become reusable: every term only grows
    /// (completed seqnos, lost and retired contexts, the pin epoch) except the pending count, so
    /// comparing the tuple is exact.
    pub(super) fn progress_mark(&self, lost: bool) -> (u64, u64, u64, usize) {
        let (mut done, mut flags) = (0u64, lost as u64);
        for a in &self.accounts {
            let t = &a.timeline;
            done = done.wrapping_add(t.completed.load(Ordering::Acquire));
            flags += t.lost.load(Ordering::Acquire) as u64 + !a.live as u64;
        }
        (done, flags, self.pin_epoch, self.pending.len())
    }

    pub(super) fn signalled(&self, slot: u32, seq: u64) -> bool {
        match self.accounts.get(slot as usize) {
            Some(a) if a.live => {
                a.timeline.lost.load(Ordering::Acquire)
                    || a.timeline.completed.load(Ordering::Acquire) >= seq
            }
            _ => true,
        }
    }

    pub(super) fn reusable(&self, id: u32, lost: bool) -> bool {
        let b = &self.blocks[id as usize];
        b.pins == 0 && (lost || b.uses.iter().all(|&(s, q)| self.signalled(s, q)))
    }

    /// Moves pending blocks whose fences signalled to the bins; returns how many.
    pub(super) fn process_pending(&mut self, dev: &Device) -> usize {
        let lost = dev.is_lost();
        // Skip the scan unless some context progressed (or a pin went) since the last one:
        // allocations while a long job holds many deferred blocks stay O(contexts).
        let mark = self.progress_mark(lost);
        if mark == self.last_mark {
            return 0;
        }
        self.last_mark = mark;
        let mut moved = 0;
        let mut i = 0;
        while i < self.pending.len() {
            let id = self.pending[i];
            if self.reusable(id, lost) {
                self.pending.swap_remove_back(i);
                let (seg, size, buffer, ctx, off) = {
                    let b = &self.blocks[id as usize];
                    (b.seg, b.size, b.buffer, b.ctx_id, b.offset)
                };
                let (kind, va) = {
                    let s = &self.segs[seg as usize];
                    (s.kind, s.va + off)
                };
                self.stats.active_bytes.sub(kind, size);
                self.stats.active_count.sub(kind, 1);
                self.event(Note {
                    kind: EventKind::Recycle,
                    ctx,
                    buffer,
                    va,
                    size,
                    requested: 0,
                    pool: kind,
                    tag: None,
                    site: None,
                });
                self.make_free(Some(dev), id);
                moved += 1;
            } else {
                i += 1;
            }
        }
        moved
    }

    /// Asks the backend how far the contexts that pending blocks wait for have got (`wait`:
    /// block until their fences signal, bounded; out-of-memory recovery only).
    pub(super) fn refresh(&mut self, dev: &Device, wait: bool) {
        if dev.is_lost() {
            return;
        }
        let mut need: Vec<(u32, u64)> = Vec::new();
        for &id in &self.pending {
            for &(s, q) in &self.blocks[id as usize].uses {
                if !self.signalled(s, q) {
                    match need.iter_mut().find(|(ns, _)| *ns == s) {
                        Some(n) => n.1 = n.1.max(q),
                        None => need.push((s, q)),
                    }
                }
            }
        }
        for (slot, seq) in need {
            let (kmd, tl) = {
                let a = &self.accounts[slot as usize];
                (a.kmd_id, a.timeline.clone())
            };
            self.stats.num_kernel_calls += 1;
            if wait {
                let deadline = crate::error::detail::mono_ns().saturating_add(OOM_FENCE_WAIT_NS);
                if let Ok(done) = dev.backend.wait(kmd, seq, deadline) {
                    tl.complete(done);
                    continue;
                }
                self.stats.num_kernel_calls += 1;
            }
            if let Ok(st) = dev.backend.ctx_state(kmd) {
                tl.complete(st.completed_seqno);
                if st.reset_status == uapi::ioctl::RESET_GUILTY {
                    tl.lost.store(true, Ordering::Release);
                }
            }
        }
    }

    /// Pending or live -> free: straight onto the quick list when possible, else coalesced with
    /// free neighbours and binned; an emptied segment is listed for release (released at once
    /// with the pool off).
    pub(super) fn make_free(&mut self, dev: Option<&Device>, id: u32) {
        let seg = self.blocks[id as usize].seg;
        {
            let b = &mut self.blocks[id as usize];
            b.uses.clear();
            b.pins = 0;
        }
        let s = &mut self.segs[seg as usize];
        s.busy = s.busy.saturating_sub(1);
        let bin = bin_of(s.kind, s.read_only);
        if self.enabled && self.bins[bin].quick_len < QUICK_MAX {
            // Emptied segments are found when the quick lists are flushed (before any release).
            self.bins[bin].quick_push(&mut self.blocks, id);
            return;
        }
        let merged = self.coalesce_and_bin(id);
        let s = &self.segs[seg as usize];
        if !self.enabled && s.busy == 0 && self.blocks[merged as usize].size == s.size {
            if let Some(dev) = dev {
                self.release_segment(dev, seg);
            }
        }
    }
}
