//! Which hardware queue a context runs on, which address-space slot a file may take, and what
//! the driver keeps of each hardware queue ([`HwQueue`]).

use super::recovery::{BusySamples, JobClock, RunTimes};
use super::report::QueueLine;
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

/// One hardware queue as both drivers keep it, besides its queued jobs (each driver's own
/// container) and its ring memory: the ring index it wrote up to, the watchdog's clock, the busy
/// samples, the run times of its jobs and how many it retired.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HwQueue {
    /// Ring index one past the last descriptor written (free-running, hw-spec §2 `Q_TAIL`).
    pub tail: u32,
    /// The watchdog's view of the job executing.
    pub clock: JobClock,
    /// Whether it had work, per watchdog period (debugfs `busy_pct`).
    pub busy: BusySamples,
    /// When its jobs started and ended.
    pub runs: RunTimes,
    /// Jobs retired.
    pub done: u64,
}

impl HwQueue {
    /// A job submitted at `submitted_ns` was retired at `end_ns`: counted; returns how long it
    /// ran (ns) from its start on the queue ([`RunTimes::completed`]).
    pub fn retired(&mut self, submitted_ns: u64, end_ns: u64) -> u64 {
        self.done = self.done.saturating_add(1);
        self.runs.completed(submitted_ns, end_ns)
    }

    /// An engine reset (or power cycle) at `now_ns` emptied the ring: the driver writes it again
    /// from index 0 (hw-spec §8), the watchdog forgets the job it watched, and the next job
    /// starts now.
    pub fn reset(&mut self, now_ns: u64) {
        self.tail = 0;
        self.clock.reset();
        self.runs.restart(now_ns);
    }

    /// Its debugfs `queues` line as queue `queue` with `inflight` jobs queued, at `now_ns`,
    /// with `Q_STATE`, `Q_HEAD` and `Q_CUR_JOB` as read from the device.
    pub fn line(
        &self,
        queue: usize,
        inflight: usize,
        now_ns: u64,
        (state, head, cur_job): (u32, u32, u64),
    ) -> QueueLine {
        QueueLine {
            queue,
            state,
            head,
            cur_job,
            tail: self.tail,
            inflight,
            done: self.done,
            busy_pct: self.busy.pct(now_ns),
        }
    }
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
    fn a_queue_counts_retired_jobs_and_starts_over_at_a_reset() {
        let mut q = HwQueue {
            tail: 7,
            ..HwQueue::default()
        };
        assert_eq!(q.retired(1_000, 5_000), 4_000);
        assert_eq!(
            q.retired(2_000, 6_000),
            1_000,
            "it started when the one before ended"
        );
        assert_eq!(q.done, 2);
        q.reset(10_000);
        assert_eq!((q.tail, q.done), (0, 2));
        assert_eq!(
            q.retired(9_000, 12_000),
            2_000,
            "the next job starts at the reset"
        );
        let line = q.line(3, 1, 12_000, (2, 5, 44));
        assert_eq!(
            (
                line.queue,
                line.state,
                line.head,
                line.cur_job,
                line.tail,
                line.inflight,
                line.done
            ),
            (3, 2, 5, 44, 0, 1, 3)
        );
    }

    #[test]
    fn slots_free_first_then_idle_owners() {
        assert_eq!(pick_slot(&[Some(1), None, Some(3)], |_| true), Some(1));
        assert_eq!(pick_slot(&[Some(1), Some(2)], |o| o == 2), Some(1));
        assert_eq!(pick_slot(&[Some(1), Some(2)], |_| false), None);
    }
}
