//! The simulated KMD's interrupt bottom half, watchdog, engine reset and device loss, and the
//! device thread that runs the model. The decisions are `rules::recovery`'s (who is guilty, what
//! each queued job becomes, who a failed producer takes down with it), as in aigpu.ko. The
//! records are libumd log records (docs/logging.md): the facts aigpu.ko prints in its dmesg line
//! (`rules::report`) are their fields, with the simulated kernel's context id as `kmd_ctx`.

use super::gpu::{lock, Gpu, Job, Mmio, SimClock, State};
use super::physmem::SharedMem;
use rules::job::FenceWait;
use rules::lost::LossCause;
use rules::recovery::{self, Blame, WaitFate};
use rules::report::{HangFacts, QueueActivity};
use rules::{Ban, FaultInfo, FenceSlots};
use std::time::{Duration, Instant};
use uapi::regs;
use vgpu::model::{Device, Step};

type Dev = Device<SharedMem, SimClock>;

/// A job left its ring (retired or dropped): the file's and the context's in-flight counts; a
/// destroyed context goes with its last job (`rules::Context::job_left`).
fn job_gone(st: &mut State, job: &Job) {
    if let Some(c) = st.clients.get_mut(&job.file) {
        c.inflight = c.inflight.saturating_sub(1);
    }
    if st
        .contexts
        .get_mut(&job.view.ctx)
        .is_some_and(|c| c.state.job_left())
    {
        super::gpu::free_ctx(st, job.view.ctx);
    }
    for w in &job.deps {
        st.fence_slots.unwatch(w.slot);
    }
}

impl Gpu {
    /// Retires completed jobs: reads each ring's head and each context's fence from memory.
    pub(super) fn retire(&self, st: &mut State, d: &mut Dev) {
        let now = crate::error::detail::mono_ns();
        for qi in 0..st.queues.len() {
            let head = d.mmio_read32(regs::queue_base(qi) + regs::Q_HEAD);
            while st.queues[qi]
                .inflight
                .front()
                .is_some_and(|j| rules::ring::at_or_after(head, j.end))
            {
                if let Some(job) = st.queues[qi].inflight.pop_front() {
                    let ran = st.queues[qi].state.retired(job.submitted_ns, now);
                    if let Some(c) = st.contexts.get_mut(&job.view.ctx) {
                        c.state.recent.push(recovery::ms_between(0, ran));
                    }
                    job_gone(st, &job);
                }
            }
        }
        let fence_page = self.fence_page;
        for c in st.contexts.values_mut() {
            if let Some(v) = self
                .mem
                .read_u64(fence_page + 8 * c.state.fence_slot as u64)
            {
                c.state.fence_read(v);
            }
        }
    }

    pub(super) fn bottom_half(&self, status: u32) {
        let mut st = self.state();
        let mut d = lock(&self.dev);
        self.retire(&mut st, &mut d);
        if status & (regs::IRQ_FAULT | regs::IRQ_MEM_ERROR) != 0 {
            self.handle_fault(&mut st, &mut d, status);
        }
        drop(d);
        drop(st);
        self.notify();
    }

