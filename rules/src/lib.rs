//! The aigpu driver's rules: what aigpu.ko (`kmd/`) and the simulator backend
//! (`umd/src/backend/sim/`) both decide, written once.
//!
//! All of it lives in [`rules`], a module tree with no crate-level attributes, no `std` and no
//! `alloc`, which the kernel module includes by path next to the `uapi` source it refers to as
//! `crate::uapi` (this crate re-exports `uapi` at its root for the same path), the way the
//! device model (`vgpu/`) is shared.
#![no_std]

pub use uapi;

pub mod rules;
pub use rules::*;
