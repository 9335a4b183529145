// SPDX-License-Identifier: GPL-2.0
//! Open files ("clients") and their contexts: attach / detach, CTX_CREATE, CTX_DESTROY,
//! CTX_STATE, and the bookkeeping of a job leaving its ring (fence slots, zombie contexts).

use kernel::{
    prelude::*,
    sync::{atomic::Relaxed, Arc, CondVarTimeoutResult, Mutex},
    time::{delay::fsleep, Delta},
};

use super::{ns_to_jiffies, Client, ClientStats, Ctx, Gpu, Job, Sched, USER_SLOTS};
use crate::{
    hw::mono_ns,
    ioctl::{fail, Fail},
    rules::{
        lost::{power_cycles_at_open, ReinitLine},
        Ban, Context, FenceSlots, Refusal,
    },
    text::{Comm, Level, Text},
    tprint,
    uapi::{
        ioctl::{self as u},
        reason as r, regs,
    },
};

/// The refusal of everything on a lost device.
pub(super) const LOST: Refusal = Refusal::new(r::DEVICE_LOST);

impl Gpu {
    // ---- clients (open files) ----

    /// Registers an open file; returns its client id. A lost device that no file uses any more
    /// (no context left: every user destroyed its contexts or closed its file) is power-cycled
    /// first, as a remove and rescan of real hardware would, so a fresh open gets a working
    /// device. Files that saw the loss stay lost (`ClientStats::lost`); a file opened while the
    /// device is lost and still in use is lost from the start.
    pub(crate) fn attach(
        &self,
        stats: Arc<ClientStats>,
        vm: Arc<Mutex<crate::vm::Vm>>,
    ) -> Result<u64> {
        let mut st = self.sched.lock();
        if power_cycles_at_open(st.lost, st.contexts.values().map(|c| &c.state)) {
            self.hw.power_cycle();
            let now = mono_ns();
            for q in st.queues.iter_mut() {
                q.state.reset(now);
            }
            st.lost = false;
            // A fresh device model: an injection armed on the old one (and not seen) is gone.
            st.injected = Default::default();
            st.slots = [None; USER_SLOTS];
            for (_, c) in st.clients.iter_mut() {
                c.slot = None;
            }
            self.program(&st);
            let mut t = Text::new();
            tprint!(&mut t, "{}", ReinitLine { lost_cause: st.lost_cause });
            self.log(Level::Warn, &t);
        }
        if st.lost {
            stats.lost.store(true, Relaxed);
        }
        let id = st.next_client;
        st.next_client += 1;
        let client = Client {
            pid: crate::text::current_tgid(),
            comm: Comm::current(),
            stats,
            vm,
            jobs: 0,
            busy_ns: 0,
            inflight: 0,
            slot: None,
            pt_root: 0,
        };
        st.clients.try_create_and_insert(id, client, GFP_KERNEL)?;
        Ok(id)
    }

    /// Unregisters an open file: waits (bounded by the job timeout) for its jobs, cancels what is
    /// left with an engine reset, destroys its contexts and frees its address-space slot. Called
    /// before the file's address space is torn down.
    pub(crate) fn detach(&self, client: u64) {
        let deadline = mono_ns() + 2 * self.timeout_ns() + 1_000_000_000;
        loop {
            {
                let mut st = self.sched.lock();
                // Completions nobody waited for are retired lazily: look at the device.
                self.retire_and_notify(&mut st);
                let busy = st.clients.get(&client).map_or(0, |c| c.inflight);
                if busy == 0 || st.lost || mono_ns() >= deadline {
                    break;
                }
            }
            // Uninterruptible: a process being killed closes its files here and must not spin.
            fsleep(Delta::from_millis(5));
        }
        let mut st = self.sched.lock();
        if st.clients.get(&client).is_some_and(|c| c.inflight > 0) && !st.lost {
            // Still running after the deadline: cancel the file's work (its page tables are about
            // to go away). Its contexts are banned quietly; everyone else's work is resubmitted.
            let ids = Self::ctx_ids(&st, |c| c.client == client);
            for id in ids.iter() {
                if let Some(c) = st.contexts.get_mut(id) {
                    c.state.ban.get_or_insert(Ban::Dropped);
                }
            }
            self.recover(&mut st);
        }
        let ids = Self::ctx_ids(&st, |c| c.client == client);
        for id in ids.iter() {
            Self::remove_ctx(&mut st, *id);
        }
        if let Some(c) = st.clients.remove(&client) {
            if let Some(s) = c.slot {
                if let Some(owner) = st.slots.get_mut(s) {
                    *owner = None;
                }
                crate::rules::program::unbind_space(&mut &self.hw, s);
            }
        }
        drop(st);
        self.changed.notify_all();
    }

    pub(super) fn timeout_ns(&self) -> u64 {
        u64::from(self.cfg.job_timeout_ms) * 1_000_000
    }

    /// Ids of the contexts matching `f` (a snapshot, so the tree can be changed after).
    pub(super) fn ctx_ids(st: &Sched, f: impl Fn(&Ctx) -> bool) -> KVec<u32> {
        let mut v = KVec::new();
        for (id, c) in st.contexts.iter() {
            if f(c) && v.push(*id, GFP_KERNEL).is_err() {
                break;
            }
        }
        v
    }

