//! A job timeout's facts (`rules::report::HangFacts`: the kernel's dmesg line and crash dump,
//! the simulator's log record) and what they say: a genuine hang, or a timeout set too short.

use crate::verdict::Facts;

/// The facts of one job timeout, by their keys (`ran_ms`, `state`, `wait`, `wait_va` /
/// `wait_pa`, `wait_value`, `offset`, `timeout_ms`, `timeout_source`, `recent_ms`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TimeoutFacts {
    /// How long the job had run, from its start on the queue.
    pub ran_ms: u64,
    /// `executing`, `waiting`, `hung` (the debug HANG packet), or another queue state's name.
    pub state: String,
    /// For `waiting`: `mem` (a WAIT_MEM packet, `wait_va`) or `fence` (an in-fence, `wait_pa`).
    pub wait: Option<String>,
    /// The address waited on and the value waited for.
    pub wait_va: Option<u64>,
    pub wait_pa: Option<u64>,
    pub wait_value: Option<u64>,
    /// The current packet's offset in its command buffer.
    pub offset: Option<u64>,
    /// The timeout in force and where it came from (`default`, `module_param`, `environment`).
    pub timeout_ms: Option<u64>,
    pub timeout_source: Option<String>,
    /// The context's last completed jobs' run times, oldest first.
    pub recent_ms: Vec<u64>,
}

/// What the facts say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// A genuine hang: the job waited for something that never came, or ran far longer than its
    /// recent peers; why.
    Hang(String),
    /// The timeout is too short for the job: why.
    TooShort(String),
    /// The facts do not decide it.
    Unclear,
}

/// A job that ran more than this many times its recent peers' longest run is not one of them.
const FAR_LONGER: u64 = 4;
/// A job within this many times its recent peers' longest run (plus [`SLACK_MS`]) ran about as
/// long as they did.
const ABOUT_AS_LONG: u64 = 2;
/// The watchdog's slack: the period it samples at (`rules::recovery::WD_PERIOD_MS`) twice.
const SLACK_MS: u64 = 10;

