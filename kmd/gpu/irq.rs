// SPDX-License-Identifier: GPL-2.0
//! The interrupt: the top half (hard-IRQ context), the bottom half (a work item), and retirement
//! of what the device completed, which is lazy (see the top half).

use kernel::{
    bindings,
    sync::{
        atomic::{Acquire, Relaxed},
        Arc, ArcBorrow, MutexGuard,
    },
    workqueue,
};

use super::{Gpu, Sched};
use crate::{
    dump,
    hw::{mono_ns, HasHw, Hw, IrqHandler},
    rules,
    uapi::regs,
};

impl HasHw for Gpu {
    fn hw(&self) -> &Hw {
        &self.hw
    }
}

impl IrqHandler for Gpu {
    /// The top half, in hard-IRQ context (connected by `Gpu::start`).
    fn handle(this: ArcBorrow<'_, Gpu>) {
        top_half(this)
    }
}

/// The interrupt handler (top half), in hard-IRQ context: read and acknowledge the status,
/// remember the causes, queue the bottom half.
fn top_half(this: ArcBorrow<'_, Gpu>) {
    let gpu: &Gpu = &this;
    let mut all = 0u32;
    for _ in 0..16 {
        let s = gpu.hw.read32(regs::IRQ_STATUS);
        if s == 0 || s == regs::LOST_READ_VALUE {
            break;
        }
        gpu.hw.write32(regs::IRQ_ACK, s);
        all |= s;
    }
    if all == 0 || gpu.stopping.load(Relaxed) {
        return;
    }
    gpu.irqs.fetch_add(1, Relaxed);
    let mut cur = gpu.irq_pending.load(Relaxed);
    while let Err(seen) = gpu.irq_pending.cmpxchg(cur, cur | all, Relaxed) {
        cur = seen;
    }
    // Wake the waiters now: they retire what they wait for themselves. A slot holds a task that
    // is inside WAIT (it clears the slot before leaving); inside this RCU read-side section the
    // task_struct cannot be freed even if the task leaves and exits meanwhile (the rcuwait
    // pattern), and a spurious wake-up of a task sleeping elsewhere is harmless.
    let (mut registered, mut woke) = (false, false);
    {
        let _rcu = kernel::sync::rcu::read_lock();
        for w in gpu.fast_waiters.iter() {
            let t = w.load(Acquire);
            if t != 0 {
                registered = true;
                // SAFETY: see above.
                woke |= unsafe { bindings::wake_up_process(t as *mut bindings::task_struct) } != 0;
            }
        }
    }
    gpu.last_irq_ns.store(mono_ns(), Relaxed);
    // Completions alone need no bottom half unless someone sleeps without being woken here
    // (retirement is lazy, as in production drivers: it frees bookkeeping, while a waiter
    // learns of its fence from the device). Scheduling the bottom half costs a kworker wake-up
    // and two context switches per job on the round-trip path.
    // - A waiter was asleep and is now woken: it retires everything the device completed (not
    //   only its own fence) and notifies `changed` before anything else (`Gpu::wait`).
    // - Nobody waits at all: whoever looks next retires (a WAIT, CTX_STATE, a submit that finds
    //   its ring full, a file being closed), and the watchdog does within `WD_PERIOD_MS` while
    //   work is queued. A sleeper that comes later retires before it sleeps (`register_waiter`,
    //   `sleep_on_changed`: a full barrier, then a look at the device; this side read the slots
    //   and the count after acknowledging the interrupt, a full barrier too).
    // A registered waiter that was running may not have gone to sleep yet (a wake-up this side
    // cannot deliver), other sleepers on `changed` are not known by name, and faults, memory
    // errors and resets need the bottom half: those still queue it.
    if all & !(regs::IRQ_JOB_DONE_ALL | regs::IRQ_FENCE) == 0 {
        if woke {
            gpu.irqs_direct.fetch_add(1, Relaxed);
            return;
        }
        if !registered && gpu.sleepers.load(Relaxed) == 0 {
            gpu.irqs_lazy.fetch_add(1, Relaxed);
            return;
        }
    }
    let arc: Arc<Gpu> = this.into();
    // Already queued: that run will see these causes too.
    let _ = workqueue::system_highpri().enqueue::<Arc<Gpu>, 0>(arc);
}

