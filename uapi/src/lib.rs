//! The aigpu contract between the kernel driver, user space and the (virtual) hardware.
//!
//! Everything lives in [`v1`], a plain module tree with no crate-level attributes, no `std` and
//! no `alloc`, so the kernel module can include it with
//! `#[path = "../uapi/src/v1/mod.rs"] mod uapi;` and every constant exists exactly once.
#![no_std]

pub mod v1;
pub use v1::version::*;
pub use v1::*;
