//! GPU command-packet format (docs/hw-spec.md §6).
//!
//! User space encodes packets with the `encode_*` functions, the KMD validates them with
//! [`decode`] before they reach the ring, and the device executes what [`decode`] returns: one
//! decoder, so the three can never disagree about what a packet means.

/// Opcode: padding.
pub const OP_NOP: u8 = 0x00;
/// Opcode: memory copy.
pub const OP_COPY: u8 = 0x01;
/// Opcode: memory fill with a 32-bit pattern.
pub const OP_FILL: u8 = 0x02;
/// Opcode: int8 x int8 -> int32 matrix multiply.
pub const OP_GEMM_I8: u8 = 0x03;
/// Opcode: element-wise int32 operation.
pub const OP_ELTWISE: u8 = 0x04;
/// Opcode: write the device timestamp.
pub const OP_TIMESTAMP: u8 = 0x05;
/// Opcode: write a 64-bit value (optionally raising an interrupt).
pub const OP_FENCE: u8 = 0x06;
/// Opcode: wait until a 64-bit value in memory is >= n.
pub const OP_WAIT_MEM: u8 = 0x07;
/// Opcode: debug hang.
pub const OP_HANG: u8 = 0x7F;

/// GEMM flag: accumulate into C.
pub const GEMM_FLAG_ACCUMULATE: u8 = 1 << 0;
/// FENCE flag: raise the FENCE interrupt cause.
pub const FENCE_FLAG_IRQ: u8 = 1 << 0;

/// ELTWISE op: dst = a + b (wrapping).
pub const ELT_ADD: u32 = 0;
/// ELTWISE op: dst = a * b (wrapping).
pub const ELT_MUL: u32 = 1;
/// ELTWISE op: dst = max(a, 0).
pub const ELT_RELU: u32 = 2;
/// ELTWISE op: int8 dst = clamp(round(a * scale / 2^shift), -128, 127).
pub const ELT_REQUANT: u32 = 3;

/// Largest GEMM dimension.
pub const GEMM_MAX_DIM: u32 = 4096;
/// Largest REQUANT shift.
pub const REQUANT_MAX_SHIFT: u32 = 62;
/// Longest fixed-size packet, in words (GEMM_I8).
pub const MAX_FIXED_WORDS: usize = 13;
/// Highest VA + 1 a packet operand may reach (48-bit space).
pub const VA_LIMIT: u64 = 1 << 48;

/// Words of each fixed-size packet.
pub const COPY_WORDS: usize = 7;
/// Words of FILL.
pub const FILL_WORDS: usize = 6;
/// Words of GEMM_I8.
pub const GEMM_WORDS: usize = 13;
/// Words of ELTWISE.
pub const ELTWISE_WORDS: usize = 11;
/// Words of TIMESTAMP.
pub const TIMESTAMP_WORDS: usize = 3;
/// Words of FENCE.
pub const FENCE_WORDS: usize = 5;
/// Words of WAIT_MEM.
pub const WAIT_MEM_WORDS: usize = 5;

/// Builds a packet header.
pub const fn header(opcode: u8, flags: u8, words: u16) -> u32 {
    (opcode as u32) | ((flags as u32) << 8) | ((words as u32) << 16)
}
/// Opcode of a header.
pub const fn header_opcode(h: u32) -> u8 {
    (h & 0xFF) as u8
}
/// Flags of a header.
pub const fn header_flags(h: u32) -> u8 {
    ((h >> 8) & 0xFF) as u8
}
/// Length in words of a header's packet.
pub const fn header_words(h: u32) -> usize {
    (h >> 16) as usize
}

