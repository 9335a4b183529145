//! Faults, hangs and engine resets: who is guilty, what happens to every queued job, and what
//! the jobs that wait on a failed context are told.
//!
//! At every engine reset each driver takes its queued jobs out of the rings and decides per job
//! (in this order):
//! 0. a fault is blamed on the job whose packet faulted; one that hit while the device fetched a
//!    descriptor (the driver's memory) bans nobody ([`blame`]);
//! 1. jobs of banned contexts are dropped (their waiters get the ban's refusal,
//!    `super::fence::Ban::on_wait`);
//! 2. a job that waits on a fence its producer will never signal (the producer is banned and had
//!    not completed that seqno) must not run: its context is banned with
//!    [`Ban::Dependency`](super::Ban::Dependency) naming the producer ([`consumer_ban`]). This
//!    is repeated until nothing changes, so the failure reaches every job that depends on it,
//!    directly or through other contexts;
//! 3. every other job is written back into its ring from its saved descriptors, minus the waits
//!    that are already satisfied ([`wait_fate`]), and its context is marked innocent.

use super::{Ban, Producer};

/// A queued job as the rules need to see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobView {
    /// Driver job id (`Desc::job_id`, non-zero).
    pub id: u64,
    /// Its context.
    pub ctx: u32,
    /// Its seqno on that context.
    pub seqno: u64,
}

/// Who a fault is blamed on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blame {
    /// The job whose packet faulted: its context is banned.
    Guilty(JobView),
    /// The fault hit while the device fetched this job's descriptor (`FAULT_JOB` 0, before it
    /// knew the job): the descriptor is the driver's memory, not the context's, so nobody is
    /// banned; the job is named and resubmitted by the reset.
    Fetching(JobView),
    /// No queued job of a live context.
    Nobody,
}

/// Who fault `fault_job` (the device's `FAULT_JOB`) is blamed on, among a queue's jobs in ring
/// order: the job with that id; for 0, the oldest unretired job, whose descriptor the device was
/// fetching.
pub fn blame(fault_job: u64, mut jobs: impl Iterator<Item = JobView>) -> Blame {
    if fault_job == 0 {
        return jobs.next().map_or(Blame::Nobody, Blame::Fetching);
    }
    jobs.find(|j| j.id == fault_job)
        .map_or(Blame::Nobody, Blame::Guilty)
}

impl Blame {
    /// The context to ban, if any.
    pub const fn guilty(self) -> Option<JobView> {
        match self {
            Blame::Guilty(j) => Some(j),
            _ => None,
        }
    }

    /// The job named (guilty or being fetched).
    pub const fn job(self) -> Option<JobView> {
        match self {
            Blame::Guilty(j) | Blame::Fetching(j) => Some(j),
            Blame::Nobody => None,
        }
    }
}

/// What becomes of one `WAIT` of a job that is resubmitted after a reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitFate {
    /// Still to be waited for on the device.
    Keep,
    /// Already satisfied (or its producer is gone, which happens only once all its work left the
    /// rings): the `WAIT` descriptor is left out.
    Satisfied,
    /// It will never be satisfied: the job must not run; its context gets this ban.
    Fails(Ban),
}

/// The fate of a `WAIT` for `value` on the fence of context `producer_id` (`producer`: its
/// state, `None` if it no longer exists).
pub fn wait_fate(producer_id: u32, producer: Option<Producer>, value: u64) -> WaitFate {
    match producer {
        None => WaitFate::Satisfied,
        Some(p) if value <= p.completed => WaitFate::Satisfied,
        Some(Producer { ban: Some(_), .. }) => WaitFate::Fails(Ban::Dependency {
            ctx: producer_id,
            seqno: value,
        }),
        Some(_) => WaitFate::Keep,
    }
}

/// The ban for a consumer context (itself `consumer_ban`, if already banned) with a queued job
/// that waits for `value` on `producer_id`: `Some` when it must be banned now.
pub fn consumer_ban(
    consumer: Option<Ban>,
    producer_id: u32,
    producer: Option<Producer>,
    value: u64,
) -> Option<Ban> {
    if consumer.is_some() {
        return None;
    }
    match wait_fate(producer_id, producer, value) {
        WaitFate::Fails(b) => Some(b),
        _ => None,
    }
}

/// The watchdog's view of one hardware queue: a job executing (`Q_CUR_JOB`) unchanged for
/// longer than the job timeout is a hang. The clock starts when the watchdog first sees the job
/// executing, at most one watchdog period after it started (the period is the documented slack,
/// docs/kmd.md).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JobClock {
    cur: u64,
    since_ns: u64,
}

impl JobClock {
    /// One observation at `now_ns`: `busy` (the queue has jobs) and the job the device says it is
    /// executing (`cur`, 0 = none). Returns the hung job, if `cur` has been executing for more
    /// than `timeout_ns`.
    pub fn observe(&mut self, busy: bool, cur: u64, now_ns: u64, timeout_ns: u64) -> Option<u64> {
        if !busy {
            self.cur = 0;
            return None;
        }
        if cur != self.cur {
            self.cur = cur;
            self.since_ns = now_ns;
            return None;
        }
        (cur != 0 && now_ns.saturating_sub(self.since_ns) > timeout_ns).then_some(cur)
    }

