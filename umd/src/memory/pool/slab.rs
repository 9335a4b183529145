//! Segments: the kernel objects the pool holds. A small-pool segment (a slab, 2 MiB) is shared
//! by many small buffers; a large-pool segment starts as one buffer's block and is split and
//! coalesced when cached blocks serve other requests.
//!
//! Finding the block that contains an address (submit validation, free by address) must be
//! cheap: slabs keep a bitmap of block starts per 512-byte granule (a backwards scan over at most
//! 64 words), large segments hold a handful of blocks and walk their list.

use super::block::{Block, NIL};
use super::size_class::{PoolKind, MIN_BLOCK, SLAB_SIZE};
use crate::backend::HostMap;

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
