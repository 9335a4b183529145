//! The kernel backend: ioctls on an aigpu render node (`/dev/dri/renderD*`).
//!
//! [`probe`] finds the nodes whose DRM driver is `aigpu`, or says precisely why there are none
//! (module not loaded, node missing, permission denied); [`KmdFile::open`] checks the UAPI
//! version. Every other method is one ioctl: the kernel writes the failure's `reason` into the
//! argument struct next to the errno (docs/kmd.md), and both are returned as a [`KmdError`].

pub mod ioctl;

use super::select::NoKernelDevice;
use super::{Backend, HostMap, KmdError, KmdResult};
use nix::errno::Errno;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use uapi::ioctl::{self as u, Cmdbuf, CtxState, Fence, Query};

/// Finds the render nodes driven by `aigpu`, or says why there are none. A device's index is
/// its node's place among them, whatever its state: a lost device, or one with another UAPI,
/// keeps its index (its open says so) rather than handing it to the next device, so an index
/// names the same GPU in every process. Only when none can be used is the most specific reason
/// returned instead.
pub fn probe() -> Result<Vec<PathBuf>, NoKernelDevice> {
    probe_in(Path::new("/sys"), Path::new("/dev/dri"))
}

/// [`probe`] against other roots (tests use a fake tree).
pub fn probe_in(sys: &Path, dev: &Path) -> Result<Vec<PathBuf>, NoKernelDevice> {
    if !sys.join("module/aigpu").exists() {
        return Err(NoKernelDevice::ModuleNotLoaded);
    }
    let mut names: Vec<String> = std::fs::read_dir(dev)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.retain(|n| n.starts_with("renderD"));
    names.sort();
    // Every aigpu node in order (an index is a place in this list), and whether one works.
    let mut nodes = Vec::new();
    let mut usable = false;
    // The first node we may not open (device 0's, when every node is closed to this user): the
    // one the caller of a device-0 open needs, not the last one probed.
    let mut denied = None;
    let mut mismatch = None;
    let mut lost = None;
    for name in names {
        let path = dev.join(&name);
        match open_node(&path) {
            Ok(f) => {
                if driver_name(&f).as_deref() != Some(uapi::DRIVER_NAME) {
                    continue;
                }
                drop(f);
                match KmdFile::open(&path) {
                    Ok(_) => {
                        usable = true;
                        nodes.push(path);
                    }
                    Err(e @ NoKernelDevice::VersionMismatch { .. }) => {
                        mismatch = Some(e);
                        nodes.push(path);
                    }
                    Err(e @ NoKernelDevice::Lost(_)) => {
                        lost = Some(e);
                        nodes.push(path);
                    }
                    Err(NoKernelDevice::PermissionDenied(n)) => {
                        denied.get_or_insert(n);
                    }
                    Err(_) => {}
                }
            }
            Err(Errno::EACCES) | Err(Errno::EPERM) => {
                denied.get_or_insert_with(|| path.display().to_string());
            }
            Err(_) => {}
        }
    }
    if !usable {
        // The most specific finding wins: a node whose device is lost, one that answered with
        // the wrong UAPI, one we may not open, then none at all.
        return Err(lost.or(mismatch).unwrap_or(match denied {
            Some(node) => NoKernelDevice::PermissionDenied(node),
            None => NoKernelDevice::NodeMissing,
        }));
    }
    Ok(nodes)
}

fn open_node(path: &Path) -> Result<File, Errno> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
}

/// The DRM driver name of an open node (`DRM_IOCTL_VERSION`).
pub fn driver_name(f: &File) -> Option<String> {
    let mut name = [0u8; 64];
    let mut v = ioctl::DrmVersion {
        version_major: 0,
        version_minor: 0,
        version_patchlevel: 0,
        name_len: name.len(),
        name: name.as_mut_ptr(),
        date_len: 0,
        date: std::ptr::null_mut(),
        desc_len: 0,
        desc: std::ptr::null_mut(),
    };
    // SAFETY: v points to valid buffers of the advertised lengths for the duration of the call.
    unsafe { ioctl::drm_version(f.as_raw_fd(), &mut v) }.ok()?;
    let n = v.name_len.min(name.len());
    Some(String::from_utf8_lossy(&name[..n]).into_owned())
}