    /// The job seen executing (debugfs `cur_job`).
    pub const fn current(&self) -> u64 {
        self.cur
    }

    /// Since when (ns) [`JobClock::current`] has been executing.
    pub const fn since_ns(&self) -> u64 {
        self.since_ns
    }

    /// Forgets the job (after a reset).
    pub fn reset(&mut self) {
        self.cur = 0;
    }
}

/// How many completed jobs' run times a context keeps ([`RecentJobs`]).
pub const RECENT_JOBS: usize = 8;

/// The run times (ms) of a context's last [`RECENT_JOBS`] completed jobs: a fixed ring, no
/// allocation. A job-timeout report gives them (`recent_ms`, `super::report::HangFacts`), so a
/// reader can tell a job that ran as long as its peers (the timeout is too short) from one that
/// ran far longer (a hang).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecentJobs {
    ms: [u32; RECENT_JOBS],
    /// Entries recorded so far (at most [`RECENT_JOBS`] are kept).
    count: u64,
}

impl RecentJobs {
    /// None yet (`Default`, usable in a `const fn`).
    pub const fn new() -> Self {
        Self {
            ms: [0; RECENT_JOBS],
            count: 0,
        }
    }

    /// Records one completed job's run time.
    pub fn push(&mut self, ms: u32) {
        let i = (self.count % RECENT_JOBS as u64) as usize;
        if let Some(slot) = self.ms.get_mut(i) {
            *slot = ms;
        }
        self.count = self.count.saturating_add(1);
    }

    /// The kept run times, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        let kept = self.count.min(RECENT_JOBS as u64) as usize;
        let first = (self.count.saturating_sub(kept as u64) % RECENT_JOBS as u64) as usize;
        (0..kept).filter_map(move |k| self.ms.get((first + k) % RECENT_JOBS).copied())
    }

    /// No completed job yet.
    pub const fn is_empty(&self) -> bool {
        self.count == 0
    }
}

/// When the jobs of one hardware queue run: the device runs a queue's jobs in ring order, so a
/// job starts when it was submitted or when the job before it completed, whichever is later, and
/// it ran until the driver retired it. (The watchdog's [`JobClock`] measures the job it sees
/// executing the same way, from its start, not from its submit.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunTimes {
    last_done_ns: u64,
}

impl RunTimes {
    /// A job submitted at `submitted_ns` ended at `end_ns`: how long it ran, ns (also the
    /// queue's busy time it adds).
    pub fn completed(&mut self, submitted_ns: u64, end_ns: u64) -> u64 {
        let start = if submitted_ns > self.last_done_ns {
            submitted_ns
        } else {
            self.last_done_ns
        };
        if end_ns > self.last_done_ns {
            self.last_done_ns = end_ns;
        }
        end_ns.saturating_sub(start)
    }

    /// After an engine reset at `now_ns`: the resubmitted jobs start again from there.
    pub fn restart(&mut self, now_ns: u64) {
        self.last_done_ns = now_ns;
    }
}

/// Whole milliseconds from `from_ns` to `to_ns` (0 if backwards, saturating at `u32::MAX`).
pub fn ms_between(from_ns: u64, to_ns: u64) -> u32 {
    u32::try_from(to_ns.saturating_sub(from_ns) / 1_000_000).unwrap_or(u32::MAX)
}

/// Busy sampling of one hardware queue: one bit per watchdog period (newest in bit 0), for the
/// share of the last half second the queue had work.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusySamples {
    bits: u128,
    last_ns: u64,
}

/// Watchdog period: busy sampling and hang detection, ms.
pub const WD_PERIOD_MS: u32 = 5;
const PERIOD_NS: u64 = WD_PERIOD_MS as u64 * 1_000_000;

impl BusySamples {
    /// Records `busy` at `now_ns`: one sample per period elapsed (the periods since the last
    /// sample, when nobody sampled, count as idle).
    pub fn sample(&mut self, now_ns: u64, busy: bool) {
        let periods = (now_ns.saturating_sub(self.last_ns) / PERIOD_NS).min(128);
        if periods > 0 {
            self.bits = if periods >= 128 {
                0
            } else {
                self.bits << periods
            };
            self.bits |= u128::from(busy);
            self.last_ns = now_ns;
        }
    }

    /// Percentage of the last half second (100 periods) the queue had work, at `now_ns`.
    pub fn pct(&self, now_ns: u64) -> u32 {
        let periods = now_ns.saturating_sub(self.last_ns) / PERIOD_NS;
        if periods >= 100 {
            return 0;
        }
        ((self.bits << periods) & ((1u128 << 100) - 1)).count_ones()
    }
}

#[cfg(test)]
mod tests {
    use super::super::FaultInfo;
    use super::*;

    fn job(id: u64, ctx: u32) -> JobView {
        JobView {
            id,
            ctx,
            seqno: id * 10,
        }
    }