    /// A queue stopped on a fault: ban the guilty context with the fault, say it, reset the
    /// engine (everyone else's work is resubmitted).
    fn handle_fault(&self, st: &mut State, d: &mut Dev, status: u32) {
        let fs = d.mmio_read32(regs::FAULT_STATUS);
        if fs == regs::LOST_READ_VALUE {
            self.recover(st, d);
            return;
        }
        if fs & regs::FAULT_VALID == 0 {
            // Nothing latched: already handled by a reset, unless a queue still sits faulted (its
            // fault was not latched); then reset to get it going again (as aigpu.ko does).
            let stuck = (0..regs::NUM_QUEUES).any(|q| {
                d.mmio_read32(regs::queue_base(q) + regs::Q_STATE) == regs::QSTATE_FAULTED
            });
            if stuck {
                self.recover(st, d);
            }
            return;
        }
        let info = FaultInfo {
            kind: regs::fault_kind(fs),
            access: regs::fault_access(fs),
            va: d.mmio_read64(regs::FAULT_ADDR),
            offset: d.mmio_read32(regs::FAULT_OFFSET) as u64,
        };
        let job = d.mmio_read64(regs::FAULT_JOB);
        let queue = regs::fault_queue(fs) as usize;
        let blame = st.queues.get(queue).map_or(Blame::Nobody, |q| {
            recovery::blame(job, q.inflight.iter().map(|j| j.view))
        });
        st.counters.faults += 1;
        let mem_error = info.kind == regs::FAULT_BUS_ERROR || status & regs::IRQ_MEM_ERROR != 0;
        // `kmd_ctx`: the simulated kernel's context id, as in dmesg; the `ctx` field of a record
        // is always the libumd context id the caller knows (docs/logging.md).
        let class = rules::report::fault_class(info.kind);
        let layer = if mem_error { "hardware" } else { "application" };
        let (fault, access) = (
            regs::fault_kind_name(info.kind),
            regs::access_name(info.access),
        );
        let va = format_args!("{:#x}", info.va);
        // As aigpu.ko: an armed memory-error injection is taken by the first memory error (the
        // simulator has no page-fault injection).
        let injected =
            info.kind == regs::FAULT_BUS_ERROR && std::mem::take(&mut st.injected.mem_error);
        let (on, msg) = match blame {
            Blame::Guilty(g) => (Some(g), format!("GPU fault: kmd context {} banned", g.ctx)),
            Blame::Fetching(g) => (
                Some(g),
                format!(
                    "GPU fault while fetching a descriptor of kmd context {}: nobody banned, the job is resubmitted",
                    g.ctx
                ),
            ),
            Blame::Nobody => (None, "GPU fault on an unknown job".to_string()),
        };
        tracing::error!(
            device = self.index,
            kmd_ctx = on.map(|g| g.ctx),
            seqno = on.map(|g| g.seqno),
            job = on.map_or(job, |g| g.id),
            queue,
            fault,
            access,
            va,
            offset = info.offset,
            injected = rules::lead::injected_value(injected),
            class,
            layer,
            "{msg}"
        );
        if let Some(c) = blame.guilty().and_then(|g| st.contexts.get_mut(&g.ctx)) {
            c.state.guilty(Ban::Fault(info));
        }
        self.recover(st, d);
    }

    /// What the job-timeout record says of hung job `job` on `queue` at `now` (ns), as aigpu.ko's
    /// report does: how long it ran (the watchdog's clock), what the queue was doing (`Q_STATE`,
    /// `Q_WAIT_ADDR`, `Q_WAIT_VALUE`; a WAIT descriptor at the ring head is an in-fence wait), the
    /// packet offset, the timeout and its source, the context's recent run times.
    fn hang_facts(&self, st: &State, d: &mut Dev, queue: usize, job: u64, now: u64) -> HangFacts {
        let qb = regs::queue_base(queue);
        let head = d.mmio_read32(qb + regs::Q_HEAD);
        let q = st.queues.get(queue);
        let the_job = q.and_then(|q| q.inflight.iter().find(|j| j.view.id == job));
        let at_wait_desc = the_job.is_some_and(|j| {
            j.descs
                .get(head.wrapping_sub(j.start) as usize)
                .is_some_and(|x| x.kind == uapi::ring::DESC_WAIT)
        });
        HangFacts {
            ran_ms: u64::from(recovery::ms_between(
                q.map_or(now, |q| q.state.clock.since_ns()),
                now,
            )),
            activity: QueueActivity::from_regs(
                d.mmio_read32(qb + regs::Q_STATE),
                d.mmio_read64(qb + regs::Q_WAIT_ADDR),
                d.mmio_read64(qb + regs::Q_WAIT_VALUE),
                at_wait_desc,
            ),
            offset: d.mmio_read32(qb + regs::Q_CUR_OFFSET),
            timeout_ms: self.cfg.job_timeout_ms,
            timeout_source: self.cfg.job_timeout_source,
            recent: the_job
                .and_then(|j| st.contexts.get(&j.view.ctx))
                .map_or_else(Default::default, |c| c.state.recent),
        }
    }

