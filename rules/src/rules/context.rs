//! A context as both drivers keep it: its queue, fence slot and timeline, its ban and reset
//! status, and its life from CTX_CREATE until its last job has left the rings.
//!
//! aigpu.ko (`kmd/gpu/mod.rs`, `Ctx`) and the simulator (`umd/src/backend/sim/gpu.rs`, `Ctx`)
//! each hold one [`Context`] per context, next to what is only theirs: the owning file (the key
//! of each driver's own table of files), and nothing else. Every change of this state that the
//! two drivers make goes through a method here, so that the same event (a job queued, a fence
//! value read, a ban, a resubmission, a destroy) leaves the same state on both.
//!
//! A destroyed context whose jobs are still in a ring stays (`destroyed`), invisible to ioctls
//! ([`Context::live`]), until its last job leaves the ring: until then the device may still
//! write its fence slot, and a reset resubmits its jobs like any innocent context's (docs/kmd.md,
//! "Submission, fences and waits", CTX_DESTROY). Freeing it earlier would hand its fence slot to
//! a new context while the old jobs can still write it; for the same reason a slot is not handed
//! out while a queued `WAIT` of another context reads it ([`FenceSlots`]).

use super::fence::{self, CtxView, FaultInfo, Producer};
use super::recovery::RecentJobs;
use super::report::{ContextLine, Owner};
use super::{Ban, Refusal};
use crate::uapi::ioctl::{CtxState, RESET_GUILTY, RESET_INNOCENT, RESET_NONE};

/// One context's driver state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    /// The hardware queue its jobs go to (`super::queue::choose`).
    pub queue: usize,
    /// `PRIORITY_*`.
    pub priority: u32,
    /// Its u64 in the fence page, written by the device with each job's seqno.
    pub fence_slot: u32,
    /// Last submitted seqno.
    pub submitted: u64,
    /// Last completed seqno (what its fence said, while it was not banned).
    pub completed: u64,
    /// `RESET_*`: guilty of a fault or hang, innocent victim of a reset, or neither.
    pub reset_status: u32,
    /// Why it is banned (it never runs again), once it is.
    pub ban: Option<Ban>,
    /// CTX_DESTROY is waiting for its work: a WAIT on it returns at once (`EINVAL` +
    /// `CTX_INVALID`, [`fence::wait_done`]), so no thread stays asleep on a context another one
    /// tears down.
    pub closing: bool,
    /// Destroyed by user space while jobs of it were still in a ring (module docs).
    pub destroyed: bool,
    /// Jobs of it in a ring.
    pub inflight: u32,
    /// Run times of its last completed jobs (the job-timeout report's `recent_ms`).
    pub recent: RecentJobs,
}

impl Context {
    /// A new context on `queue` with fence slot `fence_slot` (whose value the driver sets to 0).
    pub const fn new(queue: usize, priority: u32, fence_slot: u32) -> Self {
        Self {
            queue,
            priority,
            fence_slot,
            submitted: 0,
            completed: 0,
            reset_status: RESET_NONE,
            ban: None,
            closing: false,
            destroyed: false,
            inflight: 0,
            recent: RecentJobs::new(),
        }
    }

    /// Not destroyed: visible to ioctls and to in-fences.
    pub const fn live(&self) -> bool {
        !self.destroyed
    }

    /// What an in-fence on it, or a `WAIT` descriptor on its fence, sees.
    pub const fn producer(&self) -> Producer {
        Producer {
            submitted: self.submitted,
            completed: self.completed,
            ban: self.ban,
        }
    }

    /// Banned for a hang (job timeout).
    pub fn hung(&self) -> bool {
        self.ban == Some(Ban::Hang)
    }

    /// The fault that banned it.
    pub const fn fault(&self) -> Option<FaultInfo> {
        match self.ban {
            Some(Ban::Fault(f)) => Some(f),
            _ => None,
        }
    }

