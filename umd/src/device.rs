//! An open device: its backend file, what the query said, the GPU VA allocator, and the sticky
//! device-lost state (design §4: once lost, every call fails fast without touching the backend).

use crate::backend::{Backend, KmdError};
use crate::errmap::{kmd_error, Op};
use crate::error::{umdResult, UmdError, UmdResult};
use crate::memory::va::VaSpace;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use uapi::ioctl::Query;

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

/// An open device.
pub struct Device {
    /// Process-unique id (logs).
    pub id: u64,
    /// Index the caller opened.
    pub index: u32,
    /// The backend file.
    pub backend: Box<dyn Backend>,
    /// Versions, capabilities and limits.
    pub info: Query,
    /// GPU VA allocator for this file's address space.
    pub va: Mutex<VaSpace>,
    lost: AtomicBool,
    lost_at_wall_ns: AtomicU64,
    lost_reason: Mutex<String>,
    /// The libumd id of each live context by its kernel context id, for details that name a
    /// context the kernel reported (a failed producer).
    contexts: Mutex<std::collections::HashMap<u32, u64>>,
}

impl Device {
    /// Records (`Some(id)`) or forgets (`None`) the libumd id of kernel context `kmd_id`.
    pub fn name_context(&self, kmd_id: u32, id: Option<u64>) {
        let mut m = self.contexts.lock().unwrap_or_else(|p| p.into_inner());
        match id {
            Some(id) => m.insert(kmd_id, id),
            None => m.remove(&kmd_id),
        };
    }

    /// The libumd id of kernel context `kmd_id`, if it is live.
    pub fn context_named(&self, kmd_id: u32) -> Option<u64> {
        let m = self.contexts.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&kmd_id).copied()
    }

    /// Opens device `index` on the backend chosen by `UMD_BACKEND`, checking the UAPI version.
    pub fn open(resolved: &crate::backend::select::Resolved, index: u32) -> UmdResult<Device> {
        // A loss found here is not on a device this process holds (no mark_lost): it is said
        // once at ERROR, like every loss, so that a log read at 2 a.m. shows it even from a
        // process that never had the device; the failed call's WARN follows.
        let said_lost = |e: &UmdError| {
            if e.code == umdResult::UMD_ERR_DEVICE_LOST {
                tracing::error!(
                    index,
                    errno = e.os_errno,
                    reason = e.kmd_reason,
                    "device lost: device {index} cannot be opened: {}",
                    e.message
                );
            }
        };
        let backend = crate::backend::select::open(resolved, index).inspect_err(said_lost)?;
        let info = backend
            .query()
            .map_err(|e| kmd_error(Op::Other, e, &format!("query of {}", backend.location())))
            .inspect_err(said_lost)?;
        if !uapi::compatible(info.uapi_major, info.uapi_minor) {
            tracing::warn!(
                event = "version_mismatch",
                index,
                location = %backend.location(),
                kernel_uapi = %format!("{}.{}", info.uapi_major, info.uapi_minor),
                libumd_uapi = %format!("{}.{}", uapi::UAPI_MAJOR, uapi::UAPI_MINOR),
                min_kernel_minor = uapi::MIN_KERNEL_MINOR,
                "UAPI version mismatch"
            );
            // The sentence is the kernel probe's (`NoKernelDevice::describe`): one wording.
            let why = crate::backend::select::NoKernelDevice::VersionMismatch {
                kernel: (info.uapi_major, info.uapi_minor),
            };
            return Err(UmdError::new(
                umdResult::UMD_ERR_INIT_VERSION_MISMATCH,
                format!("{}: {}.", backend.location(), why.describe()),
            ));
        }
        let id = NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed);
        tracing::info!(device = id, index, backend = backend.kind(), location = %backend.location(),
            uapi = %format!("{}.{}", info.uapi_major, info.uapi_minor), mem_mib = info.mem_total >> 20, "device opened");
        Ok(Device {
            id,
            index,
            va: Mutex::new(VaSpace::new(info.va_start, info.va_end)),
            backend,
            info,
            lost: AtomicBool::new(false),
            lost_at_wall_ns: AtomicU64::new(0),
            lost_reason: Mutex::new(String::new()),
            contexts: Mutex::new(std::collections::HashMap::new()),
        })
    }

    /// Fails fast when the device is lost.
    #[track_caller]
    pub fn check(&self) -> UmdResult<()> {
        if self.lost.load(Ordering::Acquire) {
            return Err(self.lost_error());
        }
        Ok(())
    }

    /// True once the device is lost.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    #[track_caller]
    fn lost_error(&self) -> UmdError {
        let why = self
            .lost_reason
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        let at = self.lost_at_wall_ns.load(Ordering::Relaxed);
        UmdError::new(
            umdResult::UMD_ERR_DEVICE_LOST,
            format!(
                "device {} ({}) was lost {} ({}); every call on it fails fast without reaching the driver.",
                self.index,
                self.backend.location(),
                crate::util::format_wall(at),
                why
            ),
        )
    }

    /// Marks the device lost (first caller wins), says so once in the log, and writes the
    /// emergency log ring to a black-box file that the device-lost detail names.
    pub fn mark_lost(&self, why: &str) {
        // Held until the reason names the black box, so no caller sees a half-told loss.
        let mut reason = self.lost_reason.lock();
        if self.lost.swap(true, Ordering::AcqRel) {
            return;
        }
        self.lost_at_wall_ns
            .store(crate::error::detail::wall_ns(), Ordering::Relaxed);
        tracing::error!(device = self.id, event = "device_lost", index = self.index, location = %self.backend.location(), reason = why,
            "device lost: all further calls fail with UMD_ERR_DEVICE_LOST");
        let black_box =
            match crate::log::dump_blackbox(&format!("device {} lost: {why}", self.index)) {
                Ok(path) => format!("black box: {path}"),
                Err(e) => e,
            };
        if let Ok(r) = reason.as_mut() {
            **r = format!("{why}; {black_box}");
        }
    }

    /// Turns a backend failure into a `UmdError`, recording device loss on the way.
    #[track_caller]
    pub fn fail(&self, op: Op, e: KmdError, what: &str) -> UmdError {
        let err = kmd_error(op, e, what);
        if err.code == umdResult::UMD_ERR_DEVICE_LOST {
            self.mark_lost(&format!("{what}: {}", e.describe()));
            return self.lost_error().kmd(e.errno, e.reason);
        }
        err
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Before the backend file closes (the fields drop after this): the pool's CPU mappings
        // would keep the kernel file, and the device's memory, alive after it.
        crate::memory::pool::Pool::device_closed(self);
    }
}
