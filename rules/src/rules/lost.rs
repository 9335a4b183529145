//! The device-level lines: the device is lost ([`LostLine`]), a lost device is re-initialised
//! ([`ReinitLine`]), the DRM wedged event was sent ([`WedgedLine`]). The same shape as every
//! line of `super::report` (`<lead>: <fields>[; <clause>]`, docs/kmd.md "Faults, hangs, reset
//! and device loss"): why the device was lost and whether a fault injection did it are fields,
//! so `tools/` tells a failed reset from a device that fell off the bus without reading words.

use core::fmt::{self, Display, Formatter};

use super::lead::{self, injected_value};
use super::report::Owner;

/// Why a device is lost: the `cause` of [`LostLine`] and the `lost_cause` of [`ReinitLine`].
/// Both are hardware events, never a context's fault.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LossCause {
    /// The engine reset did not bring the device back (`ID` does not answer after it).
    #[default]
    ResetFailed,
    /// The device fell off the bus: its registers read all ones before the reset was tried.
    OffBus,
}

impl LossCause {
    /// Every cause, for the readers.
    pub const ALL: [LossCause; 2] = [LossCause::ResetFailed, LossCause::OffBus];

    /// The field's value.
    pub const fn name(self) -> &'static str {
        match self {
            LossCause::ResetFailed => "reset_failed",
            LossCause::OffBus => "off_bus",
        }
    }

    /// From the field's value.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == s)
    }

    /// The cause, from the `ID` register read before the reset and after it (`regs::ID`):
    /// all ones before is a device gone from the bus; otherwise the reset failed.
    pub const fn from_id_reads(before_reset: u32) -> Self {
        if before_reset == crate::uapi::regs::LOST_READ_VALUE {
            LossCause::OffBus
        } else {
            LossCause::ResetFailed
        }
    }
}

/// `device lost: cause=<reset_failed|off_bus> injected=<0|1>; every ioctl now fails with
/// ENODEV`: said once per loss.
pub struct LostLine {
    pub cause: LossCause,
    /// A fault injection made it (`inject_reset_failure`, `inject_fall_off_bus`).
    pub injected: bool,
}

impl Display for LostLine {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: cause={} injected={}; every ioctl now fails with ENODEV",
            lead::LOST,
            self.cause.name(),
            injected_value(self.injected)
        )
    }
}

/// When a lost device works again ([`power_cycles_at_open`]), as the messages that tell a user
/// what to do say it.
pub const WORKS_AGAIN: &str =
    "it works again once no context is left on it (the next open then power-cycles it)";

/// Whether opening a file of a lost device power-cycles it first: once no live context is left
/// on it (every user destroyed its contexts or closed its file), as a remove and rescan of real
/// hardware would. Files that saw the loss stay lost; a file opened while the device is lost and
/// still in use is lost from the start (every call on it but a context destroy fails with
/// `DEVICE_LOST`).
pub fn power_cycles_at_open<'a>(
    lost: bool,
    mut contexts: impl Iterator<Item = &'a super::Context>,
) -> bool {
    lost && contexts.all(|c| !c.live())
}

/// `device re-initialised: method=power_cycle lost_cause=<cause>; no context was left on it`:
/// the next open after the last context of a lost device is gone power-cycles it.
pub struct ReinitLine {
    /// Why it had been lost.
    pub lost_cause: LossCause,
}

impl Display for ReinitLine {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: method=power_cycle lost_cause={}; no context was left on it",
            lead::REINIT,
            self.lost_cause.name()
        )
    }
}

/// `wedged: recovery=<method> uevent=sent[ pid=... comm=...]; close every file of the device,
/// the next open re-initialises it`, or `uevent=failed errno=<n>` when the uevent could not be
/// sent: the DRM wedged event of a lost device (docs/kmd.md, "Wedged event"), with the guilty
/// process it names (its `PID=` / `TASK=`).
pub struct WedgedLine<C> {
    /// The recovery method sent (`WEDGED=`).
    pub recovery: &'static str,
    /// Sent, or the positive errno of why not.
    pub sent: Result<(), i32>,
    /// The process whose fault or hang led to the failed reset.
    pub guilty: Option<Owner<C>>,
}

impl<C: Display> Display for WedgedLine<C> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{}: recovery={}", lead::WEDGED, self.recovery)?;
        match self.sent {
            Ok(()) => f.write_str(" uevent=sent")?,
            Err(e) => write!(f, " uevent=failed errno={}", e)?,
        }
        if let Some(o) = &self.guilty {
            write!(f, " pid={} comm={}", o.pid, o.comm)?;
        }
        f.write_str("; close every file of the device, the next open re-initialises it")
    }
}

#[cfg(test)]
mod tests {
    use super::super::lead::fields_of;
    use super::super::report::tests::assert_text;
    use super::*;
    use crate::uapi::regs;

    #[test]
    fn the_loss_says_its_cause_and_whether_it_was_injected() {
        assert_text(
            LostLine {
                cause: LossCause::ResetFailed,
                injected: true,
            },
            "device lost: cause=reset_failed injected=1; every ioctl now fails with ENODEV",
        );
        assert_text(
            LostLine {
                cause: LossCause::OffBus,
                injected: false,
            },
            "device lost: cause=off_bus injected=0; every ioctl now fails with ENODEV",
        );
        assert_eq!(
            LossCause::from_id_reads(regs::LOST_READ_VALUE),
            LossCause::OffBus
        );
        assert_eq!(
            LossCause::from_id_reads(regs::ID_VALUE),
            LossCause::ResetFailed
        );
        for c in LossCause::ALL {
            assert_eq!(LossCause::from_name(c.name()), Some(c));
        }
        assert_eq!(LossCause::from_name("reset failed"), None);
    }

    #[test]
    fn reinit_and_wedged_are_fields() {
        assert_text(
            ReinitLine {
                lost_cause: LossCause::OffBus,
            },
            "device re-initialised: method=power_cycle lost_cause=off_bus; no context was left on it",
        );
        assert_text(
            WedgedLine {
                recovery: "vendor-specific",
                sent: Ok(()),
                guilty: Some(Owner {
                    pid: 50,
                    comm: "std_interfaces_",
                }),
            },
            "wedged: recovery=vendor-specific uevent=sent pid=50 comm=std_interfaces_; close every file of the device, the next open re-initialises it",
        );
        assert_text(
            WedgedLine::<&str> {
                recovery: "vendor-specific",
                sent: Err(19),
                guilty: None,
            },
            "wedged: recovery=vendor-specific uevent=failed errno=19; close every file of the device, the next open re-initialises it",
        );
        assert_eq!(
            fields_of(
                "device lost: cause=off_bus injected=0; every ioctl now fails with ENODEV",
                lead::LOST
            ),
            Some("cause=off_bus injected=0")
        );
        assert_eq!(fields_of("device lost forever", lead::LOST), None);
        assert_eq!(fields_of("device lostx: a=1", lead::LOST), None);
    }
}