    /// Busy sampling and hang detection: a job executing longer than the job timeout.
    pub(super) fn watchdog(&self) {
        let mut st = self.state();
        if st.lost {
            return;
        }
        let mut d = lock(&self.dev);
        let now = crate::error::detail::mono_ns();
        let timeout = self.job_timeout.as_nanos() as u64;
        let mut hung = None;
        for (qi, q) in st.queues.iter_mut().enumerate() {
            let busy = !q.inflight.is_empty();
            q.state.busy.sample(now, busy);
            let cur = if busy {
                d.mmio_read64(regs::queue_base(qi) + regs::Q_CUR_JOB)
            } else {
                0
            };
            if let Some(job) = q.state.clock.observe(busy, cur, now, timeout) {
                let guilty = q.inflight.iter().map(|j| j.view).find(|j| j.id == job);
                hung = Some((qi, job, guilty));
                break;
            }
        }
        let Some((queue, job, guilty)) = hung else {
            return;
        };
        // What the queue shows now, before anything retires or resets.
        let facts = self.hang_facts(&st, &mut d, queue, job, now);
        // Collect what did complete before declaring the rest lost.
        self.retire(&mut st, &mut d);
        st.counters.hangs += 1;
        // The fields of aigpu.ko's dmesg line (`rules::report::HangLine`), `kmd_ctx` for its
        // `ctx`; `recent_ms` as the line writes it.
        let (wait, wait_va, wait_pa, wait_value) = match facts.activity {
            QueueActivity::WaitMem { va, value } => {
                (Some("mem"), Some(format!("{va:#x}")), None, Some(value))
            }
            QueueActivity::WaitFence { pa, value } => {
                (Some("fence"), None, Some(format!("{pa:#x}")), Some(value))
            }
            _ => (None, None, None, None),
        };
        let mut recent_ms = String::new();
        let _ = facts.write_recent(&mut recent_ms);
        let (state, ran_ms, offset) = (facts.activity.state_name(), facts.ran_ms, facts.offset);
        let timeout_source = facts.timeout_source.name();
        let msg = match guilty {
            Some(g) => format!(
                "job timeout: kmd context {} hung the GPU; resetting the engine",
                g.ctx
            ),
            None => "job timeout on an unknown job; resetting the engine".to_string(),
        };
        tracing::error!(
            device = self.index,
            kmd_ctx = guilty.map(|g| g.ctx),
            seqno = guilty.map(|g| g.seqno),
            job,
            queue,
            ran_ms,
            state,
            wait,
            wait_va,
            wait_pa,
            wait_value,
            offset,
            timeout_ms = facts.timeout_ms,
            timeout_source,
            recent_ms,
            // The simulator has no hang injection (aigpu.ko's `inject_hang`): never injected.
            injected = rules::lead::injected_value(false),
            "{msg}"
        );
        if let Some(g) = guilty {
            if let Some(c) = st.contexts.get_mut(&g.ctx) {
                c.state.guilty(Ban::Hang);
            }
        }
        self.recover(&mut st, &mut d);
        drop(d);
        drop(st);
        self.notify();
    }

    /// Bans, until nothing changes, every context with a queued job that waits on a fence its
    /// producer will never signal (`rules::recovery::consumer_ban`), and says so per context.
    fn propagate_failures(&self, st: &mut State) {
        loop {
            let mut bans = Vec::new();
            for job in st.queues.iter().flat_map(|q| q.inflight.iter()) {
                let Some(consumer) = st.contexts.get(&job.view.ctx) else {
                    continue;
                };
                let found = job.deps.iter().find_map(
                    |&FenceWait {
                         ctx: p, value: v, ..
                     }| {
                        let producer = st.contexts.get(&p).map(|c| c.state.producer());
                        recovery::consumer_ban(consumer.state.ban, p, producer, v)
                            .map(|b| (p, v, b))
                    },
                );
                if let Some((p, v, b)) = found {
                    bans.push((job.view.ctx, job.view.seqno, p, v, b));
                }
            }
            if bans.is_empty() {
                return;
            }
            for (ctx, seqno, producer, producer_seqno, ban) in bans {
                let cause = match st.contexts.get(&producer).and_then(|c| c.state.ban) {
                    Some(b) => b,
                    None => continue,
                };
                let Some(c) = st.contexts.get_mut(&ctx) else {
                    continue;
                };
                if c.state.ban.is_some() {
                    continue;
                }
                c.state.ban = Some(ban);
                tracing::error!(
                    device = self.index,
                    kmd_ctx = ctx,
                    seqno,
                    dep_kmd_ctx = producer,
                    dep_seqno = producer_seqno,
                    cause = cause.name(),
                    "dependency failed: kmd context {ctx} banned; its job waits for kmd context {producer}, which failed"
                );
            }
        }
    }

