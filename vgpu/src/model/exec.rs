//! Packet execution (hw-spec §6): fetching and decoding one packet of a command buffer, and
//! executing one decoded packet against an address space.
//!
//! Every memory access goes through [`Space`], which translates page by page (a per-operand
//! [`Tlb`] in front of the device's [`DevTlb`] in front of the walk) and never issues a physical
//! access that crosses a page. Data moves through small on-stack buffers, so nothing here
//! allocates and the stack stays around 1.5 KiB.

use super::mem::{Clock, PhysMem};
use super::mmu::{DevTlb, Fault, Tlb, PAGE_SIZE};
use crate::uapi::packet::{self, Packet};
use crate::uapi::regs;

/// Bytes moved per chunk by COPY and FILL.
const CHUNK: usize = 512;
/// Columns of C computed per GEMM tile (the int32 accumulator lives on the stack).
const GEMM_COLS: usize = 128;
/// Elements of an A row fetched per GEMM chunk.
const GEMM_K_CHUNK: usize = 256;
/// int32 elements per ELTWISE chunk.
const ELT_CHUNK: usize = 64;

/// The most work one step of a long packet does before it yields (hw-spec §6, "Long
/// packets"): bytes for COPY and FILL, elements for ELTWISE, multiply-accumulates for GEMM
/// (rounded up to whole tiles). A packet of more work runs over several steps, resuming where it
/// stopped, so the host's rounds, its watchdog (the job timeout) and higher-priority queues get
/// the device between them however large a single packet is. About a quarter of a millisecond
/// on the host, a few milliseconds under emulation.
pub const STEP_WORK: u64 = 1 << 18;

/// One address space as the executor sees it: the device's memory, the descriptor's slot, the
/// PA of its top-level page table and the device's translation cache.
pub struct Space<'a, M: PhysMem + ?Sized> {
    /// Physical memory.
    pub mem: &'a M,
    /// The address-space slot (tags the cached translations).
    pub slot: u32,
    /// `AS_PT_BASE` of the slot.
    pub pt_base: u64,
    /// The device's translation cache.
    pub tlb: &'a DevTlb,
}

impl<M: PhysMem + ?Sized> Space<'_, M> {
    /// Calls `f(va, pa, range)` for each piece of `[va, va + len)` that lies in one page, in
    /// order, where `range` is the piece's byte range relative to `va`. Always inlined: each
    /// caller's closure then becomes straight-line code around the one-entry TLB check; left to
    /// the size-optimised kernel build, it was a call (and a closure call) per memory access,
    /// and a GEMM's per-row reads of B paid them (counting clock: device per one-packet
    /// command buffer 1.18 -> 1.13 us, MLP demo GPU time 46.0 -> 45.4 ms).
    #[inline(always)]
    fn for_pages(
        &self,
        tlb: &mut Tlb,
        va: u64,
        len: usize,
        access: u32,
        mut f: impl FnMut(u64, u64, core::ops::Range<usize>) -> Result<(), Fault>,
    ) -> Result<(), Fault> {
        let mut done = 0usize;
        while done < len {
            // A range that wraps the 64-bit space starts at or above 2^48 and fails its first
            // walk, so this never triggers; it only keeps the arithmetic checked.
            let cur =
                va.checked_add(done as u64)
                    .ok_or(Fault::new(regs::FAULT_UNMAPPED, access, va))?;
            let left_in_page = PAGE_SIZE - (cur & (PAGE_SIZE - 1));
            let n = core::cmp::min(left_in_page, (len - done) as u64) as usize;
            let pa = tlb.translate_via(cur, access, |va| {
                self.tlb
                    .translate(self.mem, self.slot, self.pt_base, va, access)
            })?;
            f(cur, pa, done..done + n)?;
            done += n;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `va` for an access of type `access` (read or fetch).
    pub fn read(&self, tlb: &mut Tlb, va: u64, buf: &mut [u8], access: u32) -> Result<(), Fault> {
        let mem = self.mem;
        self.for_pages(tlb, va, buf.len(), access, |cur, pa, range| {
            let dst = buf.get_mut(range).unwrap_or_default();
            mem.read(pa, dst)
                .map_err(|_| Fault::new(regs::FAULT_BUS_ERROR, access, cur))
        })
    }

    /// Writes `data` at `va`.
    pub fn write(&self, tlb: &mut Tlb, va: u64, data: &[u8]) -> Result<(), Fault> {
        let mem = self.mem;
        let access = regs::ACCESS_WRITE;
        self.for_pages(tlb, va, data.len(), access, |cur, pa, range| {
            let src = data.get(range).unwrap_or_default();
            mem.write(pa, src)
                .map_err(|_| Fault::new(regs::FAULT_BUS_ERROR, access, cur))
        })
    }
}

/// A packet fetched from a command buffer and decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The decoded packet (a NOP carries its full length in words).
    pub packet: Packet,
    /// Its length in bytes: the offset of the next packet is the current one plus this.
    pub bytes: u32,
}

