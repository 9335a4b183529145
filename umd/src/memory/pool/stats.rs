//! Pool statistics, with the vocabulary of PyTorch's `torch.cuda.memory_stats()` (what framework
//! engineers already read): every gauge is a [`Counter`] with current, peak, and the cumulative
//! amounts added and removed, kept for all pools together and for the small and large pools.
//!
//! | gauge | meaning |
//! |---|---|
//! | `allocated_bytes` | held by live buffers (size-class rounded) |
//! | `requested_bytes` | what callers asked for (before rounding) |
//! | `reserved_bytes` | kernel objects the pool holds (slabs and large segments) |
//! | `active_bytes` | allocated + freed blocks a submitted job may still use (reuse waits for its fence) |
//! | `cached_bytes` | reserved - allocated: free and pending blocks kept for reuse |
//! | `allocation_count` | live buffers |
//! | `segment_count` | kernel objects held |
//! | `active_count` | live + pending blocks |
//! | `cached_count` | free + pending blocks |

use super::size_class::PoolKind;

/// One gauge: current value, high-water mark, cumulative increases and decreases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counter {
    /// Now.
    pub current: u64,
    /// Highest `current` since creation or the last peak reset.
    pub peak: u64,
    /// Sum of all increases.
    pub allocated: u64,
    /// Sum of all decreases.
    pub freed: u64,
}

impl Counter {
    /// Adds `n`.
    #[inline]
    pub fn add(&mut self, n: u64) {
        self.current += n;
        self.allocated += n;
        if self.current > self.peak {
            self.peak = self.current;
        }
    }
    /// Removes `n` (saturating: a bookkeeping bug never wraps a gauge).
    #[inline]
    pub fn sub(&mut self, n: u64) {
        self.current = self.current.saturating_sub(n);
        self.freed += n;
    }
    /// Removes `n` from `current` only (a budget given back, see `cache.rs`).
    #[inline]
    pub(crate) fn down(&mut self, n: u64) {
        self.current = self.current.saturating_sub(n);
    }
}

/// Index of the all-pools entry of a gauge array.
pub(crate) const ALL: usize = 0;
/// Index of the small pool.
pub(crate) const SMALL: usize = 1;
/// Index of the large pool.
pub(crate) const LARGE: usize = 2;

/// The array index of a pool.
#[inline]
pub fn idx(kind: PoolKind) -> usize {
    match kind {
        PoolKind::Small => SMALL,
        PoolKind::Large => LARGE,
    }
}

/// A gauge kept for all pools, the small pool and the large pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Gauge(pub [Counter; 3]);

impl Gauge {
    /// Adds `n` to the pool's entry and to the total.
    #[inline]
    pub fn add(&mut self, kind: PoolKind, n: u64) {
        self.0[ALL].add(n);
        self.0[idx(kind)].add(n);
    }
    /// Removes `n` from the pool's entry and from the total.
    #[inline]
    pub fn sub(&mut self, kind: PoolKind, n: u64) {
        self.0[ALL].sub(n);
        self.0[idx(kind)].sub(n);
    }
    /// The total entry.
    pub fn all(&self) -> &Counter {
        &self.0[ALL]
    }
    /// One pool's entry.
    pub fn pool(&self, kind: PoolKind) -> &Counter {
        &self.0[idx(kind)]
    }
    fn reset_peak(&mut self) {
        for c in &mut self.0 {
            c.peak = c.current;
        }
    }
    /// The entries a change of `kind` touches.
    fn both(&mut self, kind: PoolKind) -> [&mut Counter; 2] {
        let [all, small, large] = &mut self.0;
        [
            all,
            if kind == PoolKind::Small {
                small
            } else {
                large
            },
        ]
    }
    /// Adding `n` to `kind` would raise a peak.
    fn would_peak(&self, kind: PoolKind, n: u64) -> bool {
        [ALL, idx(kind)]
            .iter()
            .any(|&i| self.0[i].current + n > self.0[i].peak)
    }
    /// Moves `n` between `current` and a cache's budget (`out`: budget handed out); the
    /// cumulative fields and the peak stay.
    fn shift(&mut self, kind: PoolKind, n: u64, out: bool) {
        for c in self.both(kind) {
            c.current = if out {
                c.current + n
            } else {
                c.current.saturating_sub(n)
            };
        }
    }
    /// Adds a cache's own changes: cumulative `added` / `removed`, and `budget` (held in
    /// `current`, not real).
    fn fold(&mut self, kind: PoolKind, added: u64, removed: u64, budget: u64) {
        for c in self.both(kind) {
            c.allocated += added;
            c.freed += removed;
            c.current = c.current.saturating_sub(budget);
        }
    }
}

