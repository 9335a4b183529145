//! The allocation path behind the context caches: a request's size class, the best-fitting free
//! block (quick lists first, then the bins), splitting it, a new segment when nothing fits, and
//! the out-of-memory path (pending blocks, empty segments, the detailed error).

use super::*;

impl Pool {
    /// Allocates a block for `req`. The caller has checked the size against the device
    /// (`UMD_ERR_MEM_TOO_LARGE`) and the flags.
    #[inline(always)]
    pub fn alloc(&self, dev: &Device, req: &Request) -> UmdResult<Grant> {
        // The hit path: this context's cache, without the pool mutex.
        if let Some(c) = self.caches.get(req.acct as usize) {
            if c.parked.load(Ordering::Relaxed) != 0 {
                if let Some(g) = c.lock().alloc(req) {
                    return Ok(*g);
                }
            }
        }
        self.alloc_slow(dev, req)
    }

    #[inline(never)]
    pub(super) fn alloc_slow(&self, dev: &Device, req: &Request) -> UmdResult<Grant> {
        let limit = dev.info.max_bo_size.min(dev.info.mem_total);
        let align = req.align.max(size_class::MIN_BLOCK);
        let kind = pool_for(req.size, align);
        let fit = round(req.size, kind).filter(|c| *c <= limit);
        let page = size_class::align_up(req.size, PAGE).unwrap_or(u64::MAX);
        let mut g = self.lock();
        let inner = &mut *g;
        let class = if inner.enabled {
            fit.unwrap_or(page)
        } else {
            page
        };
        inner.acct = req.acct;
        if inner.enabled {
            if !inner.pending.is_empty() {
                // Blocks whose fences were seen signalled (waits and queries update the
                // timelines): atomics only, no kernel call.
                inner.process_pending(dev);
            }
            if let Some(id) = inner.take(req.acct, kind, req.read_only, class, align) {
                return Ok(inner.grant(id, req, class, true));
            }
            if !inner.pending.is_empty() {
                // Ask the kernel how far the contexts got before creating a new object.
                inner.refresh(dev, false);
                if inner.process_pending(dev) > 0 {
                    if let Some(id) = inner.take(req.acct, kind, req.read_only, class, align) {
                        return Ok(inner.grant(id, req, class, true));
                    }
                }
            }
            // Free blocks parked in other contexts' caches (left alone until now: taking them
            // would stall the threads using them), before a new kernel object.
            if inner.flush_caches() > 0 {
                if let Some(id) = inner.take(req.acct, kind, req.read_only, class, align) {
                    return Ok(inner.grant(id, req, class, true));
                }
            }
        }
        let (seg_size, seg_align) = if inner.enabled && kind == PoolKind::Small {
            (SLAB_SIZE, SLAB_SIZE)
        } else {
            (class, align.max(size_class::LARGE_GRANULE))
        };
        let mut released = 0;
        let mut retried = false;
        loop {
            match inner.new_segment(dev, kind, req.read_only, seg_size, seg_align) {
                Ok(seg) => {
                    let first = inner.segs[seg as usize].first;
                    let id = inner.take_block(first, kind, class, align);
                    inner.stats.num_cache_misses += 1;
                    return Ok(inner.grant(id, req, class, false));
                }
                Err(SegErr::Oom(..)) if !retried => {
                    retried = true;
                    inner.stats.num_alloc_retries += 1;
                    inner.refresh(dev, true);
                    inner.process_pending(dev);
                    if inner.enabled {
                        if let Some(id) = inner.take(req.acct, kind, req.read_only, class, align) {
                            return Ok(inner.grant(id, req, class, true));
                        }
                    }
                    released = inner.release_empty(dev, 0);
                    tracing::warn!(
                        ctx = req.ctx_id,
                        requested = req.size,
                        released,
                        "device out of memory: released cached pool memory, retrying once"
                    );
                }
                Err(SegErr::Oom(kmd, what)) => {
                    inner.note(req, class);
                    inner.revoke_all(true); // the detail reads true gauges
                    inner.stats.num_ooms += 1;
                    inner.event(Note {
                        kind: EventKind::Oom,
                        ctx: req.ctx_id,
                        buffer: req.buffer_id,
                        va: 0,
                        size: class,
                        requested: req.size,
                        pool: kind,
                        tag: None,
                        site: None,
                    });
                    return Err(inner.oom_error(dev, req, class, kind, released, kmd, &what));
                }
                Err(SegErr::Other(e)) => return Err(e.ctx(req.ctx_id)),
            }
        }
    }
}

impl Inner {
    /// Remembers a request's class (largest recent request): in the context's cache, which
    /// keeps each context's last 64, or in the pool's ring for contexts without one.
    pub(super) fn note(&mut self, req: &Request, class: u64) {
        if let Some(c) = self.caches.get(req.acct as usize) {
            let mut d = c.lock();
            if d.ctx_id == req.ctx_id {
                d.note(class);
                return;
            }
        }
        self.recent[self.recent_at % 64] = class;
        self.recent_at += 1;
    }