/// An open aigpu render node.
pub struct KmdFile {
    path: PathBuf,
    file: File,
}

/// Runs one aigpu ioctl and turns a failure into errno + the reason the kernel wrote.
fn call<T>(
    f: &File,
    arg: &mut T,
    reason: impl Fn(&T) -> u32,
    ioctl: unsafe fn(i32, *mut T) -> nix::Result<i32>,
) -> KmdResult<()> {
    // SAFETY: `arg` is a valid, exclusively borrowed argument struct of the type the ioctl
    // number encodes; the kernel reads and writes exactly size_of::<T>() bytes of it.
    match unsafe { ioctl(f.as_raw_fd(), arg) } {
        Ok(_) => Ok(()),
        Err(e) => Err(KmdError::new(e as i32, reason(arg))),
    }
}

impl KmdFile {
    /// Opens a node and checks that it speaks a UAPI this libumd can drive.
    pub fn open(path: &Path) -> Result<KmdFile, NoKernelDevice> {
        let file = open_node(path).map_err(|e| match e {
            Errno::EACCES | Errno::EPERM => {
                NoKernelDevice::PermissionDenied(path.display().to_string())
            }
            e => NoKernelDevice::Other(format!("cannot open {}: {}", path.display(), e.desc())),
        })?;
        let f = KmdFile {
            path: path.to_path_buf(),
            file,
        };
        let q = f.query().map_err(|e| {
            if e.errno == libc::ENODEV {
                NoKernelDevice::Lost(path.display().to_string())
            } else {
                NoKernelDevice::Other(format!(
                    "query on {} failed: {}",
                    path.display(),
                    e.describe()
                ))
            }
        })?;
        if !uapi::compatible(q.uapi_major, q.uapi_minor) {
            return Err(NoKernelDevice::VersionMismatch {
                kernel: (q.uapi_major, q.uapi_minor),
            });
        }
        Ok(f)
    }
}

