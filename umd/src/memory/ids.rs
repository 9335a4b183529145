//! Buffer ids: process-unique, taken by each thread in blocks so that an allocation costs no
//! locked instruction for its id (a shared counter's `fetch_add` is one per buffer, ~5.6 ns on
//! the benchmark host: docs/benchmarks.md). A thread's ids increase; ids of different threads
//! interleave (the log's time order, not the ids, says which allocation came first). Ids are per
//! process: a forked child continues from its copies of the counter and of the forking thread's
//! block, so its ids may repeat its parent's; its log records carry its own pid, and `umd-log`
//! pairs allocations with frees by pid and id.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// The first id of the next block a thread takes.
static NEXT_BLOCK: AtomicU64 = AtomicU64::new(1);

/// Ids a thread takes at a time. A thread that ends leaves the rest of its block unused.
const BLOCK: u64 = 64;

thread_local! {
    /// The thread's block: the next id to hand out and the end of the block (exclusive).
    static MINE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
}

/// A new buffer id (never 0).
#[inline]
pub(super) fn next() -> u64 {
    MINE.with(|c| {
        let (mut next, mut end) = c.get();
        if next == end {
            next = NEXT_BLOCK.fetch_add(BLOCK, Ordering::Relaxed);
            end = next + BLOCK;
        }
        c.set((next + 1, end));
        next
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_across_threads_and_increase_within_one() {
        let per_thread: Vec<Vec<u64>> = (0..4)
            .map(|_| std::thread::spawn(|| (0..200).map(|_| next()).collect::<Vec<u64>>()))
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect();
        for ids in &per_thread {
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
            assert!(!ids.contains(&0));
        }
        let mut all: Vec<u64> = per_thread.concat();
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n, "an id was handed out twice");
    }
}