    /// The WAIT rule on its `seqno` ([`fence::wait_done`]).
    pub fn wait_done(&self, seqno: u64) -> Result<bool, Refusal> {
        fence::wait_done(
            seqno,
            self.submitted,
            self.completed,
            self.closing,
            self.ban,
        )
    }

    /// The CTX_STATE reply for it as context `id`.
    pub fn ctx_state(&self, id: u32) -> CtxState {
        fence::ctx_state(
            id,
            CtxView {
                reset_status: self.reset_status,
                ban: self.ban,
                submitted: self.submitted,
                completed: self.completed,
            },
        )
    }

    /// The seqno its next job gets.
    pub const fn next_seqno(&self) -> u64 {
        self.submitted.wrapping_add(1)
    }

    /// A job with `seqno` was written into its ring.
    pub fn queued(&mut self, seqno: u64) {
        self.submitted = seqno;
        self.inflight = self.inflight.saturating_add(1);
    }

    /// Its fence slot reads `value`: completed up to there, if that is one of its submitted
    /// seqnos and it is not banned (a banned context's fence no longer means completion).
    /// Returns whether `completed` moved.
    pub fn fence_read(&mut self, value: u64) -> bool {
        if self.ban.is_some() || value <= self.completed || value > self.submitted {
            return false;
        }
        self.completed = value;
        true
    }

    /// One of its jobs left its ring (retired, or dropped by a reset or a loss). True when it
    /// is destroyed and that was its last job: the driver frees it (and its fence slot) now.
    pub fn job_left(&mut self) -> bool {
        self.inflight = self.inflight.saturating_sub(1);
        self.destroyed && self.inflight == 0
    }

    /// CTX_DESTROY may stop waiting for its work: nothing of it is in a ring, or it is banned
    /// (its jobs are dropped, or will be at the next reset).
    pub const fn settled(&self) -> bool {
        self.inflight == 0 || self.ban.is_some()
    }

    /// Destroyed by user space (CTX_DESTROY, file close). True when nothing of it is in a ring:
    /// the driver frees it now; otherwise it stays until [`Context::job_left`] says so.
    pub fn destroy(&mut self) -> bool {
        self.destroyed = true;
        self.inflight == 0
    }

    /// One of its jobs faulted or hung: banned, guilty.
    pub fn guilty(&mut self, ban: Ban) {
        self.ban = Some(ban);
        self.reset_status = RESET_GUILTY;
    }

    /// Its queued work was resubmitted after a reset it did not cause: innocent, unless it was
    /// guilty of an earlier one.
    pub fn resubmitted(&mut self) {
        if self.reset_status == RESET_NONE {
            self.reset_status = RESET_INNOCENT;
        }
    }

    /// Its debugfs `contexts` line as context `id` of file `client`, whose process is `owner`.
    pub const fn line<C>(&self, id: u32, client: u64, owner: Owner<C>) -> ContextLine<C> {
        ContextLine {
            id,
            client,
            owner,
            queue: self.queue,
            priority: self.priority,
            submitted: self.submitted,
            completed: self.completed,
            reset_status: self.reset_status,
            ban: self.ban,
            destroyed: self.destroyed,
        }
    }
}

/// One fence slot (a u64 of the fence page) as the driver hands it out: whether a context owns
/// it, and how many `WAIT` descriptors in a ring read it. A slot is handed out again only when it
/// has neither: a destroyed context's jobs may still write it (it stays owned until the context
/// is freed, [`Context::job_left`]), and a queued `WAIT` of another context may still read it
/// (the new owner sets it to 0, on which that `WAIT` would stall, or which a later job of the new
/// owner would satisfy for the wrong producer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FenceSlot {
    owned: bool,
    watchers: u32,
}

/// The fence slots of a device (`super::ring::FENCE_SLOTS` of them), in the driver's own
/// container.
pub trait FenceSlots {
    /// A slot with no owner and no watcher, now owned (the lowest such); `None`: every slot is
    /// in use (`DEVICE_CTX_LIMIT`).
    fn take_free(&mut self) -> Option<u32>;
    /// Its context was freed; the slot is free once no `WAIT` reads it.
    fn release(&mut self, slot: u32);
    /// A `WAIT` descriptor reading it was written into a ring.
    fn watch(&mut self, slot: u32);
    /// Such a `WAIT` left its ring (its job retired or was dropped, or a reset left the
    /// satisfied `WAIT` out).
    fn unwatch(&mut self, slot: u32);
}

