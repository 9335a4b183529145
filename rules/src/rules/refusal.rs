//! A refused request: errno and reason travel together, with the offending element.
//!
//! Each reason has one errno it is normally returned with ([`default_errno`]); the few places
//! that pair a reason with another errno say so with [`Refusal::with_errno`].

use crate::uapi::reason as r;

/// Linux errno values (the same numbers on every architecture this driver builds for). The
/// kernel and user space both compare against these; `ERESTARTSYS` never reaches user space
/// (the kernel restarts the call or turns it into `EINTR`).
pub mod errno {
    pub const ENOENT: i32 = 2;
    pub const EINTR: i32 = 4;
    pub const EAGAIN: i32 = 11;
    pub const ENOMEM: i32 = 12;
    pub const EFAULT: i32 = 14;
    pub const EBUSY: i32 = 16;
    pub const ENODEV: i32 = 19;
    pub const EINVAL: i32 = 22;
    pub const ENOSPC: i32 = 28;
    pub const E2BIG: i32 = 7;
    pub const ETIMEDOUT: i32 = 110;
    pub const ECANCELED: i32 = 125;
    pub const ERESTARTSYS: i32 = 512;
}

/// Why a request failed: errno, `uapi::reason` code, and for a submit which command buffer or
/// in-fence (`index`) and which packet (`offset`, bytes into the command buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// Positive errno.
    pub errno: i32,
    /// `uapi::reason` code.
    pub reason: u32,
    /// The offending command buffer or in-fence of a submit (0 otherwise).
    pub index: u32,
    /// Byte offset of the offending packet in its command buffer (0 otherwise).
    pub offset: u64,
}

impl Refusal {
    /// `reason` with its usual errno.
    pub const fn new(reason: u32) -> Self {
        Self::with_errno(default_errno(reason), reason)
    }

    /// `reason` with another errno than its usual one.
    pub const fn with_errno(errno: i32, reason: u32) -> Self {
        Self {
            errno,
            reason,
            index: 0,
            offset: 0,
        }
    }

    /// The same refusal, naming element `index` of the request.
    pub const fn at(self, index: u32) -> Self {
        Self { index, ..self }
    }

    /// The same refusal, naming element `index` and the packet at byte `offset` in it.
    pub const fn at_packet(self, index: u32, offset: u64) -> Self {
        Self {
            index,
            offset,
            ..self
        }
    }
}

/// The errno each reason is returned with.
pub const fn default_errno(reason: u32) -> i32 {
    use errno::*;
    match reason {
        r::HANDLE_INVALID => ENOENT,
        r::SIZE_TOO_LARGE => E2BIG,
        r::OUT_OF_MEMORY => ENOMEM,
        r::CTX_BANNED | r::CTX_LOST | r::DEP_FAILED => ECANCELED,
        r::CTX_LIMIT | r::DEVICE_CTX_LIMIT => EBUSY,
        // A file's handle table (the kernel's idr) or its mappings are full: the kernel's ENOSPC.
        r::OBJECT_LIMIT => ENOSPC,
        r::RING_FULL | r::AS_SLOTS_BUSY => EAGAIN,
        r::DEVICE_LOST => ENODEV,
        r::BAD_USER_POINTER => EFAULT,
        r::TIMEOUT => ETIMEDOUT,
        r::PT_LIMIT => ENOSPC,
        r::INTERRUPTED => ERESTARTSYS,
        _ => EINVAL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_has_the_errno_the_uapi_documents() {
        use errno::*;
        assert_eq!(Refusal::new(r::CTX_BANNED).errno, ECANCELED);
        assert_eq!(Refusal::new(r::DEP_FAILED).errno, ECANCELED);
        assert_eq!(Refusal::new(r::AS_SLOTS_BUSY).errno, EAGAIN);
        assert_eq!(Refusal::new(r::DEVICE_LOST).errno, ENODEV);
        assert_eq!(Refusal::new(r::PACKET_MALFORMED).errno, EINVAL);
        assert_eq!(Refusal::new(r::PT_LIMIT).errno, ENOSPC);
        assert_eq!(Refusal::new(r::OBJECT_LIMIT).errno, ENOSPC);
        assert_eq!(Refusal::new(r::CTX_LIMIT).errno, EBUSY);
        assert_eq!(
            Refusal::new(r::CMDBUF_BAD).at_packet(3, 8),
            Refusal {
                errno: EINVAL,
                reason: r::CMDBUF_BAD,
                index: 3,
                offset: 8
            }
        );
    }
}
