//! Backend selection (`UMD_BACKEND=auto|kmd|sim`, design §4): `kmd` uses the kernel driver or
//! fails with the precise reason; `sim` uses the simulator; `auto` (the default) uses the kernel
//! driver when there is one and otherwise the simulator, saying why in one WARN line.

use super::Backend;
use crate::error::{umdResult, UmdError};

/// The user's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Kernel if present, else simulator.
    Auto,
    /// Kernel only.
    Kmd,
    /// Simulator only.
    Sim,
}

/// Parses `UMD_BACKEND`.
pub fn choice() -> Result<Choice, UmdError> {
    match std::env::var("UMD_BACKEND").as_deref() {
        Err(_) | Ok("") | Ok("auto") => Ok(Choice::Auto),
        Ok("kmd") => Ok(Choice::Kmd),
        Ok("sim") => Ok(Choice::Sim),
        Ok(other) => Err(UmdError::new(
            umdResult::UMD_ERR_INIT_BAD_CONFIG,
            format!("UMD_BACKEND={other:?} is not one of auto, kmd, sim."),
        )),
    }
}

/// Why there is no usable kernel device (the same diagnosis `umd-smi` prints).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoKernelDevice {
    /// `/sys/module/aigpu` does not exist.
    ModuleNotLoaded,
    /// The module is loaded but no render node belongs to it.
    NodeMissing,
    /// A node exists but cannot be opened.
    PermissionDenied(String),
    /// The kernel speaks a UAPI this libumd cannot drive.
    VersionMismatch { kernel: (u32, u32) },
    /// The node answers, but the driver says its device is lost (ENODEV).
    Lost(String),
    /// Any other failure (with its text).
    Other(String),
}

impl NoKernelDevice {
    /// One line for logs and details.
    pub fn describe(&self) -> String {
        match self {
            NoKernelDevice::ModuleNotLoaded => {
                "kernel module aigpu is not loaded (/sys/module/aigpu missing; try 'modprobe aigpu')".into()
            }
            NoKernelDevice::NodeMissing => {
                "module aigpu is loaded but no /dev/dri/renderD* node belongs to it".into()
            }
            NoKernelDevice::PermissionDenied(node) => {
                format!("permission denied opening {node} (add the user to the 'render' group)")
            }
            NoKernelDevice::VersionMismatch { kernel } => format!(
                "kernel aigpu UAPI {}.{} cannot be driven by this libumd (UAPI {}.{}, needs kernel {}.{}+)",
                kernel.0,
                kernel.1,
                uapi::UAPI_MAJOR,
                uapi::UAPI_MINOR,
                uapi::UAPI_MAJOR,
                uapi::MIN_KERNEL_MINOR
            ),
            NoKernelDevice::Lost(node) => format!(
                "{node}: the aigpu device is lost (the driver answers ENODEV after a failed reset or a fall off the bus; {}, or reload the module: rmmod aigpu && modprobe aigpu)",
                rules::lost::WORKS_AGAIN
            ),
            NoKernelDevice::Other(s) => s.clone(),
        }
    }
    /// The diagnosis as a name (`module_not_loaded`, `node_missing`, `permission_denied`,
    /// `version_mismatch`, `lost`, `other`): the process story's `backend_why` and a published
    /// simulator device's `owner` file (`sim/publish.rs`) carry it.
    pub fn name(&self) -> &'static str {
        match self {
            NoKernelDevice::ModuleNotLoaded => "module_not_loaded",
            NoKernelDevice::NodeMissing => "node_missing",
            NoKernelDevice::PermissionDenied(_) => "permission_denied",
            NoKernelDevice::VersionMismatch { .. } => "version_mismatch",
            NoKernelDevice::Lost(_) => "lost",
            NoKernelDevice::Other(_) => "other",
        }
    }

    /// The result code this diagnosis maps to when the kernel backend was required.
    pub fn code(&self) -> umdResult {
        match self {
            NoKernelDevice::PermissionDenied(_) => umdResult::UMD_ERR_INIT_PERMISSION_DENIED,
            NoKernelDevice::VersionMismatch { .. } => umdResult::UMD_ERR_INIT_VERSION_MISMATCH,
            NoKernelDevice::Lost(_) => umdResult::UMD_ERR_DEVICE_LOST,
            _ => umdResult::UMD_ERR_INIT_BACKEND_UNAVAILABLE,
        }
    }
}