impl FenceSlots for [FenceSlot] {
    fn take_free(&mut self) -> Option<u32> {
        let (i, s) = self
            .iter_mut()
            .enumerate()
            .find(|(_, s)| !s.owned && s.watchers == 0)?;
        s.owned = true;
        u32::try_from(i).ok()
    }

    fn release(&mut self, slot: u32) {
        if let Some(s) = self.get_mut(slot as usize) {
            s.owned = false;
        }
    }

    fn watch(&mut self, slot: u32) {
        if let Some(s) = self.get_mut(slot as usize) {
            s.watchers = s.watchers.saturating_add(1);
        }
    }

    fn unwatch(&mut self, slot: u32) {
        if let Some(s) = self.get_mut(slot as usize) {
            s.watchers = s.watchers.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uapi::ioctl::{BAN_FAULT, BAN_HANG, PRIORITY_LOW, PRIORITY_NORMAL};
    use crate::uapi::reason as r;
    use core::fmt::{self, Write};

    struct Buf([u8; 256], usize);
    impl Write for Buf {
        fn write_str(&mut self, s: &str) -> fmt::Result {
            let end = self.1 + s.len();
            self.0
                .get_mut(self.1..end)
                .ok_or(fmt::Error)?
                .copy_from_slice(s.as_bytes());
            self.1 = end;
            Ok(())
        }
    }
    fn line_text(c: &Context) -> Buf {
        let mut b = Buf([0; 256], 0);
        let owner = Owner {
            pid: 41,
            comm: "py",
        };
        write!(b, "{}", c.line(7, 3, owner)).unwrap();
        b
    }
    fn text(b: &Buf) -> &str {
        core::str::from_utf8(&b.0[..b.1]).unwrap()
    }

    #[test]
    fn a_new_context_has_an_empty_timeline() {
        let c = Context::new(3, PRIORITY_LOW, 12);
        assert_eq!((c.queue, c.priority, c.fence_slot), (3, PRIORITY_LOW, 12));
        assert_eq!((c.submitted, c.completed, c.inflight), (0, 0, 0));
        assert_eq!(c.reset_status, RESET_NONE);
        assert_eq!(c.ban, None);
        assert!(c.live() && !c.closing && c.recent.is_empty());
        assert_eq!(c.next_seqno(), 1);
    }

    #[test]
    fn the_fence_completes_only_submitted_seqnos_of_an_unbanned_context() {
        let mut c = Context::new(1, PRIORITY_NORMAL, 0);
        c.queued(1);
        c.queued(2);
        assert_eq!((c.submitted, c.inflight, c.next_seqno()), (2, 2, 3));
        assert!(!c.fence_read(3), "never submitted");
        assert!(c.fence_read(1));
        assert!(!c.fence_read(1), "no progress");
        assert!(!c.fence_read(0), "never backwards");
        assert_eq!(c.completed, 1);
        c.guilty(Ban::Hang);
        assert!(
            !c.fence_read(2),
            "banned: its fence no longer means completion"
        );
        assert_eq!(c.completed, 1);
        assert_eq!(
            c.producer(),
            Producer {
                submitted: 2,
                completed: 1,
                ban: Some(Ban::Hang)
            }
        );
    }

    #[test]
    fn guilty_and_innocent() {
        let f = FaultInfo {
            kind: 1,
            access: 0,
            va: 0x4000,
            offset: 8,
        };
        let mut c = Context::new(1, PRIORITY_NORMAL, 0);
        c.resubmitted();
        assert_eq!(c.reset_status, RESET_INNOCENT);
        c.guilty(Ban::Fault(f));
        assert_eq!(
            (c.reset_status, c.fault(), c.hung()),
            (RESET_GUILTY, Some(f), false)
        );
        c.resubmitted();
        assert_eq!(c.reset_status, RESET_GUILTY, "guilty stays guilty");
        let s = c.ctx_state(9);
        assert_eq!(
            (s.ctx_id, s.ban, s.fault_va, s.fault_offset, s.hung),
            (9, BAN_FAULT, 0x4000, 8, 0)
        );
        let mut h = Context::new(1, PRIORITY_NORMAL, 0);
        h.guilty(Ban::Hang);
        assert!(h.hung());
        assert_eq!((h.ctx_state(2).ban, h.ctx_state(2).hung), (BAN_HANG, 1));
    }

    #[test]
    fn waits_follow_the_wait_rule() {
        let mut c = Context::new(1, PRIORITY_NORMAL, 0);
        c.queued(1);
        c.queued(2);
        c.fence_read(1);
        assert_eq!(c.wait_done(1), Ok(true));
        assert_eq!(c.wait_done(2), Ok(false));
        assert_eq!(c.wait_done(3), Err(Refusal::new(r::FENCE_NOT_SUBMITTED)));
        c.closing = true;
        assert_eq!(c.wait_done(2), Err(Refusal::new(r::CTX_INVALID)));
    }

    #[test]
    fn a_destroyed_context_stays_until_its_last_job_left_the_ring() {
        let mut c = Context::new(1, PRIORITY_NORMAL, 0);
        c.queued(1);
        c.queued(2);
        assert!(!c.settled());
        assert!(!c.destroy(), "two jobs in a ring");
        assert!(!c.live());
        assert!(!c.job_left());
        assert!(c.job_left(), "the last one: free it now");
        let mut idle = Context::new(1, PRIORITY_NORMAL, 0);
        assert!(idle.settled());
        assert!(idle.destroy(), "nothing in a ring: free it now");
        let mut banned = Context::new(1, PRIORITY_NORMAL, 0);
        banned.queued(1);
        banned.guilty(Ban::Dropped);
        assert!(banned.settled());
        let mut live = Context::new(1, PRIORITY_NORMAL, 0);
        live.queued(1);
        assert!(
            !live.job_left(),
            "a live context is freed only by a destroy"
        );
    }

    #[test]
    fn a_fence_slot_is_handed_out_again_only_without_owner_and_watchers() {
        let mut slots = [FenceSlot::default(); 3];
        let slots = &mut slots[..];
        assert_eq!(slots.take_free(), Some(0));
        assert_eq!(slots.take_free(), Some(1));
        slots.watch(0);
        slots.watch(0);
        slots.release(0);
        assert_eq!(slots.take_free(), Some(2), "0 is still read by two WAITs");
        assert_eq!(slots.take_free(), None);
        slots.unwatch(0);
        assert_eq!(slots.take_free(), None);
        slots.unwatch(0);
        assert_eq!(slots.take_free(), Some(0), "its last WAIT left the ring");
        slots.watch(1);
        slots.unwatch(1);
        assert_eq!(slots.take_free(), None, "1 is still owned");
        slots.release(1);
        assert_eq!(slots.take_free(), Some(1));
        slots.release(7);
        slots.watch(7);
        slots.unwatch(7);
        assert_eq!(
            slots.take_free(),
            None,
            "an out-of-range slot changes nothing"
        );
    }

    #[test]
    fn its_debugfs_line() {
        let mut c = Context::new(2, PRIORITY_NORMAL, 5);
        c.queued(1);
        c.queued(2);
        c.fence_read(1);
        assert_eq!(
            text(&line_text(&c)),
            "ctx=7 client=3 pid=41 comm=py queue=2 prio=normal submitted=2 completed=1 reset=none hung=0"
        );
        c.guilty(Ban::Hang);
        c.destroy();
        assert_eq!(
            text(&line_text(&c)),
            "ctx=7 client=3 pid=41 comm=py queue=2 prio=normal submitted=2 completed=1 reset=guilty hung=1 ban=hang destroyed=1"
        );
    }
}
