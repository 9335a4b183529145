// SPDX-License-Identifier: GPL-2.0
//! aigpu: DRM render driver for the aigpu virtual AI GPU (Rust for Linux 7.3).
//!
//! Module root: the `module!` declaration and its parameters, the modinfo version, and the
//! module object: the PCI driver registration (one virtual GPU per bound PCI function) and the
//! faux devices + DRM registrations of the virtual GPUs beyond those (docs/kmd.md,
//! "Attachments").
//!
//! Layout (one concern per file, after drivers/gpu/drm/tyr):
//! - `driver.rs` — the `drm::Driver` implementation, per-device data, device numbers, a GPU
//!   attached to a bus device, the faux attachment;
//! - `pci.rs`    — the PCI attachment: the `pci::Driver`, the function's MSI and its handler;
//! - `file.rs`   — per-open-file state: the GPU address space, the contexts and the set of our
//!   GEM objects;
//! - `ctx.rs`    — the context, submit and wait ioctls, command-buffer validation;
//! - `gpu/`     — execution: contexts and clients, submission, waiting, interrupt top and bottom
//!   half, the watchdog, engine reset and innocent resubmission, device loss; every
//!   decision by the driver's rules (`rules/src/rules`, `mod rules` below), which
//!   the simulator backend runs too;
//! - `hw.rs`     — the "silicon": the device model behind its register interface, its thread
//!   (`hw/thread.rs`) and its interrupt line (the PCI function's MSI, or a hard `irq_work`: a
//!   self-interrupt);
//! - `bus.rs`    — the memory the device may touch: bus address -> page, for the driver's pages;
//! - `dump.rs`   — crash dumps (`dump/sections.rs`: their sections as text); `debugfs.rs` — the
//!   debugfs files; `text.rs` — text and log lines;
//! - `fdinfo.rs`, `coredump.rs`, `wedged.rs` — the kernel's standard interfaces: fdinfo usage
//!   stats, device coredumps, the DRM wedged event on device loss;
//! - `gem.rs`    — shmem GEM objects, memory accounting, handle lookup that rejects foreign
//!   objects;
//! - `vm.rs`     — the per-file GPU address space: mappings, bind / unbind;
//! - `pt.rs`     — page-table pages in the format of docs/hw-spec.md section 5;
//! - `ioctl.rs`  — the ioctl table, the trampoline that reports `reason`, argument checks (each
//!   handler lives with its object: `gem.rs`, `vm.rs`, `ctx.rs`, `query.rs`);
//! - `query.rs`  — the query ioctl.
//!
//! Every constant and argument struct of the user-space contract comes from the `uapi` crate,
//! included below by path so it exists exactly once.

use kernel::prelude::*;

mod bus;
mod coredump;
mod ctx;
mod debugfs;
mod driver;
mod dump;
mod fdinfo;
mod file;
mod gem;
mod gpu;
mod hw;
mod ioctl;
mod pci;
mod pt;
mod query;
mod text;
mod vm;
mod wedged;

/// The device model of docs/hw-spec.md (`vgpu/src/model`, the simulator's executor), compiled
/// into the module as the "silicon" `hw.rs` runs.
#[path = "../vgpu/src/model/mod.rs"]
#[allow(dead_code, unreachable_pub, clippy::all)]
mod model;

/// The driver's rules (`rules/src/rules`: submit checks, in-fences, queue and slot choice,
/// recovery decisions, line formats), the same source the simulator backend links.
#[path = "../rules/src/rules/mod.rs"]
#[allow(dead_code, unreachable_pub, clippy::all)]
mod rules;

/// The shared user/kernel/hardware contract (`uapi/src/v1`), compiled into the module.
#[path = "../uapi/src/v1/mod.rs"]
#[allow(dead_code, unreachable_pub, clippy::all)]
mod uapi;

module! {
    type: AigpuModule,
    name: "aigpu",
    authors: ["aigpu project"],
    description: "DRM render driver for the aigpu virtual AI GPU",
    license: "GPL",
    params: {
        num_devices: u32 {
            default: 1,
            description: "Number of virtual AI GPUs to create (1..=8, default 1): one per aigpu PCI function, faux devices for the rest",
        },
        mem_mib: u32 {
            default: 256,
            description: "GEM memory each virtual GPU may allocate, in MiB (1..=16384, default 256)",
        },
        job_timeout_ms: u32 {
            default: 2000,
            description: "A job running longer than this (ms, 10..=600000, default 2000) is a hang: its context is banned and the engine reset",
        },
        hang_debug: bool {
            default: false,
            description: "Allow the debug HANG packet (for timeout tests; default off)",
        },
    },
}