/// Which backend serves this process, resolved once.
#[derive(Clone, Debug)]
pub enum Resolved {
    /// Kernel render nodes, in index order.
    Kmd(Vec<std::path::PathBuf>),
    /// The simulator, and why (None when asked for explicitly).
    Sim(Option<String>),
}

/// Resolves `UMD_BACKEND` against what the machine has.
pub fn resolve() -> Result<Resolved, UmdError> {
    let c = choice()?;
    if c == Choice::Sim {
        super::sim::publish::set_backend_why("requested");
        return Ok(Resolved::Sim(None));
    }
    match super::kmd::probe() {
        Ok(nodes) => Ok(Resolved::Kmd(nodes)),
        Err(why) if c == Choice::Kmd => Err(UmdError::new(
            why.code(),
            format!("UMD_BACKEND=kmd: {}.", why.describe()),
        )),
        Err(why) => {
            super::sim::publish::set_backend_why(why.name());
            let d = why.describe();
            tracing::warn!(reason = %d, "no aigpu kernel device; using the simulator backend (UMD_BACKEND=auto)");
            Ok(Resolved::Sim(Some(d)))
        }
    }
}

/// Opens device `index` on the resolved backend.
pub fn open(r: &Resolved, index: u32) -> Result<Box<dyn Backend>, UmdError> {
    match r {
        Resolved::Kmd(nodes) => {
            let node = nodes.get(index as usize).ok_or_else(|| {
                UmdError::new(
                    umdResult::UMD_ERR_DEVICE_NOT_FOUND,
                    format!("device index {index} >= {} aigpu devices.", nodes.len()),
                )
            })?;
            super::kmd::KmdFile::open(node)
                .map(|f| Box::new(f) as Box<dyn Backend>)
                .map_err(|why| {
                    UmdError::new(
                        why.code(),
                        format!("opening {}: {}.", node.display(), why.describe()),
                    )
                })
        }
        Resolved::Sim(_) => {
            let n = super::sim::device_count()
                .map_err(|e| UmdError::new(umdResult::UMD_ERR_INIT_BAD_CONFIG, e))?;
            if index >= n {
                return Err(UmdError::new(
                    umdResult::UMD_ERR_DEVICE_NOT_FOUND,
                    format!("device index {index} >= {n} simulated devices (UMD_SIM_DEVICES)."),
                ));
            }
            let f = super::sim::SimFile::open(index).map_err(|e| match e {
                super::sim::OpenError::Config(s) => UmdError::new(
                    umdResult::UMD_ERR_INIT_BAD_CONFIG,
                    format!("simulated device {index}: {s}."),
                ),
                super::sim::OpenError::Kmd(k) => crate::errmap::kmd_error(
                    crate::errmap::Op::Other,
                    k,
                    &format!("opening simulated device {index}"),
                ),
            })?;
            // As `KmdFile::open`: a file opened while the device is lost and still in use is
            // lost from the start (`rules::lost::power_cycles_at_open`), said at the open.
            match f.query() {
                Err(e) if e.errno == libc::ENODEV => Err(UmdError::new(
                    umdResult::UMD_ERR_DEVICE_LOST,
                    format!("opening simulated device {index}: the device is lost (a failed reset or a fall off the bus); {}.", rules::lost::WORKS_AGAIN),
                )),
                _ => Ok(Box::new(f) as Box<dyn Backend>),
            }
        }
    }
}

/// Number of devices on the resolved backend.
pub fn count(r: &Resolved) -> Result<u32, UmdError> {
    match r {
        Resolved::Kmd(nodes) => Ok(nodes.len() as u32),
        Resolved::Sim(_) => super::sim::device_count()
            .map_err(|e| UmdError::new(umdResult::UMD_ERR_INIT_BAD_CONFIG, e)),
    }
}