    #[test]
    fn a_descriptor_fetch_fault_names_the_oldest_job_and_bans_nobody() {
        let jobs = [job(4, 1), job(5, 2)];
        assert_eq!(blame(5, jobs.iter().copied()), Blame::Guilty(job(5, 2)));
        assert_eq!(blame(0, jobs.iter().copied()), Blame::Fetching(job(4, 1)));
        assert_eq!(blame(0, jobs.iter().copied()).guilty(), None);
        assert_eq!(blame(0, jobs.iter().copied()).job(), Some(job(4, 1)));
        assert_eq!(blame(9, jobs.iter().copied()), Blame::Nobody);
        assert_eq!(blame(0, [].iter().copied()), Blame::Nobody);
    }

    #[test]
    fn waits_on_a_failed_producer_fail_with_its_name() {
        let fault = Ban::Fault(FaultInfo::default());
        let live = Producer {
            submitted: 4,
            completed: 2,
            ban: None,
        };
        let banned = Producer {
            ban: Some(fault),
            ..live
        };
        assert_eq!(wait_fate(7, None, 3), WaitFate::Satisfied);
        assert_eq!(wait_fate(7, Some(live), 2), WaitFate::Satisfied);
        assert_eq!(wait_fate(7, Some(live), 3), WaitFate::Keep);
        assert_eq!(wait_fate(7, Some(banned), 2), WaitFate::Satisfied);
        assert_eq!(
            wait_fate(7, Some(banned), 3),
            WaitFate::Fails(Ban::Dependency { ctx: 7, seqno: 3 })
        );
        assert_eq!(
            consumer_ban(None, 7, Some(banned), 3),
            Some(Ban::Dependency { ctx: 7, seqno: 3 })
        );
        assert_eq!(consumer_ban(Some(Ban::Hang), 7, Some(banned), 3), None);
    }

    #[test]
    fn the_job_clock_starts_when_the_job_is_first_seen() {
        let mut c = JobClock::default();
        assert_eq!(c.observe(true, 3, 100, 50), None);
        assert_eq!(c.observe(true, 3, 150, 50), None);
        assert_eq!(c.observe(true, 3, 151, 50), Some(3));
        assert_eq!(c.observe(true, 4, 152, 50), None);
        assert_eq!(c.observe(false, 0, 300, 50), None);
        assert_eq!(c.current(), 0);
        assert_eq!(c.observe(true, 0, 400, 50), None);
        assert_eq!(c.observe(true, 0, 900, 50), None);
    }

    #[test]
    fn busy_share_of_the_last_half_second() {
        let mut b = BusySamples::default();
        for i in 1..=50 {
            b.sample(i * PERIOD_NS, true);
        }
        assert_eq!(b.pct(50 * PERIOD_NS), 50);
        assert_eq!(b.pct(100 * PERIOD_NS), 50);
        assert_eq!(b.pct(150 * PERIOD_NS), 0);
        b.sample(200 * PERIOD_NS, false);
        assert_eq!(b.pct(200 * PERIOD_NS), 0);
    }

    #[test]
    fn recent_jobs_keep_the_last_eight_oldest_first() {
        let mut r = RecentJobs::default();
        assert!(r.is_empty());
        assert_eq!(r.iter().count(), 0);
        for ms in 1..=3 {
            r.push(ms);
        }
        assert_eq!(
            r.iter().collect::<heapless_vec::V>().0,
            [1, 2, 3, 0, 0, 0, 0, 0, 0, 0]
        );
        for ms in 4..=11 {
            r.push(ms);
        }
        assert!(!r.is_empty());
        assert_eq!(
            r.iter().collect::<heapless_vec::V>().0,
            [4, 5, 6, 7, 8, 9, 10, 11, 0, 0]
        );
    }

    #[test]
    fn a_job_runs_from_its_submit_or_its_predecessors_end() {
        const MS: u64 = 1_000_000;
        let mut t = RunTimes::default();
        // Submitted at 10 ms onto an idle queue, done at 15 ms.
        assert_eq!(t.completed(10 * MS, 15 * MS), 5 * MS);
        // Submitted at 12 ms behind it: it started at 15 ms.
        assert_eq!(t.completed(12 * MS, 40 * MS), 25 * MS);
        // An end reported before the last one (an interrupt time older than a retirement).
        assert_eq!(t.completed(20 * MS, 38 * MS), 0);
        // Submitted after the queue went idle.
        assert_eq!(t.completed(100 * MS, 101 * MS), MS);
        t.restart(200 * MS);
        assert_eq!(
            t.completed(150 * MS, 207 * MS),
            7 * MS,
            "resubmitted at the reset"
        );
        assert_eq!(ms_between(5 * MS, MS), 0);
        assert_eq!(ms_between(0, u64::MAX), u32::MAX);
    }

    /// A fixed collection for iterator results (the crate has no `alloc`).
    mod heapless_vec {
        pub struct V(pub [u32; 10]);
        impl FromIterator<u32> for V {
            fn from_iter<I: IntoIterator<Item = u32>>(it: I) -> Self {
                let mut v = [0; 10];
                for (slot, x) in v.iter_mut().zip(it) {
                    *slot = x;
                }
                V(v)
            }
        }
    }
}
