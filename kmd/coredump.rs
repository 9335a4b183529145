// SPDX-License-Identifier: GPL-2.0
//! Crash dumps as device coredumps: every dump `dump.rs` publishes also becomes the device's
//! devcoredump, `/sys/class/devcoredump/devcd<N>/data` (its `failing_device` link points to the
//! device: the PCI function or the faux device `aigpu<N>`), with the same text as the debugfs
//! `crashdumps/crash-<n>` file (docs/kmd.md, "Device coredump").
//!
//! The kernel keeps one pending devcoredump per device: until user space reads the dump and
//! writes to `data` (or 5 minutes pass), a new one is dropped by the kernel; debugfs keeps them
//! all (the last 8). A pending dump does not pin the module (its buffer is owned by the kernel's
//! devcoredump abstraction); it is removed when the device goes away.

use kernel::{alloc::KVVec, devcoredump, device, prelude::*};

use crate::{driver::AigpuDevice, dump::Dumps};

/// The device a devcoredump of `drm` is filed under: its parent bus device (the DRM parent is
/// the plain `device::Device`, `driver::Parent`).
fn failing_device(drm: &AigpuDevice) -> &device::Device {
    drm.as_ref()
}

/// Publishes `text` as the devcoredump of the dumps' device (nothing before the device's first
/// open: no DRM device is known yet, and no job can have run).
pub(crate) fn publish(dumps: &Dumps, text: &[u8]) {
    let Some(drm) = dumps.drm.as_ref() else { return };
    let mut data = KVVec::new();
    if data.extend_from_slice(text, GFP_KERNEL).is_err() {
        return;
    }
    devcoredump::create(failing_device(drm), data, GFP_KERNEL);
}

/// Removes the pending devcoredump of `drm`'s device, if any (the device goes away).
pub(crate) fn remove(drm: &AigpuDevice) {
    devcoredump::remove(failing_device(drm));
}
