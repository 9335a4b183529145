//! Maps what the kernel driver (or simulator) said — errno + reason — to a `umdResult` and a
//! message that names both, so a caller never sees a bare EINVAL.

use crate::backend::KmdError;
use crate::error::{umdResult, UmdError};
use uapi::reason as r;

/// Which call the error came from (the same reason means different things in different calls).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Memory: create, map, bind, unbind.
    Memory,
    /// Context create/destroy/state.
    Context,
    /// Submit.
    Submit,
    /// Wait.
    Wait,
    /// Anything else.
    Other,
}

/// The `umdResult` for a backend failure.
pub fn code_for(op: Op, e: &KmdError) -> umdResult {
    use umdResult::*;
    if e.errno == libc::ENODEV || e.reason == r::DEVICE_LOST {
        return UMD_ERR_DEVICE_LOST;
    }
    match (op, e.reason) {
        (_, r::OUT_OF_MEMORY) => UMD_ERR_MEM_OUT_OF_MEMORY,
        // The file's page tables are at their budget: memory the caller can give back (unbind,
        // trim the pool), like device memory, so the same code (the pool trims and retries).
        (_, r::PT_LIMIT) => UMD_ERR_MEM_OUT_OF_MEMORY,
        // The file's handles or mappings are at their limit: the same (freeing buffers and
        // trimming the pool give them back).
        (_, r::OBJECT_LIMIT) => UMD_ERR_MEM_OUT_OF_MEMORY,
        (_, r::SIZE_TOO_LARGE) => UMD_ERR_MEM_TOO_LARGE,
        (_, r::CTX_BANNED | r::CTX_LOST) => UMD_ERR_CTX_LOST,
        (_, r::DEP_FAILED) => UMD_ERR_CTX_DEPENDENCY_FAILED,
        (_, r::CTX_LIMIT | r::DEVICE_CTX_LIMIT) => UMD_ERR_CTX_LIMIT,
        (_, r::CTX_INVALID) => UMD_ERR_INVALID_HANDLE,
        (_, r::PRIORITY_INVALID) => UMD_ERR_INVALID_ARGUMENT,
        (
            Op::Submit,
            r::PACKET_MALFORMED | r::PACKET_HANG_DISABLED | r::CMDBUF_BAD | r::CMDBUF_NOT_MAPPED,
        ) => UMD_ERR_SUBMIT_INVALID_PACKET,
        (Op::Submit, r::RING_FULL) => UMD_ERR_SUBMIT_RING_FULL,
        (Op::Submit, r::FENCE_CTX_INVALID | r::FENCE_NOT_SUBMITTED | r::FENCE_COUNT) => {
            UMD_ERR_SUBMIT_BAD_WAIT_FENCE
        }
        (Op::Wait, r::FENCE_NOT_SUBMITTED) => UMD_ERR_SYNC_FENCE_NEVER_SUBMITTED,
        (Op::Wait, _) if e.errno == libc::ETIMEDOUT => UMD_ERR_SYNC_TIMEOUT,
        // A blocking submit waits for ring space: a signal interrupts it like a wait (nothing
        // was queued).
        (Op::Wait | Op::Submit, _) if e.errno == libc::EINTR => UMD_ERR_SYNC_INTERRUPTED,
        _ if e.errno == libc::ENOMEM => UMD_ERR_MEM_OUT_OF_MEMORY,
        _ => UMD_ERR_INTERNAL_KMD_UNEXPECTED,
    }
}

/// What a reason means for the caller beyond its one-line text, where that needs numbers
/// (appended to the detail of the error).
pub fn reason_hint(reason: u32) -> Option<String> {
    match reason {
        r::PT_LIMIT => Some(format!(
            "The file's page-table budget is {} tables of 4 KiB ({} MiB, the top-level table \
             included) and the tables it holds plus those this bind needs would pass it; unbind \
             mappings, or keep them close together (one leaf table maps 2 MiB, one L1 table 1 GiB)",
            rules::vm::MAX_PT_TABLES,
            rules::vm::MAX_PT_TABLES * 4 / 1024
        )),
        r::OBJECT_LIMIT => Some(format!(
            "One file may hold at most {} GPU mappings (and as many object handles as the kernel's \
             handle table takes); free buffers or trim the pool (umdMemTrim) to give some back",
            rules::vm::MAX_MAPPINGS
        )),
        _ => None,
    }
}

/// A `UmdError` for a backend failure of `what` (e.g. "GEM create of 4096 bytes").
#[track_caller]
pub fn kmd_error(op: Op, e: KmdError, what: &str) -> UmdError {
    let code = code_for(op, &e);
    let hint = reason_hint(e.reason)
        .map(|h| format!(" {h}."))
        .unwrap_or_default();
    UmdError::new(code, format!("{what} failed: {}.{hint}", e.describe())).kmd(e.errno, e.reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bind refused for a file limit the caller can give back from: UMD_ERR_MEM_OUT_OF_MEMORY
    /// (the pool trims and retries), with the kernel's errno and reason and `names` (the limit)
    /// in the detail.
    fn assert_memory_limit(e: KmdError, reason: &str, names: &str) {
        let (errno, kmd_reason) = (e.errno, e.reason);
        assert_eq!(errno, libc::ENOSPC);
        let u = kmd_error(Op::Memory, e, "VM bind of 4096 bytes at 0x40100000");
        assert_eq!(
            (u.code, u.os_errno, u.kmd_reason),
            (umdResult::UMD_ERR_MEM_OUT_OF_MEMORY, errno, kmd_reason)
        );
        assert!(u.message.contains(reason), "{}", u.message);
        assert!(u.message.contains(names), "{}", u.message);
    }

    #[test]
    fn mapping_limit_maps_to_out_of_memory_and_names_the_limit() {
        let e = KmdError::from(rules::vm::mapping_limit(rules::vm::MAX_MAPPINGS).unwrap_err());
        assert_memory_limit(e, "OBJECT_LIMIT (32)", "at most 65536 GPU mappings");
    }

    #[test]
    fn page_table_budget_maps_to_out_of_memory_and_names_the_budget() {
        assert_memory_limit(
            KmdError::new(libc::ENOSPC, r::PT_LIMIT),
            "PT_LIMIT (36)",
            "page-table budget is 2048 tables of 4 KiB (8 MiB",
        );
    }

    /// Both context limits are UMD_ERR_CTX_LIMIT; which one it was stays in the detail (the
    /// reason's name), so nobody has to guess between the file's 64 and the device's 512.
    #[test]
    fn file_and_device_context_limits_map_to_ctx_limit_and_say_which() {
        for (reason, name) in [
            (
                r::CTX_LIMIT,
                "CTX_LIMIT (16): too many contexts on this file (64)",
            ),
            (
                r::DEVICE_CTX_LIMIT,
                "DEVICE_CTX_LIMIT (34): the device has no context left",
            ),
        ] {
            let e = KmdError::new(libc::EBUSY, reason);
            assert_eq!(code_for(Op::Context, &e), umdResult::UMD_ERR_CTX_LIMIT);
            let u = kmd_error(Op::Context, e, "context create");
            assert_eq!(
                (u.code, u.os_errno, u.kmd_reason),
                (umdResult::UMD_ERR_CTX_LIMIT, libc::EBUSY, reason)
            );
            assert!(u.message.contains(name), "{}", u.message);
        }
    }
}
