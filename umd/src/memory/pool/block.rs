//! Blocks and the free bins (two-level segregated fit).
//!
//! Every byte of a segment belongs to exactly one block; blocks are linked to their physical
//! neighbours (for coalescing) and, while free, to the bin of their size (for O(1) best-fit
//! search: two bitmaps find the first non-empty bin at or above a request's class).

use super::bin_of;
use super::size_class::{bin_ceil, bin_floor, FL_COUNT};

/// "No block".
pub(crate) const NIL: u32 = u32::MAX;

/// Life of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// In a bin, reusable now.
    Free,
    /// Freed by its buffer while a submitted job may still use it (or a submit is checking
    /// it): not in a bin until every fence that used it has signalled.
    Pending,
    /// Held by a buffer.
    Live,
    /// Freed and reusable, kept uncoalesced on its bin's quick list: the next request of the
    /// same class takes it back in O(1) without splitting (coalesced lazily, see `Bins`).
    Quick,
    /// Delegated to its context's cache (`cache.rs`): live or free there, the cache's slot
    /// says which.
    Cached,
    /// Record unused (on the free-slot list).
    Dead,
}

/// One block.
#[derive(Clone, Debug)]
pub struct Block {
    /// Segment index.
    pub seg: u32,
    /// Offset in the segment.
    pub offset: u64,
    /// Bytes.
    pub size: u64,
    /// Physical neighbours.
    pub prev: u32,
    /// Physical neighbours.
    pub next: u32,
    /// Bin list links (while Free).
    pub fprev: u32,
    /// Bin list links (while Free).
    pub fnext: u32,
    /// State.
    pub state: State,
    /// Submits currently checking this block (between validation and the stamp).
    pub pins: u32,
    /// (account slot, seqno) of the last job of each context that used it.
    pub uses: Vec<(u32, u64)>,
    /// Live: the buffer's id.
    pub buffer: u64,
    /// Live: bytes asked for.
    pub requested: u64,
    /// Live: context it was allocated on.
    pub ctx_id: u64,
    /// Live: account slot of that context.
    pub acct: u32,
    /// Cached: the slot in the cache of account `acct`.
    pub slot: u32,
}

impl Block {
    /// A free block record.
    pub fn new(seg: u32, offset: u64, size: u64) -> Block {
        Block {
            seg,
            offset,
            size,
            prev: NIL,
            next: NIL,
            fprev: NIL,
            fnext: NIL,
            state: State::Free,
            pins: 0,
            uses: Vec::new(),
            buffer: 0,
            requested: 0,
            ctx_id: 0,
            acct: 0,
            slot: NIL,
        }
    }
}

/// The free lists of one pool (one kind, one access mode), plus quick lists: a freed block that
/// is reusable at once goes onto the quick list of its bin without coalescing, and a request of
/// the same class pops it (the common alloc/free/alloc pattern never splits or merges). A request
/// the quick list cannot serve first coalesces every quick block (amortised O(1) per free), so
/// best fit and coalescing behave as if blocks were merged at free.
pub struct Bins {
    fl: u64,
    sl: [u8; FL_COUNT],
    heads: [[u32; 8]; FL_COUNT],
    quick: [[u32; 8]; FL_COUNT],
    /// Which quick lists may be non-empty (bit per first-level bin; drained lazily).
    quick_fl: u64,
    /// Blocks on quick lists.
    pub quick_len: usize,
}

impl Default for Bins {
    fn default() -> Self {
        Bins {
            fl: 0,
            sl: [0; FL_COUNT],
            heads: [[NIL; 8]; FL_COUNT],
            quick: [[NIL; 8]; FL_COUNT],
            quick_fl: 0,
            quick_len: 0,
        }
    }
}

impl Bins {
    /// Pushes reusable block `id` onto the quick list of its size.
    #[inline]
    pub fn quick_push(&mut self, blocks: &mut [Block], id: u32) {
        let (f, s) = bin_floor(blocks[id as usize].size);
        let b = &mut blocks[id as usize];
        b.state = State::Quick;
        b.fnext = self.quick[f][s];
        self.quick[f][s] = id;
        self.quick_fl |= 1 << f;
        self.quick_len += 1;
    }

