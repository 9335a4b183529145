//! The aigpu driver's rules, written once for aigpu.ko and the simulator backend.
//!
//! Every decision both drivers make the same way lives here: the state each keeps per context
//! and every change to it ([`context`]), a job in a ring ([`job`]), the errno that goes with each
//! reason ([`refusal`]), the UAPI's `flags` fields as types ([`flags`]), the checks of a submit and its packet stream ([`submit`]), what an
//! in-fence means ([`fence`]), which hardware queue a context gets and which address-space slot a
//! file may take ([`queue`]), ring arithmetic ([`ring`]), who is guilty of a fault and what an
//! engine reset does to every queued job, including jobs whose inputs will never be written
//! ([`recovery`]), the arguments of VM_BIND and VM_UNBIND ([`vm`]), the name tables ([`names`]), the register writes that program the device ([`program`]) and the line formats of dmesg and debugfs that the
//! tools read ([`report`], the device-level ones in [`lost`], their shape and leads in [`lead`]).
//!
//! What stays in each driver is what is its own: locks, sleeping and waking, work items and
//! threads, memory (DMA, GEM, the simulator's physical memory), user copies, and the containers
//! that hold contexts and jobs (the kernel's `RBTree`/`KVec`, the simulator's `HashMap`/`Vec`):
//! the rules here take plain values and small views, so they need neither.
//!
//! This tree is shared verbatim with the kernel module, which includes it by path next to
//! `mod uapi;` at its crate root. Hence: no crate-level attributes, nothing from `std` or `alloc`,
//! no floating point, no panics on any input, the contract referred to only as `crate::uapi::...`
//! and sibling files as `super::x`.

pub mod context;
pub mod fence;
pub mod flags;
pub mod job;
pub mod lead;
pub mod lost;
pub mod names;
pub mod program;
pub mod queue;
pub mod recovery;
pub mod refusal;
pub mod report;
pub mod ring;
pub mod submit;
pub mod vm;

pub use context::{Context, FenceSlot, FenceSlots};
pub use fence::{Ban, FaultInfo, Producer};
pub use refusal::Refusal;
