//! Which hardware queue a context runs on, and which address-space slot a file may take.

use crate::uapi::ioctl::{PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL};
use crate::uapi::regs::NUM_QUEUES;

/// The priority of hardware queue `q`: queue 0 high, 1 and 2 normal, 3 low.
pub const fn queue_priority(q: usize) -> u32 {
    match q {
        0 => PRIORITY_HIGH,
        3 => PRIORITY_LOW,
        _ => PRIORITY_NORMAL,
    }
}

/// The queue for a new context of `priority`: the least loaded (fewest contexts, `load[q]`) of
/// that priority, the lowest-numbered on a tie.
pub fn choose(priority: u32, load: &[usize; NUM_QUEUES]) -> usize {
    (0..NUM_QUEUES)
        .filter(|&q| queue_priority(q) == priority)
        .min_by_key(|&q| load.get(q).copied().unwrap_or(usize::MAX))
        .unwrap_or(1)
}

/// An address-space slot for a file that has none: a free one, else one whose owner has no job
/// in a ring (`idle(owner)`), the lowest-numbered first. `None`: every slot is held by other
/// files' queued work (the submit waits, or fails with `EAGAIN` + `AS_SLOTS_BUSY` under
/// `SUBMIT_FLAG_NO_BLOCK`).
pub fn pick_slot(slots: &[Option<u64>], idle: impl Fn(u64) -> bool) -> Option<usize> {
    slots
        .iter()
        .position(Option::is_none)
        .or_else(|| slots.iter().position(|o| o.is_none_or(&idle)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_loaded_queue_of_the_priority() {
        assert_eq!(choose(PRIORITY_HIGH, &[9, 0, 0, 0]), 0);
        assert_eq!(choose(PRIORITY_NORMAL, &[0, 2, 1, 0]), 2);
        assert_eq!(choose(PRIORITY_NORMAL, &[0, 1, 1, 0]), 1);
        assert_eq!(choose(PRIORITY_LOW, &[0, 0, 0, 5]), 3);
    }

    #[test]
    fn slots_free_first_then_idle_owners() {
        assert_eq!(pick_slot(&[Some(1), None, Some(3)], |_| true), Some(1));
        assert_eq!(pick_slot(&[Some(1), Some(2)], |o| o == 2), Some(1));
        assert_eq!(pick_slot(&[Some(1), Some(2)], |_| false), None);
    }
}
