//! The `flags` fields of the UAPI as types: a raw `u32` from user space becomes one of these
//! only through `TryFrom`, which refuses undefined bits with `FLAGS_UNKNOWN` (`EINVAL`), so code
//! past the check asks the type what is set instead of masking the raw word again.

use super::Refusal;
use crate::uapi::{ioctl::SUBMIT_FLAG_NO_BLOCK, reason as r};

/// A `flags` field the UAPI reserves: must be zero, so that a meaning can be given later
/// without old kernels silently ignoring it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoFlags;

impl TryFrom<u32> for NoFlags {
    type Error = Refusal;

    fn try_from(flags: u32) -> Result<Self, Refusal> {
        if flags != 0 {
            return Err(Refusal::new(r::FLAGS_UNKNOWN));
        }
        Ok(NoFlags)
    }
}

/// `SUBMIT`'s flags (`SUBMIT_FLAG_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SubmitFlags(u32);

impl SubmitFlags {
    /// Every bit the UAPI defines.
    pub const ALL: u32 = SUBMIT_FLAG_NO_BLOCK;

    /// `SUBMIT_FLAG_NO_BLOCK`: fail with `EAGAIN` instead of waiting for ring space or an
    /// address-space slot.
    pub const fn no_block(self) -> bool {
        self.0 & SUBMIT_FLAG_NO_BLOCK != 0
    }

    /// The raw value (what user space passed).
    pub const fn bits(self) -> u32 {
        self.0
    }
}

impl TryFrom<u32> for SubmitFlags {
    type Error = Refusal;

    fn try_from(flags: u32) -> Result<Self, Refusal> {
        if flags & !Self::ALL != 0 {
            return Err(Refusal::new(r::FLAGS_UNKNOWN));
        }
        Ok(SubmitFlags(flags))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_flags_must_be_zero() {
        assert_eq!(NoFlags::try_from(0), Ok(NoFlags));
        for bit in 0..32 {
            assert_eq!(
                NoFlags::try_from(1 << bit),
                Err(Refusal::new(r::FLAGS_UNKNOWN))
            );
        }
    }

    #[test]
    fn submit_flags_take_only_defined_bits() {
        let nb = SubmitFlags::try_from(SUBMIT_FLAG_NO_BLOCK).unwrap();
        assert!(nb.no_block());
        assert_eq!(nb.bits(), SUBMIT_FLAG_NO_BLOCK);
        assert!(!SubmitFlags::try_from(0).unwrap().no_block());
        for bit in 1..32 {
            assert_eq!(
                SubmitFlags::try_from(1 << bit | SUBMIT_FLAG_NO_BLOCK),
                Err(Refusal::new(r::FLAGS_UNKNOWN))
            );
        }
    }
}
