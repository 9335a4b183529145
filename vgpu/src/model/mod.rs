//! The aigpu device model: the virtual GPU of `docs/hw-spec.md`, as one [`Device`] value.
//!
//! The driver side talks to a [`Device`] only through its register block
//! ([`Device::mmio_read32`] / [`Device::mmio_write32`] and the 64-bit variants), its interrupt
//! line ([`Device::irq_line`]) and the memory both sides share ([`PhysMem`]). Whoever hosts the
//! device (the simulator backend, or the kernel module) calls [`Device::step`] (or
//! [`Device::run_round`], a device thread's batch of steps) to let it run: each step executes at
//! most one packet (or one descriptor boundary action) on one queue; the fetch of an EXEC
//! descriptor also runs its first packet, so a one-packet command buffer is one step.
//!
//! This tree is shared verbatim with the kernel module, which includes it by path next to
//! `mod uapi;` at its crate root. Hence: no crate-level attributes, nothing from `std` or
//! `alloc` (no heap, fixed-size arrays only), no floating point, no panics on any input, the
//! contract referred to only as `crate::uapi::...` and sibling files as `super::x`.
//!
//! Files, one concern each:
//! - [`mem`]: the [`PhysMem`] and [`Clock`] interfaces the host provides.
//! - [`mmu`]: the four-level page-table walk (hw-spec §5) and a one-entry TLB.
//! - [`exec`]: fetching, decoding and executing one packet (hw-spec §6).
//! - [`device`]: registers, queues and rings, interrupts, faults, reset, fault injection.

pub mod device;
pub mod exec;
pub mod mem;
pub mod mmu;

pub use device::{Device, Step};
pub use mem::{BusError, Clock, PhysMem};
