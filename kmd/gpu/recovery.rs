// SPDX-License-Identifier: GPL-2.0
//! Faults, hangs and recovery: the fault handler, the watchdog (busy sampling, device presence,
//! hang detection), engine reset with innocent resubmission and dependency failure, device loss,
//! and the root-only fault injections. Every decision is `rules::recovery`'s and every line
//! `rules::report`'s, the same as the simulator's.

use kernel::{prelude::*, sync::atomic::Relaxed};

use super::{Gpu, Sched};
use crate::{
    dump,
    hw::mono_ns,
    rules::{
        recovery::{self, Blame, WaitFate},
        lost::{LossCause, LostLine},
        report::{DependencyLine, FaultLine, HangFacts, HangLine, Owner, QueueActivity, ResetLine},
        Ban, FaultInfo, FenceSlots,
    },
    text::{Comm, Level, Text},
    tprint,
    uapi::{regs, ring},
};

impl Gpu {
    /// A queue stopped on a fault: ban the guilty context with the fault, log it, keep a crash
    /// dump, reset the engine (everyone else's work is resubmitted).
    pub(super) fn handle_fault(&self, st: &mut Sched, status: u32) -> Option<dump::Dump> {
        let fs = self.hw.read32(regs::FAULT_STATUS);
        if fs == regs::LOST_READ_VALUE {
            self.recover(st);
            return None;
        }
        if fs & regs::FAULT_VALID == 0 {
            // Nothing latched: already handled by a reset, unless a queue still sits faulted (its
            // fault was not latched); then reset to get it going again.
            let stuck = (0..regs::NUM_QUEUES)
                .any(|q| self.hw.read32(regs::queue_base(q) + regs::Q_STATE) == regs::QSTATE_FAULTED);
            if stuck {
                self.recover(st);
            }
            return None;
        }
        let info = FaultInfo {
            kind: regs::fault_kind(fs),
            access: regs::fault_access(fs),
            va: self.hw.read64(regs::FAULT_ADDR),
            offset: u64::from(self.hw.read32(regs::FAULT_OFFSET)),
        };
        let latched = self.hw.read64(regs::FAULT_JOB);
        let queue = regs::fault_queue(fs) as usize;
        // A descriptor-fetch fault latches job 0: it names the oldest job and bans nobody
        // (`rules::recovery::blame`).
        let blame = st
            .queues
            .get(queue)
            .map_or(Blame::Nobody, |q| recovery::blame(latched, q.jobs.iter().map(|j| j.view)));
        let job = blame.job().map_or(latched, |j| j.id);
        st.counters.faults += 1;
        let mem_error = info.kind == regs::FAULT_BUS_ERROR || status & regs::IRQ_MEM_ERROR != 0;
        let kind = if mem_error { "mem_error" } else { "page_fault" };
        // An armed injection is taken by the first event of its kind.
        let injected = if info.kind == regs::FAULT_BUS_ERROR {
            core::mem::take(&mut st.injected.mem_error)
        } else {
            let ours = st.injected.fault_job == Some(job);
            if ours {
                st.injected.fault_job = None;
            }
            ours
        };
        let d = dump::build(self, st, kind, queue, job, Some(info), None);
        let line = FaultLine {
            fault: info,
            queue,
            job,
            ctx: blame.job().map(|j| (j.ctx, Self::owner_of(st, j.ctx), blame.guilty().is_some())),
            injected,
        };
        let mut t = Text::new();
        tprint!(&mut t, "{}", line);
        self.log(Level::Err, &t);
        if let Some(c) = blame.guilty().and_then(|g| st.contexts.get_mut(&g.ctx)) {
            c.state.guilty(Ban::Fault(info));
        }
        self.recover(st);
        d
    }

    /// pid and command of the process that owns context `ctx`.
    pub(crate) fn owner(st: &Sched, ctx: u32) -> (i32, Comm) {
        st.contexts
            .get(&ctx)
            .and_then(|c| st.clients.get(&c.client))
            .map_or((0, Comm::default()), |k| (k.pid, k.comm))
    }

    /// [`Gpu::owner`] for the line formats of `rules::report`.
    pub(crate) fn owner_of(st: &Sched, ctx: u32) -> Owner<Comm> {
        let (pid, comm) = Self::owner(st, ctx);
        Owner { pid: pid.into(), comm }
    }

