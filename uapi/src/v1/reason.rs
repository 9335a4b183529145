//! KMD reason codes: why an ioctl failed, beyond the errno.
//!
//! Every failing aigpu ioctl returns a negative errno (Linux requires it) and, when its argument
//! struct could be read, writes one of these into the struct's `reason` field, so user space
//! never has to guess which of twenty causes an `EINVAL` meant. Values are frozen once released:
//! never reused, never re-meant. `0` means "no reason recorded" (success).

/// Declares the reason codes once, with their names and one-line meanings for logs.
macro_rules! reasons {
    ($($(#[$doc:meta])* $name:ident = $val:expr, $text:expr;)*) => {
        $($(#[$doc])* pub const $name: u32 = $val;)*
        /// Every defined reason code with its name and meaning (for logs, docs and tests).
        pub const ALL: &[(u32, &str, &str)] = &[$(($val, stringify!($name), $text)),*];
    };
}

reasons! {
    /// No failure.
    NONE = 0, "no failure";
    /// A `flags` field had bits set that this UAPI version does not define.
    FLAGS_UNKNOWN = 1, "unknown bits set in the flags field";
    /// A padding or reserved field was not zero.
    PAD_NONZERO = 2, "padding or reserved field is not zero";
    /// The GEM handle does not name an object of this file.
    HANDLE_INVALID = 3, "GEM handle does not exist in this file";
    /// The GEM handle names an object aigpu did not create (e.g. a dumb buffer).
    HANDLE_FOREIGN = 4, "GEM handle names an object not created by aigpu";
    /// A size was zero.
    SIZE_ZERO = 5, "size is zero";
    /// A size was larger than the device or the UAPI allows.
    SIZE_TOO_LARGE = 6, "size exceeds the device or UAPI limit";
    /// The kernel could not allocate memory for the request.
    OUT_OF_MEMORY = 7, "kernel memory allocation failed";
    /// A VA, offset or size was not page aligned.
    UNALIGNED = 8, "address, offset or size is not page aligned";
    /// A VA range fell outside the usable VA range, or overflowed.
    VA_OUT_OF_RANGE = 9, "VA range outside the usable VA range or overflowing";
    /// The VA range overlaps an existing mapping.
    VA_OVERLAP = 10, "VA range overlaps an existing mapping";
    /// Unbind of a range that is not exactly one existing mapping.
    VA_NOT_MAPPED = 11, "VA range is not exactly one existing mapping";
    /// `bo_offset + size` runs past the end of the object.
    BO_RANGE = 12, "object offset and size run past the end of the object";
    /// Access flags empty or with unknown bits.
    ACCESS_INVALID = 13, "access flags are empty or have unknown bits";
    /// The context id does not name a live context of this file.
    CTX_INVALID = 14, "context id does not name a live context of this file";
    /// The context was banned after a fault or hang; it accepts no more work.
    CTX_BANNED = 15, "context is banned after a fault or hang";
    /// The file has reached its context limit (`MAX_CONTEXTS`, 64). (Kernels of UAPI 1.0 also
    /// reported the device-wide limit with it; since 1.1 that is `DEVICE_CTX_LIMIT`.)
    CTX_LIMIT = 16, "too many contexts on this file (64)";
    /// The priority value is not defined.
    PRIORITY_INVALID = 17, "priority is not low, normal or high";
    /// Zero command buffers, or more than the per-submit limit.
    CMDBUF_COUNT = 18, "number of command buffers is zero or above the limit";
    /// A command buffer VA or size is not 4-byte aligned, or its size is zero or too large.
    CMDBUF_BAD = 19, "command buffer VA or size misaligned, zero or too large";
    /// A command buffer (or an address a packet uses) is not mapped with the needed access.
    CMDBUF_NOT_MAPPED = 20, "command buffer or packet operand is not mapped with the needed access";
    /// A packet is malformed; `bad_index` and `bad_offset` say where.
    PACKET_MALFORMED = 21, "malformed packet";
    /// A HANG packet was submitted while the debug HANG capability is off.
    PACKET_HANG_DISABLED = 22, "HANG packet submitted while hang debugging is disabled";
    /// An in-fence names an unknown context.
    FENCE_CTX_INVALID = 23, "in-fence names an unknown context";
    /// A fence seqno that was never submitted on its context.
    FENCE_NOT_SUBMITTED = 24, "fence sequence number was never submitted";
    /// The context's ring is full and the submit asked not to block.
    RING_FULL = 25, "ring is full";
    /// The device is lost; nothing will run again until the module is reloaded.
    DEVICE_LOST = 26, "device is lost";
    /// A user pointer could not be read or written.
    BAD_USER_POINTER = 27, "user pointer could not be read or written";
    /// Too many in-fences in one submit.
    FENCE_COUNT = 28, "too many in-fences";
    /// The wait's context was reset or faulted: its work will never complete.
    CTX_LOST = 29, "context was reset or faulted; its pending work will not complete";
    /// The wait timed out; the work is still running.
    TIMEOUT = 30, "timed out; the work is still running";
    /// A signal interrupted the wait; it can be restarted.
    INTERRUPTED = 31, "interrupted by a signal";
    /// The file has too many GEM objects or mappings.
    OBJECT_LIMIT = 32, "too many objects or mappings on this file";
    /// (UAPI 1.1) The submit asked not to block, its ring has room, but every address-space
    /// slot of the device is held by other files' unfinished work.
    AS_SLOTS_BUSY = 33, "every address-space slot is held by other files' work";
    /// (UAPI 1.1) The device has no context left to give: every one of its 512 fence slots is
    /// taken, by any files.
    DEVICE_CTX_LIMIT = 34, "the device has no context left (all 512 taken, by any files)";
    /// A job waited on a fence its producer context will never signal (the producer faulted,
    /// hung or failed the same way): the job did not run (UAPI 1.2).
    DEP_FAILED = 35, "a fence this job waits for will never signal: its producer context failed";
    /// (UAPI 1.3) The bind would take the file's page tables past their budget
    /// (`rules::vm::MAX_PT_TABLES`, 2048 tables of 4 KiB): nothing was mapped or allocated.
    PT_LIMIT = 36, "the bind needs more page tables than the file's budget (2048 tables, 8 MiB)";
}

/// The name of a reason code (`"VA_OVERLAP"`), or `"UNKNOWN"`.
pub fn name(code: u32) -> &'static str {
    let mut i = 0;
    while i < ALL.len() {
        if ALL[i].0 == code {
            return ALL[i].1;
        }
        i += 1;
    }
    "UNKNOWN"
}

/// The one-line meaning of a reason code, or `"unknown reason"`.
pub fn text(code: u32) -> &'static str {
    let mut i = 0;
    while i < ALL.len() {
        if ALL[i].0 == code {
            return ALL[i].2;
        }
        i += 1;
    }
    "unknown reason"
}