/// Device-wide pool statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Bytes of live buffers (rounded).
    pub allocated_bytes: Gauge,
    /// Bytes callers asked for.
    pub requested_bytes: Gauge,
    /// Bytes of kernel objects held.
    pub reserved_bytes: Gauge,
    /// Allocated + pending bytes.
    pub active_bytes: Gauge,
    /// Reserved - allocated.
    pub cached_bytes: Gauge,
    /// Live buffers.
    pub allocation_count: Gauge,
    /// Kernel objects held.
    pub segment_count: Gauge,
    /// Live + pending blocks.
    pub active_count: Gauge,
    /// Free + pending blocks.
    pub cached_count: Gauge,
    /// Successful allocations.
    pub num_allocs: u64,
    /// Frees.
    pub num_frees: u64,
    /// Allocations served from cached memory (no kernel call).
    pub num_cache_hits: u64,
    /// Allocations that needed a new kernel object.
    pub num_cache_misses: u64,
    /// Kernel objects created (GEM create).
    pub num_kernel_allocs: u64,
    /// Kernel objects released (GEM close).
    pub num_kernel_frees: u64,
    /// Every backend call the pool made (create, bind, unbind, close, mmap, munmap, state polls,
    /// waits).
    pub num_kernel_calls: u64,
    /// Allocations retried after the backend said out of memory and the cache was released.
    pub num_alloc_retries: u64,
    /// Allocations that failed with UMD_ERR_MEM_OUT_OF_MEMORY.
    pub num_ooms: u64,
    /// Frees whose block a submitted job could still use (reuse deferred to its fence).
    pub num_deferred_frees: u64,
    /// Trim calls.
    pub num_trims: u64,
    /// Segments released by trims, the release threshold or out-of-memory recovery.
    pub num_segments_released: u64,
    /// Largest free block now (bytes), not counting pending ones.
    pub largest_free_block: u64,
    /// Free bytes in blocks smaller than the largest recent request (they cannot serve it).
    pub fragmentation_bytes: u64,
    /// Largest request (rounded) among the last 64 allocations.
    pub largest_recent_request: u64,
    /// Cached bytes the pool keeps at most (u64::MAX: no limit).
    pub release_threshold: u64,
    /// False with UMD_POOL=off.
    pub pool_enabled: bool,
    /// Capacity of the history ring (0: off).
    pub history_capacity: u64,
    /// Events recorded so far (including those the ring dropped).
    pub history_events: u64,
}

impl Stats {
    /// The gauges of budget dimension `d` (see `cache.rs`).
    fn dim(&mut self, d: usize) -> (&mut Gauge, Option<&mut Gauge>) {
        match d {
            0 => (&mut self.allocated_bytes, Some(&mut self.active_bytes)),
            1 => (&mut self.requested_bytes, None),
            2 => (&mut self.allocation_count, Some(&mut self.active_count)),
            3 => (&mut self.cached_bytes, None),
            _ => (&mut self.cached_count, None),
        }
    }

