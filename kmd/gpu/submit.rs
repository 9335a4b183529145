// SPDX-License-Identifier: GPL-2.0
//! SUBMIT on the device side: an address-space slot for the file (`rules::queue::pick_slot`),
//! the in-fences (`rules::fence::in_fence`), ring space (`rules::ring::fits`) with back-pressure,
//! the descriptors of the job, the doorbell, and the watchdog armed while work is queued.

use kernel::{
    prelude::*,
    sync::{Arc, CondVarTimeoutResult},
};

use super::{clients::LOST, dfl_wq, Gpu, Job, Sched, KCODE_FAULT, KCODE_HANG, KERNEL_SLOT, KVA_CODE, RING_ENTRIES, WD_PERIOD_MS};
use crate::{
    hw::mono_ns,
    ioctl::{refuse, Fail},
    rules::{
        self,
        fence::{self, InFence},
        flags::SubmitFlags,
        job::FenceWait,
        recovery::JobView,
        FenceSlots, Refusal,
    },
    uapi::{
        ioctl::{Cmdbuf, Fence},
        packet, reason as r,
        ring::{self, Desc, DESC_SIZE},
    },
};

impl Gpu {
    /// Gives `client` an address-space slot pointing at `pt_root` (free, or taken from a file
    /// with nothing in flight). `None` when every slot is busy.
    pub(super) fn ensure_slot(&self, st: &mut Sched, client: u64, pt_root: u64) -> Option<usize> {
        if let Some(c) = st.clients.get_mut(&client) {
            c.pt_root = pt_root;
            if let Some(s) = c.slot {
                return Some(s);
            }
        }
        let clients = &st.clients;
        let s = rules::queue::pick_slot(&st.slots, |o| clients.get(&o).is_none_or(|c| c.inflight == 0))?;
        // Taken from a file with no job in a ring.
        if let Some(victim) = st.slots.get(s).copied().flatten() {
            if let Some(v) = st.clients.get_mut(&victim) {
                v.slot = None;
            }
        }
        if let Some(o) = st.slots.get_mut(s) {
            *o = Some(client);
        }
        if let Some(c) = st.clients.get_mut(&client) {
            c.slot = Some(s);
        }
        rules::program::bind_space(&mut &self.hw, s, pt_root);
        Some(s)
    }

