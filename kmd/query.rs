// SPDX-License-Identifier: GPL-2.0
//! The query ioctl: versions, capabilities and limits of the device.

use crate::{
    driver::{DrmFile, RegDevice},
    ioctl::IoctlResult,
    rules::flags::NoFlags,
    uapi::{ioctl as u, regs, version},
};

/// Capabilities reported by this driver version: what the hardware spec's `CAPS` register
/// offers (GEMM_I8, ELTWISE, WAIT_MEM, TIMESTAMP) plus context priorities. `CAP_HANG_DEBUG` is
/// added when the `hang_debug` module parameter is set.
pub(crate) const CAPS: u64 = version::CAP_GEMM_I8
    | version::CAP_ELTWISE
    | version::CAP_WAIT_MEM
    | version::CAP_TIMESTAMP
    | version::CAP_PRIORITY;

/// Fills every out-field of [`u::Query`]; `flags` must be zero.
pub(crate) fn query(dev: &RegDevice, req: &mut u::Query, _file: &DrmFile) -> IoctlResult {
    NoFlags::try_from(req.flags)?;
    let mem = &dev.mem;
    let (uapi_major, uapi_minor) = match dev.gpu.uapi_override.load(kernel::sync::atomic::Relaxed) {
        0 => (version::UAPI_MAJOR, version::UAPI_MINOR),
        v => ((v >> 32) as u32, v as u32),
    };
    *req = u::Query {
        flags: 0,
        reason: 0,
        uapi_major,
        uapi_minor,
        driver_major: version::DRIVER_VERSION.0,
        driver_minor: version::DRIVER_VERSION.1,
        driver_patch: version::DRIVER_VERSION.2,
        num_queues: regs::NUM_QUEUES as u32,
        caps: if dev.gpu.cfg.hang_debug { CAPS | version::CAP_HANG_DEBUG } else { CAPS },
        va_start: version::VA_START,
        va_end: version::VA_END,
        page_size: version::PAGE_SIZE as u32,
        max_cmdbufs: u::MAX_CMDBUFS,
        mem_total: mem.total(),
        mem_used: mem.used(),
        max_bo_size: mem.total(),
        max_in_fences: u::MAX_IN_FENCES,
        max_contexts: u::MAX_CONTEXTS,
    };
    Ok(())
}
