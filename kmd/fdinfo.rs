// SPDX-License-Identifier: GPL-2.0
//! The driver's part of a client's fdinfo (`/proc/<pid>/fdinfo/<fd>` of an open aigpu file):
//! the keys of the kernel's drm-usage-stats specification that aigpu models, then aigpu's own
//! `aigpu-` keys. The format, every key and its source: docs/kmd.md, "fdinfo".
//!
//! The DRM core prints `drm-driver`, `drm-client-id` (and `drm-pdev` on a PCI function) before
//! this; the memory keys come from the DRM core's walk of the file's handles
//! (`File::show_memory_stats`). The numbers are the ones debugfs `clients` and `contexts` show,
//! read under the same lock: there is one set of counters.

use core::fmt::Write;

use kernel::{drm, sync::atomic::Relaxed};

use crate::{
    driver::{AigpuDriver, DrmFile},
    uapi::ioctl::RESET_NONE,
};

/// The one engine: every hardware queue feeds it (docs/hw-spec.md), so a client's busy time is
/// the time its jobs held it.
pub(crate) const ENGINE: &str = "compute";

/// Prints the driver's keys of `file`'s fdinfo.
pub(crate) fn show(
    _dev: &drm::Device<AigpuDriver, drm::Registered>,
    file: &DrmFile,
    p: &mut drm::print::Printer<'_>,
) {
    let f = file.inner();
    let mut busy_ns = 0;
    let mut submitted = 0;
    let mut inflight = 0;
    let (mut contexts, mut faults, mut hangs, mut resets) = (0u32, 0u32, 0u32, 0u32);
    {
        // Retire first, as debugfs does: a finished job counts as finished.
        let st = f.gpu.sched_retired();
        if let Some(c) = st.clients.get(&f.client) {
            busy_ns = c.busy_ns;
            submitted = c.jobs;
            inflight = u64::from(c.inflight);
        }
        for c in st.contexts.values().filter(|c| c.client == f.client && c.state.live()) {
            contexts += 1;
            faults += u32::from(c.state.fault().is_some());
            hangs += u32::from(c.state.hung());
            resets += u32::from(c.state.reset_status != RESET_NONE);
        }
    }
    let _ = writeln!(p, "drm-engine-{ENGINE}:\t{busy_ns} ns");
    file.show_memory_stats(p);
    // The DRM core counts an object as active by the fences of its reservation object, which
    // aigpu does not use; here every object with a handle in the file is active while the file
    // has work in a ring (its jobs may touch any of them).
    let mem = f.stats.mem.load(Relaxed);
    let _ = writeln!(p, "drm-active-memory:\t{}", if inflight > 0 { mem } else { 0 });
    let _ = writeln!(p, "aigpu-client:\t{}", f.client);
    let _ = writeln!(p, "aigpu-contexts:\t{contexts}");
    let _ = writeln!(p, "aigpu-jobs-submitted:\t{submitted}");
    let _ = writeln!(p, "aigpu-jobs-inflight:\t{inflight}");
    let _ = writeln!(p, "aigpu-jobs-completed:\t{}", submitted.saturating_sub(inflight));
    let _ = writeln!(p, "aigpu-faults:\t{faults}");
    let _ = writeln!(p, "aigpu-hangs:\t{hangs}");
    let _ = writeln!(p, "aigpu-resets:\t{resets}");
    let _ = writeln!(p, "aigpu-objects:\t{}", f.stats.objects.load(Relaxed));
    let _ = writeln!(p, "aigpu-mappings:\t{}", f.stats.mappings.load(Relaxed));
    let _ = writeln!(p, "aigpu-lost:\t{}", u32::from(f.stats.lost.load(Relaxed)));
}