/// Fetches (access type `FETCH`) and decodes the packet at byte `offset` of the command buffer
/// `[cmd_va, cmd_va + cmd_size)`, with the one decoder the KMD also uses
/// (`uapi::packet::decode`). `tlb` is the queue's fetch TLB: kept across packets and command
/// buffers of the queue while it stays valid (see `Queue::fetch_tlb`).
///
/// A packet that does not decode (unknown opcode, bad length, undefined flags, bad operand,
/// running past the end of the buffer, HANG while `hang_enabled` is false) faults with
/// `MALFORMED_PACKET`, access `FETCH` and the VA of the packet header. The body of a NOP is
/// never fetched (its operands are ignored).
pub fn fetch<M: PhysMem + ?Sized>(
    space: &Space<'_, M>,
    cmd_va: u64,
    cmd_size: u32,
    offset: u32,
    hang_enabled: bool,
    tlb: &mut Tlb,
) -> Result<Fetched, Fault> {
    let fetch = regs::ACCESS_FETCH;
    let va = cmd_va.checked_add(u64::from(offset)).ok_or(Fault::new(
        regs::FAULT_UNMAPPED,
        fetch,
        cmd_va,
    ))?;
    let malformed = Fault::new(regs::FAULT_MALFORMED_PACKET, fetch, va);

    let mut bytes = [0u8; packet::MAX_FIXED_WORDS * 4];
    let remaining = (cmd_size.saturating_sub(offset) / 4) as usize;
    // One access for the header and as much of the longest fixed-size body as lies in both the
    // command buffer and the header's page (bytes past the packet are ignored, and reading them
    // cannot fault: same page, same access); a body that crosses the page is read in a second
    // access.
    let in_page = (PAGE_SIZE - (va & (PAGE_SIZE - 1))) as usize;
    let first = core::cmp::max(
        4,
        core::cmp::min(core::cmp::min(remaining * 4, in_page), bytes.len()),
    );
    space.read(tlb, va, bytes.get_mut(..first).unwrap_or_default(), fetch)?;
    let h = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    let n = packet::packet_words(h, remaining).map_err(|_| malformed)?;

    let mut words = [0u32; packet::MAX_FIXED_WORDS];
    let used = if packet::header_opcode(h) == packet::OP_NOP {
        1
    } else if n <= packet::MAX_FIXED_WORDS {
        if n * 4 > first {
            let rest = bytes.get_mut(first..n * 4).unwrap_or_default();
            space.read(tlb, va.wrapping_add(first as u64), rest, fetch)?;
        }
        n
    } else {
        // Longer than any fixed-size packet: only NOP may be, so this is a bad length.
        return Err(malformed);
    };
    // All of them, not `used`: a copy of a constant length is a few moves, one of a variable
    // length a `memcpy` call (this loop is a byte copy on a little-endian CPU), which was 5 % of
    // the device thread's time on one-packet command buffers under emulation.
    for (w, b) in words.iter_mut().zip(bytes.as_chunks::<4>().0) {
        *w = u32::from_le_bytes(*b);
    }
    let packet = match packet::decode(words.get(..used).unwrap_or_default(), hang_enabled) {
        Ok(Packet::Nop { .. }) => Packet::Nop { words: n },
        Ok(p) => p,
        Err(_) => return Err(malformed),
    };
    Ok(Fetched {
        packet,
        // n <= remaining <= 2^18, so this fits.
        bytes: (n as u32).wrapping_mul(4),
    })
}

/// What executing one packet did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The packet completed.
    Done,
    /// A FENCE with the IRQ flag completed: raise the `FENCE` cause.
    FenceIrq,
    /// A WAIT_MEM whose condition is not met yet: execute it again later.
    Waiting,
    /// A HANG: the queue stops until reset.
    Hang,
    /// A long packet did [`STEP_WORK`] and yields: execute it again from this resume point
    /// (its unit: see `execute`).
    Partial(u64),
}