impl Gpu {
    /// Retires what the device completed: jobs from each ring's head, fences from the page.
    /// Returns whether anything was retired: the caller notifies `changed` then (the bottom
    /// half always does, the watchdog when anything changed, the others through
    /// [`Gpu::retire_and_notify`]).
    pub(super) fn retire(&self, st: &mut Sched) -> bool {
        if st.lost {
            return false;
        }
        let now = mono_ns();
        // A job's end for busy time: the interrupt that reported it, when retirement comes
        // later (it can lag by a watchdog period); its retirement time if that interrupt has
        // not been handled yet (a WAIT that looked at the device first).
        let irq = self.last_irq_ns.load(Relaxed);
        let mut any = false;
        for qi in 0..st.queues.len() {
            // An idle queue has nothing to retire: no register read (a WAIT does this per
            // wake-up, and most queues are idle).
            if st.queues.get(qi).is_none_or(|q| q.jobs.len() == 0) {
                continue;
            }
            let head = self.hw.read32(regs::queue_base(qi) + regs::Q_HEAD);
            if head == regs::LOST_READ_VALUE && self.hw.read32(regs::ID) != regs::ID_VALUE {
                return any;
            }
            while let Some(q) = st.queues.get_mut(qi) {
                if !q.jobs.front().is_some_and(|j| rules::ring::at_or_after(head, j.end)) {
                    break;
                }
                let Some(job) = q.jobs.pop_front() else { break };
                any = true;
                let end = if irq >= job.submitted_ns { irq.min(now) } else { now };
                // From the job's start on the queue (`rules::recovery::RunTimes`).
                let busy = q.state.retired(job.submitted_ns, end);
                if let Some(c) = st.clients.get_mut(&job.file) {
                    c.busy_ns += busy;
                }
                if let Some(c) = st.contexts.get_mut(&job.view.ctx) {
                    c.state.recent.push(rules::recovery::ms_between(0, busy));
                }
                Self::job_gone(st, &job);
            }
        }
        for (_, c) in st.contexts.iter_mut() {
            let c = &mut c.state;
            if c.ban.is_some() || c.completed >= c.submitted {
                continue; // nothing its fence could tell (`Context::fence_read`): no bus read
            }
            if let Some(v) = self.read_fence(c.fence_slot) {
                any |= c.fence_read(v);
            }
        }
        any
    }

    /// [`Gpu::retire`] outside the bottom half and the watchdog: whoever retires tells the
    /// other sleepers on `changed` (the bottom half may not run for these completions: see the
    /// top half).
    pub(super) fn retire_and_notify(&self, st: &mut Sched) -> bool {
        let any = self.retire(st);
        if any {
            self.changed.notify_all();
        }
        any
    }

    /// The scheduler state with everything the device completed retired: what a reader that
    /// reports it (debugfs) must see, as retirement is otherwise lazy (see the top half).
    pub(crate) fn sched_retired(&self) -> MutexGuard<'_, Sched> {
        let mut st = self.sched.lock();
        self.retire_and_notify(&mut st);
        st
    }

    pub(super) fn bottom_half(&self) {
        if self.stopping() {
            return;
        }
        let status = self.irq_pending.xchg(0, Relaxed);
        let mut dump = None;
        {
            let mut st = self.sched.lock();
            if st.lost {
                return;
            }
            self.retire(&mut st);
            if status & (regs::IRQ_FAULT | regs::IRQ_MEM_ERROR) != 0 {
                dump = self.handle_fault(&mut st, status);
            }
            // Published before anyone can see the ban (the scheduler lock is still held).
            if let Some(d) = dump.take() {
                dump::publish(self, d);
            }
        }
        self.changed.notify_all();
    }
}
