//! libumd: the aigpu user-mode driver.
//!
//! C callers use `include/umd.h` (the [`abi`] module); Rust callers may use the modules
//! directly. Layers, top down: [`abi`] (C surface, panic and error capture) → objects
//! ([`device`], [`context`], [`memory`], [`cmdbuf`], [`submit`]) → [`backend`] (the UAPI, one
//! method per ioctl: the kernel driver or the in-process simulator).

pub mod abi;
pub mod backend;
pub mod caller;
pub mod cmdbuf;
pub mod context;
pub mod device;
pub mod errmap;
pub mod error;
pub mod fork;
pub mod handle;
pub mod log;
pub mod memory;
pub mod pci;
pub mod registry;
pub mod submit;
pub mod util;

pub use error::{umdResult, UmdError, UmdResult};