/// Executes one decoded packet in `space` from resume point `from` (0 for a packet's first
/// step; the value of the last [`Outcome::Partial`] after), reading the time from `clock`. On a
/// fault nothing of the packet is guaranteed to have been written (hw-spec §7). `tlb` serves the
/// packets with one memory operand (FILL, TIMESTAMP, FENCE, WAIT_MEM): the queue's data TLB,
/// kept across packets like its fetch TLB; COPY, GEMM and ELTWISE keep one per operand for the
/// step. Resume points: bytes done (COPY, FILL), elements done (ELTWISE), tiles done (GEMM).
pub fn execute<M: PhysMem + ?Sized, C: Clock + ?Sized>(
    space: &Space<'_, M>,
    clock: &C,
    packet: &Packet,
    tlb: &mut Tlb,
    from: u64,
) -> Result<Outcome, Fault> {
    match *packet {
        Packet::Nop { .. } => Ok(Outcome::Done),
        Packet::Copy { src, dst, size } => copy(space, src, dst, size, from).map(resumed),
        Packet::Fill { dst, size, pattern } => {
            fill(space, tlb, dst, size, pattern, from).map(resumed)
        }
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
            let g = Gemm {
                a,
                b,
                c,
                m: m as usize,
                n: n as usize,
                k: k as usize,
                lda: u64::from(lda),
                ldb: u64::from(ldb),
                ldc: u64::from(ldc),
                accumulate,
            };
            gemm(space, &g, from).map(resumed)
        }
        Packet::Eltwise {
            op,
            count,
            a,
            b,
            dst,
            scale,
            shift,
        } => eltwise(space, op, count, a, b, dst, scale, shift, from).map(resumed),
        Packet::Timestamp { dst } => {
            let now = clock.now_ns();
            space.write(tlb, dst, &now.to_le_bytes())?;
            Ok(Outcome::Done)
        }
        Packet::Fence { dst, value, irq } => {
            space.write(tlb, dst, &value.to_le_bytes())?;
            Ok(if irq {
                Outcome::FenceIrq
            } else {
                Outcome::Done
            })
        }
        Packet::WaitMem { addr, value } => {
            let mut b = [0u8; 8];
            space.read(tlb, addr, &mut b, regs::ACCESS_READ)?;
            Ok(if u64::from_le_bytes(b) >= value {
                Outcome::Done
            } else {
                Outcome::Waiting
            })
        }
        Packet::Hang => Ok(Outcome::Hang),
    }
}

/// A long packet's step result: `None` when it finished, else where to resume.
fn resumed(next: Option<u64>) -> Outcome {
    match next {
        None => Outcome::Done,
        Some(at) => Outcome::Partial(at),
    }
}

/// COPY: chunk by chunk, source then destination, from byte `from`, at most [`STEP_WORK`] bytes
/// per step. The decoder guarantees both ranges end at or below 2^48, so the address arithmetic
/// cannot wrap.
fn copy<M: PhysMem + ?Sized>(
    space: &Space<'_, M>,
    src: u64,
    dst: u64,
    size: u64,
    from: u64,
) -> Result<Option<u64>, Fault> {
    let mut buf = [0u8; CHUNK];
    let (mut rt, mut wt) = (Tlb::new(), Tlb::new());
    let mut done = from;
    let stop = from.saturating_add(STEP_WORK);
    while done < size {
        if done >= stop {
            return Ok(Some(done));
        }
        let n = core::cmp::min(CHUNK as u64, size - done) as usize;
        let chunk = buf.get_mut(..n).unwrap_or_default();
        space.read(&mut rt, src.wrapping_add(done), chunk, regs::ACCESS_READ)?;
        space.write(&mut wt, dst.wrapping_add(done), chunk)?;
        done += n as u64;
    }
    Ok(None)
}