    /// The watchdog: busy sampling, device presence, hang detection. Returns whether to run
    /// again.
    pub(super) fn watchdog(&self) -> bool {
        if self.stopping() {
            return false;
        }
        let mut dump = None;
        let again;
        let changed;
        {
            let mut st = self.sched.lock();
            if st.lost {
                st.wd_armed = false;
                return false;
            }
            let events = |st: &Sched| (st.counters.faults, st.counters.hangs, st.counters.resets, st.lost);
            let before = events(&st);
            let mut retired = false;
            if self.hw.read32(regs::ID) != regs::ID_VALUE {
                // Off the bus: the reset cannot bring it back, and `recover` says so.
                self.recover(&mut st);
            } else {
                retired = self.retire(&mut st);
                // A stopped queue whose interrupt was not handled yet (normally the bottom half
                // is first): handle the fault here rather than let it pass for a hang.
                let faulted = (0..regs::NUM_QUEUES).any(|q| {
                    st.queues.get(q).is_some_and(|h| h.jobs.len() > 0)
                        && self.hw.read32(regs::queue_base(q) + regs::Q_STATE) == regs::QSTATE_FAULTED
                });
                dump = if faulted {
                    let raw = self.hw.read32(regs::IRQ_RAWSTAT);
                    self.handle_fault(&mut st, raw & (regs::IRQ_FAULT | regs::IRQ_MEM_ERROR))
                } else {
                    self.check_hang(&mut st)
                };
            }
            again = !st.lost && st.queues.iter().any(|q| q.jobs.len() > 0);
            st.wd_armed = again;
            changed = retired || dump.is_some() || events(&st) != before;
            if let Some(d) = dump.take() {
                dump::publish(self, d);
            }
        }
        // Only when something changed: sleepers are woken by the change that concerns them
        // (retirement, fault, hang, reset, loss), not every watchdog period (which would also
        // hide a missing notification elsewhere).
        if changed {
            self.changed.notify_all();
        }
        again
    }

    /// What the job-timeout report says of hung job `job` on `queue` at `now` (ns): how long it
    /// ran (the watchdog's clock), what the queue was doing (`Q_STATE`, `Q_WAIT_ADDR`,
    /// `Q_WAIT_VALUE`; a WAIT descriptor at the ring head is an in-fence wait), the packet offset,
    /// the timeout and its source, the context's recent run times.
    fn hang_facts(&self, st: &Sched, queue: usize, job: u64, now: u64) -> HangFacts {
        let qb = regs::queue_base(queue);
        let head = self.hw.read32(qb + regs::Q_HEAD);
        let q = st.queues.get(queue);
        let the_job = q.and_then(|q| q.jobs.iter().find(|j| j.view.id == job));
        let at_wait_desc = the_job.is_some_and(|j| {
            j.descs
                .get(head.wrapping_sub(j.start) as usize)
                .is_some_and(|d| d.kind == ring::DESC_WAIT)
        });
        HangFacts {
            ran_ms: u64::from(recovery::ms_between(q.map_or(now, |q| q.state.clock.since_ns()), now)),
            activity: QueueActivity::from_regs(
                self.hw.read32(qb + regs::Q_STATE),
                self.hw.read64(qb + regs::Q_WAIT_ADDR),
                self.hw.read64(qb + regs::Q_WAIT_VALUE),
                at_wait_desc,
            ),
            offset: self.hw.read32(qb + regs::Q_CUR_OFFSET),
            timeout_ms: u64::from(self.cfg.job_timeout_ms),
            timeout_source: self.cfg.job_timeout_source,
            recent: the_job
                .and_then(|j| st.contexts.get(&j.view.ctx))
                .map_or_else(Default::default, |c| c.state.recent),
        }
    }

    pub(super) fn check_hang(&self, st: &mut Sched) -> Option<dump::Dump> {
        let now = mono_ns();
        let timeout = self.timeout_ns();
        let mut hung = None;
        for qi in 0..st.queues.len() {
            let busy = st.queues.get(qi).is_some_and(|q| q.jobs.len() > 0);
            let cur = if busy { self.hw.read64(regs::queue_base(qi) + regs::Q_CUR_JOB) } else { 0 };
            let Some(q) = st.queues.get_mut(qi) else { continue };
            q.state.busy.sample(now, busy);
            if let Some(job) = q.state.clock.observe(busy, cur, now, timeout) {
                hung = hung.or(Some((qi, job)));
            }
        }
        let (queue, job) = hung?;
        st.counters.hangs += 1;
        let guilty = st
            .queues
            .get(queue)
            .and_then(|q| q.jobs.iter().map(|j| j.view).find(|j| j.id == job));
        let facts = self.hang_facts(st, queue, job, now);
        let injected = st.injected.hang_job == Some(job);
        if injected {
            st.injected.hang_job = None;
        }
        let d = dump::build(self, st, "hang", queue, job, None, Some(&facts));
        let line = HangLine {
            queue,
            job,
            guilty: guilty.map(|g| (g.ctx, g.seqno, Self::owner_of(st, g.ctx))),
            facts,
            injected,
        };
        let mut t = Text::new();
        tprint!(&mut t, "{}", line);
        self.log(Level::Err, &t);
        if let Some(c) = guilty.and_then(|g| st.contexts.get_mut(&g.ctx)) {
            c.state.guilty(Ban::Hang);
        }
        self.recover(st);
        d
    }

