//! Segments: the kernel objects the pool holds. A small-pool segment (a slab, 2 MiB) is shared
//! by many small buffers; a large-pool segment starts as one buffer's block and is split and
//! coalesced when cached blocks serve other requests.
//!
//! Finding the block that contains an address (submit validation, free by address) must be
//! cheap: slabs keep a bitmap of block starts per 512-byte granule (a backwards scan over at most
//! 64 words), large segments hold a handful of blocks and walk their list.

use super::block::{Block, State, NIL};
use super::history::{EventKind, Note};
use super::size_class::{PoolKind, MIN_BLOCK, SLAB_SIZE};
use super::{bin_of, SegErr, PAGE};
use crate::backend::HostMap;
use crate::device::Device;
use crate::errmap::{code_for, Op};
use crate::error::umdResult;
use uapi::ioctl::{VM_ACCESS_READ, VM_ACCESS_WRITE};

/// One kernel object.
pub struct Segment {
    /// GEM handle.
    pub gem: u32,
    /// GPU VA.
    pub va: u64,
    /// Bytes.
    pub size: u64,
    /// Pool.
    pub kind: PoolKind,
    /// Bound read-only.
    pub read_only: bool,
    /// CPU mapping, made on first use.
    pub host: Option<HostMap>,
    /// Block at offset 0.
    pub first: u32,
    /// Live + pending blocks in it.
    pub busy: u32,
    /// Bumped when the segment stops being empty (invalidates stale entries of the empty list).
    pub epoch: u64,
    /// False once released (the slot may be reused).
    pub alive: bool,
    /// On the pool's list of empty segments.
    pub listed: bool,
    heads: Vec<u64>,
    ids: Vec<u32>,
}

impl Segment {
    /// A segment record (its one free block is `first`).
    pub fn new(
        gem: u32,
        va: u64,
        size: u64,
        kind: PoolKind,
        read_only: bool,
        first: u32,
    ) -> Segment {
        let indexed = kind == PoolKind::Small && size == SLAB_SIZE;
        let granules = if indexed {
            (size / MIN_BLOCK) as usize
        } else {
            0
        };
        let mut s = Segment {
            gem,
            va,
            size,
            kind,
            read_only,
            host: None,
            first,
            busy: 0,
            epoch: 0,
            alive: true,
            listed: false,
            heads: vec![0; granules.div_ceil(64)],
            ids: vec![NIL; granules],
        };
        s.set_head(0, first);
        s
    }

    /// Records that block `id` starts at `offset`.
    #[inline]
    pub fn set_head(&mut self, offset: u64, id: u32) {
        if self.ids.is_empty() {
            return;
        }
        let g = (offset / MIN_BLOCK) as usize;
        self.heads[g / 64] |= 1 << (g % 64);
        self.ids[g] = id;
    }

    /// Records that no block starts at `offset` any more (merged into its predecessor).
    #[inline]
    pub fn clear_head(&mut self, offset: u64) {
        if self.ids.is_empty() {
            return;
        }
        let g = (offset / MIN_BLOCK) as usize;
        self.heads[g / 64] &= !(1 << (g % 64));
        self.ids[g] = NIL;
    }

    /// The block containing `offset` (< size).
    pub fn block_at(&self, blocks: &[Block], offset: u64) -> u32 {
        if self.ids.is_empty() {
            let mut id = self.first;
            while id != NIL {
                let b = &blocks[id as usize];
                if offset < b.offset + b.size {
                    return id;
                }
                id = b.next;
            }
            return NIL;
        }
        let g = (offset / MIN_BLOCK) as usize;
        let mut w = g / 64;
        let mut word = self.heads[w] & (u64::MAX >> (63 - (g % 64)));
        loop {
            if word != 0 {
                let bit = 63 - word.leading_zeros() as usize;
                return self.ids[w * 64 + bit];
            }
            if w == 0 {
                return NIL;
            }
            w -= 1;
            word = self.heads[w];
        }
    }
}

/// A segment's life in the pool: created with its kernel object and VA, listed, released when
/// empty (least recently emptied first) or at teardown.
impl super::Inner {
    pub(super) fn new_segment(
        &mut self,
        dev: &Device,
        kind: PoolKind,
        ro: bool,
        size: u64,
        align: u64,
    ) -> Result<u32, SegErr> {
        self.stats.num_kernel_calls += 1;
        let gem = match dev.backend.gem_create(size) {
            Ok(g) => g,
            Err(e) if code_for(Op::Memory, &e) == umdResult::UMD_ERR_MEM_OUT_OF_MEMORY => {
                return Err(SegErr::Oom(Some(e), format!("GEM create of {size} bytes")))
            }
            Err(e) => {
                return Err(SegErr::Other(dev.fail(
                    Op::Memory,
                    e,
                    &format!("GEM create of {size} bytes"),
                )))
            }
        };
        self.stats.num_kernel_allocs += 1;
        let va = dev
            .va
            .lock()
            .ok()
            .and_then(|mut v| v.alloc(size, align.max(PAGE)));
        let Some(va) = va else {
            self.close_gem(dev, gem);
            return Err(SegErr::Oom(
                None,
                format!("GPU virtual address space exhausted for {size} bytes"),
            ));
        };
        let access = if ro {
            VM_ACCESS_READ
        } else {
            VM_ACCESS_READ | VM_ACCESS_WRITE
        };
        self.stats.num_kernel_calls += 1;
        if let Err(e) = dev.backend.vm_bind(gem, va, 0, size, access) {
            if let Ok(mut v) = dev.va.lock() {
                v.free(va, size);
            }
            self.close_gem(dev, gem);
            let what = format!("VM bind of {size} bytes at {va:#x}");
            return Err(
                if code_for(Op::Memory, &e) == umdResult::UMD_ERR_MEM_OUT_OF_MEMORY {
                    SegErr::Oom(Some(e), what)
                } else {
                    SegErr::Other(dev.fail(Op::Memory, e, &what))
                },
            );
        }
        let seg_id = match self.free_segs.last() {
            Some(&s) => s,
            None => self.segs.len() as u32,
        };
        let first = self.new_block(Block::new(seg_id, 0, size));
        let seg = Segment::new(gem, va, size, kind, ro, first);
        if self.free_segs.pop().is_some() {
            self.segs[seg_id as usize] = seg;
        } else {
            self.segs.push(seg);
        }
        self.index.insert(va, seg_id);
        self.bins[bin_of(kind, ro)].insert(&mut self.blocks, first);
        self.room(kind, [0, 0, 0, size, 1], false);
        let st = &mut self.stats;
        st.reserved_bytes.add(kind, size);
        st.cached_bytes.add(kind, size);
        st.segment_count.add(kind, 1);
        st.cached_count.add(kind, 1);
        self.event(Note::segment(EventKind::SegmentAlloc, va, size, kind));
        tracing::debug!(
            device = dev.id,
            gem,
            va,
            size,
            pool = kind.name(),
            "pool: segment created"
        );
        Ok(seg_id)
    }