/// A decoded packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet {
    /// Padding of `words` words.
    Nop {
        /// Length of the packet in words, header included.
        words: usize,
    },
    /// Copy `size` bytes from `src` to `dst`.
    Copy {
        /// Source VA.
        src: u64,
        /// Destination VA.
        dst: u64,
        /// Bytes.
        size: u64,
    },
    /// Fill `size` bytes at `dst` with `pattern`.
    Fill {
        /// Destination VA.
        dst: u64,
        /// Bytes (multiple of 4).
        size: u64,
        /// 32-bit pattern.
        pattern: u32,
    },
    /// `C (+)= A * B`.
    Gemm {
        /// A (int8, m x k, row stride lda).
        a: u64,
        /// B (int8, k x n, row stride ldb).
        b: u64,
        /// C (int32, m x n, row stride ldc).
        c: u64,
        /// Rows of A and C.
        m: u32,
        /// Columns of B and C.
        n: u32,
        /// Columns of A, rows of B.
        k: u32,
        /// Row stride of A in elements.
        lda: u32,
        /// Row stride of B in elements.
        ldb: u32,
        /// Row stride of C in elements.
        ldc: u32,
        /// Add to C instead of overwriting it.
        accumulate: bool,
    },
    /// Element-wise op over `count` int32 elements.
    Eltwise {
        /// `ELT_*`.
        op: u32,
        /// Number of elements.
        count: u32,
        /// First operand (int32).
        a: u64,
        /// Second operand (int32; 0 for RELU/REQUANT).
        b: u64,
        /// Destination (int32, or int8 for REQUANT).
        dst: u64,
        /// REQUANT multiplier.
        scale: i32,
        /// REQUANT right shift.
        shift: u32,
    },
    /// Write the timestamp to `dst`.
    Timestamp {
        /// Destination VA (8-byte aligned).
        dst: u64,
    },
    /// Write `value` to `dst`, raising the FENCE cause if `irq`.
    Fence {
        /// Destination VA (8-byte aligned).
        dst: u64,
        /// Value written.
        value: u64,
        /// Raise the FENCE interrupt cause.
        irq: bool,
    },
    /// Stall until `*addr >= value`.
    WaitMem {
        /// VA of the watched u64 (8-byte aligned).
        addr: u64,
        /// Value waited for.
        value: u64,
    },
    /// Debug hang.
    Hang,
}

/// Why a packet is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    /// Header length is zero.
    ZeroLength,
    /// The packet runs past the end of the command buffer.
    Truncated,
    /// Unknown opcode.
    UnknownOpcode(u8),
    /// The length does not match the opcode's fixed length.
    BadLength {
        /// Words the opcode needs.
        expected: usize,
        /// Words the header says.
        found: usize,
    },
    /// Flag bits the opcode does not define.
    UnknownFlags(u8),
    /// An operand is out of range (zero size, dimension limit, overflow, alignment, bad op):
    /// what is wrong, the operand's name (the C API's argument name) and its value, so every
    /// layer that reports it can say which argument and what it was.
    Operand {
        /// What is wrong.
        what: &'static str,
        /// The operand: `size`, `count`, `m`, `lda`, `dst`, ...
        field: &'static str,
        /// Its value.
        value: u64,
    },
    /// HANG while the debug capability is off.
    HangDisabled,
}

impl Malformed {
    /// A short human-readable description (for reasons, logs and dumps).
    pub fn describe(&self) -> &'static str {
        match self {
            Malformed::ZeroLength => "packet length is zero",
            Malformed::Truncated => "packet runs past the end of the command buffer",
            Malformed::UnknownOpcode(_) => "unknown opcode",
            Malformed::BadLength { .. } => "packet length does not match its opcode",
            Malformed::UnknownFlags(_) => "undefined flag bits set",
            Malformed::Operand { what, .. } => what,
            Malformed::HangDisabled => "HANG packet while hang debugging is disabled",
        }
    }
}

/// A memory range a packet reads or writes (for validation against an address space).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Access {
    /// First VA.
    pub va: u64,
    /// Bytes.
    pub len: u64,
    /// Written (otherwise read).
    pub write: bool,
}

/// The u64 in words `i` and `i + 1` (low word first); 0 past the end, which the callers rule
/// out by checking the packet's length first. Without a panic path the kernel's size-optimised
/// build inlines it: it was an out-of-line call per operand of every packet decoded.
fn u64_at(w: &[u32], i: usize) -> u64 {
    match (w.get(i), w.get(i.wrapping_add(1))) {
        (Some(&lo), Some(&hi)) => u64::from(lo) | (u64::from(hi) << 32),
        _ => 0,
    }
}

fn operand(what: &'static str, field: &'static str, value: u64) -> Malformed {
    Malformed::Operand { what, field, value }
}

/// `va + len` must stay inside the 48-bit space.
fn range_ok(va: u64, len: u64) -> bool {
    len > 0 && va.checked_add(len).is_some_and(|end| end <= VA_LIMIT)
}

fn fixed(words: &[u32], expected: usize, allowed_flags: u8) -> Result<u8, Malformed> {
    if words.len() != expected {
        return Err(Malformed::BadLength {
            expected,
            found: words.len(),
        });
    }
    let flags = header_flags(words[0]);
    if flags & !allowed_flags != 0 {
        return Err(Malformed::UnknownFlags(flags));
    }
    Ok(flags)
}

