// SPDX-License-Identifier: GPL-2.0
//! Creating a device's execution state (rings, fence page, the driver's own address space, the
//! device model, the interrupt connection, the device thread), and [`Running`], whose drop shuts
//! it down.

use kernel::{
    bindings, device,
    dma::Coherent,
    new_condvar, new_mutex,
    prelude::*,
    rbtree::RBTree,
    str::CString,
    sync::{
        atomic::{Atomic, Relaxed},
        Arc,
    },
    workqueue::{new_delayed_work, new_work, DelayedWork, Work},
};

use super::{bus_addr, Config, Counters, Gpu, Hq, JobQueue, Sched, FENCE_SLOTS, KCODE_FAULT, KCODE_HANG, KVA_CODE, KVA_UNMAPPED, RING_ENTRIES, USER_SLOTS};
use crate::{
    bus::Bus,
    driver::Stats,
    dump::Dumps,
    gem::MemAccount,
    hw::{DeviceThread, Hw, IrqConnection},
    pt::PtPage,
    rules::{queue::HwQueue, FenceSlot},
    uapi::{packet, pte, regs, ring::DESC_SIZE},
};

impl Gpu {
    /// Creates the device (rings, fence page, the driver's own address space, the device
    /// model), programs it and starts it: connects the interrupt and starts the device thread.
    pub(crate) fn start(
        dev: &device::Device<device::Bound>,
        index: u32,
        mem: Arc<MemAccount>,
        cfg: Config,
    ) -> Result<Running> {
        let bus = Bus::new()?;
        let name = CString::try_from_fmt(fmt!("aigpu{}", index))?;
        let ring_bytes = RING_ENTRIES as usize * DESC_SIZE;
        let mut rings = KVec::with_capacity(regs::NUM_QUEUES, GFP_KERNEL)?;
        for _ in 0..regs::NUM_QUEUES {
            let ring = Coherent::<u8>::zeroed_slice(dev, ring_bytes, GFP_KERNEL)?;
            let base = bus_addr(&ring);
            for p in 0..ring_bytes / 4096 {
                // SAFETY: page `p` of the ring's coherent allocation, which lives in `Gpu` (and
                // the device model, the only user of the bus, stops before it is freed).
                unsafe {
                    bus.register_kva(base + (p * 4096) as u64, ring.as_mut_ptr().cast::<u8>().add(p * 4096))?
                };
            }
            rings.push(ring, GFP_KERNEL)?;
        }
        let fence_page = Coherent::<u64>::zeroed_slice(dev, FENCE_SLOTS, GFP_KERNEL)?;
        #[allow(clippy::useless_conversion)]
        let fence_pa = u64::from(fence_page.dma_address());
        // SAFETY: as for the rings.
        unsafe { bus.register_kva(fence_pa, fence_page.as_mut_ptr().cast::<u8>())? };

        // The driver's own address space: one read-only code page with the injection packets.
        let kstats = Arc::new(
            Stats {
                pt_pages: Atomic::new(0),
                mappings: Atomic::new(0),
            },
            GFP_KERNEL,
        )?;
        let code = Coherent::<u32>::zeroed_slice(dev, 1024, GFP_KERNEL)?;
        // SAFETY: the code page is ours and not yet visible to the device.
        unsafe {
            let p = code.as_mut_ptr().cast::<u32>();
            p.add((KCODE_HANG / 4) as usize).write(packet::encode_hang()[0]);
            for (i, w) in packet::encode_copy(KVA_UNMAPPED, KVA_CODE + 2048, 64).iter().enumerate() {
                p.add((KCODE_FAULT / 4) as usize + i).write(*w);
            }
        }
        #[allow(clippy::useless_conversion)]
        let code_pa = u64::from(code.dma_address());
        // SAFETY: as for the rings.
        unsafe { bus.register_kva(code_pa, code.as_mut_ptr().cast::<u8>())? };
        let mut kas_root = PtPage::new(dev, pte::LEVELS - 1, &kstats, &bus)?;
        // The kernel's own address space is outside every file's page-table budget.
        let mut kas_tables = 0;
        kas_root.map_page(dev, KVA_CODE, code_pa, pte::READ, &mut kas_tables)?;

        let mut queues = KVec::with_capacity(regs::NUM_QUEUES, GFP_KERNEL)?;
        for _ in 0..regs::NUM_QUEUES {
            queues.push(
                Hq {
                    state: HwQueue::default(),
                    jobs: JobQueue::new()?,
                },
                GFP_KERNEL,
            )?;
        }
        let mut fence_slots = KVec::with_capacity(FENCE_SLOTS, GFP_KERNEL)?;
        for _ in 0..FENCE_SLOTS {
            fence_slots.push(FenceSlot::default(), GFP_KERNEL)?;
        }
        let sched = Sched {
            lost: false,
            next_ctx: 1,
            next_job: 1,
            next_client: 1,
            contexts: RBTree::new(),
            fence_slots,
            slots: [None; USER_SLOTS],
            queues,
            counters: Counters::default(),
            clients: RBTree::new(),
            wd_armed: false,
            inject_hang: false,
            inject_fault: false,
            injected: Default::default(),
            lost_cause: Default::default(),
        };
        let gpu = Arc::pin_init(
            try_pin_init!(Gpu {
                index,
                name,
                cfg,
                mem,
                hw <- Hw::new(bus),
                sched <- new_mutex!(sched, "aigpu_sched"),
                changed <- new_condvar!("aigpu_changed"),
                bh <- new_work!("aigpu_bottom_half"),
                wd <- new_delayed_work!("aigpu_watchdog"),
                irq_pending: Atomic::new(0),
                fast_waiters: core::array::from_fn(|_| Atomic::new(0)),
                irqs: Atomic::new(0),
                irqs_direct: Atomic::new(0),
                irqs_lazy: Atomic::new(0),
                last_irq_ns: Atomic::new(0),
                sleepers: Atomic::new(0),
                stopping: Atomic::new(false),
                uapi_override: Atomic::new(0),
                rings,
                fence_page,
                kas_root,
                _kas_code: code,
                dumps <- new_mutex!(Dumps::new(), "aigpu_dumps"),
            }),
            GFP_KERNEL,
        )?;
        if gpu.hw.read32(regs::ID) != regs::ID_VALUE {
            return Err(ENODEV);
        }
        {
            let st = gpu.sched.lock();
            gpu.program(&st);
        }
        // Interrupts first: the device raises them as soon as its thread runs. A failure drops
        // what was started so far, which stops it (`Running`).
        let irq = IrqConnection::new(gpu.clone())?;
        let thread = DeviceThread::start(gpu.clone(), index)?;
        Ok(Running {
            _thread: thread,
            _irq: irq,
            _deferred: DeferredWork(gpu.clone()),
            gpu,
        })
    }
}