    /// Before raising the gauges of `kind` by `up` (per budget dimension): if that would pass
    /// a peak while caches may hold tokens, revokes those of the dimensions concerned (the
    /// allocated side, or everything when a cached gauge would pass), so that `current` is the
    /// true value and the peak the operation sets is exact.
    /// `flush`: the caller's blocks are in a consistent state (no free block out of its bin).
    pub(super) fn room(&mut self, kind: PoolKind, up: [u64; DIMS], flush: bool) {
        let pass = |d: usize, st: &mut Stats| up[d] > 0 && st.would_peak(kind, d, up[d]);
        if self.tokens == 0 || !(0..DIMS).any(|d| pass(d, &mut self.stats)) {
            return;
        }
        // Taking back the operating context's free blocks (and their tokens) usually suffices
        // and costs it little: only then everyone's tokens.
        if flush && self.flush_own(self.acct) > 0 && !(0..DIMS).any(|d| pass(d, &mut self.stats)) {
            return;
        }
        if (3..DIMS).any(|d| pass(d, &mut self.stats)) {
            self.revoke_all(true);
        } else if (0..3).any(|d| pass(d, &mut self.stats)) {
            self.revoke_all(false);
        }
    }

    /// A free block for `class` bytes aligned to `align`, carved out of the best-fitting bin.
    pub(super) fn take(
        &mut self,
        acct: u32,
        kind: PoolKind,
        ro: bool,
        class: u64,
        align: u64,
    ) -> Option<u32> {
        let gran = kind.granule();
        let need = if align > gran {
            class.checked_add(align - gran)?
        } else {
            class
        };
        let bin = bin_of(kind, ro);
        if align <= gran {
            if let Some(id) = self.bins[bin].quick_pop(&mut self.blocks, class) {
                return Some(id);
            }
        }
        // Blocks parked in the context's own cache are free memory too: best fit sees them
        // (coalesced). Other contexts' caches are left alone until a new kernel object would be
        // needed (`Pool::alloc`): taking them would stall the threads using them.
        if self.flush_own(acct) > 0 && align <= gran {
            if let Some(id) = self.bins[bin].quick_pop(&mut self.blocks, class) {
                return Some(id);
            }
        }
        if self.bins[bin].quick_len > 0 {
            self.flush_quick(bin);
        }
        let id = self.bins[bin].find(&self.blocks, need)?;
        Some(self.take_block(id, kind, class, align))
    }

    /// Coalesces every quick block of bin set `bin` into the ordinary bins.
    pub(super) fn flush_quick(&mut self, bin: usize) {
        let mut ids = std::mem::take(&mut self.scratch);
        self.bins[bin].quick_drain(&mut self.blocks, &mut ids);
        for &id in &ids {
            // Quick blocks are already accounted free and off their segment's busy count.
            self.coalesce_and_bin(id);
        }
        ids.clear();
        self.scratch = ids;
    }

    /// Coalesces every quick block of every bin set.
    pub(super) fn flush_all_quick(&mut self) {
        for bin in 0..4 {
            if self.bins[bin].quick_len > 0 {
                self.flush_quick(bin);
            }
        }
    }

    /// Carves `class` bytes aligned to `align` out of free block `id` (in a bin or fresh).
    pub(super) fn take_block(&mut self, id: u32, kind: PoolKind, class: u64, align: u64) -> u32 {
        let bin = {
            let s = &self.segs[self.blocks[id as usize].seg as usize];
            bin_of(s.kind, s.read_only)
        };
        self.bins[bin].remove(&mut self.blocks, id);
        let gran = kind.granule();
        let mut id = id;
        let (seg_va, off) = {
            let b = &self.blocks[id as usize];
            (self.segs[b.seg as usize].va, b.offset)
        };
        let start = seg_va + off;
        let pad = size_class::align_up(start, align).unwrap_or(start) - start;
        if pad > 0 {
            let rest = self.split(id, pad);
            self.bins[bin].insert(&mut self.blocks, id);
            id = rest;
        }
        if self.blocks[id as usize].size - class >= gran {
            let tail = self.split(id, class);
            self.bins[bin].insert(&mut self.blocks, tail);
        }
        id
    }

