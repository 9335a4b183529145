//! The kernel backend: ioctls on an aigpu render node (`/dev/dri/renderD*`).
//!
//! This file holds the probe (which node, or precisely why none) now; the ioctl wrappers come
//! with the kernel driver's bring-up (issue 3).

use super::select::NoKernelDevice;
use super::{Backend, HostMap, KmdError, KmdResult};
use std::path::{Path, PathBuf};
use uapi::ioctl::{Cmdbuf, CtxState, Fence, Query};

/// Finds the render nodes driven by `aigpu`, or says why there are none.
pub fn probe() -> Result<Vec<PathBuf>, NoKernelDevice> {
    probe_in(Path::new("/sys"), Path::new("/dev/dri"))
}

/// [`probe`] against other roots (tests use a fake sysfs).
pub fn probe_in(sys: &Path, dev: &Path) -> Result<Vec<PathBuf>, NoKernelDevice> {
    if !sys.join("module/aigpu").exists() {
        return Err(NoKernelDevice::ModuleNotLoaded);
    }
    let mut nodes = Vec::new();
    let Ok(entries) = std::fs::read_dir(sys.join("class/drm")) else {
        return Err(NoKernelDevice::NodeMissing);
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with("renderD") {
            continue;
        }
        let driver = std::fs::read_link(e.path().join("device/driver"))
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
        let uevent = std::fs::read_to_string(e.path().join("device/uevent")).unwrap_or_default();
        if driver.as_deref() == Some("aigpu") || uevent.contains("aigpu") {
            nodes.push(dev.join(&name));
        }
    }
    nodes.sort();
    if nodes.is_empty() {
        return Err(NoKernelDevice::NodeMissing);
    }
    Ok(nodes)
}

/// An open aigpu render node.
pub struct KmdFile {
    path: PathBuf,
}

impl KmdFile {
    /// Opens and version-checks a node.
    pub fn open(path: &Path) -> Result<KmdFile, NoKernelDevice> {
        Err(NoKernelDevice::Other(format!(
            "{}: the kernel backend is not available in this build of libumd yet",
            path.display()
        )))
    }
}

fn unsupported<T>() -> KmdResult<T> {
    Err(KmdError::new(libc::EOPNOTSUPP, 0))
}

impl Backend for KmdFile {
    fn kind(&self) -> &'static str {
        "kmd"
    }
    fn location(&self) -> String {
        self.path.display().to_string()
    }
    fn query(&self) -> KmdResult<Query> {
        unsupported()
    }
    fn gem_create(&self, _size: u64) -> KmdResult<u32> {
        unsupported()
    }
    fn gem_close(&self, _handle: u32) -> KmdResult<()> {
        unsupported()
    }
    fn gem_mmap(&self, _handle: u32, _size: u64) -> KmdResult<HostMap> {
        unsupported()
    }
    fn gem_munmap(&self, _map: HostMap) -> KmdResult<()> {
        unsupported()
    }
    fn vm_bind(&self, _h: u32, _va: u64, _off: u64, _size: u64, _access: u32) -> KmdResult<()> {
        unsupported()
    }
    fn vm_unbind(&self, _va: u64, _size: u64) -> KmdResult<()> {
        unsupported()
    }
    fn ctx_create(&self, _priority: u32) -> KmdResult<u32> {
        unsupported()
    }
    fn ctx_destroy(&self, _ctx_id: u32) -> KmdResult<()> {
        unsupported()
    }
    fn submit(&self, _c: u32, _b: &[Cmdbuf], _f: &[Fence], _flags: u32) -> KmdResult<u64> {
        unsupported()
    }
    fn wait(&self, _c: u32, _s: u64, _d: u64) -> KmdResult<u64> {
        unsupported()
    }
    fn ctx_state(&self, _c: u32) -> KmdResult<CtxState> {
        unsupported()
    }
    fn debug_inject(&self, _what: u32) -> KmdResult<()> {
        unsupported()
    }
}