    /// Pops a quick block of at least `need` bytes (`need` on a bin boundary: every size class
    /// is), if the quick list of its bin has one.
    #[inline]
    pub fn quick_pop(&mut self, blocks: &mut [Block], need: u64) -> Option<u32> {
        if self.quick_len == 0 {
            return None;
        }
        // The bin of `need` itself first (an exact-size block lives there even when `need` is
        // not a bin boundary, as large classes above 16 MiB are not), then the next one up.
        let (mut f, mut s) = bin_floor(need);
        let mut id = self.quick[f][s];
        if id == NIL || blocks[id as usize].size < need {
            (f, s) = bin_ceil(need);
            if f >= FL_COUNT {
                return None;
            }
            id = self.quick[f][s];
            if id == NIL || blocks[id as usize].size < need {
                return None;
            }
        }
        self.quick[f][s] = blocks[id as usize].fnext;
        blocks[id as usize].fnext = NIL;
        self.quick_len -= 1;
        Some(id)
    }

    /// Empties every quick list; returns the blocks (to be coalesced by the caller). Visits only
    /// the first-level bins that had a push since the last drain.
    pub fn quick_drain(&mut self, blocks: &mut [Block], out: &mut Vec<u32>) {
        let mut fl = self.quick_fl;
        self.quick_fl = 0;
        self.quick_len = 0;
        while fl != 0 {
            let f = fl.trailing_zeros() as usize;
            fl &= fl - 1;
            for head in self.quick[f].iter_mut() {
                let mut id = *head;
                while id != NIL {
                    out.push(id);
                    let next = blocks[id as usize].fnext;
                    blocks[id as usize].fnext = NIL;
                    id = next;
                }
                *head = NIL;
            }
        }
    }

    /// Links free block `id` into the bin of its size.
    pub fn insert(&mut self, blocks: &mut [Block], id: u32) {
        let (f, s) = bin_floor(blocks[id as usize].size);
        let head = self.heads[f][s];
        {
            let b = &mut blocks[id as usize];
            b.fprev = NIL;
            b.fnext = head;
        }
        if head != NIL {
            blocks[head as usize].fprev = id;
        }
        self.heads[f][s] = id;
        self.fl |= 1 << f;
        self.sl[f] |= 1 << s;
    }

    /// Unlinks free block `id`.
    pub fn remove(&mut self, blocks: &mut [Block], id: u32) {
        let (p, n, size) = {
            let b = &blocks[id as usize];
            (b.fprev, b.fnext, b.size)
        };
        if p != NIL {
            blocks[p as usize].fnext = n;
        } else {
            let (f, s) = bin_floor(size);
            self.heads[f][s] = n;
            if n == NIL {
                self.sl[f] &= !(1 << s);
                if self.sl[f] == 0 {
                    self.fl &= !(1 << f);
                }
            }
        }
        if n != NIL {
            blocks[n as usize].fprev = p;
        }
        let b = &mut blocks[id as usize];
        b.fprev = NIL;
        b.fnext = NIL;
    }

    /// A free block of at least `need` bytes from the smallest non-empty bin that guarantees
    /// it; then, if that finds nothing, a first-fit scan of the bin just below (its blocks may
    /// still be large enough). `None` when no free block fits.
    pub fn find(&self, blocks: &[Block], need: u64) -> Option<u32> {
        let (f, s) = bin_ceil(need);
        if f < FL_COUNT {
            let sl_map = self.sl[f] as u32 & (!0u32 << s);
            let (f2, s2) = if sl_map != 0 {
                (f, sl_map.trailing_zeros() as usize)
            } else {
                let fl_map = if f + 1 >= 64 {
                    0
                } else {
                    self.fl & (!0u64 << (f + 1))
                };
                if fl_map != 0 {
                    let f2 = fl_map.trailing_zeros() as usize;
                    (f2, (self.sl[f2] as u32).trailing_zeros() as usize)
                } else {
                    (FL_COUNT, 0)
                }
            };
            if f2 < FL_COUNT {
                return Some(self.heads[f2][s2]);
            }
        }
        // The bin holding `need` itself: blocks in [lower, upper) of which some may fit.
        let (f, s) = bin_floor(need);
        let mut id = self.heads[f][s];
        while id != NIL {
            let b = &blocks[id as usize];
            if b.size >= need {
                return Some(id);
            }
            id = b.fnext;
        }
        None
    }

