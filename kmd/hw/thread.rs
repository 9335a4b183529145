// SPDX-License-Identifier: GPL-2.0
//! The device thread (`aigpu<N>-hw`): the stand-in for silicon's own clock. It runs the model in
//! rounds under the model lock while there is work and sleeps when the device is idle until a
//! doorbell wakes it; a round is bounded in steps and in time so that a driver register access
//! (which needs the model lock) waits at most about one round.

use core::{ffi::c_void, ptr, ptr::NonNull};

use kernel::{
    bindings,
    prelude::*,
    sync::{atomic::Relaxed, Arc},
};

use super::{mono_ns, HasHw, Hw};
use crate::model::Step;

impl Hw {
    /// Wakes the device thread.
    pub(crate) fn kick(&self) {
        *self.kick.lock() = true;
        self.kick_cv.notify_one();
    }

    /// One round of the device thread: up to `ROUND_STEPS` steps, or `ROUND_NS` of them, under
    /// one hold of the model lock, then the interrupt latch. Returns what the last step did.
    fn run_once(&self) -> Step {
        let mut d = self.model.lock();
        // The device touches memory only here, under this (see `bus::BusMem`).
        let _round = self.bus.device_round();
        d.mem().begin_round();
        self.apply_doorbells(&mut d);
        let start = mono_ns();
        // The clock is read every 8 steps, and after every step of a long packet (hw-spec §6):
        // small steps are cheaper than a clock read under emulation, a long one is not. Long
        // steps get a round of `LONG_ROUND_NS` (ending each round after one of them made a
        // GEMM-heavy job pay for a round's lock, mirrors and latch per step), still short enough
        // for the watchdog to see the job and for other queues' doorbells to be taken.
        let round = d.run_round(ROUND_STEPS, |n, long| {
            let elapsed = || mono_ns().saturating_sub(start);
            (n % 8 == 0 && elapsed() > ROUND_NS) || (long && elapsed() > LONG_ROUND_NS)
        });
        self.refresh(&mut d);
        self.latch(&mut d);
        if round.steps > 0 {
            self.steps.fetch_add(round.steps, Relaxed);
            self.busy_ns.fetch_add(mono_ns().saturating_sub(start), Relaxed);
        }
        // A round that ended on the interrupt line with nothing left to run is the device going
        // idle: saying so now saves a whole round (lock, doorbells, an idle step, mirrors, latch)
        // per job when jobs come one at a time. A doorbell latched meanwhile has set `kick`, so
        // the thread does not sleep on it.
        if round.last == Step::Progress && !d.busy() {
            return Step::Idle;
        }
        round.last
    }
}

/// The running device thread of one device (`aigpu<N>-hw`): started by [`DeviceThread::start`],
/// stopped (and waited for) when dropped. The reference it holds keeps the `Hw` the thread runs
/// alive until the thread has returned, so no caller has to promise it.
pub(crate) struct DeviceThread<T: HasHw + Send + Sync> {
    task: NonNull<bindings::task_struct>,
    _owner: Arc<T>,
}

// SAFETY: `task` is only passed to `kthread_stop`, which may be called from any thread; `owner`
// is an `Arc` of a `Send + Sync` type.
unsafe impl<T: HasHw + Send + Sync> Send for DeviceThread<T> {}
// SAFETY: a shared `DeviceThread` gives no access to `task` (only `drop` uses it).
unsafe impl<T: HasHw + Send + Sync> Sync for DeviceThread<T> {}

impl<T: HasHw + Send + Sync> DeviceThread<T> {
    /// Starts the device thread of `owner`'s device, named `aigpu<index>-hw`.
    pub(crate) fn start(owner: Arc<T>, index: u32) -> Result<Self> {
        let hw = owner.hw();
        // SAFETY: `device_thread` only uses `data` as `&Hw` until `kthread_should_stop()`, and
        // the guard's drop, which waits for it to return (`kthread_stop`), runs before the guard
        // lets go of `owner`, in which the `Hw` lives. The format string takes one `%u`, a C
        // unsigned int.
        let task = unsafe {
            bindings::kthread_create_on_node(
                Some(device_thread),
                ptr::from_ref(hw).cast_mut().cast(),
                bindings::NUMA_NO_NODE,
                c"aigpu%u-hw".as_char_ptr(),
                index,
            )
        };
        let err = task as isize;
        if (-4095..0).contains(&err) {
            return Err(Error::from_errno(err as i32));
        }
        let task = NonNull::new(task).ok_or(ENOMEM)?;
        // The device thread stands in for silicon, which never waits for a CPU: a real-time
        // priority (the lowest FIFO one, as `sched_set_fifo_low` documents for such helpers)
        // makes a doorbell start the work at once instead of at the waker's next tick (the guest
        // kernels preempt lazily). It sleeps whenever the device is idle or stalled.
        // SAFETY: `task` is the new, not yet running kthread.
        unsafe { bindings::sched_set_fifo_low(task.as_ptr()) };
        // SAFETY: `task` is the new, not yet running kthread.
        unsafe { bindings::wake_up_process(task.as_ptr()) };
        Ok(Self { task, _owner: owner })
    }
}