fn num(v: &str) -> Option<u64> {
    match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

impl TimeoutFacts {
    /// From a record's fields (`get(key)`); `None` when it has no `ran_ms` and `state` (a record
    /// of an older driver).
    pub fn from_fields(get: impl Fn(&str) -> Option<String>) -> Option<TimeoutFacts> {
        let n = |k: &str| get(k).as_deref().and_then(num);
        Some(TimeoutFacts {
            ran_ms: n("ran_ms")?,
            state: get("state")?,
            wait: get("wait"),
            wait_va: n("wait_va"),
            wait_pa: n("wait_pa"),
            wait_value: n("wait_value"),
            offset: n("offset"),
            timeout_ms: n("timeout_ms"),
            timeout_source: get("timeout_source"),
            recent_ms: get("recent_ms")
                .filter(|v| v != "none")
                .map(|v| v.split(',').filter_map(num).collect())
                .unwrap_or_default(),
        })
    }

    /// From a `key=value` line of the kernel's (a dmesg line's fields, a crash dump's `hang`
    /// line).
    pub fn from_kv(k: &crate::kv::Kv) -> Option<TimeoutFacts> {
        Self::from_fields(|key| k.get(key).map(str::to_string))
    }

    /// A genuine hang or a timeout too short. `default_ms`: the timeout's default, when known
    /// (the simulator's `setting` record says it).
    pub fn judge(&self, default_ms: Option<u64>) -> Judgement {
        let peers = self.recent_ms.iter().copied().max();
        match self.state.as_str() {
            "hung" => return Judgement::Hang("it stopped in the debug HANG packet".into()),
            "waiting" => {
                return Judgement::Hang(format!(
                    "it was waiting{} and the value never came",
                    self.waited_for()
                ))
            }
            "executing" => {}
            _ => return Judgement::Unclear,
        }
        let configured = self
            .timeout_source
            .as_deref()
            .is_some_and(|s| s != "default");
        let below_default =
            configured && self.timeout_ms.zip(default_ms).is_some_and(|(t, d)| t < d);
        match (peers, self.timeout_ms) {
            (Some(p), Some(t)) if configured && t < p => Judgement::TooShort(format!(
                "the timeout of {t} ms is shorter than the context's recent jobs (up to {p} ms)"
            )),
            (Some(p), _) if self.ran_ms <= ABOUT_AS_LONG * p + SLACK_MS => {
                Judgement::TooShort(format!(
                    "it was still executing after {} ms, about as long as the context's recent jobs (up to {p} ms)",
                    self.ran_ms
                ))
            }
            // Before "far longer than its peers": a job unlike the context's earlier ones (a
            // large GEMM after small fills) is far longer than they are, and a timeout set
            // below the default is the likelier cause.
            (_, Some(t)) if below_default => Judgement::TooShort(format!(
                "it was still executing (not waiting) when a timeout of {t} ms, below the default {} ms, stopped it",
                default_ms.unwrap_or(t)
            )),
            (Some(p), _) if self.ran_ms > FAR_LONGER * p + SLACK_MS => Judgement::Hang(format!(
                "it was executing for {} ms, far longer than the context's recent jobs (up to {p} ms)",
                self.ran_ms
            )),
            _ => Judgement::Unclear,
        }
    }

    /// ` on 0x... for <value>` (a WAIT_MEM) or ` on an in-fence (fence 0x... for <value>)`.
    fn waited_for(&self) -> String {
        let v = self
            .wait_value
            .map(|v| format!(" for {v}"))
            .unwrap_or_default();
        match (self.wait.as_deref(), self.wait_va, self.wait_pa) {
            (Some("fence"), _, Some(pa)) => format!(" on an in-fence (fence {pa:#x}{v})"),
            (_, Some(va), _) => format!(" on {va:#x}{v}"),
            _ => String::new(),
        }
    }

    /// The facts in words: `ran 2004 ms, executing at packet offset 0, timeout 2000 ms
    /// (default); recent jobs 3, 4 ms`.
    pub fn text(&self) -> String {
        let state = match self.state.as_str() {
            "waiting" => format!("waiting{}", self.waited_for()),
            "hung" => "in the HANG packet".into(),
            s => s.to_string(),
        };
        let at = self
            .offset
            .map(|o| format!(" at packet offset {o}"))
            .unwrap_or_default();
        let timeout = match (self.timeout_ms, self.timeout_source.as_deref()) {
            (Some(t), Some(s)) => format!(", timeout {t} ms ({s})"),
            (Some(t), None) => format!(", timeout {t} ms"),
            _ => String::new(),
        };
        let recent = if self.recent_ms.is_empty() {
            "no earlier job of the context completed".to_string()
        } else {
            let ms: Vec<String> = self.recent_ms.iter().map(u64::to_string).collect();
            format!("its recent jobs ran {} ms", ms.join(", "))
        };
        format!("ran {} ms, {state}{at}{timeout}; {recent}", self.ran_ms)
    }

    /// Puts the facts into a finding's fields.
    pub fn apply(&self, f: &mut Facts) {
        f.ran_ms = Some(self.ran_ms);
        f.state = Some(self.state.clone());
        f.wait_va = self.wait_va;
        f.wait_pa = self.wait_pa;
        f.wait_value = self.wait_value;
        f.timeout_ms = self.timeout_ms;
        f.timeout_source = self.timeout_source.clone();
        f.recent_ms = Some(self.recent_ms.clone());
        if f.packet.is_none() {
            f.packet = self.offset.map(|o| format!("offset {o}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::Kv;

    fn of(line: &str) -> TimeoutFacts {
        TimeoutFacts::from_kv(&Kv::parse(line)).expect("facts")
    }

    #[test]
    fn fields_by_key() {
        let f = of("hang job=9 ran_ms=2004 state=waiting wait=mem wait_va=0x40001000 wait_value=7 offset=24 timeout_ms=2000 timeout_source=module_param recent_ms=3,4");
        assert_eq!(
            f,
            TimeoutFacts {
                ran_ms: 2004,
                state: "waiting".into(),
                wait: Some("mem".into()),
                wait_va: Some(0x4000_1000),
                wait_pa: None,
                wait_value: Some(7),
                offset: Some(24),
                timeout_ms: Some(2000),
                timeout_source: Some("module_param".into()),
                recent_ms: vec![3, 4],
            }
        );
        assert_eq!(
            f.text(),
            "ran 2004 ms, waiting on 0x40001000 for 7 at packet offset 24, timeout 2000 ms (module_param); its recent jobs ran 3, 4 ms"
        );
        assert_eq!(
            of("ran_ms=1 state=hung recent_ms=none").recent_ms,
            Vec::<u64>::new()
        );
        let k = Kv::parse("hang job=9 offset=0 timeout_ms=2000");
        assert_eq!(TimeoutFacts::from_kv(&k), None, "an older dump");
    }

    #[test]
    fn a_wait_or_the_hang_packet_is_a_hang() {
        let w = of("ran_ms=2004 state=waiting wait=mem wait_va=0x1000 wait_value=5 offset=0 timeout_ms=10 timeout_source=environment recent_ms=1");
        assert_eq!(
            w.judge(Some(2000)),
            Judgement::Hang("it was waiting on 0x1000 for 5 and the value never came".into())
        );
        let fence = of("ran_ms=2004 state=waiting wait=fence wait_pa=0x7000 wait_value=3 timeout_ms=2000 timeout_source=default recent_ms=none");
        assert_eq!(
            fence.judge(None),
            Judgement::Hang(
                "it was waiting on an in-fence (fence 0x7000 for 3) and the value never came"
                    .into()
            )
        );
        assert!(matches!(
            of("ran_ms=2004 state=hung timeout_ms=2000 timeout_source=default recent_ms=none")
                .judge(Some(2000)),
            Judgement::Hang(_)
        ));
    }

    #[test]
    fn an_executing_job_is_judged_against_its_peers_and_the_default() {
        let e = |ran: u64, src: &str, t: u64, recent: &str| {
            of(&format!("ran_ms={ran} state=executing offset=0 timeout_ms={t} timeout_source={src} recent_ms={recent}"))
        };
        // As long as its peers: too short.
        assert_eq!(
            e(104, "environment", 100, "60,70,80").judge(Some(2000)),
            Judgement::TooShort("it was still executing after 104 ms, about as long as the context's recent jobs (up to 80 ms)".into())
        );
        // Far longer than its peers: a hang (a kernel that spins).
        assert_eq!(
            e(2004, "default", 2000, "3,4,5").judge(Some(2000)),
            Judgement::Hang("it was executing for 2004 ms, far longer than the context's recent jobs (up to 5 ms)".into())
        );
        // A configured timeout below what its peers took.
        assert_eq!(
            e(51, "module_param", 50, "20,400").judge(None),
            Judgement::TooShort(
                "the timeout of 50 ms is shorter than the context's recent jobs (up to 400 ms)"
                    .into()
            )
        );
        // Between: undecided.
        assert_eq!(
            e(350, "default", 340, "100").judge(None),
            Judgement::Unclear
        );
        // No peers: a timeout below the default set for the process is too short.
        assert_eq!(
            e(24, "environment", 10, "none").judge(Some(2000)),
            Judgement::TooShort("it was still executing (not waiting) when a timeout of 10 ms, below the default 2000 ms, stopped it".into())
        );
        assert_eq!(
            e(2004, "default", 2000, "none").judge(Some(2000)),
            Judgement::Unclear
        );
        // A large job after small ones, with a timeout below the default: the setting.
        assert!(matches!(
            e(24, "environment", 10, "1,1").judge(Some(2000)),
            Judgement::TooShort(w) if w.contains("below the default 2000 ms")
        ));
        // The same on aigpu.ko, whose default the line does not say: far longer than its peers.
        assert!(matches!(
            e(24, "module_param", 10, "1,1").judge(None),
            Judgement::Hang(_)
        ));
        assert_eq!(
            e(24, "environment", 10, "none").judge(None),
            Judgement::Unclear
        );
        assert_eq!(of("ran_ms=2 state=idle").judge(None), Judgement::Unclear);
    }
}
