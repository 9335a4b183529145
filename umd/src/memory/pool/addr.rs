//! What is at an address: the live buffer, an interior address, a freed buffer (its ghost), or
//! nothing of this pool (free by address, submit validation's messages).

use super::*;

impl Pool {
    /// What `va` is (free by address).
    pub fn classify(&self, va: u64) -> AddrInfo {
        Self::classify_in(&self.lock(), va)
    }

    /// [`Pool::classify`] if the pool's lock is free now; None otherwise (an error message's
    /// decoration must never wait: in a forked child the lock may be one the parent held).
    fn try_classify(&self, va: u64) -> Option<AddrInfo> {
        match self.inner.try_lock() {
            Ok(g) => Some(Self::classify_in(&g, va)),
            Err(std::sync::TryLockError::Poisoned(p)) => {
                Some(Self::classify_in(&p.into_inner(), va))
            }
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    fn classify_in(g: &Inner, va: u64) -> AddrInfo {
        match g.lookup(va) {
            Some(id) => {
                let (b, ghost) = g.view(id);
                let start = g.segs[b.seg as usize].va + b.offset;
                match b.state {
                    State::Live if start == va => AddrInfo::Live {
                        buffer: b.buffer,
                        handle: b.handle,
                        ctx_id: b.ctx_id,
                    },
                    State::Live => AddrInfo::Interior {
                        buffer: b.buffer,
                        start,
                        requested: b.requested,
                    },
                    _ => match ghost.filter(|_| start == va) {
                        Some(gh) => AddrInfo::Freed(gh),
                        None => match g.ghost_at(va, true) {
                            Some(gh) => AddrInfo::Freed(gh.clone()),
                            None => AddrInfo::Unknown { in_pool: true },
                        },
                    },
                }
            }
            None => match g.ghost_at(va, true) {
                Some(gh) => AddrInfo::Freed(gh.clone()),
                None => AddrInfo::Unknown { in_pool: false },
            },
        }
    }
}

/// "buffer 12 (512 bytes at VA 0x200000, allocated on context 3 at ...), freed 4 ms ago at ...":
/// the freed buffer `buffer` that started at `va`, from the ghosts of every open device's pool
/// (a destroyed buffer handle's error, `crate::registry::BUFFERS`); once its memory has been
/// handed out again, which buffer has it now; None when no pool knows the address.
///
/// Only tried, never waited for: the registry's and the pools' locks are taken with `try_lock`
/// (a forked child may have inherited them held), and a busy one leaves the message plain.
pub fn describe_freed(va: u64, buffer: u64) -> Option<String> {
    let pools: Vec<Arc<Pool>> = match POOLS.try_lock() {
        Ok(v) => v.clone(),
        Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().clone(),
        Err(std::sync::TryLockError::WouldBlock) => return None,
    };
    let mut reused = None;
    for p in &pools {
        match p.try_classify(va)? {
            AddrInfo::Freed(g) if g.buffer == buffer => return Some(g.describe()),
            AddrInfo::Live { buffer: now, .. } | AddrInfo::Interior { buffer: now, .. }
                if now != buffer =>
            {
                reused = Some(now)
            }
            _ => {}
        }
    }
    reused.map(|now| {
        format!("buffer {buffer} at VA {va:#x}, freed; its memory has been allocated again since (buffer {now})")
    })
}

impl Inner {
    /// Block `id` as validation sees it: a delegated block's live fields and state come from its
    /// cache slot (Live, or Free with the ghost of its last buffer).
    pub(super) fn view(&self, id: u32) -> (BlockView, Option<Ghost>) {
        let b = &self.blocks[id as usize];
        let mut v = BlockView {
            state: b.state,
            seg: b.seg,
            offset: b.offset,
            buffer: b.buffer,
            requested: b.requested,
            ctx_id: b.ctx_id,
            handle: self.handles.get(id as usize).copied().unwrap_or(0),
        };
        if b.state != State::Cached {
            return (v, None);
        }
        let Some(c) = self.caches.get(b.acct as usize) else {
            return (v, None);
        };
        let mut d = c.lock();
        let ctx_id = d.ctx_id;
        let Some(s) = d.slot_mut(b.slot, id) else {
            return (v, None);
        };
        (v.buffer, v.requested, v.ctx_id, v.handle) = (s.buffer, s.requested, ctx_id, s.handle);
        if s.live {
            v.state = State::Live;
            return (v, None);
        }
        v.state = State::Free;
        let ghost = Ghost {
            va: s.g.va,
            requested: s.requested,
            size: s.g.size,
            buffer: s.buffer,
            ctx_id,
            seq: 0,
            at_ns: s.at_ns,
            site: None,
            callers: s.callers,
        };
        (v, Some(ghost))
    }

    /// The block containing `va`, if it lies in a segment.
    pub(super) fn lookup(&self, va: u64) -> Option<u32> {
        let (&start, &seg) = self.index.range(..=va).next_back()?;
        let s = &self.segs[seg as usize];
        if va >= start + s.size {
            return None;
        }
        let id = s.block_at(&self.blocks, va - start);
        (id != NIL).then_some(id)
    }

    /// The most recent freed buffer containing `va` (`at_start`: starting at it).
    pub(super) fn ghost_at(&self, va: u64, at_start: bool) -> Option<&Ghost> {
        // Newest first: the ring's slots from the last written backwards.
        let n = self.ghosts.len();
        (1..=n)
            .map(|k| &self.ghosts[(self.ghost_at.wrapping_sub(k)) % n.max(1)])
            .find(|g| {
                if at_start {
                    g.va == va
                } else {
                    va >= g.va && va < g.va + g.size
                }
            })
    }
}