    /// Engine reset (`rules::recovery`): bans the consumers of failed producers, drops banned
    /// contexts' work, resubmits the rest minus satisfied waits (marking those contexts
    /// innocent), or declares the device lost when the reset does not bring it back.
    pub(super) fn recover(&self, st: &mut State, d: &mut Dev) {
        st.counters.resets += 1;
        // Read before the reset: a device off the bus reads all ones already (`LossCause`).
        let id_before = d.mmio_read32(regs::ID);
        d.mmio_write32(regs::RESET, regs::RESET_ENGINE);
        if d.mmio_read32(regs::ID) != regs::ID_VALUE {
            self.declare_lost(st, LossCause::from_id_reads(id_before));
            return;
        }
        d.mmio_write32(regs::IRQ_ACK, regs::IRQ_ALL);
        self.program(d, st);
        self.propagate_failures(st);
        let (mut resubmitted, mut dropped) = (0u32, 0u32);
        for qi in 0..st.queues.len() {
            let jobs: Vec<Job> = st.queues[qi].inflight.drain(..).collect();
            st.queues[qi].state.reset(crate::error::detail::mono_ns());
            for mut job in jobs {
                let keep = st
                    .contexts
                    .get(&job.view.ctx)
                    .is_some_and(|c| c.state.ban.is_none());
                if !keep {
                    job_gone(st, &job);
                    dropped += 1;
                    continue;
                }
                if let Some(c) = st.contexts.get_mut(&job.view.ctx) {
                    c.state.resubmitted();
                }
                // Waits that are satisfied are left out; none fails here (propagation above
                // banned every job that had one).
                let mut k = 0;
                let (mut descs, mut deps) = (Vec::new(), Vec::new());
                for desc in job.descs.iter() {
                    if desc.kind == uapi::ring::DESC_WAIT {
                        let Some(&w) = job.deps.get(k) else { continue };
                        k += 1;
                        let producer = st.contexts.get(&w.ctx).map(|c| c.state.producer());
                        if recovery::wait_fate(w.ctx, producer, w.value) != WaitFate::Keep {
                            // Left out of the ring: it no longer reads the slot.
                            st.fence_slots.unwatch(w.slot);
                            continue;
                        }
                        deps.push(w);
                    }
                    descs.push(*desc);
                }
                job.descs = descs;
                job.deps = deps;
                (job.start, job.end) = self.write_ring(st, qi, &job.descs);
                st.queues[qi].inflight.push_back(job);
                resubmitted += 1;
            }
            rules::program::doorbell(&mut Mmio(d), qi, st.queues[qi].state.tail);
        }
        tracing::warn!(
            device = self.index,
            resubmitted,
            dropped,
            "engine reset done; innocent jobs resubmitted"
        );
    }

    /// The device did not come back: every call fails with `ENODEV` from now on, said once with
    /// the fields of aigpu.ko's line (`rules::lost::LostLine`: `cause`, `injected`). Jobs are
    /// dropped.
    fn declare_lost(&self, st: &mut State, cause: LossCause) {
        if !st.lost {
            let injected = match cause {
                LossCause::ResetFailed => std::mem::take(&mut st.injected.reset_failure),
                LossCause::OffBus => std::mem::take(&mut st.injected.off_bus),
            };
            tracing::error!(
                device = self.index,
                cause = cause.name(),
                injected = rules::lead::injected_value(injected),
                layer = "hardware",
                "device lost; every call will fail with UMD_ERR_DEVICE_LOST"
            );
        }
        st.lost = true;
        st.lost_cause = cause;
        // Every file open now saw it (they stay lost after a power cycle).
        for c in st.clients.values_mut() {
            c.lost = true;
        }
        for qi in 0..st.queues.len() {
            let jobs: Vec<Job> = st.queues[qi].inflight.drain(..).collect();
            for j in jobs {
                job_gone(st, &j);
            }
        }
    }
}

/// The device thread: steps the model, takes interrupts, runs the watchdog. Holds only a weak
/// reference so the GPU goes away with its last file.
pub(super) fn device_thread(gpu: std::sync::Weak<Gpu>) {
    let mut last_watchdog = Instant::now();
    loop {
        let Some(g) = gpu.upgrade() else { return };
        if g.stop.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        // Top half: step, then read and acknowledge the interrupt status under the device lock.
        let (step, status) = {
            let mut d = lock(&g.dev);
            let start = Instant::now();
            // A few packets per lock hold keeps register access responsive for submitters.
            let round = d.run_round(16, |_, _| false);
            let step = round.last;
            if round.steps > 0 {
                g.steps
                    .fetch_add(round.steps, std::sync::atomic::Ordering::Relaxed);
                let ns = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                g.busy_ns
                    .fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
            }
            let status = if d.irq_line() {
                let s = d.mmio_read32(regs::IRQ_STATUS);
                d.mmio_write32(regs::IRQ_ACK, s);
                s
            } else {
                0
            };
            (step, status)
        };
        if status != 0 {
            g.bottom_half(status);
        }
        if last_watchdog.elapsed() >= Duration::from_millis(rules::recovery::WD_PERIOD_MS.into()) {
            g.watchdog();
            last_watchdog = Instant::now();
        }
        if let Some(p) = &g.publisher {
            p.tick(&g);
        }
        let idle_wait = match step {
            Step::Progress => None,
            Step::Stalled => Some(Duration::from_micros(200)),
            Step::Idle => Some(Duration::from_millis(20)),
        };
        if let Some(t) = idle_wait {
            let (m, cv) = (&g.kick.0, &g.kick.1);
            let mut kicked = lock(m);
            if !*kicked {
                kicked = cv
                    .wait_timeout(kicked, t)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            *kicked = false;
        }
    }
}
