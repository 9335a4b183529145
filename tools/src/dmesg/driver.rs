//! The driver's own event lines (`rules/src/rules/report.rs`, `lost.rs`): recognised by their
//! declared lead (`rules::lead`, the constants aigpu.ko prints with) and read by key into the
//! typed facts of [`Event`]. No fact comes from a sentence's words.

use super::Event;
use crate::kv::Kv;
use rules::rules::lead::{self, fields_of};
use rules::rules::lost::LossCause;

/// The fields of a fault line (`rules::report::FaultLine`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultFacts {
    /// Its lead (one of `rules::lead::FAULTS`).
    pub class: &'static str,
    /// `fault`: the fault type (`unmapped`, `permission`, `bad-pte`, `bus-error`, ...).
    pub fault: String,
    /// `access`: `read`, `write`, `fetch`.
    pub access: String,
    /// `va`.
    pub va: Option<u64>,
    /// `offset`: the packet's offset in its command buffer.
    pub offset: Option<u64>,
    /// `ctx`, `pid`, `comm`: the job's context and its owner (absent when no live context owns
    /// the job).
    pub ctx: Option<u64>,
    pub pid: Option<u64>,
    pub comm: Option<String>,
    /// `injected=1`: a fault injection made it.
    pub injected: bool,
}

impl FaultFacts {
    /// An uncorrectable memory error: the hardware's, never the context's page fault.
    pub fn mem_error(&self) -> bool {
        self.class == lead::MEM_ERROR
    }

    fn read(class: &'static str, k: &Kv) -> FaultFacts {
        FaultFacts {
            class,
            fault: k.or_dash("fault").to_string(),
            access: k.or_dash("access").to_string(),
            va: k.num("va"),
            offset: k.num("offset"),
            ctx: k.num("ctx"),
            pid: k.num("pid"),
            comm: k.get("comm").map(str::to_string),
            injected: injected(k),
        }
    }
}

/// The `injected` field (`rules::lead::injected_value`).
fn injected(k: &Kv) -> bool {
    k.num("injected") == Some(1)
}

/// The driver's event line `message` as an [`Event`]: by its lead, its facts by key.
pub(super) fn driver_event(message: &str) -> Option<Event> {
    for class in lead::FAULTS {
        if let Some(f) = fields_of(message, class) {
            return Some(Event::Fault(FaultFacts::read(class, &Kv::parse(f))));
        }
    }
    if fields_of(message, lead::HANG).is_some() {
        return Some(Event::Hang);
    }
    if let Some(f) = fields_of(message, lead::LOST) {
        let k = Kv::parse(f);
        // A loss is a loss whatever its cause says; a cause this tool does not know is told
        // as the reset that failed, which every loss starts with.
        let cause = k
            .get("cause")
            .and_then(LossCause::from_name)
            .unwrap_or_default();
        return Some(Event::Lost {
            cause,
            injected: injected(&k),
        });
    }
    if let Some(f) = fields_of(message, lead::REINIT) {
        let k = Kv::parse(f);
        return Some(Event::Reinit {
            lost_cause: k.get("lost_cause").and_then(LossCause::from_name),
        });
    }
    if let Some(f) = fields_of(message, lead::WEDGED) {
        return Some(Event::Wedged {
            sent: Kv::parse(f).get("uevent") == Some("sent"),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::super::tests::events;
    use super::*;

    /// A driver line as aigpu.ko prints it: `dev_*`'s prefix, then the `rules` format.
    fn dev_line(t: &str, d: impl std::fmt::Display) -> String {
        format!("[ {t}] aigpu aigpu0: {d}")
    }

    #[test]
    fn the_lines_rules_writes_are_read_back_as_typed_facts() {
        use rules::rules::lost::{LostLine, ReinitLine, WedgedLine};
        use rules::rules::report::Owner;
        let owner = Owner {
            pid: 50,
            comm: "exec_test",
        };
        // The fault line's exact text is rules' own test (`report.rs`); here as aigpu.ko logs it.
        let lines = [
            "[ 1.0] aigpu aigpu0: uncorrectable memory error: fault=bus-error access=fetch va=0x4e10000 offset=0 queue=0 job=0 injected=1; no job of a live context owns it".to_string(),
            dev_line(
                "2.0",
                LostLine {
                    cause: LossCause::OffBus,
                    injected: false,
                },
            ),
            dev_line(
                "3.0",
                WedgedLine {
                    recovery: "vendor-specific",
                    sent: Ok(()),
                    guilty: Some(owner),
                },
            ),
            dev_line(
                "4.0",
                ReinitLine {
                    lost_cause: LossCause::OffBus,
                },
            ),
            dev_line(
                "5.0",
                LostLine {
                    cause: LossCause::ResetFailed,
                    injected: true,
                },
            ),
            dev_line(
                "6.0",
                WedgedLine::<&str> {
                    recovery: "vendor-specific",
                    sent: Err(19),
                    guilty: None,
                },
            ),
        ];
        assert_eq!(
            lines[1],
            "[ 2.0] aigpu aigpu0: device lost: cause=off_bus injected=0; every ioctl now fails with ENODEV"
        );
        assert_eq!(
            events(&lines),
            vec![
                Event::Fault(FaultFacts {
                    class: lead::MEM_ERROR,
                    fault: "bus-error".into(),
                    access: "fetch".into(),
                    va: Some(0x4e1_0000),
                    offset: Some(0),
                    injected: true,
                    ..FaultFacts::default()
                }),
                Event::Lost {
                    cause: LossCause::OffBus,
                    injected: false
                },
                Event::Wedged { sent: true },
                Event::Reinit {
                    lost_cause: Some(LossCause::OffBus)
                },
                Event::Lost {
                    cause: LossCause::ResetFailed,
                    injected: true
                },
                Event::Wedged { sent: false },
            ]
        );
        let Event::Fault(f) = &events(&lines[..1])[0] else {
            panic!("not a fault")
        };
        assert!(f.mem_error(), "a memory error is the hardware's");
    }

    #[test]
    fn words_are_not_events() {
        // Sentences that name the events without their declared lead say nothing to triage;
        // the kernel's own lines about the module still do.
        assert_eq!(
            events(&[
                "[ 1.0] aigpu aigpu0: engine reset failed: device lost; every ioctl now fails with ENODEV".into(),
                "[ 1.1] aigpu aigpu0: the device fell off the bus".into(),
                "[ 1.2] aigpu aigpu0: an uncorrectable memory error, bus-error".into(),
                "[ 1.3] aigpu aigpu0: device re-initialised (power cycle) after it was lost; no context was left on it".into(),
                "[ 1.4] aigpu aigpu0: device lost: cause=melted injected=0; every ioctl now fails with ENODEV".into(),
                "[ 1.5] aigpu aigpu0: device re-initialised: method=power_cycle; no context was left on it".into(),
                "[ 1.6] aigpu: module verification failed: signature and/or required key missing - tainting kernel".into(),
            ]),
            vec![
                Event::Lost {
                    cause: LossCause::ResetFailed,
                    injected: false
                },
                Event::Reinit { lost_cause: None },
                Event::LoadError,
            ]
        );
    }
}
