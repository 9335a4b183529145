//! The debugfs texts of docs/debugfs.md, rendered from the simulator's state, so `umd-smi` reads
//! the simulator and the kernel driver with one parser. The `contexts` and `queues` lines are
//! `rules::report`'s, the same code aigpu.ko prints them with.

use super::gpu::{lock, Gpu};
use rules::report::Owner;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use uapi::regs;

impl Gpu {
    /// Contents of `status`.
    pub fn debugfs_status(&self) -> String {
        let st = self.state();
        let c = st.counters;
        format!(
            "device=sim{} state={} uapi={}.{} driver={}.{}.{} hw=1.0 mem_total={} mem_used={} clients={} contexts={} jobs={} faults={} hangs={} resets={} job_timeout_ms={} hang_debug={} steps={} busy_us={}\n",
            self.index,
            if st.lost { "lost" } else { "ok" },
            uapi::UAPI_MAJOR,
            uapi::UAPI_MINOR,
            uapi::DRIVER_VERSION.0,
            uapi::DRIVER_VERSION.1,
            uapi::DRIVER_VERSION.2,
            self.mem.size(),
            st.clients.values().map(|c| c.mem.load(Ordering::Relaxed)).sum::<u64>(),
            st.clients.len(),
            st.contexts.values().filter(|c| c.state.live()).count(),
            c.jobs,
            c.faults,
            c.hangs,
            c.resets,
            self.cfg.job_timeout_ms,
            self.cfg.hang_debug as u32,
            self.steps.load(Ordering::Relaxed),
            self.busy_ns.load(Ordering::Relaxed) / 1000
        )
    }

    /// Contents of `queues`.
    pub fn debugfs_queues(&self) -> String {
        let st = self.state();
        let mut d = lock(&self.dev);
        let now = crate::error::detail::mono_ns();
        let mut out = String::new();
        for (qi, q) in st.queues.iter().enumerate() {
            let b = regs::queue_base(qi);
            let device = (
                d.mmio_read32(b + regs::Q_STATE),
                d.mmio_read32(b + regs::Q_HEAD),
                d.mmio_read64(b + regs::Q_CUR_JOB),
            );
            let line = q.state.line(qi, q.inflight.len(), now, device);
            let _ = writeln!(out, "{line}");
        }
        out
    }

    /// Contents of `clients`.
    pub fn debugfs_clients(&self) -> String {
        let st = self.state();
        let mut ids: Vec<&u64> = st.clients.keys().collect();
        ids.sort();
        let mut out = String::new();
        for id in ids {
            let c = &st.clients[id];
            let contexts = st
                .contexts
                .values()
                .filter(|x| x.file == *id && x.state.live())
                .count();
            let _ = writeln!(
                out,
                "client={id} pid={} comm={} mem={} objects={} contexts={contexts} jobs={}",
                c.pid,
                c.comm,
                c.mem.load(Ordering::Relaxed),
                c.objects,
                c.jobs
            );
        }
        out
    }

    /// Contents of `contexts`.
    pub fn debugfs_contexts(&self) -> String {
        let st = self.state();
        let mut ids: Vec<&u32> = st.contexts.keys().collect();
        ids.sort();
        let mut out = String::new();
        for id in ids {
            let c = &st.contexts[id];
            let (pid, comm) = st
                .clients
                .get(&c.file)
                .map(|k| (k.pid.into(), k.comm.as_str()))
                .unwrap_or((0, "?"));
            let _ = writeln!(out, "{}", c.state.line(*id, c.file, Owner { pid, comm }));
        }
        out
    }
}
