//! Process-wide object tables behind the C handles, and the backend chosen for this process.

use crate::backend::select::{self, Resolved};
use crate::cmdbuf::CmdBuf;
use crate::context::Context;
use crate::device::Device;
use crate::error::UmdResult;
use crate::handle::{Kind, Table, Tombstone};
use crate::memory::{Buffer, BufferRef};
use std::sync::OnceLock;

/// Open devices.
pub static DEVICES: Table<Device> = Table::new(Kind::Device);
/// Live contexts.
pub static CONTEXTS: Table<Context> = Table::new(Kind::Context);
/// Live buffers; a destroyed buffer's handle says which buffer it was, where it was allocated
/// and where it was freed (`umdMemFree` twice, a use after free).
pub static BUFFERS: Table<Buffer, BufferRef> = Table::with_tombstone(
    Kind::Buffer,
    Tombstone {
        keep: Buffer::tombstone,
        describe: Buffer::describe_tombstone,
    },
);
/// Live command buffers.
pub static CMDBUFS: Table<CmdBuf> = Table::new(Kind::CmdBuf);

/// In a forked child (`crate::fork`'s handler): no inherited object counts as the child's.
/// Atomic stores only.
pub fn forget_inherited_counts() {
    DEVICES.forget_inherited();
    CONTEXTS.forget_inherited();
    BUFFERS.forget_inherited();
    CMDBUFS.forget_inherited();
}

static RESOLVED: OnceLock<UmdResult<Resolved>> = OnceLock::new();

/// The backend for this process (`UMD_BACKEND`), decided on first use.
pub fn resolved() -> UmdResult<Resolved> {
    RESOLVED.get_or_init(select::resolve).clone()
}
