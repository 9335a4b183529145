//! Name tables shared by debugfs, dmesg, crash dumps and the simulator's log.

use crate::uapi::ioctl::{
    PRIORITY_HIGH, PRIORITY_LOW, PRIORITY_NORMAL, RESET_GUILTY, RESET_INNOCENT,
};

/// A context priority (`uapi::ioctl::PRIORITY_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Priority {
    Low,
    Normal,
    High,
}

impl TryFrom<u32> for Priority {
    type Error = super::Refusal;

    fn try_from(p: u32) -> Result<Self, Self::Error> {
        match p {
            PRIORITY_LOW => Ok(Priority::Low),
            PRIORITY_NORMAL => Ok(Priority::Normal),
            PRIORITY_HIGH => Ok(Priority::High),
            _ => Err(super::Refusal::new(crate::uapi::reason::PRIORITY_INVALID)),
        }
    }
}

impl Priority {
    /// The UAPI value.
    pub const fn raw(self) -> u32 {
        match self {
            Priority::Low => PRIORITY_LOW,
            Priority::Normal => PRIORITY_NORMAL,
            Priority::High => PRIORITY_HIGH,
        }
    }
}

/// `low`, `normal` or `high`.
pub const fn prio_name(p: u32) -> &'static str {
    match p {
        PRIORITY_LOW => "low",
        PRIORITY_HIGH => "high",
        _ => "normal",
    }
}

/// `none`, `guilty` or `innocent`.
pub const fn reset_name(r: u32) -> &'static str {
    match r {
        RESET_GUILTY => "guilty",
        RESET_INNOCENT => "innocent",
        _ => "none",
    }
}