impl Backend for KmdFile {
    fn kind(&self) -> &'static str {
        "kmd"
    }
    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn query(&self) -> KmdResult<Query> {
        let mut q = Query::default();
        call(&self.file, &mut q, |a| a.reason, ioctl::aigpu_query)?;
        Ok(q)
    }

    fn gem_create(&self, size: u64) -> KmdResult<u32> {
        let mut a = u::GemCreate {
            size,
            ..Default::default()
        };
        call(&self.file, &mut a, |a| a.reason, ioctl::aigpu_gem_create)?;
        Ok(a.handle)
    }

    fn gem_close(&self, handle: u32) -> KmdResult<()> {
        let a = ioctl::DrmGemClose { handle, pad: 0 };
        // SAFETY: a valid drm_gem_close for the duration of the call.
        unsafe { ioctl::drm_gem_close(self.file.as_raw_fd(), &a) }
            .map(|_| ())
            .map_err(|e| KmdError::new(e as i32, 0))
    }

    fn gem_mmap(&self, handle: u32, size: u64) -> KmdResult<HostMap> {
        let mut a = u::GemMmapOffset {
            handle,
            ..Default::default()
        };
        call(
            &self.file,
            &mut a,
            |a| a.reason,
            ioctl::aigpu_gem_mmap_offset,
        )?;
        let len = std::num::NonZeroUsize::new(size as usize)
            .ok_or(KmdError::new(libc::EINVAL, uapi::reason::SIZE_ZERO))?;
        // SAFETY: a shared mapping of the DRM file at the offset the kernel gave for this
        // object; the kernel bounds it to the object's size.
        let p = unsafe {
            nix::sys::mman::mmap(
                None,
                len,
                nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
                nix::sys::mman::MapFlags::MAP_SHARED,
                &self.file,
                a.offset as libc::off_t,
            )
        }
        .map_err(|e| KmdError::new(e as i32, 0))?;
        Ok(HostMap {
            ptr: p.as_ptr() as *mut u8,
            len: size,
        })
    }

    fn gem_munmap(&self, map: HostMap) -> KmdResult<()> {
        let Some(p) = std::ptr::NonNull::new(map.ptr as *mut libc::c_void) else {
            return Ok(());
        };
        // SAFETY: (ptr, len) is a mapping gem_mmap created and nobody uses any more.
        unsafe { nix::sys::mman::munmap(p, map.len as usize) }
            .map_err(|e| KmdError::new(e as i32, 0))
    }

    fn vm_bind(
        &self,
        handle: u32,
        va: u64,
        bo_offset: u64,
        size: u64,
        access: u32,
    ) -> KmdResult<()> {
        let mut a = u::VmBind {
            handle,
            va,
            bo_offset,
            size,
            access,
            ..Default::default()
        };
        call(&self.file, &mut a, |a| a.reason, ioctl::aigpu_vm_bind)
    }

    fn vm_unbind(&self, va: u64, size: u64) -> KmdResult<()> {
        let mut a = u::VmUnbind {
            va,
            size,
            ..Default::default()
        };
        call(&self.file, &mut a, |a| a.reason, ioctl::aigpu_vm_unbind)
    }

    fn ctx_create(&self, priority: u32) -> KmdResult<u32> {
        let mut a = u::CtxCreate {
            priority,
            ..Default::default()
        };
        call(&self.file, &mut a, |a| a.reason, ioctl::aigpu_ctx_create)?;
        Ok(a.ctx_id)
    }

    fn ctx_destroy(&self, ctx_id: u32) -> KmdResult<()> {
        let mut a = u::CtxDestroy {
            ctx_id,
            ..Default::default()
        };
        call(&self.file, &mut a, |a| a.reason, ioctl::aigpu_ctx_destroy)
    }

    fn submit(
        &self,
        ctx_id: u32,
        cmdbufs: &[Cmdbuf],
        in_fences: &[Fence],
        flags: u32,
    ) -> KmdResult<u64> {
        let mut a = u::Submit {
            ctx_id,
            flags,
            cmdbufs: cmdbufs.as_ptr() as u64,
            in_fences: in_fences.as_ptr() as u64,
            num_cmdbufs: cmdbufs.len() as u32,
            num_in_fences: in_fences.len() as u32,
            ..Default::default()
        };
        // SAFETY: the arrays behind the user pointers outlive the call; the kernel only reads
        // num_* elements of each.
        match unsafe { ioctl::aigpu_submit(self.file.as_raw_fd(), &mut a) } {
            Ok(_) => Ok(a.out_seqno),
            Err(e) => Err(KmdError {
                errno: e as i32,
                reason: a.reason,
                bad_index: a.bad_index,
                bad_offset: a.bad_offset,
            }),
        }
    }

    fn wait(&self, ctx_id: u32, seqno: u64, deadline_ns: u64) -> KmdResult<u64> {
        let mut a = u::Wait {
            ctx_id,
            seqno,
            timeout_ns: deadline_ns,
            ..Default::default()
        };
        call(&self.file, &mut a, |a| a.reason, ioctl::aigpu_wait)?;
        Ok(a.completed_seqno)
    }

    fn ctx_state(&self, ctx_id: u32) -> KmdResult<CtxState> {
        let mut a = CtxState {
            ctx_id,
            ..Default::default()
        };
        call(&self.file, &mut a, |a| a.reason, ioctl::aigpu_ctx_state)?;
        Ok(a)
    }

    fn debug_inject(&self, what: u32) -> KmdResult<()> {
        // The kernel exposes fault injection as root-only debugfs files (issue 4).
        let name = match what {
            1 => "inject_mem_error",
            2 => "inject_reset_failure",
            3 => "inject_fall_off_bus",
            _ => return Err(KmdError::new(libc::EINVAL, uapi::reason::FLAGS_UNKNOWN)),
        };
        let minor = self
            .path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("renderD"))
            .unwrap_or("");
        let path = format!("/sys/kernel/debug/dri/{minor}/{name}");
        std::fs::write(&path, b"1")
            .map_err(|e| KmdError::new(e.raw_os_error().unwrap_or(libc::EIO), 0))
    }
}
