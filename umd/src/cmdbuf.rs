//! Command buffers: packets are encoded on the CPU into a host vector while recording (cheap,
//! no locks, no device calls), checked with the same decoder the KMD and the device use, and
//! uploaded into a GPU buffer at `end`, ready to be submitted any number of times.

use crate::context::Context;
use crate::error::{umdResult, UmdError, UmdResult};
use crate::memory::pool::Access;
use crate::memory::{Buffer, BufferRef, MEM_FLAG_READ_ONLY};
use std::sync::{Arc, Mutex};
use uapi::packet;

/// Recording state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Created or submitted-and-reusable: `begin` next.
    Initial,
    /// Between `begin` and `end`.
    Recording,
    /// Ended: can be submitted.
    Ended,
}

/// What `end` produced: the GPU copy of the packets.
pub struct Recorded {
    /// Buffer holding the packets.
    pub buffer: BufferRef,
    /// Bytes of packets.
    pub size: u32,
    /// Every memory access of the packets, sorted by address (submit validation and reuse
    /// gating in the pool).
    pub accesses: Arc<[Access]>,
}

struct Inner {
    state: State,
    words: Vec<u32>,
    accesses: Vec<Access>,
    recorded: Option<Recorded>,
}

/// One command buffer.
pub struct CmdBuf {
    /// The context it was created on.
    pub ctx: Arc<Context>,
    inner: Mutex<Inner>,
}

/// The record-time error for a packet the shared decoder refused (`uapi::packet::decode`, the
/// same rules the kernel applies at submit): which argument and its value. One rule for codes:
/// a size, count or dimension that is zero or out of range is `UMD_ERR_INVALID_SIZE` (as in
/// `umdMemAlloc` and `umdMemcpy*`), any other operand `UMD_ERR_INVALID_ARGUMENT`, and a packet
/// this device does not accept at all (HANG without hang debugging)
/// `UMD_ERR_SUBMIT_INVALID_PACKET`.
#[track_caller]
fn malformed(m: packet::Malformed) -> UmdError {
    match m {
        packet::Malformed::HangDisabled => UmdError::new(
            umdResult::UMD_ERR_SUBMIT_INVALID_PACKET,
            format!("invalid packet: {} (enable hang debugging: UMD_SIM_HANG_DEBUG=1 on the simulator, hang_debug=1 on the aigpu module).", m.describe()),
        ),
        packet::Malformed::Operand { what, field, value } => {
            let sized = matches!(field, "size" | "count" | "m" | "n" | "k");
            let shown = if matches!(field, "dst" | "src" | "addr" | "va" | "b") {
                format!("0x{value:x}")
            } else {
                value.to_string()
            };
            let code = if sized {
                umdResult::UMD_ERR_INVALID_SIZE
            } else {
                umdResult::UMD_ERR_INVALID_ARGUMENT
            };
            UmdError::new(code, format!("invalid packet: {what}: argument '{field}' is {shown}."))
        }
        m => UmdError::new(
            umdResult::UMD_ERR_INVALID_ARGUMENT,
            format!("invalid packet: {}.", m.describe()),
        ),
    }
}

fn poisoned() -> UmdError {
    UmdError::new(
        umdResult::UMD_ERR_INTERNAL,
        "command buffer lock poisoned by an earlier panic",
    )
}

impl CmdBuf {
    /// A new, empty command buffer on `ctx`.
    pub fn new(ctx: Arc<Context>) -> CmdBuf {
        CmdBuf {
            ctx,
            inner: Mutex::new(Inner {
                state: State::Initial,
                words: Vec::new(),
                accesses: Vec::new(),
                recorded: None,
            }),
        }
    }

    /// Starts recording (discards earlier packets).
    pub fn begin(&self) -> UmdResult<()> {
        let mut i = self.inner.lock().map_err(|_| poisoned())?;
        if i.state == State::Recording {
            crate::bail!(UMD_ERR_INVALID_STATE, "umdCmdBufBegin on a command buffer that is already recording (call umdCmdBufEnd first).");
        }
        i.state = State::Recording;
        i.words.clear();
        i.accesses.clear();
        Ok(())
    }

