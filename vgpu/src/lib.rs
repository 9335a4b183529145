//! The aigpu virtual GPU ("the silicon"), specified by `docs/hw-spec.md`.
//!
//! All of it lives in [`model`], a module tree with no crate-level attributes, no `std` and no
//! `alloc`, which the kernel module includes by path, next to the `uapi` source it depends on
//! (it refers to the contract as `crate::uapi`, which this crate provides by re-exporting the
//! `uapi` crate at its root: see `model/mod.rs`).
#![no_std]

pub use uapi;

pub mod model;