/// FILL: `size` is a multiple of 4 and so is `CHUNK`, so every chunk starts on a pattern word.
/// A small fill (the common clear of a flag or counter) goes through a small buffer: preparing
/// 512 bytes of pattern for 4 of them was most of a one-packet job's cost under emulation.
fn fill<M: PhysMem + ?Sized>(
    space: &Space<'_, M>,
    tlb: &mut Tlb,
    dst: u64,
    size: u64,
    pattern: u32,
    from: u64,
) -> Result<Option<u64>, Fault> {
    if size <= 8 {
        // A flag or a counter: the pattern's bytes in one access, no buffer to clear and fill
        // (clearing even the small buffer is a `memset` call in the kernel's size-optimised
        // build).
        let w = (u64::from(pattern) | (u64::from(pattern) << 32)).to_le_bytes();
        space
            .write(tlb, dst, w.get(..size as usize).unwrap_or_default())
            .map(|()| None)
    } else if size <= SMALL_FILL as u64 {
        fill_with::<M, SMALL_FILL>(space, tlb, dst, size, pattern, from)
    } else {
        fill_with::<M, CHUNK>(space, tlb, dst, size, pattern, from)
    }
}

/// Bytes of the buffer for fills of at most this size.
const SMALL_FILL: usize = 64;

/// FILL through an `N`-byte buffer of the pattern (`N` a multiple of 4).
fn fill_with<M: PhysMem + ?Sized, const N: usize>(
    space: &Space<'_, M>,
    tlb: &mut Tlb,
    dst: u64,
    size: u64,
    pattern: u32,
    from: u64,
) -> Result<Option<u64>, Fault> {
    let mut buf = [0u8; N];
    let used = core::cmp::min(N as u64, size) as usize;
    let word = pattern.to_le_bytes();
    for w in buf
        .get_mut(..used)
        .unwrap_or_default()
        .as_chunks_mut::<4>()
        .0
    {
        *w = word;
    }
    // `from` is a multiple of N (a resume point of this loop), so chunks stay pattern-aligned.
    let mut done = from;
    let stop = from.saturating_add(STEP_WORK);
    while done < size {
        if done >= stop {
            return Ok(Some(done));
        }
        let n = core::cmp::min(N as u64, size - done) as usize;
        space.write(
            tlb,
            dst.wrapping_add(done),
            buf.get(..n).unwrap_or_default(),
        )?;
        done += n as u64;
    }
    Ok(None)
}

/// GEMM operands, widened for address arithmetic.
struct Gemm {
    a: u64,
    b: u64,
    c: u64,
    m: usize,
    n: usize,
    k: usize,
    lda: u64,
    ldb: u64,
    ldc: u64,
    accumulate: bool,
}

/// GEMM_I8: for each row of C, tiles of `GEMM_COLS` columns accumulated in an on-stack int32
/// tile; A is streamed in chunks of its row, B one row segment per inner index. Access order per
/// tile: C (read, if accumulating), then A and B interleaved, then C (write). Products and sums
/// wrap (int32). Offsets stay below 2^48: the decoder checked every matrix range. A tile reads
/// and writes only its own part of C, so the packet resumes at any tile: from tile `from` (in row
/// order), at most [`STEP_WORK`] multiply-accumulates per step, at least one tile.
fn gemm<M: PhysMem + ?Sized>(
    space: &Space<'_, M>,
    g: &Gemm,
    from: u64,
) -> Result<Option<u64>, Fault> {
    let read = regs::ACCESS_READ;
    let (mut ta, mut tb, mut tc) = (Tlb::new(), Tlb::new(), Tlb::new());
    let mut acc = [0i32; GEMM_COLS];
    let mut c_bytes = [0u8; GEMM_COLS * 4];
    let mut a_chunk = [0u8; GEMM_K_CHUNK];
    let mut b_row = [0u8; GEMM_COLS];
    let tiles_per_row = g.n.div_ceil(GEMM_COLS) as u64;
    let tile_work = (GEMM_COLS as u64).saturating_mul(g.k as u64).max(1);
    let tiles_per_step = (STEP_WORK / tile_work).max(1);
    let first_row = (from / tiles_per_row.max(1)) as usize;
    let mut tile = from;
    let stop = from.saturating_add(tiles_per_step);
    for i in first_row..g.m {
        let a_row = g.a.wrapping_add((i as u64).wrapping_mul(g.lda));
        let c_row =
            g.c.wrapping_add((i as u64).wrapping_mul(g.ldc).wrapping_mul(4));
        let mut j0 = if i == first_row {
            (from % tiles_per_row.max(1)) as usize * GEMM_COLS
        } else {
            0
        };
        while j0 < g.n {
            if tile >= stop {
                return Ok(Some(tile));
            }
            tile += 1;
            let cols = core::cmp::min(GEMM_COLS, g.n - j0);
            let acc = acc.get_mut(..cols).unwrap_or_default();
            let c_tile = c_bytes.get_mut(..cols * 4).unwrap_or_default();
            let c_va = c_row.wrapping_add(j0 as u64 * 4);
            if g.accumulate {
                space.read(&mut tc, c_va, c_tile, read)?;
                for (v, b) in acc.iter_mut().zip(c_tile.as_chunks::<4>().0) {
                    *v = i32::from_le_bytes(*b);
                }
            } else {
                acc.fill(0);
            }
            let b_tile = b_row.get_mut(..cols).unwrap_or_default();
            let mut l0 = 0usize;
            while l0 < g.k {
                let ks = core::cmp::min(GEMM_K_CHUNK, g.k - l0);
                let a_part = a_chunk.get_mut(..ks).unwrap_or_default();
                space.read(&mut ta, a_row.wrapping_add(l0 as u64), a_part, read)?;
                for (dl, &a_byte) in a_part.iter().enumerate() {
                    let l = (l0 + dl) as u64;
                    let b_va =
                        g.b.wrapping_add(l.wrapping_mul(g.ldb))
                            .wrapping_add(j0 as u64);
                    space.read(&mut tb, b_va, b_tile, read)?;
                    let av = i32::from(a_byte as i8);
                    for (v, &b_byte) in acc.iter_mut().zip(b_tile.iter()) {
                        // |a·b| <= 2^14: the product cannot overflow, only the sum can.
                        *v = v.wrapping_add(av * i32::from(b_byte as i8));
                    }
                }
                l0 += ks;
            }
            for (b, v) in c_tile.as_chunks_mut::<4>().0.iter_mut().zip(acc.iter()) {
                *b = v.to_le_bytes();
            }
            space.write(&mut tc, c_va, c_tile)?;
            j0 += cols;
        }
    }
    Ok(None)
}