    /// Appends one encoded packet after checking it with the shared decoder.
    pub fn record(&self, words: &[u32]) -> UmdResult<()> {
        let hang_ok = self.ctx.device.info.caps & uapi::CAP_HANG_DEBUG != 0;
        let decoded = packet::decode(words, hang_ok);
        if let Err(m) = decoded {
            return Err(malformed(m).ctx(self.ctx.id));
        }
        let mut i = self.inner.lock().map_err(|_| poisoned())?;
        if i.state != State::Recording {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_STATE,
                "recording into a command buffer that is not recording (call umdCmdBufBegin first).",
            )
            .ctx(self.ctx.id));
        }
        if (i.words.len() + words.len()) * 4 > uapi::ring::MAX_CMD_SIZE as usize {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_SIZE,
                format!("command buffer would exceed {} bytes; split the work into several command buffers.", uapi::ring::MAX_CMD_SIZE),
            )
            .ctx(self.ctx.id));
        }
        let offset = (i.words.len() * 4) as u32;
        if let Ok(p) = decoded {
            for a in p.accesses().into_iter().flatten() {
                i.accesses.push(Access {
                    va: a.va,
                    len: a.len,
                    offset,
                    write: a.write,
                });
            }
        }
        i.words.extend_from_slice(words);
        Ok(())
    }

    /// Ends recording and uploads the packets.
    pub fn end(&self) -> UmdResult<()> {
        let mut i = self.inner.lock().map_err(|_| poisoned())?;
        if i.state != State::Recording {
            return Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_STATE,
                "umdCmdBufEnd without umdCmdBufBegin.",
            )
            .ctx(self.ctx.id));
        }
        if i.words.is_empty() {
            i.words.extend_from_slice(&packet::encode_nop());
        }
        let bytes: Vec<u8> = i.words.iter().flat_map(|w| w.to_le_bytes()).collect();
        // Sorted by address once here, so each submit checks them in one ordered pass.
        let mut acc = std::mem::take(&mut i.accesses);
        acc.sort_unstable_by_key(|a| (a.va, a.len, a.offset));
        acc.dedup_by_key(|a| (a.va, a.len));
        let accesses: Arc<[Access]> = acc.into();
        // Reuse the previous upload only when it is large enough and no job can still read it:
        // every submit keeps an Arc to the buffer it submitted until its fence is seen signalled
        // (Context::retire), so a count of one means nothing in flight uses it.
        let reuse = matches!(&i.recorded,
            Some(r) if r.buffer.size >= bytes.len() as u64 && BufferRef::is_unique(&r.buffer));

        if !reuse {
            let size = (bytes.len() as u64).next_multiple_of(uapi::PAGE_SIZE);
            let buf = Buffer::alloc(&self.ctx, size, MEM_FLAG_READ_ONLY)
                .map_err(|e| e.ctx(self.ctx.id))?;
            i.recorded = Some(Recorded {
                buffer: BufferRef::new(buf),
                size: 0,
                accesses: Arc::new([]),
            });
        }
        if let Some(r) = i.recorded.as_mut() {
            r.buffer.write(0, &bytes)?;
            r.size = bytes.len() as u32;
            r.accesses = accesses;
        }
        i.state = State::Ended;
        Ok(())
    }

    /// The GPU copy to submit, if ended, with its sorted memory accesses.
    pub fn submittable(&self) -> UmdResult<(BufferRef, u32, Arc<[Access]>)> {
        let i = self.inner.lock().map_err(|_| poisoned())?;
        match (&i.state, &i.recorded) {
            (State::Ended, Some(r)) => Ok((r.buffer.clone(), r.size, r.accesses.clone())),
            _ => Err(UmdError::new(
                umdResult::UMD_ERR_INVALID_STATE,
                "submitting a command buffer that was not ended (umdCmdBufBegin ... umdCmdBufEnd).",
            )
            .ctx(self.ctx.id)),
        }
    }
}
