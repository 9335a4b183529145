// SPDX-License-Identifier: GPL-2.0
//! WAIT (the rule is `rules::fence::wait_done`, through `rules::Context::wait_done`) and the ways
//! a sleeping task is known to the top half: by name in `fast_waiters` (woken directly) or
//! counted in `sleepers` (left to the bottom half's broadcast).

use kernel::{
    bindings,
    prelude::*,
    sync::{atomic::{Full, Relaxed}, CondVarTimeoutResult, MutexGuard},
};

use super::{clients::LOST, ns_to_jiffies, Gpu, Sched, Waiter};
use crate::{
    hw::mono_ns,
    ioctl::Fail,
    rules::Refusal,
    uapi::reason as r,
};

impl Gpu {
    /// WAIT: sleeps until `seqno` on the context completes, `deadline_ns` (absolute
    /// `CLOCK_MONOTONIC`) passes, a signal arrives, the context is lost or the device is lost.
    pub(crate) fn wait(&self, client: u64, ctx_id: u32, seqno: u64, deadline_ns: u64) -> Result<u64, Fail> {
        let mut st = self.sched.lock();
        loop {
            if st.lost {
                return Err(LOST.into());
            }
            let c = Self::ctx_of(&st, client, ctx_id)?;
            if c.state.wait_done(seqno)? {
                return Ok(c.state.completed);
            }
            // The fence may already be written while its interrupt is on its way, or was left
            // to whoever looks next: look at the device's progress. The top half knows this
            // task from before that look on (by name in a slot, or counted), so a completion is
            // either seen by the look or its top half sees this task (a full barrier on each
            // side), never neither.
            let before = c.state.completed;
            let me = self.register_waiter();
            self.retire_and_notify(&mut st);
            let progressed = Self::ctx_of(&st, client, ctx_id).is_ok_and(|c| c.state.completed != before);
            let now = mono_ns();
            let res = if progressed || deadline_ns <= now {
                None
            } else {
                Some(self.changed.wait_interruptible_timeout(&mut st, ns_to_jiffies(deadline_ns - now)))
            };
            self.unregister_waiter(me);
            let Some(res) = res else {
                if progressed {
                    continue;
                }
                return Err(Refusal::new(r::TIMEOUT).into());
            };
            // Whatever woke this task, retire first: the top half skips the bottom half when it
            // woke a sleeping waiter, which makes this task the one that retires those
            // completions for everybody (and notifies the other sleepers).
            self.retire_and_notify(&mut st);
            if let CondVarTimeoutResult::Signal { .. } = res {
                // Restartable: the deadline is absolute, so the same arguments are right again.
                return Err(Refusal::new(r::INTERRUPTED).into());
            }
        }
    }

    /// Makes the current task known to the top half before it looks at the device and sleeps:
    /// by name in a free slot of the direct wake-up list, or else counted in `sleepers`. A full
    /// barrier (see the top half).
    pub(super) fn register_waiter(&self) -> Waiter {
        // SAFETY: `get_current` returns the running task, valid while it runs.
        let me = unsafe { bindings::get_current() } as usize;
        match self.fast_waiters.iter().position(|w| w.cmpxchg(0, me, Full).is_ok()) {
            Some(i) => Waiter::Slot(i),
            None => self.register_anonymous(),
        }
    }

    /// Forgets the current task again. A full barrier: the retirement that follows must see
    /// every completion whose top half still found this task in the slot (and so may have
    /// skipped the bottom half): the top half reads the slot after acknowledging the interrupt,
    /// this reads the device's progress after clearing it.
    pub(super) fn unregister_waiter(&self, me: Waiter) {
        match me {
            Waiter::Slot(i) => {
                if let Some(w) = self.fast_waiters.get(i) {
                    w.xchg(0, Full);
                }
            }
            Waiter::Counted => {
                self.sleepers.fetch_sub(1, Relaxed);
            }
        }
    }

    /// Sleeps on `changed` for up to `j` jiffies as a sleeper the top half does not wake by
    /// name (CTX_DESTROY, a submit waiting for ring space): counted in `sleepers`, so every
    /// interrupt goes to the bottom half, which notifies. Completions from before it was
    /// counted are retired first; it then returns as if woken, for the caller to look again.
    pub(super) fn sleep_on_changed(&self, st: &mut MutexGuard<'_, Sched>, j: kernel::time::Jiffies) -> CondVarTimeoutResult {
        let me = self.register_anonymous();
        let res = if self.retire(st) {
            self.changed.notify_all();
            CondVarTimeoutResult::Woken { jiffies: j }
        } else {
            self.changed.wait_interruptible_timeout(st, j)
        };
        self.unregister_waiter(me);
        res
    }

    /// Counts the current task in `sleepers` (a full barrier, as `register_waiter`).
    pub(super) fn register_anonymous(&self) -> Waiter {
        self.sleepers.fetch_add(1, Full);
        Waiter::Counted
    }
}
