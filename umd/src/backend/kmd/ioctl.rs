//! The raw ioctls: DRM core ones libumd needs (version, GEM close) and the aigpu ones, with the
//! numbers and structs of the `uapi` crate (nothing is restated here).

use uapi::ioctl as u;

/// `struct drm_version` (include/uapi/drm/drm.h).
#[repr(C)]
pub struct DrmVersion {
    /// Major.
    pub version_major: i32,
    /// Minor.
    pub version_minor: i32,
    /// Patch level.
    pub version_patchlevel: i32,
    /// In: bytes of `name`; out: length of the name.
    pub name_len: usize,
    /// Buffer for the driver name.
    pub name: *mut u8,
    /// In/out: date length.
    pub date_len: usize,
    /// Buffer for the date.
    pub date: *mut u8,
    /// In/out: description length.
    pub desc_len: usize,
    /// Buffer for the description.
    pub desc: *mut u8,
}

/// `struct drm_gem_close`.
#[repr(C)]
pub struct DrmGemClose {
    /// Handle.
    pub handle: u32,
    /// Padding.
    pub pad: u32,
}

const fn drm_ioc(dir: u32, nr: u32, size: usize) -> u32 {
    (dir << 30) | ((size as u32 & 0x3FFF) << 16) | (u::DRM_IOCTL_BASE << 8) | nr
}
/// `DRM_IOCTL_VERSION`.
pub const DRM_IOCTL_VERSION: u32 = drm_ioc(3, 0x00, std::mem::size_of::<DrmVersion>());
/// `DRM_IOCTL_GEM_CLOSE`.
pub const DRM_IOCTL_GEM_CLOSE: u32 = drm_ioc(1, 0x09, std::mem::size_of::<DrmGemClose>());

nix::ioctl_readwrite_bad!(drm_version, DRM_IOCTL_VERSION, DrmVersion);
nix::ioctl_write_ptr_bad!(drm_gem_close, DRM_IOCTL_GEM_CLOSE, DrmGemClose);
nix::ioctl_readwrite_bad!(aigpu_query, u::IOCTL_QUERY, u::Query);
nix::ioctl_readwrite_bad!(aigpu_gem_create, u::IOCTL_GEM_CREATE, u::GemCreate);
nix::ioctl_readwrite_bad!(
    aigpu_gem_mmap_offset,
    u::IOCTL_GEM_MMAP_OFFSET,
    u::GemMmapOffset
);
nix::ioctl_readwrite_bad!(aigpu_vm_bind, u::IOCTL_VM_BIND, u::VmBind);
nix::ioctl_readwrite_bad!(aigpu_vm_unbind, u::IOCTL_VM_UNBIND, u::VmUnbind);
nix::ioctl_readwrite_bad!(aigpu_ctx_create, u::IOCTL_CTX_CREATE, u::CtxCreate);
nix::ioctl_readwrite_bad!(aigpu_ctx_destroy, u::IOCTL_CTX_DESTROY, u::CtxDestroy);
nix::ioctl_readwrite_bad!(aigpu_submit, u::IOCTL_SUBMIT, u::Submit);
nix::ioctl_readwrite_bad!(aigpu_wait, u::IOCTL_WAIT, u::Wait);
nix::ioctl_readwrite_bad!(aigpu_ctx_state, u::IOCTL_CTX_STATE, u::CtxState);

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn drm_core_numbers_match_the_kernel_headers() {
        // Values of DRM_IOCTL_VERSION and DRM_IOCTL_GEM_CLOSE on x86_64 (drm.h).
        assert_eq!(DRM_IOCTL_VERSION, 0xC040_6400);
        assert_eq!(DRM_IOCTL_GEM_CLOSE, 0x4008_6409);
    }
}