// `module!` has no version field: emit the modinfo string by hand, the way it emits the others.
// The string must match `uapi::version::DRIVER_VERSION` (checked at compile time below).
#[cfg(MODULE)]
#[link_section = ".modinfo"]
#[used]
static __AIGPU_VERSION: [u8; 14] = *b"version=0.1.0\0";
const _: () = assert!(
    uapi::version::DRIVER_VERSION.0 == 0
        && uapi::version::DRIVER_VERSION.1 == 1
        && uapi::version::DRIVER_VERSION.2 == 0
);

/// Largest accepted `num_devices`, and most virtual GPUs at a time (PCI functions included).
const MAX_DEVICES: u32 = 8;
/// Largest accepted `mem_mib` (16 GiB).
const MAX_MEM_MIB: u32 = 16384;
/// `job_timeout_ms`'s default (the `default:` of its declaration above).
const JOB_TIMEOUT_DEFAULT_MS: u32 = 2000;
/// Accepted `job_timeout_ms` range.
const JOB_TIMEOUT_MS: core::ops::RangeInclusive<u32> = 10..=600_000;

/// The GEM budget of each virtual GPU (bytes) and its execution settings, from the module
/// parameters (checked by `AigpuModule::init` before any GPU is created).
fn gpu_params() -> (u64, gpu::Config) {
    let job_timeout_ms = module_parameters::job_timeout_ms.value();
    let cfg = gpu::Config {
        job_timeout_ms,
        job_timeout_source: if job_timeout_ms == JOB_TIMEOUT_DEFAULT_MS {
            crate::rules::report::TimeoutSource::Default
        } else {
            crate::rules::report::TimeoutSource::ModuleParam
        },
        hang_debug: module_parameters::hang_debug.value(),
    };
    (u64::from(module_parameters::mem_mib.value()) << 20, cfg)
}

struct AigpuModule {
    /// One entry per virtual GPU on a faux device; dropped in order (each entry unregisters its
    /// DRM device before destroying its faux device).
    _gpus: KVec<driver::VirtualGpu>,
    /// The PCI driver: unregistering it unbinds every function (their GPUs go with them).
    _pci: Pin<KBox<kernel::driver::Registration<kernel::pci::Adapter<pci::AigpuPci>>>>,
}

impl kernel::Module for AigpuModule {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let n = module_parameters::num_devices.value();
        let mem_mib = module_parameters::mem_mib.value();
        if n == 0 || n > MAX_DEVICES {
            pr_err!("num_devices={} out of range 1..={}\n", n, MAX_DEVICES);
            return Err(EINVAL);
        }
        if mem_mib == 0 || mem_mib > MAX_MEM_MIB {
            pr_err!("mem_mib={} out of range 1..={}\n", mem_mib, MAX_MEM_MIB);
            return Err(EINVAL);
        }
        let job_timeout_ms = module_parameters::job_timeout_ms.value();
        if !JOB_TIMEOUT_MS.contains(&job_timeout_ms) {
            pr_err!(
                "job_timeout_ms={} out of range {}..={}\n",
                job_timeout_ms,
                JOB_TIMEOUT_MS.start(),
                JOB_TIMEOUT_MS.end()
            );
            return Err(EINVAL);
        }
        let (mem_total, cfg) = gpu_params();
        // The PCI functions first: registering the driver probes the functions present (one GPU
        // each, the lowest device numbers); faux devices make up the rest of `num_devices`.
        let pci = KBox::pin_init(kernel::driver::Registration::new(pci::NAME, module), GFP_KERNEL)?;
        let faux = n.saturating_sub(driver::Number::in_use());
        let mut gpus = KVec::with_capacity(faux as usize, GFP_KERNEL)?;
        for _ in 0..faux {
            // On failure the GPUs created so far are torn down when `gpus` and `pci` drop.
            gpus.push(driver::VirtualGpu::new(mem_total, cfg)?, GFP_KERNEL)?;
        }
        Ok(Self {
            _gpus: gpus,
            _pci: pci,
        })
    }
}