    /// Marks `id` live for `req` (of size class `class`) and accounts it.
    pub(super) fn grant(&mut self, id: u32, req: &Request, class: u64, hit: bool) -> Grant {
        let (seg, offset, size) = {
            let b = &mut self.blocks[id as usize];
            b.state = State::Live;
            b.buffer = req.buffer_id;
            b.requested = req.size;
            b.ctx_id = req.ctx_id;
            b.acct = req.acct;
            b.uses.clear();
            b.pins = 0;
            (b.seg, b.offset, b.size)
        };
        let s = &mut self.segs[seg as usize];
        if s.busy == 0 {
            // Not empty any more: an entry on the empty list is now stale.
            s.epoch += 1;
            s.listed = false;
        }
        s.busy += 1;
        let (kind, va) = (s.kind, s.va + offset);
        self.room(kind, [size, req.size, 1, 0, 0], true);
        let st = &mut self.stats;
        st.allocated_bytes.add(kind, size);
        st.requested_bytes.add(kind, req.size);
        st.active_bytes.add(kind, size);
        st.cached_bytes.sub(kind, size);
        st.allocation_count.add(kind, 1);
        st.active_count.add(kind, 1);
        st.cached_count.sub(kind, 1);
        st.num_allocs += 1;
        if hit {
            st.num_cache_hits += 1;
        }
        // Per-context accounting (in the context's cache when it has one).
        let g = Grant {
            block: id,
            seg,
            offset,
            va,
            size,
            kind,
            hit,
            acct: req.acct,
            slot: NIL,
        };
        if let Some(c) = self.caches.get(req.acct as usize) {
            let mut d = c.lock();
            if d.ctx_id == req.ctx_id {
                d.note(class);
                let st = &d.stats;
                if st.allocated_bytes.current + size > st.allocated_bytes.peak
                    || st.requested_bytes.current + req.size > st.requested_bytes.peak
                    || st.allocation_count.current >= st.allocation_count.peak
                {
                    // A new peak of the context: its `current` must be true first.
                    let b = d.revoke(false);
                    unbudget(&mut self.stats, &mut self.tokens, &b);
                }
                d.stats.on_alloc(size, req.size, hit);
            }
        } else {
            self.note(req, class);
            if let Some(a) = self.accounts.get_mut(req.acct as usize) {
                if a.ctx_id == req.ctx_id {
                    a.stats.on_alloc(size, req.size, hit);
                }
            }
        }
        let ev = if hit {
            EventKind::Reuse
        } else {
            EventKind::Alloc
        };
        self.event(Note {
            kind: ev,
            ctx: req.ctx_id,
            buffer: req.buffer_id,
            va,
            size,
            requested: req.size,
            pool: kind,
            tag: req.tag.as_ref(),
            site: req.site.as_ref(),
        });
        g
    }

    /// (largest free block, free bytes in blocks smaller than `want`).
    pub(super) fn free_profile(&self, want: u64) -> (u64, u64) {
        let mut largest = 0;
        let mut frag = 0;
        for bins in &self.bins {
            for id in bins.iter(&self.blocks) {
                let s = self.blocks[id as usize].size;
                largest = largest.max(s);
                if s < want {
                    frag += s;
                }
            }
        }
        (largest, frag)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn oom_error(
        &self,
        dev: &Device,
        req: &Request,
        class: u64,
        kind: PoolKind,
        released: u64,
        kmd: Option<KmdError>,
        what: &str,
    ) -> UmdError {
        let total = dev.info.mem_total;
        let used = dev.backend.query().map(|q| q.mem_used).unwrap_or(0);
        let st = &self.stats;
        let reserved = st.reserved_bytes.all().current;
        let allocated = st.allocated_bytes.all().current;
        let cached = st.cached_bytes.all().current;
        let pending = st.active_bytes.all().current.saturating_sub(allocated);
        let (largest, frag) = self.free_profile(class);
        let cause = match kmd {
            Some(e) => format!(
                "{what}: errno {}, reason {}{}",
                crate::backend::errno_name(e.errno),
                uapi::reason::name(e.reason),
                crate::errmap::reason_hint(e.reason)
                    .map(|h| format!(". {h}"))
                    .unwrap_or_default()
            ),
            None => what.to_string(),
        };
        // Kept under the detail's 768 characters: every number a reader needs, PyTorch-style.
        let m = format!(
            "out of device memory: tried to allocate {} (requested {} bytes; {} class {}) on context {}. Device {}: device total {}, free {}. This process: {} allocated ({} buffers), {} reserved but unallocated ({} awaiting GPU fences); largest free block {}, fragmentation {}. Released {} of cache and retried once. {cause}. Try: free buffers or umdMemTrim; a smaller batch; UMD_POOL_RELEASE_THRESHOLD=256M if reserved-but-unallocated is large.",
            human(class),
            req.size,
            kind.name(),
            class,
            req.ctx_id,
            dev.index,
            human(total),
            human(total.saturating_sub(used)),
            human(allocated),
            st.allocation_count.all().current,
            human(cached),
            human(pending),
            human(largest),
            human(frag),
            human(released),
        );
        let _ = reserved;
        let mut e = UmdError::new(umdResult::UMD_ERR_MEM_OUT_OF_MEMORY, m).ctx(req.ctx_id);
        if let Some(k) = kmd {
            e = e.kmd(k.errno, k.reason);
        }
        e
    }
}
