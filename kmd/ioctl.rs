// SPDX-License-Identifier: GPL-2.0
//! The ioctl table, the trampoline that reports a `reason` with every failure, and the argument
//! validation of every ioctl.
//!
//! How the reason reaches user space on failure: `drm_ioctl()` (drivers/gpu/drm/drm_ioctl.c)
//! copies the argument struct into a kernel buffer, calls the driver function on it and then
//! copies the buffer back to the user pointer *unconditionally* (`copy_to_user(arg, kdata,
//! out_size)` right after `drm_ioctl_kernel()`, whatever `retcode` is; all aigpu ioctls are
//! `_IOWR`, so `out_size` is the struct size). The trampoline below therefore clears `reason`
//! on entry and writes the failure's reason into the kernel copy before returning the negative
//! errno; the core's copy-back delivers it together with the errno. Failures before the driver
//! is called (`ENOTTY`/`EINVAL` for an unknown number, `EFAULT`, `EACCES` from the permission
//! check, `ENODEV` when the core already sees the device unplugged) leave the struct as user
//! space passed it, so user space must zero `reason` before the call; `docs/kmd.md` says so. A
//! device that goes away between the core's check and ours gives `ENODEV` + `DEVICE_LOST`.
//!
//! `kernel::declare_drm_ioctls!` only accepts structs of the kernel's own `uapi` crate, so the
//! descriptors are built here with the same public helpers (as in the spike prototype).

use core::ffi::{c_int, c_void};

use kernel::{
    bindings,
    drm,
    prelude::*,
};

use crate::{
    ctx,
    driver::AigpuDriver,
    file::AigpuFile,
    gem, query,
    uapi::{ioctl as u, reason},
    vm,
};

/// An ioctl failure: the errno returned and the reason written to the argument struct.
pub(crate) struct Fail {
    pub(crate) err: Error,
    pub(crate) reason: u32,
    /// Submit: the offending command buffer or in-fence (`bad_index`).
    pub(crate) index: u32,
    /// Submit: byte offset of the offending packet in its command buffer (`bad_offset`).
    pub(crate) offset: u64,
}

/// Builds a [`Fail`].
pub(crate) fn fail(err: Error, reason: u32) -> Fail {
    Fail { err, reason, index: 0, offset: 0 }
}

/// A refusal for `reason` with the errno it is always returned with (`rules::refusal`'s table,
/// which the simulator uses too): the pairing is written once, not at every site. [`fail`] is for
/// an errno that comes from the kernel (an allocator's, the DRM core's).
pub(crate) fn refuse(reason: u32) -> Fail {
    crate::rules::Refusal::new(reason).into()
}

/// A refusal of the driver's rules (`crate::rules::Refusal`): its errno travels with its reason,
/// and the element and packet it names become a submit's `bad_index` / `bad_offset` (`ctx.rs`).
impl From<crate::rules::Refusal> for Fail {
    fn from(r: crate::rules::Refusal) -> Self {
        Fail {
            err: Error::from_errno(-r.errno),
            reason: r.reason,
            index: r.index,
            offset: r.offset,
        }
    }
}

/// What an ioctl handler returns.
pub(crate) type IoctlResult = core::result::Result<(), Fail>;

/// Argument structs with a `reason` out-field.
pub(crate) trait HasReason {
    fn set_reason(&mut self, reason: u32);
}

macro_rules! has_reason {
    ($($t:ty),* $(,)?) => {
        $(impl HasReason for $t {
            fn set_reason(&mut self, reason: u32) {
                self.reason = reason;
            }
        })*
    };
}
has_reason!(
    u::Query,
    u::GemCreate,
    u::GemMmapOffset,
    u::VmBind,
    u::VmUnbind,
    u::CtxCreate,
    u::CtxDestroy,
    u::Submit,
    u::Wait,
    u::CtxState,
);

/// `EINVAL` + `PAD_NONZERO` unless `pad == 0`.
pub(crate) fn check_pad(pad: u32) -> IoctlResult {
    if pad != 0 {
        return Err(refuse(reason::PAD_NONZERO));
    }
    Ok(())
}

