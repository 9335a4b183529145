//! aigpu UAPI v1. See `docs/uapi.md` (ioctls) and `docs/hw-spec.md` (hardware).
//!
//! This file is also the root of the module the kernel driver includes by path: keep it free of
//! crate-level attributes and of anything outside `core`.

pub mod ioctl;
pub mod packet;
pub mod pte;
pub mod reason;
pub mod regs;
pub mod ring;
pub mod version;
