// SPDX-License-Identifier: GPL-2.0
//! Device loss as the DRM wedged event: when the driver gives a device up (an engine reset did
//! not bring it back, or it fell off the bus), a crash dump of kind `lost` (`dump.rs`, also the
//! devcoredump) and a `KOBJ_CHANGE` uevent of the device's `card<N>` node with
//! `WEDGED=vendor-specific`, and `PID=` / `TASK=` of the guilty process when a fault or hang of
//! one of its contexts led to the failed reset.
//!
//! The recovery procedure (docs/kmd.md, "Wedged event"): close every file of the device (the
//! consumer prerequisite of the kernel's "Device Wedging" chapter); the next open re-initialises
//! the device (a power cycle of the virtual device, `Gpu::attach`). It is `vendor-specific`
//! rather than `rebind` because a faux device cannot be unbound from user space.

use kernel::drm::device::{WedgeRecovery, WedgeTaskInfo};

use crate::{
    dump,
    gpu::{Gpu, Sched},
    rules::{lost::WedgedLine, report::Owner},
    text::{Level, Text},
    tprint,
};

/// The recovery method sent with the event, and its name in the uevent (`WEDGED=`) and the
/// log line.
const RECOVERY: WedgeRecovery = WedgeRecovery::VendorSpecific;
const RECOVERY_NAME: &str = "vendor-specific";

/// The device is lost: dump, wedged event, one log line. Called once per loss, by the code that
/// declares it, with the scheduler state before the lost jobs are dropped.
pub(crate) fn device_lost(gpu: &Gpu, st: &Sched) {
    let d = dump::build_lost(gpu, st);
    let guilty = dump::guilty_of_loss(st).map(|ctx| Gpu::owner(st, ctx));
    dump::publish(gpu, d);

    let task = guilty.map(|(pid, comm)| {
        let mut name = Text::new();
        tprint!(&mut name, "{}", comm);
        WedgeTaskInfo::new(pid, name.as_bytes())
    });
    let drm = gpu.dumps.lock().drm.clone();
    let sent = match drm {
        Some(drm) => drm.wedged_event(RECOVERY.into(), task.as_ref()),
        // Never opened: nobody to tell, and nothing ran on it.
        None => Err(kernel::error::code::ENODEV),
    };
    let line = WedgedLine {
        recovery: RECOVERY_NAME,
        sent: sent.map_err(|e| -e.to_errno()),
        guilty: guilty.map(|(pid, comm)| Owner { pid: pid.into(), comm }),
    };
    let mut t = Text::new();
    tprint!(&mut t, "{}", line);
    gpu.log(Level::Warn, &t);
}
