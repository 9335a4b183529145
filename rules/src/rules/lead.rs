//! The driver's lines have one shape, `<lead>: <fields>[; <clause>]`: the lead names the event,
//! the fields are `key=value` pairs with unique keys, and the clause after the last `; ` is for
//! people, never read. The leads are named here once: aigpu.ko writes them through the formats of
//! `super::report` and `super::lost`, the simulator names its records' `class` by them, and
//! `tools/src/dmesg.rs` recognises a line by them ([`fields_of`]).

/// A fault of the context's own addressing (`super::report::FaultLine`).
pub const PAGE_FAULT: &str = "page fault";
/// An uncorrectable memory error: a hardware event, never a page fault.
pub const MEM_ERROR: &str = "uncorrectable memory error";
/// Any other fault the device reports.
pub const GPU_FAULT: &str = "GPU fault";
/// `super::report::HangLine`.
pub const HANG: &str = "job timeout";
/// `super::report::DependencyLine`.
pub const DEPENDENCY: &str = "dependency failed";
/// `super::report::ResetLine`.
pub const RESET_DONE: &str = "engine reset done";
/// `super::lost::LostLine`.
pub const LOST: &str = "device lost";
/// `super::lost::ReinitLine`.
pub const REINIT: &str = "device re-initialised";
/// `super::lost::WedgedLine`.
pub const WEDGED: &str = "wedged";
/// The three fault leads, by `super::report::fault_class`.
pub const FAULTS: [&str; 3] = [PAGE_FAULT, MEM_ERROR, GPU_FAULT];

/// The fields of `message` (a driver line without its `aigpu <device>: ` prefix) when it starts
/// with `lead` followed by `:`: the text between the lead and the last `; ` (the clause for
/// people), trimmed. `None` for a line of another format.
pub fn fields_of<'a>(message: &'a str, lead: &str) -> Option<&'a str> {
    let rest = message.strip_prefix(lead)?.strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    let fields = rest.rsplit_once("; ").map_or(rest, |(f, _)| f);
    Some(fields.trim())
}

/// The `injected` value: `1` when a fault injection (the root-only debugfs files `inject_*`,
/// the simulator's `umdDebugInjectFault`) made the event, else `0`.
pub const fn injected_value(injected: bool) -> u8 {
    if injected {
        1
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_what_follows_the_lead_up_to_the_clause() {
        assert_eq!(
            fields_of(
                "page fault: fault=unmapped access=read va=0x1 job=2 injected=0; context banned",
                PAGE_FAULT
            ),
            Some("fault=unmapped access=read va=0x1 job=2 injected=0")
        );
        assert_eq!(
            fields_of("engine reset done: resubmitted=2 dropped=3", RESET_DONE),
            Some("resubmitted=2 dropped=3")
        );
        assert_eq!(fields_of("job timeout:", HANG), Some(""));
        assert_eq!(fields_of("page faults: x=1", PAGE_FAULT), None);
        assert_eq!(fields_of("a page fault: x=1", PAGE_FAULT), None);
        assert_eq!(fields_of("page fault:x=1", PAGE_FAULT), None);
    }
}