/// Decodes one packet. `words` is exactly the packet (`header_words(words[0])` words); use
/// [`packet_words`] first to learn how many words to fetch. `hang_enabled` says whether the
/// debug HANG packet is legal.
pub fn decode(words: &[u32], hang_enabled: bool) -> Result<Packet, Malformed> {
    let Some(&h) = words.first() else {
        return Err(Malformed::Truncated);
    };
    if header_words(h) == 0 {
        return Err(Malformed::ZeroLength);
    }
    let p = match header_opcode(h) {
        OP_NOP => {
            fixed(&words[..1], 1, 0)?;
            Packet::Nop { words: words.len() }
        }
        OP_COPY => {
            fixed(words, COPY_WORDS, 0)?;
            let (src, dst, size) = (u64_at(words, 1), u64_at(words, 3), u64_at(words, 5));
            if size == 0 {
                return Err(operand("COPY size is zero", "size", size));
            }
            if !range_ok(src, size) {
                return Err(operand(
                    "COPY source range overflows the VA space",
                    "src",
                    src,
                ));
            }
            if !range_ok(dst, size) {
                return Err(operand(
                    "COPY destination range overflows the VA space",
                    "dst",
                    dst,
                ));
            }
            if src < dst + size && dst < src + size {
                return Err(operand("COPY source and destination overlap", "dst", dst));
            }
            Packet::Copy { src, dst, size }
        }
        OP_FILL => {
            fixed(words, FILL_WORDS, 0)?;
            let (dst, size, pattern) = (u64_at(words, 1), u64_at(words, 3), words[5]);
            if size == 0 || size % 4 != 0 {
                return Err(operand(
                    "FILL size is zero or not a multiple of 4",
                    "size",
                    size,
                ));
            }
            if !range_ok(dst, size) {
                return Err(operand("FILL range overflows the VA space", "dst", dst));
            }
            Packet::Fill { dst, size, pattern }
        }
        OP_GEMM_I8 => {
            let flags = fixed(words, GEMM_WORDS, GEMM_FLAG_ACCUMULATE)?;
            let p = Packet::Gemm {
                a: u64_at(words, 1),
                b: u64_at(words, 3),
                c: u64_at(words, 5),
                m: words[7],
                n: words[8],
                k: words[9],
                lda: words[10],
                ldb: words[11],
                ldc: words[12],
                accumulate: flags & GEMM_FLAG_ACCUMULATE != 0,
            };
            if let Packet::Gemm {
                m,
                n,
                k,
                lda,
                ldb,
                ldc,
                ..
            } = p
            {
                for (field, d) in [("m", m), ("n", n), ("k", k)] {
                    if !(1..=GEMM_MAX_DIM).contains(&d) {
                        return Err(operand(
                            "GEMM dimension is zero or above 4096",
                            field,
                            d.into(),
                        ));
                    }
                }
                for (field, ld, row) in [("lda", lda, k), ("ldb", ldb, n), ("ldc", ldc, n)] {
                    if ld < row {
                        return Err(operand(
                            "GEMM leading dimension smaller than the row",
                            field,
                            ld.into(),
                        ));
                    }
                }
            }
            if let Some(a) = p
                .accesses()
                .iter()
                .flatten()
                .find(|a| !range_ok(a.va, a.len))
            {
                return Err(operand(
                    "GEMM matrix range overflows the VA space",
                    "va",
                    a.va,
                ));
            }
            p
        }
        OP_ELTWISE => {
            fixed(words, ELTWISE_WORDS, 0)?;
            let p = Packet::Eltwise {
                op: words[1],
                count: words[2],
                a: u64_at(words, 3),
                b: u64_at(words, 5),
                dst: u64_at(words, 7),
                scale: words[9] as i32,
                shift: words[10],
            };
            if let Packet::Eltwise {
                op,
                count,
                b,
                scale,
                shift,
                ..
            } = p
            {
                if op > ELT_REQUANT {
                    return Err(operand(
                        "ELTWISE op is not add, mul, relu or requant",
                        "op",
                        op.into(),
                    ));
                }
                if count == 0 {
                    return Err(operand("ELTWISE count is zero", "count", 0));
                }
                if (op == ELT_RELU || op == ELT_REQUANT) && b != 0 {
                    return Err(operand("ELTWISE b must be 0 for relu and requant", "b", b));
                }
                if op == ELT_REQUANT && shift > REQUANT_MAX_SHIFT {
                    return Err(operand("REQUANT shift above 62", "shift", shift.into()));
                }
                if op != ELT_REQUANT && scale != 0 {
                    return Err(operand(
                        "ELTWISE scale and shift must be 0 unless requant",
                        "scale",
                        u64::from(scale as u32),
                    ));
                }
                if op != ELT_REQUANT && shift != 0 {
                    return Err(operand(
                        "ELTWISE scale and shift must be 0 unless requant",
                        "shift",
                        shift.into(),
                    ));
                }
            }
            if let Some(a) = p
                .accesses()
                .iter()
                .flatten()
                .find(|a| !range_ok(a.va, a.len))
            {
                return Err(operand("ELTWISE range overflows the VA space", "va", a.va));
            }
            p
        }
        OP_TIMESTAMP => {
            fixed(words, TIMESTAMP_WORDS, 0)?;
            let dst = u64_at(words, 1);
            if !range_ok(dst, 8) || dst & 7 != 0 {
                return Err(operand(
                    "TIMESTAMP destination not 8-byte aligned",
                    "dst",
                    dst,
                ));
            }
            Packet::Timestamp { dst }
        }
        OP_FENCE => {
            let flags = fixed(words, FENCE_WORDS, FENCE_FLAG_IRQ)?;
            let dst = u64_at(words, 1);
            if !range_ok(dst, 8) || dst & 7 != 0 {
                return Err(operand("FENCE destination not 8-byte aligned", "dst", dst));
            }
            Packet::Fence {
                dst,
                value: u64_at(words, 3),
                irq: flags & FENCE_FLAG_IRQ != 0,
            }
        }
        OP_WAIT_MEM => {
            fixed(words, WAIT_MEM_WORDS, 0)?;
            let addr = u64_at(words, 1);
            if !range_ok(addr, 8) || addr & 7 != 0 {
                return Err(operand("WAIT_MEM address not 8-byte aligned", "addr", addr));
            }
            Packet::WaitMem {
                addr,
                value: u64_at(words, 3),
            }
        }
        OP_HANG => {
            fixed(words, 1, 0)?;
            if !hang_enabled {
                return Err(Malformed::HangDisabled);
            }
            Packet::Hang
        }
        op => return Err(Malformed::UnknownOpcode(op)),
    };
    Ok(p)
}

