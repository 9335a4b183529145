//! Ring descriptors (docs/hw-spec.md §4).

/// Descriptor kind: does nothing.
pub const DESC_NOP: u32 = 0;
/// Descriptor kind: execute a command buffer.
pub const DESC_EXEC: u32 = 1;
/// Descriptor kind: stall until a u64 in memory reaches a value.
pub const DESC_WAIT: u32 = 2;
/// Descriptor flag: write `value` to `fence_pa` on completion.
pub const DESC_FLAG_FENCE: u32 = 1 << 0;
/// Descriptor flag: raise `JOB_DONE(q)` on completion.
pub const DESC_FLAG_IRQ: u32 = 1 << 1;
/// Largest command buffer one descriptor may run (bytes).
pub const MAX_CMD_SIZE: u32 = 1 << 20;

/// One 64-byte ring descriptor, as the device reads it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Desc {
    /// `DESC_NOP`, `DESC_EXEC` or `DESC_WAIT`.
    pub kind: u32,
    /// `DESC_FLAG_*`.
    pub flags: u32,
    /// EXEC: address-space slot.
    pub as_slot: u32,
    /// EXEC: command-buffer size in bytes.
    pub cmd_size: u32,
    /// EXEC: command-buffer VA.
    pub cmd_va: u64,
    /// EXEC+FENCE: fence PA; WAIT: PA of the watched u64.
    pub fence_pa: u64,
    /// EXEC+FENCE: value written; WAIT: value waited for.
    pub value: u64,
    /// Driver tag echoed in `Q_CUR_JOB` / `FAULT_JOB`.
    pub job_id: u64,
    /// Must be zero.
    pub reserved: [u64; 2],
}

/// Size of a descriptor in bytes.
pub const DESC_SIZE: usize = 64;

impl Desc {
    /// The descriptor as the little-endian bytes the device fetches.
    pub fn to_bytes(&self) -> [u8; DESC_SIZE] {
        let mut b = [0u8; DESC_SIZE];
        self.write_to(&mut b);
        b
    }

    /// Writes the descriptor's bytes into `b` (a ring slot), every byte of it.
    pub fn write_to(&self, b: &mut [u8; DESC_SIZE]) {
        // Eight fixed-size 8-byte stores: a slice `copy_from_slice` per field was an out-of-line
        // call and a `memcpy` each in the kernel's size-optimised build, ten per command buffer.
        // The words are iterated by reference: by value (an array `IntoIter`) that build called
        // `IndexRange::len` out of line for every word.
        let words = [
            u64::from(self.kind) | u64::from(self.flags) << 32,
            u64::from(self.as_slot) | u64::from(self.cmd_size) << 32,
            self.cmd_va,
            self.fence_pa,
            self.value,
            self.job_id,
            self.reserved[0],
            self.reserved[1],
        ];
        for (dst, w) in b.as_chunks_mut::<8>().0.iter_mut().zip(words.iter()) {
            *dst = w.to_le_bytes();
        }
    }

    /// Parses the bytes the device fetched.
    pub fn from_bytes(b: &[u8; DESC_SIZE]) -> Self {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            u64::from_le_bytes([
                b[o],
                b[o + 1],
                b[o + 2],
                b[o + 3],
                b[o + 4],
                b[o + 5],
                b[o + 6],
                b[o + 7],
            ])
        };
        Desc {
            kind: u32_at(0),
            flags: u32_at(4),
            as_slot: u32_at(8),
            cmd_size: u32_at(12),
            cmd_va: u64_at(16),
            fence_pa: u64_at(24),
            value: u64_at(32),
            job_id: u64_at(40),
            reserved: [u64_at(48), u64_at(56)],
        }
    }
}