    pub(super) fn close_gem(&mut self, dev: &Device, gem: u32) {
        self.stats.num_kernel_calls += 1;
        self.stats.num_kernel_frees += 1;
        let _ = dev.backend.gem_close(gem);
    }

    /// Gives an empty segment back to the kernel.
    pub(super) fn release_segment(&mut self, dev: &Device, seg: u32) {
        let (gem, va, size, kind, ro, first, host) = {
            let s = &mut self.segs[seg as usize];
            s.alive = false;
            (
                s.gem,
                s.va,
                s.size,
                s.kind,
                s.read_only,
                s.first,
                s.host.take(),
            )
        };
        self.bins[bin_of(kind, ro)].remove(&mut self.blocks, first);
        self.kill_block(first);
        if let Some(m) = host {
            self.stats.num_kernel_calls += 1;
            let _ = dev.backend.gem_munmap(m);
        }
        if !dev.is_lost() {
            self.stats.num_kernel_calls += 1;
            let _ = dev.backend.vm_unbind(va, size);
        }
        if let Ok(mut v) = dev.va.lock() {
            v.free(va, size);
        }
        self.close_gem(dev, gem);
        self.index.remove(&va);
        self.free_segs.push(seg);
        let st = &mut self.stats;
        st.reserved_bytes.sub(kind, size);
        st.cached_bytes.sub(kind, size);
        st.segment_count.sub(kind, 1);
        st.cached_count.sub(kind, 1);
        st.num_segments_released += 1;
        self.event(Note::segment(EventKind::SegmentRelease, va, size, kind));
        tracing::debug!(
            device = dev.id,
            gem,
            va,
            size,
            pool = kind.name(),
            "pool: segment released"
        );
    }

    /// Gives every segment back when the device goes away ([`super::Pool::device_closed`]):
    /// unmapped, unbound and closed whatever blocks they hold (no buffer is left; the
    /// statistics die with the pool).
    pub(super) fn release_all(&mut self, dev: &Device) {
        for s in self.segs.iter_mut().filter(|s| s.alive) {
            s.alive = false;
            if let Some(m) = s.host.take() {
                self.stats.num_kernel_calls += 1;
                let _ = dev.backend.gem_munmap(m);
            }
            if !dev.is_lost() {
                self.stats.num_kernel_calls += 1;
                let _ = dev.backend.vm_unbind(s.va, s.size);
            }
            self.stats.num_kernel_calls += 1;
            self.stats.num_kernel_frees += 1;
            let _ = dev.backend.gem_close(s.gem);
        }
    }

    /// Releases empty segments, least recently emptied first, until at most `keep` bytes are
    /// cached. Returns the bytes released.
    pub(super) fn release_empty(&mut self, dev: &Device, keep: u64) -> u64 {
        let mut released = 0;
        if self.stats.cached_bytes.all().current > keep {
            // Cached blocks back to the bins, budgets back to the gauges: `current` is true.
            self.flush_caches();
            self.revoke_all(true);
            self.flush_all_quick();
        }
        while self.stats.cached_bytes.all().current > keep {
            let Some((seg, epoch)) = self.empty.pop_front() else {
                break;
            };
            self.segs[seg as usize].listed = false;
            let s = &self.segs[seg as usize];
            let first = &self.blocks[s.first as usize];
            if !s.alive
                || s.epoch != epoch
                || s.busy != 0
                || first.state != State::Free
                || first.size != s.size
            {
                continue;
            }
            released += s.size;
            self.release_segment(dev, seg);
        }
        released
    }

    /// Lists `seg` as empty (once per emptiness).
    pub(super) fn list_empty(&mut self, seg: u32) {
        let s = &mut self.segs[seg as usize];
        if !s.listed {
            s.listed = true;
            self.empty.push_back((seg, s.epoch));
            if self.empty.len() > 2 * self.segs.len() + 16 {
                // Drop stale entries (segments that were reused since they were listed).
                let segs = &self.segs;
                self.empty
                    .retain(|&(g, e)| segs[g as usize].alive && segs[g as usize].epoch == e);
            }
        }
    }
}
