//! The checks of a submit before anything is queued: its arguments, each command buffer's shape
//! and every packet of its stream, in the order docs/kmd.md documents. Reading the command
//! buffer's words through the file's address space is each driver's own (the kernel through the
//! GEM pages of the mappings, the simulator through its physical memory); a buffer that is not
//! mapped readable is refused by the caller with `CMDBUF_NOT_MAPPED` between [`cmdbuf_shape`] and
//! [`packet_stream`].
//!
//! Operand addresses are left to the GPU's MMU: a bad one is a page fault of the submitting
//! context when the work runs.

use super::flags::{NoFlags, SubmitFlags};
use super::Refusal;
use crate::uapi::ioctl::{Cmdbuf, MAX_CMDBUFS, MAX_IN_FENCES};
use crate::uapi::{packet, reason as r, ring};

/// Flags, then the number of command buffers, then the number of in-fences. Returns the flags,
/// checked.
pub fn arguments(flags: u32, num_cmdbufs: u32, num_in_fences: u32) -> Result<SubmitFlags, Refusal> {
    let flags = SubmitFlags::try_from(flags)?;
    if num_cmdbufs == 0 || num_cmdbufs > MAX_CMDBUFS {
        return Err(Refusal::new(r::CMDBUF_COUNT));
    }
    if num_in_fences > MAX_IN_FENCES {
        return Err(Refusal::new(r::FENCE_COUNT));
    }
    Ok(flags)
}

/// Command buffer `index`: no flags, a non-zero size that is a multiple of 4 and at most
/// `ring::MAX_CMD_SIZE`, at a 4-byte aligned VA.
pub fn cmdbuf_shape(index: u32, cb: &Cmdbuf) -> Result<(), Refusal> {
    NoFlags::try_from(cb.flags).map_err(|e| e.at(index))?;
    if cb.size == 0
        || !cb.size.is_multiple_of(4)
        || !cb.va.is_multiple_of(4)
        || cb.size > ring::MAX_CMD_SIZE
    {
        return Err(Refusal::new(r::CMDBUF_BAD).at(index));
    }
    Ok(())
}

/// The largest command buffer of a submit that can pass [`cmdbuf_shape`], in words: what a
/// scratch buffer for [`packet_stream`] needs (one that cannot pass is refused in its turn and
/// must not make the scratch huge first).
pub fn scratch_words(cmdbufs: &[Cmdbuf]) -> usize {
    cmdbufs
        .iter()
        .filter(|c| c.size <= ring::MAX_CMD_SIZE)
        .map(|c| (c.size / 4) as usize)
        .max()
        .unwrap_or(0)
}

/// Every packet of command buffer `index` (its words) well formed per the decoder the device
/// runs; `hang`: the debug HANG packet is enabled. The refusal names the packet's byte offset.
pub fn packet_stream(index: u32, words: &[u32], hang: bool) -> Result<(), Refusal> {
    let mut at = 0;
    while let Some(&header) = words.get(at) {
        let bad = |reason| Refusal::new(reason).at_packet(index, at as u64 * 4);
        let n =
            packet::packet_words(header, words.len() - at).map_err(|_| bad(r::PACKET_MALFORMED))?;
        let Some(p) = words.get(at..at + n) else {
            return Err(bad(r::PACKET_MALFORMED));
        };
        match packet::decode(p, hang) {
            Ok(_) => {}
            Err(packet::Malformed::HangDisabled) => return Err(bad(r::PACKET_HANG_DISABLED)),
            Err(_) => return Err(bad(r::PACKET_MALFORMED)),
        }
        at += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uapi::ioctl::SUBMIT_FLAG_NO_BLOCK;

    #[test]
    fn arguments_in_order() {
        assert_eq!(arguments(2, 0, 99), Err(Refusal::new(r::FLAGS_UNKNOWN)));
        assert_eq!(arguments(0, 0, 99), Err(Refusal::new(r::CMDBUF_COUNT)));
        assert_eq!(
            arguments(0, MAX_CMDBUFS + 1, 0),
            Err(Refusal::new(r::CMDBUF_COUNT))
        );
        assert_eq!(
            arguments(0, 1, MAX_IN_FENCES + 1),
            Err(Refusal::new(r::FENCE_COUNT))
        );
        let flags = arguments(SUBMIT_FLAG_NO_BLOCK, MAX_CMDBUFS, MAX_IN_FENCES).unwrap();
        assert!(flags.no_block());
        assert!(!arguments(0, 1, 0).unwrap().no_block());
    }

    #[test]
    fn shape_and_stream_name_the_buffer_and_packet() {
        let cb = |va, size, flags| Cmdbuf { va, size, flags };
        assert_eq!(
            cmdbuf_shape(1, &cb(0x1000, 8, 1)),
            Err(Refusal::new(r::FLAGS_UNKNOWN).at(1))
        );
        assert_eq!(
            cmdbuf_shape(2, &cb(0x1002, 8, 0)),
            Err(Refusal::new(r::CMDBUF_BAD).at(2))
        );
        assert_eq!(
            cmdbuf_shape(0, &cb(0x1000, 0, 0)),
            Err(Refusal::new(r::CMDBUF_BAD))
        );
        assert_eq!(cmdbuf_shape(0, &cb(0x1000, 8, 0)), Ok(()));
        let nop = packet::header(packet::OP_NOP, 0, 1);
        assert_eq!(packet_stream(3, &[nop, nop], false), Ok(()));
        assert_eq!(
            packet_stream(3, &[nop, 0], false),
            Err(Refusal::new(r::PACKET_MALFORMED).at_packet(3, 4))
        );
        let hang = packet::header(packet::OP_HANG, 0, 1);
        assert_eq!(
            packet_stream(0, &[nop, hang], false),
            Err(Refusal::new(r::PACKET_HANG_DISABLED).at_packet(0, 4))
        );
        assert_eq!(packet_stream(0, &[nop, hang], true), Ok(()));
        assert_eq!(
            scratch_words(&[cb(0, 16, 0), cb(0, ring::MAX_CMD_SIZE + 4, 0)]),
            4
        );
    }
}