/// ELTWISE: chunks of `ELT_CHUNK` elements; per chunk a is read, then b (ADD and MUL), then the
/// destination written (int32, or int8 for REQUANT).
#[allow(clippy::too_many_arguments)]
fn eltwise<M: PhysMem + ?Sized>(
    space: &Space<'_, M>,
    op: u32,
    count: u32,
    a: u64,
    b: u64,
    dst: u64,
    scale: i32,
    shift: u32,
    from: u64,
) -> Result<Option<u64>, Fault> {
    let read = regs::ACCESS_READ;
    let (mut ta, mut tb, mut td) = (Tlb::new(), Tlb::new(), Tlb::new());
    let mut a_bytes = [0u8; ELT_CHUNK * 4];
    let mut b_bytes = [0u8; ELT_CHUNK * 4];
    let mut d_bytes = [0u8; ELT_CHUNK * 4];
    let count = u64::from(count);
    let mut done = from;
    let stop = from.saturating_add(STEP_WORK);
    while done < count {
        if done >= stop {
            return Ok(Some(done));
        }
        let n = core::cmp::min(ELT_CHUNK as u64, count - done) as usize;
        let off = done * 4;
        let a_in = a_bytes.get_mut(..n * 4).unwrap_or_default();
        space.read(&mut ta, a.wrapping_add(off), a_in, read)?;
        let b_in = b_bytes.get_mut(..n * 4).unwrap_or_default();
        if op == packet::ELT_ADD || op == packet::ELT_MUL {
            space.read(&mut tb, b.wrapping_add(off), b_in, read)?;
        }
        let le = |w: &[u8; 4]| i32::from_le_bytes(*w);
        let pairs = a_in.as_chunks::<4>().0.iter().zip(b_in.as_chunks::<4>().0);
        if op == packet::ELT_REQUANT {
            let out = d_bytes.get_mut(..n).unwrap_or_default();
            for (o, (x, _)) in out.iter_mut().zip(pairs) {
                *o = packet::requant(le(x), scale, shift) as u8;
            }
            space.write(&mut td, dst.wrapping_add(done), out)?;
        } else {
            let out = d_bytes.get_mut(..n * 4).unwrap_or_default();
            for (o, (x, y)) in out.as_chunks_mut::<4>().0.iter_mut().zip(pairs) {
                let (x, y) = (le(x), le(y));
                let r = match op {
                    packet::ELT_ADD => x.wrapping_add(y),
                    packet::ELT_MUL => x.wrapping_mul(y),
                    _ => core::cmp::max(x, 0),
                };
                *o = r.to_le_bytes();
            }
            space.write(&mut td, dst.wrapping_add(off), out)?;
        }
        done += n as u64;
    }
    Ok(None)
}