impl<T: HasHw + Send + Sync> Drop for DeviceThread<T> {
    fn drop(&mut self) {
        // SAFETY: `task` is our kthread, which never exits on its own (it only returns when
        // `kthread_should_stop()`), so its task_struct is still valid here; `kthread_stop` waits
        // for it to return.
        unsafe { bindings::kthread_stop(self.task.as_ptr()) };
    }
}

/// Most steps per round of the device thread: each round costs a model-lock cycle, the doorbell
/// and register mirror updates and the interrupt latch, so small steps (a one-packet command
/// buffer is one) are run in batches.
const ROUND_STEPS: u64 = 64;
/// A round ends after this much work (checked every 8 steps), so a driver register access that
/// needs the model lock waits at most about this long plus one step.
const ROUND_NS: u64 = 100_000;
/// A round of long-packet steps ends once it has run this long (hw-spec §6, "Long packets").
const LONG_ROUND_NS: u64 = 2_000_000;

/// Uninterrupted device work after which the device thread gives up real-time priority (see
/// `device_thread`).
const LONG_RUN_NS: u64 = 2_000_000;

/// The device thread: steps the model while it has work; sleeps (woken by doorbells) when idle.
///
/// # Safety
///
/// Only `kthread_create` in [`DeviceThread::start`] calls this, with `data` pointing at the `Hw`
/// that the guard keeps alive until the thread has returned.
unsafe extern "C" fn device_thread(data: *mut c_void) -> core::ffi::c_int {
    // SAFETY: `data` is the `Hw` passed by `DeviceThread::start`, valid until the guard's drop
    // has returned from `kthread_stop`, which cannot happen before this function returns.
    let hw = unsafe { &*data.cast::<Hw>() };
    // SAFETY: `get_current` returns this kthread, valid while it runs.
    let me = unsafe { bindings::get_current() };
    // Start of the current run of uninterrupted work, and whether the thread left real-time
    // priority for it: a doorbell gets a real-time start, but work that goes on for longer than
    // LONG_RUN_NS (back-to-back big GEMMs) shares the CPU as a normal task until the device is
    // idle again, so the stand-in for silicon cannot starve the machine it runs on.
    let mut busy_since: Option<u64> = None;
    let mut demoted = false;
    // SAFETY: plain query of the current kthread's stop flag.
    while !unsafe { bindings::kthread_should_stop() } {
        let step = hw.run_once();
        let sleep = match step {
            Step::Progress => {
                let now = mono_ns();
                let since = *busy_since.get_or_insert(now);
                if !demoted && now.saturating_sub(since) > LONG_RUN_NS {
                    // SAFETY: `me` is this running kthread.
                    unsafe { bindings::sched_set_normal(me, 0) };
                    demoted = true;
                }
                continue;
            }
            // Every queue with work waits on memory (another queue's fence is re-checked at the
            // next round; CPU writes are polled): look again after a tick unless kicked.
            Step::Stalled => 1,
            // Idle: until a doorbell (a long timeout only as a safety net).
            Step::Idle => kernel::time::msecs_to_jiffies(1000),
        };
        busy_since = None;
        if demoted {
            // SAFETY: `me` is this running kthread.
            unsafe { bindings::sched_set_fifo_low(me) };
            demoted = false;
        }
        let mut kicked = hw.kick.lock();
        if !*kicked {
            // Woken by a doorbell, by `kthread_stop`, or by the timeout.
            let _ = hw.kick_cv.wait_interruptible_timeout(&mut kicked, sleep);
        }
        *kicked = false;
    }
    0
}
