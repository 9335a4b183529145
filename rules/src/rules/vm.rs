//! The argument rules of VM_BIND and VM_UNBIND, in the order docs/uapi.md lists them. Whether a
//! range overlaps an existing mapping (bind) or is exactly one (unbind) is each driver's lookup
//! in its own mapping tree, checked after these.

use super::Refusal;
use crate::uapi::ioctl::{VM_ACCESS_READ, VM_ACCESS_WRITE};
use crate::uapi::{reason as r, version};

const fn page_aligned(v: u64) -> bool {
    v.is_multiple_of(version::PAGE_SIZE)
}

/// A GPU VA range: page aligned, not overflowing, inside `[VA_START, VA_END)`. Returns its end.
pub const fn va_range(va: u64, size: u64) -> Result<u64, Refusal> {
    if !page_aligned(va) || !page_aligned(size) {
        return Err(Refusal::new(r::UNALIGNED));
    }
    let Some(end) = va.checked_add(size) else {
        return Err(Refusal::new(r::VA_OUT_OF_RANGE));
    };
    if va < version::VA_START || end > version::VA_END {
        return Err(Refusal::new(r::VA_OUT_OF_RANGE));
    }
    Ok(end)
}

/// VM_BIND of `[bo_offset, bo_offset + size)` of an object of `bo_size` bytes at `va` with
/// `access`: access, size, the object offset's alignment, the VA range, the object range.
/// Returns the end of the VA range.
pub const fn bind(
    va: u64,
    bo_offset: u64,
    size: u64,
    access: u32,
    bo_size: u64,
) -> Result<u64, Refusal> {
    if access == 0 || access & !(VM_ACCESS_READ | VM_ACCESS_WRITE) != 0 {
        return Err(Refusal::new(r::ACCESS_INVALID));
    }
    if size == 0 {
        return Err(Refusal::new(r::SIZE_ZERO));
    }
    if !page_aligned(bo_offset) {
        return Err(Refusal::new(r::UNALIGNED));
    }
    let end = match va_range(va, size) {
        Ok(end) => end,
        Err(e) => return Err(e),
    };
    match bo_offset.checked_add(size) {
        Some(bo_end) if bo_end <= bo_size => Ok(end),
        _ => Err(Refusal::new(r::BO_RANGE)),
    }
}

/// VM_UNBIND of `[va, va + size)`: size, then the VA range. Returns its end.
pub const fn unbind(va: u64, size: u64) -> Result<u64, Refusal> {
    if size == 0 {
        return Err(Refusal::new(r::SIZE_ZERO));
    }
    va_range(va, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VA: u64 = version::VA_START;
    const P: u64 = version::PAGE_SIZE;

    #[test]
    fn bind_checks_in_order() {
        assert_eq!(bind(VA, 0, P, 0, P), Err(Refusal::new(r::ACCESS_INVALID)));
        assert_eq!(bind(VA, 0, P, 4, P), Err(Refusal::new(r::ACCESS_INVALID)));
        assert_eq!(
            bind(VA + 1, 1, 0, VM_ACCESS_READ, P),
            Err(Refusal::new(r::SIZE_ZERO))
        );
        assert_eq!(
            bind(VA + 1, 1, P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::UNALIGNED))
        );
        assert_eq!(
            bind(VA + 1, 0, P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::UNALIGNED))
        );
        assert_eq!(
            bind(0, 0, P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::VA_OUT_OF_RANGE))
        );
        assert_eq!(
            bind(u64::MAX - P + 1, 0, 2 * P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::VA_OUT_OF_RANGE))
        );
        assert_eq!(
            bind(VA, P, P, VM_ACCESS_READ, P),
            Err(Refusal::new(r::BO_RANGE))
        );
        assert_eq!(
            bind(VA, 0, P, VM_ACCESS_READ | VM_ACCESS_WRITE, P),
            Ok(VA + P)
        );
    }

    #[test]
    fn unbind_checks_in_order() {
        assert_eq!(unbind(VA + 1, 0), Err(Refusal::new(r::SIZE_ZERO)));
        assert_eq!(unbind(VA + 1, P), Err(Refusal::new(r::UNALIGNED)));
        assert_eq!(
            unbind(version::VA_END, P),
            Err(Refusal::new(r::VA_OUT_OF_RANGE))
        );
        assert_eq!(unbind(VA, P), Ok(VA + P));
    }
}