/// A started device: its execution state and the guards of everything that runs on its own.
/// Dropping it stops them, in this order: the device thread (nothing raises an interrupt any
/// more), the interrupt connection (no top half runs any more), then the bottom half and the
/// watchdog (flushed; they see `stopping` and neither re-arm nor queue each other). The owner
/// drops it before anything the device could still touch goes (`driver::DeviceData`).
pub(crate) struct Running {
    // Field order is drop order (see above).
    _thread: DeviceThread<Gpu>,
    _irq: IrqConnection<Gpu>,
    _deferred: DeferredWork,
    gpu: Arc<Gpu>,
}

impl Running {
    /// The execution half.
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Runs before the fields are dropped: from now on the top half ignores interrupts, the
        // bottom half returns at once, the watchdog does not re-arm and no job is queued.
        self.gpu.stopping.store(true, Relaxed);
    }
}

/// Flushes the bottom half and the watchdog when dropped (last of `Running`'s guards).
struct DeferredWork(Arc<Gpu>);

impl Drop for DeferredWork {
    fn drop(&mut self) {
        let gpu = &self.0;
        // SAFETY: `bh` was initialised by `new_work!`; flushing waits for a queued or running
        // bottom half, which returns at once now that `stopping` is set (and drops its `Arc`).
        unsafe { bindings::flush_work(Work::raw_get(&gpu.bh)) };
        // SAFETY: a `delayed_work` starts with its `work_struct`; flushing runs a pending
        // watchdog now, which sees `stopping` and does not re-arm.
        unsafe {
            bindings::flush_delayed_work(
                Work::raw_get(DelayedWork::raw_as_work(&gpu.wd)).cast::<bindings::delayed_work>(),
            )
        };
    }
}
