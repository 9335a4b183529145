//! The free path behind the context caches: a live block goes back to the bins, or to the
//! pending list while a submitted job may still use it; its accounting, and the ghost that lets
//! a later double free or use after free name the buffer.

use super::*;

impl Pool {
    /// Returns the block of `grant`. Reuse waits for the fences of the jobs that used it.
    #[inline(always)]
    pub fn free(&self, dev: &Device, grant: &Grant, note: FreeNote) {
        if let (Some(c), true) = (self.caches.get(grant.acct as usize), grant.slot != NIL) {
            // The hit path's other half: back into the context's cache when idle.
            if c.lock()
                .free(grant, note.at_ns, note.callers, || dev.is_lost())
            {
                if c.parked.load(Ordering::Relaxed) == 0 {
                    c.parked.store(1, Ordering::Relaxed);
                }
                return;
            }
        }
        self.free_slow(dev, grant, note)
    }

    #[inline(never)]
    pub(super) fn free_slow(&self, dev: &Device, grant: &Grant, note: FreeNote) {
        let block = grant.block;
        let mut g = self.lock();
        let inner = &mut *g;
        inner.acct = grant.acct;
        let live = match inner.blocks.get(block as usize).map(|b| b.state) {
            Some(State::Live) => true,
            Some(State::Cached) => inner.undelegate_live(block),
            _ => false,
        };
        if !live {
            tracing::error!(block, "pool: free of a block that is not live (driver bug)");
            return;
        }
        inner.free_live(dev, block, note);
        let t = self.release_threshold.load(Ordering::Relaxed);
        if inner.stats.cached_bytes.all().current > t {
            inner.release_empty(dev, t);
        }
    }
}

impl Inner {
    /// Live -> pending or free.
    pub(super) fn free_live(&mut self, dev: &Device, id: u32, note: FreeNote) {
        let lost = dev.is_lost();
        let (seg, size, requested, buffer, ctx_id, acct, offset) = {
            let b = &self.blocks[id as usize];
            (
                b.seg,
                b.size,
                b.requested,
                b.buffer,
                b.ctx_id,
                b.acct,
                b.offset,
            )
        };
        let (kind, va) = {
            let s = &self.segs[seg as usize];
            (s.kind, s.va + offset)
        };
        self.handles[id as usize] = 0;
        self.room(kind, [0, 0, 0, size, 1], true);
        let st = &mut self.stats;
        st.allocated_bytes.sub(kind, size);
        st.requested_bytes.sub(kind, requested);
        st.cached_bytes.add(kind, size);
        st.allocation_count.sub(kind, 1);
        st.cached_count.add(kind, 1);
        st.num_frees += 1;
        let deferred = !self.reusable(id, lost);
        // Per-context accounting; a block reusable at once may go to the context's cache.
        let delegated = match self.caches.get(acct as usize) {
            Some(_) => self.account_free(id, acct, ctx_id, !deferred, note.at_ns, note.callers),
            None => {
                if let Some(a) = self.accounts.get_mut(acct as usize) {
                    if a.ctx_id == ctx_id {
                        a.stats.on_free(size, requested);
                    }
                }
                false
            }
        };
        let ev = if deferred {
            EventKind::FreeDeferred
        } else {
            EventKind::Free
        };
        self.event(Note {
            kind: ev,
            ctx: ctx_id,
            buffer,
            va,
            size,
            requested,
            pool: kind,
            tag: None,
            site: note.site.as_ref(),
        });
        let g = Ghost {
            va,
            requested,
            size,
            buffer,
            ctx_id,
            seq: self.seq,
            at_ns: note.at_ns,
            site: note.site,
            callers: note.callers,
        };
        self.remember(g);
        if deferred {
            self.blocks[id as usize].state = State::Pending;
            self.pending.push_back(id);
            self.stats.num_deferred_frees += 1;
        } else {
            self.stats.active_bytes.sub(kind, size);
            self.stats.active_count.sub(kind, 1);
            if !delegated {
                self.make_free(Some(dev), id);
            }
        }
    }

    /// Accounts the free of live block `id` to its context's cache (account `acct` < CACHES)
    /// and, when `reusable`, hands the block to that cache with the token of the allocated side
    /// its free just made room for (the gauges' `current` does not move). Returns true if the
    /// cache took the block.
    pub(super) fn account_free(
        &mut self,
        id: u32,
        acct: u32,
        ctx_id: u64,
        reusable: bool,
        at_ns: u64,
        callers: Callers,
    ) -> bool {
        let b = &self.blocks[id as usize];
        let seg = &self.segs[b.seg as usize];
        let g = Grant {
            block: id,
            seg: b.seg,
            acct,
            slot: NIL,
            offset: b.offset,
            va: seg.va + b.offset,
            size: b.size,
            kind: seg.kind,
            hit: true,
        };
        let (requested, buffer, ro) = (b.requested, b.buffer, seg.read_only);
        let slot = {
            let mut d = self.caches[acct as usize].lock();
            if d.ctx_id != ctx_id {
                return false;
            }
            d.stats.on_free(g.size, requested);
            // Only a size the context asked for lately: in a stream of varied sizes, parking
            // every block would cost more than the few hits it buys.
            if !reusable || !d.active || !d.asked_lately(g.size) {
                return false;
            }
            let Some(slot) = d.insert(g, ro, buffer, requested, at_ns, callers) else {
                return false;
            };
            let st = &mut d.stats;
            st.allocated_bytes.current += g.size;
            st.requested_bytes.current += requested;
            st.allocation_count.current += 1;
            slot
        };
        self.caches[acct as usize]
            .parked
            .store(1, Ordering::Relaxed);
        for (d, n) in [(0, g.size), (1, requested), (2, 1)] {
            self.stats.shift(g.kind, d, n, true);
        }
        self.tokens += 1;
        let b = &mut self.blocks[id as usize];
        b.state = State::Cached;
        b.slot = slot;
        true
    }

    /// Keeps a freed buffer for reports (a ring: overwrites the oldest in place).
    pub(super) fn remember(&mut self, g: Ghost) {
        if self.ghosts.len() < GHOSTS {
            self.ghosts.push(g);
        } else {
            self.ghosts[self.ghost_at % GHOSTS] = g;
        }
        self.ghost_at = self.ghost_at.wrapping_add(1);
    }
}