    /// Bans, until nothing changes, every context with a queued job that waits on a fence its
    /// producer will never signal (`rules::recovery::consumer_ban`), and says so per context.
    pub(super) fn propagate_failures(&self, st: &mut Sched) {
        loop {
            let mut found = None;
            'scan: for q in st.queues.iter() {
                for job in q.jobs.iter() {
                    let Some(consumer) = st.contexts.get(&job.view.ctx) else { continue };
                    for d in job.deps.iter() {
                        let producer = st.contexts.get(&d.ctx).map(|c| c.state.producer());
                        if let Some(ban) = recovery::consumer_ban(consumer.state.ban, d.ctx, producer, d.value) {
                            found = Some((job.view.ctx, job.view.seqno, *d, ban));
                            break 'scan;
                        }
                    }
                }
            }
            // One at a time (no allocation under the lock): each ban may make others.
            let Some((ctx, seqno, dep, ban)) = found else { return };
            let Some(cause) = st.contexts.get(&dep.ctx).and_then(|c| c.state.ban) else { return };
            let line = DependencyLine {
                ctx,
                seqno,
                owner: Self::owner_of(st, ctx),
                producer: dep.ctx,
                producer_seqno: dep.value,
                cause,
            };
            let mut t = Text::new();
            tprint!(&mut t, "{}", line);
            self.log(Level::Err, &t);
            match st.contexts.get_mut(&ctx) {
                Some(c) => c.state.ban = Some(ban),
                None => return,
            }
        }
    }

    /// Engine reset (`rules::recovery`): bans the consumers of failed producers, drops banned
    /// contexts' work, resubmits the rest from its saved descriptors minus satisfied waits
    /// (marking those contexts innocent), or declares the device lost when the reset does not
    /// bring it back.
    pub(super) fn recover(&self, st: &mut Sched) {
        st.counters.resets += 1;
        // Read before the reset: a device off the bus reads all ones already (`LossCause`).
        let id_before = self.hw.read32(regs::ID);
        self.hw.write32(regs::RESET, regs::RESET_ENGINE);
        if self.hw.read32(regs::ID) != regs::ID_VALUE {
            self.declare_lost(st, LossCause::from_id_reads(id_before));
            return;
        }
        self.hw.write32(regs::IRQ_ACK, regs::IRQ_ALL);
        self.program(st);
        self.propagate_failures(st);
        let (mut resubmitted, mut dropped) = (0u32, 0u32);
        for qi in 0..st.queues.len() {
            // Take the queue's jobs out, then put the innocent ones back from index 0.
            let n = st.queues.get(qi).map_or(0, |q| q.jobs.len());
            let mut jobs = KVec::with_capacity(n, GFP_KERNEL).unwrap_or_default();
            if let Some(q) = st.queues.get_mut(qi) {
                q.state.reset(mono_ns());
            }
            while let Some(j) = st.queues.get_mut(qi).and_then(|q| q.jobs.pop_front()) {
                if let Err(e) = jobs.push_within_capacity(j) {
                    // No memory to hold it for resubmission: it is lost with its context (whose
                    // waits then report CTX_LOST).
                    let lost_job = e.0;
                    if let Some(c) = st.contexts.get_mut(&lost_job.view.ctx) {
                        c.state.ban.get_or_insert(Ban::Dropped);
                    }
                    Self::job_gone(st, &lost_job);
                    dropped += 1;
                }
            }
            for mut job in jobs.into_iter() {
                let keep = st.contexts.get(&job.view.ctx).is_some_and(|c| c.state.ban.is_none());
                if !keep {
                    Self::job_gone(st, &job);
                    dropped += 1;
                    continue;
                }
                if let Some(c) = st.contexts.get_mut(&job.view.ctx) {
                    c.state.resubmitted();
                }
                // Waits already satisfied are left out (`rules::recovery::wait_fate`); none fails
                // here: `propagate_failures` banned every job that had one.
                let mut k = 0;
                let mut keep_descs = KVec::new();
                let mut keep_deps = KVec::new();
                let mut unwatch = KVec::new();
                let mut ok = true;
                for d in job.descs.iter() {
                    if d.kind == ring::DESC_WAIT {
                        let Some(&dep) = job.deps.get(k) else { continue };
                        k += 1;
                        let producer = st.contexts.get(&dep.ctx).map(|c| c.state.producer());
                        if recovery::wait_fate(dep.ctx, producer, dep.value) != WaitFate::Keep {
                            ok &= unwatch.push(dep.slot, GFP_KERNEL).is_ok();
                            continue;
                        }
                        ok &= keep_deps.push(dep, GFP_KERNEL).is_ok();
                    }
                    ok &= keep_descs.push(*d, GFP_KERNEL).is_ok();
                }
                if ok {
                    // The producer may be gone already (freed earlier in this recovery): its slot
                    // is then orphaned and this was its last waiter.
                    for s in unwatch.iter() {
                        st.fence_slots.unwatch(*s);
                    }
                    job.descs = keep_descs;
                    job.deps = keep_deps;
                }
                let (start, end) = self.write_ring(st, qi, &job.descs);
                job.start = start;
                job.end = end;
                if let Some(q) = st.queues.get_mut(qi) {
                    if let Err(j) = q.jobs.push_back(job) {
                        Self::job_gone(st, &j);
                        continue;
                    }
                }
                resubmitted += 1;
            }
            let tail = st.queues.get(qi).map_or(0, |q| q.state.tail);
            self.ring_doorbell(qi, tail);
        }
        let mut t = Text::new();
        tprint!(&mut t, "{}", ResetLine { resubmitted, dropped });
        self.log(Level::Warn, &t);
    }

    /// The device did not come back: every waiter wakes with `ENODEV`, every ioctl fails fast,
    /// said once in the log, with why (`cause`) and whether an injection did it. Jobs are
    /// dropped.
    pub(super) fn declare_lost(&self, st: &mut Sched, cause: LossCause) {
        if !st.lost {
            let injected = match cause {
                LossCause::ResetFailed => core::mem::take(&mut st.injected.reset_failure),
                LossCause::OffBus => core::mem::take(&mut st.injected.off_bus),
            };
            st.lost_cause = cause;
            let mut t = Text::new();
            tprint!(&mut t, "{}", LostLine { cause, injected });
            self.log(Level::Err, &t);
            // Before the jobs go: the dump names the guilty context and the ones whose work is
            // dropped.
            crate::wedged::device_lost(self, st);
        }
        st.lost = true;
        for (_, c) in st.clients.iter() {
            c.stats.lost.store(true, Relaxed);
        }
        for qi in 0..st.queues.len() {
            while let Some(j) = st.queues.get_mut(qi).and_then(|q| q.jobs.pop_front()) {
                Self::job_gone(st, &j);
            }
        }
    }


    // ---- fault injection (root-only debugfs files) ----

    // Each marks its injection armed before the device sees it, so the event's line says
    // `injected=1`.

    /// `inject_mem_error`.
    pub(crate) fn inject_mem_error(&self) {
        self.sched.lock().injected.mem_error = true;
        self.hw.inject_bus_error();
    }

    /// `inject_reset_failure`.
    pub(crate) fn inject_reset_failure(&self) {
        self.sched.lock().injected.reset_failure = true;
        self.hw.inject_reset_failure();
    }

    /// `inject_fall_off_bus`: the device goes away now; noticed at once.
    pub(crate) fn inject_fall_off_bus(&self) {
        self.sched.lock().injected.off_bus = true;
        self.hw.fall_off_bus();
        {
            let mut st = self.sched.lock();
            if !st.lost {
                self.recover(&mut st);
            }
        }
        self.changed.notify_all();
    }

    /// `inject_hang` / `inject_page_fault`: the next job runs a HANG (whatever `hang_debug`
    /// says) or reads an unmapped address first.
    pub(crate) fn inject_job(&self, hang: bool) {
        let mut st = self.sched.lock();
        if hang {
            st.inject_hang = true;
            self.hw.write32(regs::DEBUG_CTRL, regs::DEBUG_CTRL_HANG);
        } else {
            st.inject_fault = true;
        }
    }
}
