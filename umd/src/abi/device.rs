//! Devices: count, open, close, info, debug fault injection.

use super::types::*;
use super::{copy_versioned, guard, out, struct_size};
use crate::error::{umdResult, UmdError};
use crate::registry::{self, BUFFERS, CMDBUFS, CONTEXTS, DEVICES};
use std::sync::Arc;

/// Number of aigpu devices on the backend `UMD_BACKEND` selects (kernel render nodes, or the
/// simulator's `UMD_SIM_DEVICES`).
#[no_mangle]
#[must_use]
pub extern "C" fn umdGetDeviceCount(count: *mut u32) -> umdResult {
    guard("umdGetDeviceCount", || {
        let count = out(count, "count")?;
        let r = registry::resolved();
        crate::log::story::started(&r);
        let r = r?;
        *count = crate::backend::select::count(&r)?;
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Opens device `index`: one kernel file (own GPU address space), UAPI version checked.
#[no_mangle]
#[must_use]
pub extern "C" fn umdDeviceOpen(index: u32, device: *mut umdDevice) -> umdResult {
    guard("umdDeviceOpen", || {
        let device = out(device, "device")?;
        let r = registry::resolved();
        crate::log::story::started(&r);
        let r = r?;
        let d = crate::device::Device::open(&r, index)?;
        *device = DEVICES.insert(Arc::new(d));
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Closes a device. Contexts, buffers and command buffers still alive on it are reported as
/// leaks (bounded: the first 32 buffers one WARN each, then a summary) and destroyed; their
/// handles become invalid.
/// A umdFenceWait blocked in another thread on a context of the device fails with
/// UMD_ERR_INVALID_HANDLE, detail "the device was closed by another thread (umdDeviceClose)
/// while this wait was blocked", at once (both backends); the close itself waits for each
/// context's submitted work to complete or be declared hung (the job timeout), as
/// umdContextDestroy does (docs/libumd.md, "Closing under a blocked wait").
#[no_mangle]
#[must_use]
pub extern "C" fn umdDeviceClose(device: umdDevice) -> umdResult {
    let caller = crate::caller!();
    guard("umdDeviceClose", || {
        let dev = DEVICES.get(device)?;
        for (h, cb) in CMDBUFS.live() {
            if Arc::ptr_eq(&cb.ctx.device, &dev) {
                tracing::warn!(
                    ctx = cb.ctx.id,
                    event = "leak_object",
                    object = "command_buffer",
                    handle = format_args!("{h:#x}"),
                    "leak: command buffer not destroyed before umdDeviceClose"
                );
                let _ = CMDBUFS.remove(h);
            }
        }
        let mut leaked = Vec::new();
        for (h, b) in BUFFERS.live() {
            if Arc::ptr_eq(b.device(), &dev) && BUFFERS.remove(h).is_ok() {
                b.set_free_caller(caller);
                leaked.push(b);
            }
        }
        crate::memory::leaks::report(0, "umdDeviceClose", &leaked);
        drop(leaked);
        for (h, c) in CONTEXTS.live() {
            if Arc::ptr_eq(&c.device, &dev) {
                tracing::warn!(
                    ctx = c.id,
                    event = "leak_object",
                    object = "context",
                    "leak: context not destroyed before umdDeviceClose"
                );
                let _ = CONTEXTS.remove(h);
                let _ = c.close(crate::context::ClosedBy::DeviceClose);
            }
        }
        DEVICES.remove(device)?;
        tracing::info!(device = dev.id, "device closed");
        Ok(umdResult::UMD_SUCCESS)
    })
}

fn fill_str(dst: &mut [std::ffi::c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = *b as std::ffi::c_char;
    }
    dst[n] = 0;
}

/// Fills `*info` (set `info->struct_size = sizeof(umdDeviceInfo)` first).
#[no_mangle]
#[must_use]
pub extern "C" fn umdDeviceGetInfo(device: umdDevice, info: *mut umdDeviceInfo) -> umdResult {
    guard("umdDeviceGetInfo", || {
        let dst = out(info, "info")?;
        struct_size(
            dst.struct_size,
            UMD_DEVICE_INFO_SIZE_V1 as usize,
            "umdDeviceInfo",
        )?;
        let dev = DEVICES.get(device)?;
        dev.check()?;
        let q = &dev.info;
        let mut v = umdDeviceInfo {
            struct_size: std::mem::size_of::<umdDeviceInfo>() as u32,
            index: dev.index,
            backend: [0; 8],
            location: [0; 64],
            uapi_major: q.uapi_major,
            uapi_minor: q.uapi_minor,
            driver_major: q.driver_major,
            driver_minor: q.driver_minor,
            driver_patch: q.driver_patch,
            num_queues: q.num_queues,
            caps: q.caps,
            mem_total: q.mem_total,
            max_alloc: q.max_bo_size,
            va_start: q.va_start,
            va_end: q.va_end,
            page_size: q.page_size,
            max_cmdbufs_per_submit: q.max_cmdbufs,
            pci_address: [0; 16],
        };
        fill_str(&mut v.backend, dev.backend.kind());
        let location = dev.backend.location();
        fill_str(&mut v.location, &location);
        if dev.backend.kind() == "kmd" {
            let pci = crate::pci::pci_address(std::path::Path::new(&location));
            fill_str(&mut v.pci_address, pci.as_deref().unwrap_or(""));
        }
        copy_versioned(&v, info, dst.struct_size);
        Ok(umdResult::UMD_SUCCESS)
    })
}

/// Test hook: injects a device fault (`UMD_DEBUG_FAULT_*`). On the simulator it always works; on
/// the kernel driver it needs root (debugfs). Never use it in production code.
#[no_mangle]
#[must_use]
pub extern "C" fn umdDebugInjectFault(device: umdDevice, fault: u32) -> umdResult {
    guard("umdDebugInjectFault", || {
        let dev = DEVICES.get(device)?;
        dev.check()?;
        if !(UMD_DEBUG_FAULT_MEM_ERROR..=UMD_DEBUG_FAULT_FALL_OFF_BUS).contains(&fault) {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_ARGUMENT,
                format!("fault {fault} is not a UMD_DEBUG_FAULT_* value."),
            ));
        }
        dev.backend
            .debug_inject(fault)
            .map_err(|e| dev.fail(crate::errmap::Op::Other, e, "fault injection"))?;
        tracing::warn!(
            device = dev.id,
            event = "fault_injected",
            fault,
            "debug fault injected"
        );
        Ok(umdResult::UMD_SUCCESS)
    })
}