    /// Removes a context now, or keeps it destroyed (a zombie) while jobs of it are in a ring
    /// (`rules::context`).
    pub(super) fn remove_ctx(st: &mut Sched, id: u32) {
        let (slot, free) = match st.contexts.get_mut(&id) {
            Some(c) => (c.state.fence_slot, c.state.destroy()),
            None => return,
        };
        if !free {
            return;
        }
        st.contexts.remove(&id);
        st.fence_slots.release(slot);
    }

    /// A job left its ring (retired or dropped): context and client bookkeeping, fence-slot
    /// references of its `WAIT` descriptors, zombie contexts freed.
    pub(super) fn job_gone(st: &mut Sched, job: &Job) {
        let mut free_ctx = None;
        if let Some(c) = st.contexts.get_mut(&job.view.ctx) {
            if c.state.job_left() {
                free_ctx = Some(job.view.ctx);
            }
        }
        if let Some(c) = st.clients.get_mut(&job.file) {
            c.inflight = c.inflight.saturating_sub(1);
        }
        for d in job.deps.iter() {
            st.fence_slots.unwatch(d.slot);
        }
        if let Some(id) = free_ctx {
            if let Some(c) = st.contexts.remove(&id) {
                st.fence_slots.release(c.state.fence_slot);
            }
        }
    }

    // ---- contexts ----

    /// CTX_CREATE: a context on the least-loaded hardware queue of its priority.
    pub(crate) fn ctx_create(&self, client: u64, priority: u32) -> Result<u32, Fail> {
        let mut st = self.sched.lock();
        if st.lost {
            return Err(LOST.into());
        }
        let mine = st
            .contexts
            .values()
            .filter(|c| c.client == client && c.state.live())
            .count();
        if mine >= u::MAX_CONTEXTS as usize {
            return Err(Refusal::new(r::CTX_LIMIT).into());
        }
        let mut fence_slot = st.fence_slots.take_free();
        if fence_slot.is_none() {
            // Destroyed contexts keep their slot until their last job is retired (lazily).
            self.retire_and_notify(&mut st);
            fence_slot = st.fence_slots.take_free();
        }
        let Some(fence_slot) = fence_slot else {
            return Err(Refusal::new(r::DEVICE_CTX_LIMIT).into());
        };
        let mut load = [0usize; regs::NUM_QUEUES];
        for c in st.contexts.values() {
            if let Some(l) = load.get_mut(c.state.queue) {
                *l += 1;
            }
        }
        let queue = crate::rules::queue::choose(priority, &load);
        // A fresh id not in use (ids wrap, skipping live ones).
        let mut id = st.next_ctx;
        while st.contexts.get(&id).is_some() {
            id = id.wrapping_add(1).max(1);
        }
        st.next_ctx = id.wrapping_add(1).max(1);
        let ctx = Ctx {
            client,
            state: Context::new(queue, priority, fence_slot),
        };
        if let Err(e) = st.contexts.try_create_and_insert(id, ctx, GFP_KERNEL) {
            st.fence_slots.release(fence_slot);
            return Err(fail(e, r::OUT_OF_MEMORY));
        }
        self.write_fence(fence_slot, 0);
        Ok(id)
    }

    /// A live (not destroyed) context of `client`.
    pub(super) fn ctx_of(st: &Sched, client: u64, id: u32) -> Result<&Ctx, Fail> {
        match st.contexts.get(&id) {
            Some(c) if c.client == client && c.state.live() => Ok(c),
            _ => Err(Refusal::new(r::CTX_INVALID).into()),
        }
    }

    /// CTX_DESTROY: wakes the context's waiters (they return CTX_INVALID), waits for its
    /// pending work (bounded by the job timeout; a signal stops the wait), then destroys it. Work still in a ring keeps its fence slot until it
    /// leaves.
    pub(crate) fn ctx_destroy(&self, client: u64, id: u32) -> Result<(), Fail> {
        let deadline = mono_ns() + 2 * self.timeout_ns() + 1_000_000_000;
        let mut st = self.sched.lock();
        Self::ctx_of(&st, client, id)?;
        // Waiters on this context wake now and see it closing (see `wait`).
        if let Some(c) = st.contexts.get_mut(&id) {
            c.state.closing = true;
        }
        self.changed.notify_all();
        loop {
            let Ok(c) = Self::ctx_of(&st, client, id) else {
                return Err(Refusal::new(r::CTX_INVALID).into());
            };
            let now = mono_ns();
            if c.state.settled() || st.lost || now >= deadline {
                break;
            }
            let j = ns_to_jiffies(deadline - now);
            if let CondVarTimeoutResult::Signal { .. } = self.sleep_on_changed(&mut st, j) {
                break;
            }
        }
        Self::remove_ctx(&mut st, id);
        Ok(())
    }

    /// CTX_STATE.
    pub(crate) fn ctx_state(&self, client: u64, id: u32) -> Result<u::CtxState, Fail> {
        let mut st = self.sched.lock();
        if st.lost {
            return Err(LOST.into());
        }
        // Report what the device has completed so far, not what the last interrupt said.
        self.retire_and_notify(&mut st);
        Ok(Self::ctx_of(&st, client, id)?.state.ctx_state(id))
    }
}