/// How many words the packet starting with header `h` occupies, checked against the words
/// `remaining` in the command buffer.
pub fn packet_words(h: u32, remaining: usize) -> Result<usize, Malformed> {
    let n = header_words(h);
    if n == 0 {
        Err(Malformed::ZeroLength)
    } else if n > remaining {
        Err(Malformed::Truncated)
    } else {
        Ok(n)
    }
}

impl Packet {
    /// The memory ranges this packet reads and writes (up to three).
    pub fn accesses(&self) -> [Option<Access>; 3] {
        let r = |va, len| {
            Some(Access {
                va,
                len,
                write: false,
            })
        };
        let w = |va, len| {
            Some(Access {
                va,
                len,
                write: true,
            })
        };
        match *self {
            Packet::Copy { src, dst, size } => [r(src, size), w(dst, size), None],
            Packet::Fill { dst, size, .. } => [w(dst, size), None, None],
            Packet::Gemm {
                a,
                b,
                c,
                m,
                n,
                k,
                lda,
                ldb,
                ldc,
                accumulate,
            } => {
                let (m, n, k) = (u64::from(m), u64::from(n), u64::from(k));
                let a_len = (m - 1) * u64::from(lda) + k;
                let b_len = (k - 1) * u64::from(ldb) + n;
                let c_len = ((m - 1) * u64::from(ldc) + n) * 4;
                let c_acc = Access {
                    va: c,
                    len: c_len,
                    write: true,
                };
                // Accumulating GEMM also reads C; a write mapping implies read here (hw-spec:
                // READ and WRITE are checked separately, so the KMD checks both).
                let _ = accumulate;
                [r(a, a_len), r(b, b_len), Some(c_acc)]
            }
            Packet::Eltwise {
                op,
                count,
                a,
                b,
                dst,
                ..
            } => {
                let n = u64::from(count);
                let dst_len = if op == ELT_REQUANT { n } else { n * 4 };
                let b_acc = if op == ELT_ADD || op == ELT_MUL {
                    r(b, n * 4)
                } else {
                    None
                };
                [r(a, n * 4), b_acc, w(dst, dst_len)]
            }
            Packet::Timestamp { dst } => [w(dst, 8), None, None],
            Packet::Fence { dst, .. } => [w(dst, 8), None, None],
            Packet::WaitMem { addr, .. } => [r(addr, 8), None, None],
            Packet::Nop { .. } | Packet::Hang => [None, None, None],
        }
    }
}