    /// Raising dimension `d` of `kind` by `n` would pass a peak (as `current` counts budgets).
    pub(crate) fn would_peak(&mut self, kind: PoolKind, d: usize, n: u64) -> bool {
        let (a, b) = self.dim(d);
        a.would_peak(kind, n) || b.is_some_and(|b| b.would_peak(kind, n))
    }

    /// Hands `n` of dimension `d` out to a cache's budget (`out`) or takes it back.
    pub(crate) fn shift(&mut self, kind: PoolKind, d: usize, n: u64, out: bool) {
        let (a, b) = self.dim(d);
        a.shift(kind, n, out);
        if let Some(b) = b {
            b.shift(kind, n, out);
        }
    }

    /// Adds what a context cache did on its own (`alloc` / `free`: bytes, requested bytes,
    /// blocks of its hits and frees) and removes its `budget` from `current`.
    pub(crate) fn fold(&mut self, kind: PoolKind, alloc: [u64; 3], free: [u64; 3], budget: &[u64]) {
        for (d, (added, removed)) in [
            (alloc[0], free[0]),
            (alloc[1], free[1]),
            (alloc[2], free[2]),
            (free[0], alloc[0]),
            (free[2], alloc[2]),
        ]
        .into_iter()
        .enumerate()
        {
            let (a, b) = self.dim(d);
            a.fold(kind, added, removed, budget[d]);
            if let Some(b) = b {
                b.fold(kind, added, removed, budget[d]);
            }
        }
        self.num_allocs += alloc[2];
        self.num_cache_hits += alloc[2];
        self.num_frees += free[2];
    }

    /// Sets every peak to the current value.
    pub fn reset_peaks(&mut self) {
        for g in [
            &mut self.allocated_bytes,
            &mut self.requested_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.cached_bytes,
            &mut self.allocation_count,
            &mut self.segment_count,
            &mut self.active_count,
            &mut self.cached_count,
        ] {
            g.reset_peak();
        }
    }
}

/// Per-context accounting.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtxStats {
    /// Context id.
    pub ctx_id: u64,
    /// Bytes of live buffers allocated on the context (rounded).
    pub allocated_bytes: Counter,
    /// Bytes asked for.
    pub requested_bytes: Counter,
    /// Live buffers.
    pub allocation_count: Counter,
    /// Allocations.
    pub num_allocs: u64,
    /// Frees.
    pub num_frees: u64,
    /// Allocations served from cache.
    pub num_cache_hits: u64,
}

impl CtxStats {
    /// One allocation of `size` bytes (`requested` asked for).
    #[inline]
    pub fn on_alloc(&mut self, size: u64, requested: u64, hit: bool) {
        self.allocated_bytes.add(size);
        self.requested_bytes.add(requested);
        self.allocation_count.add(1);
        self.num_allocs += 1;
        self.num_cache_hits += hit as u64;
    }
    /// One free.
    #[inline]
    pub fn on_free(&mut self, size: u64, requested: u64) {
        self.allocated_bytes.sub(size);
        self.requested_bytes.sub(requested);
        self.allocation_count.sub(1);
        self.num_frees += 1;
    }
    /// Sets every peak to the current value.
    pub fn reset_peaks(&mut self) {
        for c in [
            &mut self.allocated_bytes,
            &mut self.requested_bytes,
            &mut self.allocation_count,
        ] {
            c.peak = c.current;
        }
    }
}

/// "1.50 MiB" (binary units, two decimals; plain bytes below 1 KiB).
pub fn human(bytes: u64) -> String {
    const U: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u < U.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.2} {}", U[u])
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn counter_and_human() {
        let mut c = Counter::default();
        c.add(10);
        c.add(5);
        c.sub(12);
        assert_eq!(
            c,
            Counter {
                current: 3,
                peak: 15,
                allocated: 15,
                freed: 12
            }
        );
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.50 KiB");
        assert_eq!(human(64 << 20), "64.00 MiB");
    }
}