/// Builds a `drm_ioctl_desc` whose C trampoline calls `$func(dev, data, file)`, clears `reason`
/// on entry and sets it on failure.
macro_rules! aigpu_ioctl {
    ($name:literal, $cmd:expr, $nr:expr, $ty:ty, $func:path) => {{
        // The uapi crate's encoding must be the kernel's `_IOWR('d', DRM_COMMAND_BASE + nr, T)`.
        const _: () = assert!($cmd == drm::ioctl::IOWR::<$ty>(u::DRM_COMMAND_BASE + $nr));
        const _: () = assert!(kernel::ioctl::_IOC_SIZE($cmd) == core::mem::size_of::<$ty>());
        /// The C entry point `drm_ioctl()` calls for this ioctl.
        ///
        /// # Safety
        ///
        /// Only `drm_ioctl()` calls this, for a device and an open file of this driver, with a
        /// kernel copy of the argument of `_IOC_SIZE(cmd)` bytes.
        unsafe extern "C" fn tramp(
            raw_dev: *mut bindings::drm_device,
            raw_data: *mut c_void,
            raw_file: *mut bindings::drm_file,
        ) -> c_int {
            // SAFETY: `drm_ioctl()` calls this for a device registered by this driver, whose
            // reference count it holds for the call.
            let dev = unsafe { drm::Device::<AigpuDriver, drm::Ioctl>::from_raw(raw_dev) };
            // SAFETY: `drm_ioctl()` passes a kernel buffer of at least `_IOC_SIZE(cmd)` bytes
            // (asserted equal to `size_of::<$ty>()` above), exclusively ours for the call; every
            // bit pattern is valid for these plain `#[repr(C)]` integer structs.
            let data = unsafe { &mut *raw_data.cast::<$ty>() };
            let Some(guard) = dev.registration_guard() else {
                data.set_reason(reason::DEVICE_LOST);
                return ENODEV.to_errno();
            };
            // SAFETY: `raw_file` is an open `drm_file` of this driver.
            let file = unsafe { drm::File::<AigpuFile>::from_raw(raw_file) };
            data.set_reason(reason::NONE);
            // A file that saw the device lost fails every ioctl fast (destroying a context still
            // works, as in the simulator, so user space can clean up).
            if $nr != u::NR_CTX_DESTROY && file.inner().stats.lost.load(kernel::sync::atomic::Relaxed) {
                data.set_reason(reason::DEVICE_LOST);
                return ENODEV.to_errno();
            }
            match $func(&*guard, data, file) {
                Ok(()) => 0,
                Err(f) => {
                    data.set_reason(f.reason);
                    f.err.to_errno()
                }
            }
        }
        bindings::drm_ioctl_desc {
            cmd: $cmd,
            flags: drm::ioctl::RENDER_ALLOW,
            func: Some(tramp),
            name: kernel::str::as_char_ptr_in_const_context($name),
        }
    }};
}

/// The driver ioctls, in `NR_*` order (index = number - `DRM_COMMAND_BASE`).
pub(crate) const IOCTLS: &[drm::ioctl::DrmIoctlDescriptor] = &[
    aigpu_ioctl!(c"AIGPU_QUERY", u::IOCTL_QUERY, u::NR_QUERY, u::Query, query::query),
    aigpu_ioctl!(c"AIGPU_GEM_CREATE", u::IOCTL_GEM_CREATE, u::NR_GEM_CREATE, u::GemCreate, gem::create_ioctl),
    aigpu_ioctl!(c"AIGPU_GEM_MMAP_OFFSET", u::IOCTL_GEM_MMAP_OFFSET, u::NR_GEM_MMAP_OFFSET, u::GemMmapOffset, gem::mmap_offset_ioctl),
    aigpu_ioctl!(c"AIGPU_VM_BIND", u::IOCTL_VM_BIND, u::NR_VM_BIND, u::VmBind, vm::bind_ioctl),
    aigpu_ioctl!(c"AIGPU_VM_UNBIND", u::IOCTL_VM_UNBIND, u::NR_VM_UNBIND, u::VmUnbind, vm::unbind_ioctl),
    aigpu_ioctl!(c"AIGPU_CTX_CREATE", u::IOCTL_CTX_CREATE, u::NR_CTX_CREATE, u::CtxCreate, ctx::ctx_create),
    aigpu_ioctl!(c"AIGPU_CTX_DESTROY", u::IOCTL_CTX_DESTROY, u::NR_CTX_DESTROY, u::CtxDestroy, ctx::ctx_destroy),
    aigpu_ioctl!(c"AIGPU_SUBMIT", u::IOCTL_SUBMIT, u::NR_SUBMIT, u::Submit, ctx::submit),
    aigpu_ioctl!(c"AIGPU_WAIT", u::IOCTL_WAIT, u::NR_WAIT, u::Wait, ctx::wait),
    aigpu_ioctl!(c"AIGPU_CTX_STATE", u::IOCTL_CTX_STATE, u::NR_CTX_STATE, u::CtxState, ctx::ctx_state),
];
const _: () = assert!(IOCTLS.len() == u::NUM_IOCTLS as usize);