fn lo(v: u64) -> u32 {
    v as u32
}
fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}

/// Encodes NOP padding of `words` words (>= 1).
pub fn encode_nop() -> [u32; 1] {
    [header(OP_NOP, 0, 1)]
}
/// Encodes COPY.
pub fn encode_copy(src: u64, dst: u64, size: u64) -> [u32; COPY_WORDS] {
    let h = header(OP_COPY, 0, COPY_WORDS as u16);
    [h, lo(src), hi(src), lo(dst), hi(dst), lo(size), hi(size)]
}
/// Encodes FILL.
pub fn encode_fill(dst: u64, size: u64, pattern: u32) -> [u32; FILL_WORDS] {
    let h = header(OP_FILL, 0, FILL_WORDS as u16);
    [h, lo(dst), hi(dst), lo(size), hi(size), pattern]
}
/// GEMM operands for [`encode_gemm`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GemmArgs {
    /// A VA (int8).
    pub a: u64,
    /// B VA (int8).
    pub b: u64,
    /// C VA (int32).
    pub c: u64,
    /// Rows of A and C.
    pub m: u32,
    /// Columns of B and C.
    pub n: u32,
    /// Inner dimension.
    pub k: u32,
    /// Row stride of A.
    pub lda: u32,
    /// Row stride of B.
    pub ldb: u32,
    /// Row stride of C.
    pub ldc: u32,
    /// Accumulate into C.
    pub accumulate: bool,
}
/// Encodes GEMM_I8.
pub fn encode_gemm(g: &GemmArgs) -> [u32; GEMM_WORDS] {
    let flags = if g.accumulate {
        GEMM_FLAG_ACCUMULATE
    } else {
        0
    };
    let h = header(OP_GEMM_I8, flags, GEMM_WORDS as u16);
    [
        h,
        lo(g.a),
        hi(g.a),
        lo(g.b),
        hi(g.b),
        lo(g.c),
        hi(g.c),
        g.m,
        g.n,
        g.k,
        g.lda,
        g.ldb,
        g.ldc,
    ]
}
/// Encodes ELTWISE (`scale`/`shift` only for REQUANT, `b` 0 for RELU/REQUANT).
pub fn encode_eltwise(
    op: u32,
    count: u32,
    a: u64,
    b: u64,
    dst: u64,
    scale: i32,
    shift: u32,
) -> [u32; ELTWISE_WORDS] {
    let h = header(OP_ELTWISE, 0, ELTWISE_WORDS as u16);
    [
        h,
        op,
        count,
        lo(a),
        hi(a),
        lo(b),
        hi(b),
        lo(dst),
        hi(dst),
        scale as u32,
        shift,
    ]
}
/// Encodes TIMESTAMP.
pub fn encode_timestamp(dst: u64) -> [u32; TIMESTAMP_WORDS] {
    [
        header(OP_TIMESTAMP, 0, TIMESTAMP_WORDS as u16),
        lo(dst),
        hi(dst),
    ]
}
/// Encodes FENCE.
pub fn encode_fence(dst: u64, value: u64, irq: bool) -> [u32; FENCE_WORDS] {
    let flags = if irq { FENCE_FLAG_IRQ } else { 0 };
    [
        header(OP_FENCE, flags, FENCE_WORDS as u16),
        lo(dst),
        hi(dst),
        lo(value),
        hi(value),
    ]
}
/// Encodes WAIT_MEM.
pub fn encode_wait_mem(addr: u64, value: u64) -> [u32; WAIT_MEM_WORDS] {
    [
        header(OP_WAIT_MEM, 0, WAIT_MEM_WORDS as u16),
        lo(addr),
        hi(addr),
        lo(value),
        hi(value),
    ]
}
/// Encodes HANG.
pub fn encode_hang() -> [u32; 1] {
    [header(OP_HANG, 0, 1)]
}

/// Reference result of REQUANT for one element (shared by the device and CPU references).
pub fn requant(a: i32, scale: i32, shift: u32) -> i8 {
    let prod = i64::from(a) * i64::from(scale);
    let rounded = if shift == 0 {
        prod
    } else {
        (prod + (1i64 << (shift - 1))) >> shift
    };
    rounded.clamp(-128, 127) as i8
}