    /// Every free block (for statistics).
    pub fn iter<'a>(&'a self, blocks: &'a [Block]) -> impl Iterator<Item = u32> + 'a {
        self.heads.iter().flatten().flat_map(move |&h| {
            let mut id = h;
            std::iter::from_fn(move || {
                if id == NIL {
                    return None;
                }
                let cur = id;
                id = blocks[cur as usize].fnext;
                Some(cur)
            })
        })
    }
}

/// The pool's block table: making and retiring block records, splitting a block and merging free
/// neighbours.
impl super::Inner {
    pub(super) fn new_block(&mut self, b: Block) -> u32 {
        match self.free_slots.pop() {
            Some(id) => {
                self.blocks[id as usize] = b;
                self.handles[id as usize] = 0;
                id
            }
            None => {
                self.blocks.push(b);
                self.handles.push(0);
                (self.blocks.len() - 1) as u32
            }
        }
    }

    pub(super) fn kill_block(&mut self, id: u32) {
        let b = &mut self.blocks[id as usize];
        b.state = State::Dead;
        b.uses.clear();
        self.free_slots.push(id);
    }

    /// Splits free block `id` at `at` bytes; returns the new block (the part after `at`).
    pub(super) fn split(&mut self, id: u32, at: u64) -> u32 {
        let (seg, off, size, next) = {
            let b = &self.blocks[id as usize];
            (b.seg, b.offset, b.size, b.next)
        };
        let mut nb = Block::new(seg, off + at, size - at);
        nb.prev = id;
        nb.next = next;
        let nid = self.new_block(nb);
        if next != NIL {
            self.blocks[next as usize].prev = nid;
        }
        let b = &mut self.blocks[id as usize];
        b.size = at;
        b.next = nid;
        self.segs[seg as usize].set_head(off + at, nid);
        let kind = self.segs[seg as usize].kind;
        self.room(kind, [0, 0, 0, 0, 1], false);
        self.stats.cached_count.add(kind, 1);
        nid
    }

    /// Marks `id` free, merges it with free neighbours, bins the result; returns its id.
    pub(super) fn coalesce_and_bin(&mut self, id: u32) -> u32 {
        self.blocks[id as usize].state = State::Free;
        let seg = self.blocks[id as usize].seg;
        let (kind, ro) = {
            let s = &self.segs[seg as usize];
            (s.kind, s.read_only)
        };
        let bin = bin_of(kind, ro);
        let mut id = id;
        let next = self.blocks[id as usize].next;
        if next != NIL && self.blocks[next as usize].state == State::Free {
            self.bins[bin].remove(&mut self.blocks, next);
            self.merge(id, next);
        }
        let prev = self.blocks[id as usize].prev;
        if prev != NIL && self.blocks[prev as usize].state == State::Free {
            self.bins[bin].remove(&mut self.blocks, prev);
            self.merge(prev, id);
            id = prev;
        }
        self.bins[bin].insert(&mut self.blocks, id);
        let s = &self.segs[seg as usize];
        if self.enabled && s.busy == 0 && self.blocks[id as usize].size == s.size {
            self.list_empty(seg);
        }
        id
    }

    /// `a` absorbs its next neighbour `b` (both free, `b` unlinked from the bins).
    pub(super) fn merge(&mut self, a: u32, b: u32) {
        let (bsize, bnext, boff, seg) = {
            let x = &self.blocks[b as usize];
            (x.size, x.next, x.offset, x.seg)
        };
        self.blocks[a as usize].size += bsize;
        self.blocks[a as usize].next = bnext;
        if bnext != NIL {
            self.blocks[bnext as usize].prev = a;
        }
        self.segs[seg as usize].clear_head(boff);
        let kind = self.segs[seg as usize].kind;
        self.stats.cached_count.sub(kind, 1);
        self.kill_block(b);
    }
}