    /// Queues a validated job: `WAIT` descriptors for unsignalled in-fences, then one `EXEC`
    /// per command buffer, the last one writing the context's fence and raising `JOB_DONE`.
    /// Blocks while the ring is full or every address-space slot is held by other files' work
    /// (or fails with `EAGAIN` + `RING_FULL` / `AS_SLOTS_BUSY` under `SUBMIT_FLAG_NO_BLOCK`).
    /// Returns the job's seqno; a refused in-fence is named in the failure's `index`.
    pub(crate) fn queue_job(
        self: &Arc<Self>,
        client: u64,
        pt_root: u64,
        ctx_id: u32,
        cmdbufs: &[Cmdbuf],
        in_fences: &[Fence],
        flags: SubmitFlags,
    ) -> Result<u64, Fail> {
        let oom = |_| refuse(r::OUT_OF_MEMORY);
        // Everything that allocates happens before the lock.
        let mut descs = KVec::with_capacity(in_fences.len() + cmdbufs.len() + 1, GFP_KERNEL).map_err(oom)?;
        let mut deps = KVec::with_capacity(in_fences.len(), GFP_KERNEL).map_err(oom)?;
        let mut st = self.sched.lock();
        let (slot, queue, job_id, seqno, injected) = loop {
            if st.lost {
                return Err(LOST.into());
            }
            let ctx = Self::ctx_of(&st, client, ctx_id)?;
            if let Some(b) = ctx.state.ban {
                return Err(b.on_submit().into());
            }
            let queue = ctx.state.queue;
            // In-fences (re-checked after every sleep: a dependency may have completed or been
            // banned meanwhile).
            descs.clear();
            deps.clear();
            for (i, f) in in_fences.iter().enumerate() {
                let dep = st.contexts.get(&f.ctx_id).filter(|c| c.client == client && c.state.live());
                if fence::in_fence(i as u32, f.flags, f.seqno, dep.map(|c| c.state.producer()))? == InFence::Wait {
                    let slot = dep.map_or(0, |c| c.state.fence_slot);
                    // Capacity reserved above: these pushes do not allocate.
                    let _ = descs.push_within_capacity(Desc {
                        kind: ring::DESC_WAIT,
                        fence_pa: self.fence_pa(slot),
                        value: f.seqno,
                        ..Desc::default()
                    });
                    let _ = deps.push_within_capacity(FenceWait { ctx: f.ctx_id, slot, value: f.seqno });
                }
            }
            let injected = usize::from(st.inject_hang || st.inject_fault);
            let need = descs.len() + injected + cmdbufs.len();
            let q = match st.queues.get(queue) {
                Some(q) => q,
                None => return Err(refuse(r::CTX_INVALID)),
            };
            let head = q.jobs.front().map_or(q.state.tail, |j| j.start);
            let ring_ok = rules::ring::fits(head, q.state.tail, need) && q.jobs.len() < q.jobs.cap();
            let slot = if ring_ok { self.ensure_slot(&mut st, client, pt_root) } else { None };
            if let Some(slot) = slot {
                let job_id = st.next_job;
                st.next_job += 1;
                let seqno = st.contexts.get(&ctx_id).map_or(1, |c| c.state.next_seqno());
                break (slot, queue, job_id, seqno, injected != 0);
            }
            if flags.no_block() {
                // Work the device finished but nobody retired yet (retirement is lazy) still
                // holds ring space and slots: retire it and look again before refusing.
                if self.retire_and_notify(&mut st) {
                    continue;
                }
                // Say which of the two waits this would have been: for ring space, or (the ring
                // has room) for an address-space slot other files' work holds.
                let why = if ring_ok { r::AS_SLOTS_BUSY } else { r::RING_FULL };
                return Err(Refusal::new(why).into());
            }
            let j = kernel::time::msecs_to_jiffies(50);
            if let CondVarTimeoutResult::Signal { .. } = self.sleep_on_changed(&mut st, j) {
                // Nothing was queued: the call can be restarted as is.
                return Err(Refusal::new(r::INTERRUPTED).into());
            }
        };
        let Some(fence_slot) = st.contexts.get(&ctx_id).map(|c| c.state.fence_slot) else {
            return Err(Refusal::new(r::CTX_BANNED).into());
        };
        if injected {
            let code = if st.inject_hang { KCODE_HANG } else { KCODE_FAULT };
            let size = if st.inject_hang { 4 } else { (packet::COPY_WORDS * 4) as u32 };
            let _ = descs.push_within_capacity(Desc {
                kind: ring::DESC_EXEC,
                as_slot: KERNEL_SLOT as u32,
                cmd_size: size,
                cmd_va: KVA_CODE + code,
                job_id,
                ..Desc::default()
            });
            if st.inject_hang {
                st.injected.hang_job = Some(job_id);
            } else {
                st.injected.fault_job = Some(job_id);
            }
            st.inject_hang = false;
            st.inject_fault = false;
        }
        // Capacity for all of them was reserved before the lock: `push_within_capacity` cannot
        // fail, and unlike `push` (an out-of-line call that may allocate) it compiles to stores.
        for (i, cb) in cmdbufs.iter().enumerate() {
            let last = i + 1 == cmdbufs.len();
            let _ = descs.push_within_capacity(Desc {
                kind: ring::DESC_EXEC,
                flags: if last { ring::DESC_FLAG_FENCE | ring::DESC_FLAG_IRQ } else { 0 },
                as_slot: slot as u32,
                cmd_size: cb.size,
                cmd_va: cb.va,
                fence_pa: if last { self.fence_pa(fence_slot) } else { 0 },
                value: if last { seqno } else { 0 },
                job_id,
                reserved: [0; 2],
            });
        }
        for d in deps.iter() {
            st.fence_slots.watch(d.slot);
        }
        if let Some(c) = st.contexts.get_mut(&ctx_id) {
            c.state.queued(seqno);
        }
        st.counters.jobs += 1;
        if let Some(c) = st.clients.get_mut(&client) {
            c.jobs += 1;
            c.inflight += 1;
        }
        let now = mono_ns();
        let (start, end) = self.write_ring(&mut st, queue, &descs);
        let job = Job {
            view: JobView { id: job_id, ctx: ctx_id, seqno },
            file: client,
            descs,
            deps,
            start,
            end,
            submitted_ns: now,
        };
        if let Some(q) = st.queues.get_mut(queue) {
            // Cannot fail: checked for room above, under the same lock hold.
            if let Err(job) = q.jobs.push_back(job) {
                Self::job_gone(&mut st, &job);
            }
        }
        self.ring_doorbell(queue, end);
        let arm = !st.wd_armed;
        st.wd_armed = true;
        drop(st);
        if arm {
            self.arm_watchdog();
        }
        Ok(seqno)
    }

    pub(super) fn arm_watchdog(self: &Arc<Self>) {
        if self.stopping() {
            return;
        }
        let delay = kernel::time::msecs_to_jiffies(WD_PERIOD_MS);
        let _ = dfl_wq().enqueue_delayed::<Arc<Gpu>, 1>(self.clone(), delay);
    }

    /// Writes descriptors at the queue's tail; returns the job's first index and the new tail.
    pub(super) fn write_ring(&self, st: &mut Sched, queue: usize, descs: &[Desc]) -> (u32, u32) {
        let (Some(q), Some(ring)) = (st.queues.get_mut(queue), self.rings.get(queue)) else {
            return (0, 0);
        };
        let start = q.state.tail;
        // The driver writes its own ring through its kernel mapping (as a driver writes a ring
        // in system memory), not through the bus registry the device uses: no lock, no lookup,
        // per descriptor.
        let base = ring.as_mut_ptr().cast::<u8>();
        for d in descs {
            let off = (q.state.tail % RING_ENTRIES) as usize * DESC_SIZE;
            // SAFETY: the ring is RING_ENTRIES * DESC_SIZE bytes (allocated in `new`, alive with
            // `self`), so `off + DESC_SIZE` is in bounds, and a byte array has no alignment. The
            // device reads only descriptors between its head and the tail it saw at the last
            // doorbell; this writes at or after the driver's tail, which the device reads only
            // after the doorbell below publishes it (release on the doorbell latch, acquire in
            // the device thread), so nothing else accesses the slot while this reference lives.
            let slot = unsafe { &mut *base.add(off).cast::<[u8; DESC_SIZE]>() };
            // In place: no descriptor-sized temporary to clear and copy.
            d.write_to(slot);
            q.state.tail = q.state.tail.wrapping_add(1);
        }
        (start, q.state.tail)
    }

    pub(super) fn ring_doorbell(&self, queue: usize, tail: u32) {
        rules::program::doorbell(&mut &self.hw, queue, tail);
    }
}
