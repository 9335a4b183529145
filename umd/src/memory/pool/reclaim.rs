//! The pool's side of the per-context caches (`cache.rs`): taking free blocks, live blocks and
//! budget tokens back from them (before a trim, an out-of-memory retry, a context's end, or a
//! pool-wide operation that needs every block in the pool's own lists), and reaching a delegated
//! block's cache slot.

use super::block::{State, NIL};
use super::cache::{self, Budget, Slot, DIMS};
use super::size_class::PoolKind;
use super::stats::Stats;
use super::{Ghost, Inner};
use std::sync::atomic::Ordering;

/// Takes budgets given back by a cache out of the gauges' `current`, and their tokens out of
/// `tokens` (every token stands for one block: on the allocated or on the cached side).
pub(super) fn unbudget(stats: &mut Stats, tokens: &mut u64, b: &Budget) {
    for kind in [PoolKind::Small, PoolKind::Large] {
        let b = &b[cache::k(kind)];
        *tokens -= b[2] + b[4];
        for (d, &n) in b.iter().enumerate() {
            if n > 0 {
                stats.shift(kind, d, n, false);
            }
        }
    }
}

/// The indices of the set bits of `m`.
pub(super) fn bits(m: u64) -> impl Iterator<Item = usize> {
    (0..64).filter(move |i| m & (1 << i) != 0)
}

impl Inner {
    /// Takes back the free blocks of the cache of account `acct`, if it has any.
    pub(super) fn flush_own(&mut self, acct: u32) -> usize {
        match self.caches.get(acct as usize) {
            Some(c) if c.parked.load(Ordering::Relaxed) != 0 => {
                self.flush_cache(acct as usize, false)
            }
            _ => 0,
        }
    }

    /// Takes the caches' tokens back: those of the allocated side, or (`cached`) all.
    pub(super) fn revoke_all(&mut self, cached: bool) {
        if self.tokens > 0 {
            // Only registered contexts' caches hold tokens (unregister takes them back).
            for i in bits(self.registered) {
                self.revoke(i, cached);
            }
        }
    }

    /// Takes cache `i`'s tokens back (see [`cache::CacheData::revoke`]).
    pub(super) fn revoke(&mut self, i: usize, cached: bool) {
        let b = self.caches[i].lock().revoke(cached);
        unbudget(&mut self.stats, &mut self.tokens, &b);
    }

    /// Takes the free blocks of every cache back (to the quick lists); returns how many.
    pub(super) fn flush_caches(&mut self) -> usize {
        let mut n = 0;
        for i in bits(self.registered) {
            if self.caches[i].parked.load(Ordering::Relaxed) > 0 {
                n += self.flush_cache(i, false);
            }
        }
        n
    }

    /// Takes the free blocks of cache `i` back (`live`: its live ones too, whose buffers
    /// outlive their context); returns how many.
    pub(super) fn flush_cache(&mut self, i: usize, live: bool) -> usize {
        let mut out = std::mem::take(&mut self.flushed);
        let mut lives = Vec::new();
        let mut b = [[0; DIMS]; 2];
        let ctx_id = {
            let c = &self.caches[i];
            let mut d = c.lock();
            d.drain(&mut out, live.then_some(&mut lives), &mut b);
            c.parked.store(0, Ordering::Relaxed);
            d.ctx_id
        };
        unbudget(&mut self.stats, &mut self.tokens, &b);
        let n = out.len() + lives.len();
        for s in lives {
            self.adopt_live(s, ctx_id);
        }
        for p in out.drain(..) {
            if p.hit {
                // (Else the pool's free of its last buffer already left this ghost.)
                self.remember(Ghost {
                    va: p.va,
                    requested: p.requested,
                    size: p.size,
                    buffer: p.buffer,
                    ctx_id,
                    seq: 0,
                    at_ns: p.at_ns,
                    site: None,
                    callers: p.callers,
                });
            }
            self.make_free(None, p.block);
        }
        self.flushed = out;
        n
    }

    /// Takes delegated live block `id` back from its cache; false if its slot is not live.
    pub(super) fn undelegate_live(&mut self, id: u32) -> bool {
        let (acct, slot) = {
            let b = &self.blocks[id as usize];
            (b.acct, b.slot)
        };
        let Some(c) = self.caches.get(acct as usize) else {
            return false;
        };
        let mut b = [[0; DIMS]; 2];
        let (s, ctx_id) = {
            let mut d = c.lock();
            (d.take_live(slot, id, &mut b), d.ctx_id)
        };
        unbudget(&mut self.stats, &mut self.tokens, &b);
        match s {
            Some(s) => {
                self.adopt_live(s, ctx_id);
                true
            }
            None => false,
        }
    }

    /// Records a live block coming back from a cache in the pool's own fields.
    pub(super) fn adopt_live(&mut self, s: Slot, ctx_id: u64) {
        let id = s.g.block;
        self.handles[id as usize] = s.handle;
        let b = &mut self.blocks[id as usize];
        b.state = State::Live;
        b.slot = NIL;
        b.buffer = s.buffer;
        b.requested = s.requested;
        b.ctx_id = ctx_id;
        b.pins = s.pins;
        b.uses = s.uses.iter().map(|u| (u.0, u.1)).collect();
    }

    /// Runs `f` on the cache slot of delegated block `id`.
    pub(super) fn with_slot<R>(&self, id: u32, f: impl FnOnce(&mut Slot) -> R) -> Option<R> {
        let b = &self.blocks[id as usize];
        let mut d = self.caches.get(b.acct as usize)?.lock();
        d.slot_mut(b.slot, id).map(f)
    }
}
