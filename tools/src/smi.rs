//! `umd-smi`: every aigpu device with its versions, memory, queues, counters, state and clients,
//! or precisely why there is none (libumd's own diagnosis, `umd::backend::kmd::probe_in`).
//!
//! Sources, per device: the render node (libumd's probe, then the query ioctl: versions and
//! memory, readable by anyone allowed to open the node), `/sys/class/drm` (which node belongs
//! to which device) and debugfs (`status`, `queues`, `clients`, `contexts`, crash dumps:
//! root only). What cannot be read is said, not guessed. On the simulator the same debugfs
//! texts come from the in-process device.

use crate::debugfs::{self, CrashDump, Debugfs, DebugfsDevice};
use crate::host::{Host, Notes, ReadErr};
use crate::kv::{self, Kv};
use crate::system::{self, DrmEntry, Node};
use crate::util::{self, Wall};
use serde_json::{json, Value};
use std::path::PathBuf;
use umd::backend::select::NoKernelDevice;
use umd::backend::Backend;

/// What the query ioctl said.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryInfo {
    /// UAPI major.minor.
    pub uapi: (u32, u32),
    /// Driver version.
    pub driver: (u32, u32, u32),
    /// Memory total, bytes.
    pub mem_total: u64,
    /// Memory used, bytes.
    pub mem_used: u64,
    /// Hardware queues.
    pub queues: u32,
}

impl From<&uapi::ioctl::Query> for QueryInfo {
    fn from(q: &uapi::ioctl::Query) -> Self {
        QueryInfo {
            uapi: (q.uapi_major, q.uapi_minor),
            driver: (q.driver_major, q.driver_minor, q.driver_patch),
            mem_total: q.mem_total,
            mem_used: q.mem_used,
            queues: q.num_queues,
        }
    }
}

/// Whether this user can drive the device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Access {
    /// libumd can open it and speaks its UAPI.
    Ok,
    /// libumd cannot use it (the probe's words for this node).
    No(String),
    /// Not checked: offline (a recorded tree has no device to open).
    Offline,
    /// The in-process simulator.
    Sim,
}

/// One device.
#[derive(Clone, Debug)]
pub struct DeviceView {
    /// libumd's device index (render-node order).
    pub index: usize,
    /// `aigpu0`, `sim0`, or `?`.
    pub name: String,
    /// Render node (machine path).
    pub node: Option<String>,
    /// PCI address of the function the device is attached to (`0000:00:04.0`, from sysfs:
    /// `umd::pci`); none on a faux device or the simulator.
    pub pci: Option<String>,
    /// Can libumd use it.
    pub access: Access,
    /// The query ioctl's answer.
    pub query: Option<QueryInfo>,
    /// The debugfs directory read.
    pub debugfs: Option<DebugfsDevice>,
    /// Why debugfs details are missing.
    pub debugfs_why: Option<String>,
    /// Without debugfs: this user's clients of the device, from fdinfo.
    pub fdinfo: Vec<crate::fdinfo::FdClient>,
    /// A simulator device another process publishes (`simdir.rs`): that process.
    pub owner: Option<umd::backend::sim::publish::Owner>,
}

impl DeviceView {
    /// A name unique on the machine: the device's, and for another process's simulator device
    /// `sim0@<pid>` (every simulator process has its own `sim0`).
    pub fn unique_name(&self) -> String {
        match &self.owner {
            Some(o) => format!("{}@{}", self.name, o.pid),
            None => self.name.clone(),
        }
    }

    fn status(&self) -> Option<&Kv> {
        self.debugfs.as_ref().and_then(|d| d.status.as_ref())
    }

    /// `ok`, `lost`, or what is known.
    pub fn state(&self) -> String {
        if let Some(s) = self.status().and_then(|s| s.get("state")) {
            return s.to_string();
        }
        match (&self.access, self.query) {
            (Access::Ok, Some(_)) => "ok".into(),
            _ => "unknown".into(),
        }
    }

    /// UAPI `major.minor` as the kernel reports it.
    pub fn uapi(&self) -> Option<String> {
        self.query
            .map(|q| format!("{}.{}", q.uapi.0, q.uapi.1))
            .or_else(|| {
                self.status()
                    .and_then(|s| s.get("uapi"))
                    .map(str::to_string)
            })
    }

    /// Driver version.
    pub fn driver(&self) -> Option<String> {
        self.query
            .map(|q| format!("{}.{}.{}", q.driver.0, q.driver.1, q.driver.2))
            .or_else(|| {
                self.status()
                    .and_then(|s| s.get("driver"))
                    .map(str::to_string)
            })
    }

    /// (used, total) bytes.
    pub fn memory(&self) -> Option<(u64, u64)> {
        if let Some(s) = self.status() {
            if let (Some(u), Some(t)) = (s.num("mem_used"), s.num("mem_total")) {
                return Some((u, t));
            }
        }
        self.query.map(|q| (q.mem_used, q.mem_total))
    }
}

/// Everything `umd-smi` shows.
#[derive(Clone, Debug)]
pub struct SmiView {
    /// When.
    pub time: Wall,
    /// `kmd` or `sim`.
    pub backend: &'static str,
    /// Running kernel release.
    pub kernel: Option<String>,
    /// `/sys/module/aigpu` exists.
    pub module_loaded: bool,
    /// The module's version (sysfs), when published.
    pub module_version: Option<String>,
    /// The devices.
    pub devices: Vec<DeviceView>,
    /// libumd's diagnosis when its probe found no usable device.
    pub no_device: Option<NoKernelDevice>,
    /// Published simulator directories whose process is gone (not devices).
    pub stale_sims: Vec<crate::simdir::Stale>,
    /// What could not be read.
    pub notes: Notes,
}

/// What the kernel side looks like, read once (triage reuses it).
#[derive(Clone, Debug)]
pub struct KernelScan {
    /// libumd's probe (node paths are real paths below the root).
    pub probe: Result<Vec<PathBuf>, NoKernelDevice>,
    /// `/sys/class/drm`.
    pub drm: Result<Vec<DrmEntry>, ReadErr>,
    /// `/dev/dri`.
    pub nodes: Result<Vec<Node>, ReadErr>,
    /// debugfs.
    pub debugfs: Debugfs,
    /// `/sys/module/aigpu`.
    pub module: system::ModuleState,
    /// The aigpu files whose fdinfo this user can read.
    pub fdinfo: Vec<crate::fdinfo::FdClient>,
    /// The simulator devices other processes publish.
    pub sims: crate::simdir::Scan,
}

/// Reads the kernel side.
pub fn scan(host: &Host, ids: &system::Ids, notes: &mut Notes) -> KernelScan {
    let probe = umd::backend::kmd::probe_in(&host.path("/sys"), &host.path("/dev/dri"));
    let drm = system::drm_class(host);
    if let Err(e) = &drm {
        if *e != ReadErr::Missing {
            notes.add("/sys/class/drm", e.describe());
        }
    }
    let nodes = system::dev_nodes(host, ids);
    if let Err(e) = &nodes {
        if *e != ReadErr::Missing {
            notes.add("/dev/dri", e.describe());
        }
    }
    let module = system::module_state(host, notes);
    let debugfs = debugfs::scan(host, notes);
    // (Who holds the device is noted by triage, which lists the holders itself.)
    let fdinfo = crate::fdinfo::clients(host, &system::holders(host, &mut Notes::default()));
    let sim_dir = std::env::var("UMD_SIM_DIR").ok();
    let sims = crate::simdir::scan(host, &crate::simdir::bases(sim_dir.as_deref()), notes);
    KernelScan {
        probe,
        drm,
        nodes,
        debugfs,
        module,
        fdinfo,
        sims,
    }
}

fn name_of_node(drm: &Result<Vec<DrmEntry>, ReadErr>, node_name: &str) -> Option<String> {
    drm.as_ref()
        .ok()?
        .iter()
        .find(|e| e.name == node_name)
        .and_then(|e| e.device.clone())
}

/// The GPU name (`aigpu0`) of render node `node_name`: its sysfs parent's name on a faux device;
/// on a PCI function (the parent is `0000:00:04.0`) the `device=` of the device's debugfs
/// directory (the one `dri/<minor>` leads to) when readable, else the function's address.
fn gpu_name_of_node(host: &Host, ks: &KernelScan, node_name: &str) -> Option<String> {
    let sysfs = name_of_node(&ks.drm, node_name);
    if sysfs.as_deref().is_some_and(|n| n.starts_with("aigpu")) {
        return sysfs;
    }
    let Some(minor) = node_name.strip_prefix("renderD") else {
        return sysfs;
    };
    let canon = |dir: &str| std::fs::canonicalize(host.path(dir)).ok();
    let want = canon(&format!("/sys/kernel/debug/dri/{minor}"));
    ks.debugfs
        .devices()
        .iter()
        .find(|d| want.is_some() && canon(&d.dir) == want)
        .and_then(|d| d.device.clone())
        .or(sysfs)
}

/// The device view of a kernel scan.
pub fn kernel_view(host: &Host, ks: &KernelScan, notes: Notes) -> SmiView {
    let mut devs: Vec<DeviceView> = Vec::new();
    let mut add = |name: String, node: Option<String>, access: Access, query: Option<QueryInfo>| {
        let pci = node
            .as_deref()
            .and_then(|n| umd::pci::pci_address_in(&host.path("/sys"), n.rsplit('/').next()?));
        devs.push(DeviceView {
            index: 0,
            name,
            node,
            pci,
            access,
            query,
            debugfs: None,
            debugfs_why: None,
            fdinfo: Vec::new(),
            owner: None,
        })
    };
    // 1. The nodes libumd's probe lists: its device indexes, in order. A lost device, or one
    // with another UAPI, keeps its index there (`probe`) and says why it cannot be used.
    let probed: Vec<String> = ks
        .probe
        .as_ref()
        .map(|v| v.iter().map(|p| host.show(p)).collect())
        .unwrap_or_default();
    for (node, real) in probed.iter().zip(ks.probe.as_ref().into_iter().flatten()) {
        let file = node.rsplit('/').next().unwrap_or("");
        let (access, query) = if host.offline {
            (Access::Ok, None)
        } else {
            match umd::backend::kmd::KmdFile::open(real) {
                Ok(f) => (Access::Ok, f.query().ok().map(|q| QueryInfo::from(&q))),
                Err(why) => (Access::No(why.describe()), None),
            }
        };
        add(
            gpu_name_of_node(host, ks, file).unwrap_or_else(|| "?".into()),
            Some(node.clone()),
            access,
            query,
        );
    }
    // 2. aigpu render nodes sysfs knows that the probe did not accept: say why for each.
    if let Ok(drm) = &ks.drm {
        for e in drm
            .iter()
            .filter(|e| e.is_aigpu() && e.name.starts_with("renderD"))
        {
            let node = format!("/dev/dri/{}", e.name);
            if probed.contains(&node) {
                continue;
            }
            let real = host.path(&node);
            let access = if !host.exists(&node) {
                Access::No(format!(
                    "{node} does not exist although /sys/class/drm/{} does (no devtmpfs/udev node, or a container without /dev/dri)",
                    e.name
                ))
            } else if host.offline {
                Access::Offline
            } else {
                match umd::backend::kmd::KmdFile::open(&real) {
                    Ok(_) => Access::Ok,
                    Err(why) => Access::No(why.describe()),
                }
            };
            let query = if access == Access::Ok {
                umd::backend::kmd::KmdFile::open(&real)
                    .ok()
                    .and_then(|f| f.query().ok())
                    .map(|q| QueryInfo::from(&q))
            } else {
                None
            };
            // Named as the probed nodes are: a lost GPU on a PCI function is still `aigpu0`
            // (its debugfs directory says so), not its sysfs parent's PCI address.
            add(
                gpu_name_of_node(host, ks, &e.name)
                    .or_else(|| e.device.clone())
                    .unwrap_or_else(|| "?".into()),
                Some(node),
                access,
                query,
            );
        }
    }
    // 3. debugfs: attach to the device of the same name, or list it on its own.
    let why = ks.debugfs.why_not();
    for d in ks.debugfs.devices() {
        let name = d.device.clone().unwrap_or_else(|| "?".into());
        match devs
            .iter_mut()
            .find(|v| v.name == name && v.debugfs.is_none())
        {
            Some(v) => v.debugfs = Some(d.clone()),
            None => devs.push(DeviceView {
                index: 0,
                name,
                node: None,
                pci: None,
                access: Access::No("no render node belongs to it".into()),
                query: None,
                debugfs: Some(d.clone()),
                debugfs_why: None,
                fdinfo: Vec::new(),
                owner: None,
            }),
        }
    }
    // A client's file is the device's when it is the device's render node, or another node
    // (the primary `card<N>`) that sysfs files under the same device.
    let device_of = |node: &str| {
        node.strip_prefix("/dev/dri/")
            .and_then(|n| name_of_node(&ks.drm, n))
    };
    for v in &mut devs {
        if v.debugfs.is_none() {
            let dev = v.node.as_deref().and_then(device_of);
            v.fdinfo = ks
                .fdinfo
                .iter()
                .filter(|c| {
                    v.node.as_deref() == Some(c.holder.target.as_str())
                        || (dev.is_some() && device_of(&c.holder.target) == dev)
                })
                .cloned()
                .collect();
            v.debugfs_why = Some(why.clone().unwrap_or_else(|| {
                format!(
                    "no aigpu directory in /sys/kernel/debug/dri names {}",
                    v.name
                )
            }));
        }
    }
    devs.sort_by(|a, b| {
        let k = |v: &DeviceView| (v.node.is_none(), v.node.clone().unwrap_or_default());
        let (ka, kb) = (k(a), k(b));
        ka.0.cmp(&kb.0)
            .then_with(|| crate::host::natural_cmp(&ka.1, &kb.1))
            .then_with(|| crate::host::natural_cmp(&a.name, &b.name))
    });
    // 4. The simulator devices other processes publish, after the kernel's.
    for d in &ks.sims.live {
        devs.push(DeviceView {
            index: 0,
            name: d
                .views
                .device
                .clone()
                .unwrap_or_else(|| d.owner.device.clone()),
            node: None,
            pci: None,
            access: Access::Sim,
            query: None,
            debugfs: Some(d.views.clone()),
            debugfs_why: None,
            fdinfo: Vec::new(),
            owner: Some(d.owner.clone()),
        });
    }
    for (i, v) in devs.iter_mut().enumerate() {
        v.index = i;
    }
    // Offline, the probe cannot ask a recorded node for its driver name (no ioctl on a plain
    // file): "no node belongs to aigpu" is then an artefact, not a finding.
    let no_device = match &ks.probe {
        Err(NoKernelDevice::NodeMissing)
            if host.offline && devs.iter().any(|d| d.access == Access::Offline) =>
        {
            None
        }
        Err(e) => Some(e.clone()),
        Ok(_) => None,
    };
    SmiView {
        time: host.now,
        backend: "kmd",
        kernel: host.uname_r(),
        module_loaded: ks.module.loaded,
        module_version: ks.module.version.clone(),
        no_device,
        devices: devs,
        stale_sims: ks.sims.stale.clone(),
        notes,
    }
}

/// Reads the kernel side and builds the view (what `umd-smi` does on a machine).
pub fn kernel(host: &Host) -> SmiView {
    let mut notes = Notes::default();
    let ids = system::Ids::read(host);
    let ks = scan(host, &ids, &mut notes);
    kernel_view(host, &ks, notes)
}

// ---------------------------------------------------------------------------------------------
// simulator

/// Simulated devices opened in this process, with an optional demo workload.
pub struct SimSession {
    files: Vec<umd::backend::sim::SimFile>,
    demo: Option<Demo>,
}

struct Demo {
    ctx_hi: u32,
    ctx_lo: u32,
    map: umd::backend::HostMap,
    va: u64,
}

const DEMO_BYTES: u64 = 1 << 20;

impl SimSession {
    /// Opens every simulated device (`UMD_SIM_DEVICES`); with `demo`, device 0 gets two
    /// contexts, a 1 MiB buffer and a few jobs so the view is not all zeros.
    pub fn open(demo: bool) -> Result<SimSession, String> {
        // The tool's own devices are not a process to show, and the tools never write to the
        // published directories.
        umd::backend::sim::publish::turn_off();
        let n = umd::backend::sim::device_count()?;
        let mut files = Vec::new();
        for i in 0..n {
            let f = umd::backend::sim::SimFile::open(i)
                .map_err(|e| format!("simulated device {i}: {e:?}"))?;
            files.push(f);
        }
        let mut s = SimSession { files, demo: None };
        if demo {
            s.demo = Some(s.start_demo().map_err(|e| format!("demo workload: {e}"))?);
            s.step()?;
        }
        Ok(s)
    }

    fn start_demo(&self) -> Result<Demo, String> {
        let f = self.files.first().ok_or("no simulated device")?;
        let q = f.query().map_err(|e| e.describe())?;
        let va = q.va_start.max(0x100000);
        let h = f.gem_create(DEMO_BYTES).map_err(|e| e.describe())?;
        f.vm_bind(
            h,
            va,
            0,
            DEMO_BYTES,
            uapi::ioctl::VM_ACCESS_READ | uapi::ioctl::VM_ACCESS_WRITE,
        )
        .map_err(|e| e.describe())?;
        let map = f.gem_mmap(h, DEMO_BYTES).map_err(|e| e.describe())?;
        let ctx_hi = f
            .ctx_create(uapi::ioctl::PRIORITY_HIGH)
            .map_err(|e| e.describe())?;
        let ctx_lo = f
            .ctx_create(uapi::ioctl::PRIORITY_NORMAL)
            .map_err(|e| e.describe())?;
        Ok(Demo {
            ctx_hi,
            ctx_lo,
            map,
            va,
        })
    }

    /// Runs one round of the demo workload (a fill and a copy on each context) and waits.
    pub fn step(&self) -> Result<(), String> {
        let (Some(d), Some(f)) = (&self.demo, self.files.first()) else {
            return Ok(());
        };
        let mut words: Vec<u32> = Vec::new();
        words.extend_from_slice(&uapi::packet::encode_fill(
            d.va + 0x10000,
            0x8000,
            0x5a5a5a5a,
        ));
        words.extend_from_slice(&uapi::packet::encode_copy(
            d.va + 0x10000,
            d.va + 0x20000,
            0x8000,
        ));
        let bytes = words.len() * 4;
        if bytes as u64 > 0x10000 || bytes as u64 > d.map.len {
            return Err("demo command buffer too large".into());
        }
        // SAFETY: the mapping is DEMO_BYTES long and the command buffer fits in its first
        // 64 KiB (checked above); nothing else writes it while no job is in flight.
        unsafe {
            std::ptr::copy_nonoverlapping(words.as_ptr() as *const u8, d.map.ptr, bytes);
        }
        let cb = uapi::ioctl::Cmdbuf {
            va: d.va,
            size: bytes as u32,
            flags: 0,
        };
        for ctx in [d.ctx_hi, d.ctx_lo] {
            let seq = f.submit(ctx, &[cb], &[], 0).map_err(|e| e.describe())?;
            f.wait(ctx, seq, umd::error::detail::mono_ns() + 5_000_000_000)
                .map_err(|e| e.describe())?;
        }
        Ok(())
    }

    /// The view of the simulated devices.
    pub fn view(&self, now: Wall) -> SmiView {
        let mut devs = Vec::new();
        for (i, f) in self.files.iter().enumerate() {
            let g = f.gpu();
            let status = g.debugfs_status();
            let queues = g.debugfs_queues();
            let clients = g.debugfs_clients();
            let contexts = g.debugfs_contexts();
            let st = kv::lines(&status).into_iter().next();
            let d = DebugfsDevice {
                dir: format!("sim:{i}"),
                name_line: format!("aigpu dev=sim{i}"),
                device: st
                    .as_ref()
                    .and_then(|s| s.get("device"))
                    .map(str::to_string),
                status: st,
                queues: kv::lines(&queues),
                clients: kv::lines(&clients),
                contexts: kv::lines(&contexts),
                crashes: Vec::new(),
                files: vec![
                    ("status".into(), status),
                    ("queues".into(), queues),
                    ("clients".into(), clients),
                    ("contexts".into(), contexts),
                ],
            };
            devs.push(DeviceView {
                index: i,
                name: d.device.clone().unwrap_or_else(|| format!("sim{i}")),
                node: None,
                pci: None,
                access: Access::Sim,
                query: f.query().ok().map(|q| QueryInfo::from(&q)),
                debugfs: Some(d),
                debugfs_why: None,
                fdinfo: Vec::new(),
                owner: None,
            });
        }
        SmiView {
            time: now,
            backend: "sim",
            kernel: None,
            module_loaded: false,
            module_version: None,
            devices: devs,
            no_device: None,
            stale_sims: Vec::new(),
            notes: Notes::default(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// rendering

/// Left-aligned columns separated by two spaces, each line prefixed by `indent`. Kept by hand:
/// the golden files pin this exact layout, and a table crate's would be another.
pub fn table(indent: &str, head: &[&str], rows: &[Vec<String>]) -> String {
    let mut w: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < w.len() {
                w[i] = w[i].max(c.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = indent.to_string();
        for (i, c) in cells.iter().enumerate() {
            s += c;
            if i + 1 < cells.len() {
                s += &" ".repeat(w[i] - c.chars().count() + 2);
            }
        }
        s.trim_end().to_string() + "\n"
    };
    let mut out = line(head.to_vec());
    for r in rows {
        out += &line(r.iter().map(String::as_str).collect());
    }
    out
}

fn libumd_uapi() -> String {
    format!("{}.{}", uapi::UAPI_MAJOR, uapi::UAPI_MINOR)
}

fn crash_line(c: &CrashDump) -> String {
    let mut s = format!(
        "{} {}",
        c.name,
        if c.kind.is_empty() { "?" } else { &c.kind }
    );
    if let Some(t) = c.time {
        s += &format!(" at {}", t.human());
    }
    if let Some(x) = c.ctx {
        s += &format!(", ctx {x}");
    }
    if let Some(p) = c.pid {
        s += &format!(", pid {p} {}", c.comm.as_deref().unwrap_or("?"));
    }
    if let (Some(f), Some(va)) = (&c.fault, &c.va) {
        s += &format!(", {f} {} at {va}", c.access.as_deref().unwrap_or("access"));
    }
    s
}

/// The device view for people.
pub fn render_text(v: &SmiView) -> String {
    let mut out = format!(
        "umd-smi {}  {}\n",
        env!("CARGO_PKG_VERSION"),
        v.time.human()
    );
    match v.backend {
        "sim" => {
            out += &format!(
                "host: simulator (in-process devices, no kernel), libumd UAPI {}\n",
                libumd_uapi()
            )
        }
        _ => {
            out += &format!(
                "host: kernel {}, module aigpu {}, libumd UAPI {}\n",
                v.kernel.as_deref().unwrap_or("?"),
                match (&v.module_loaded, &v.module_version) {
                    (true, Some(ver)) => format!("{ver} loaded"),
                    (true, None) => "loaded".into(),
                    (false, _) => "not loaded".into(),
                },
                libumd_uapi()
            )
        }
    }
    let sims = v.devices.iter().filter(|d| d.owner.is_some()).count();
    if let Some(why) = &v.no_device {
        if !v.devices.is_empty() && sims == v.devices.len() {
            out += &format!(
                "no aigpu kernel device: {} [{}]; the simulator devices below are other processes' own\n",
                why.describe(),
                why.code().name()
            );
        } else if v.devices.is_empty() {
            out += &format!(
                "no aigpu device: {} [{}]\n",
                why.describe(),
                why.code().name()
            );
            out += "run 'umd-smi triage' for the evidence (dmesg, modinfo, device nodes, logs)\n";
        } else {
            out += &format!(
                "libumd cannot use these devices: {} [{}]\n",
                why.describe(),
                why.code().name()
            );
        }
    }
    for d in &v.devices {
        out += &device_text(d);
    }
    if !v.stale_sims.is_empty() {
        out += "\nstale simulator directories (not devices: their process is gone):\n";
        for s in &v.stale_sims {
            out += &format!(
                "  {}  pid {} {} {}\n",
                s.dir,
                s.pid,
                s.comm.as_deref().unwrap_or("?"),
                s.why
            );
        }
    }
    if !v.notes.0.is_empty() {
        out += "not read:\n";
        for n in &v.notes.0 {
            out += &format!("  {}: {}\n", n.what, n.why);
        }
    }
    out
}

fn device_text(d: &DeviceView) -> String {
    let place = match &d.owner {
        Some(o) => format!("simulator of pid {} ({})", o.pid, o.comm),
        None => d.node.as_deref().unwrap_or("(no render node)").to_string(),
    };
    let mut out = format!(
        "\nGPU {}: {}  {}  state {}\n",
        d.index,
        d.name,
        place,
        d.state()
    );
    if let Some(p) = &d.pci {
        out += &format!("  pci        {p}\n");
    }
    let st = d.status();
    let hw = st.and_then(|s| s.get("hw"));
    out += &format!(
        "  versions   driver {}, UAPI {}{}\n",
        d.driver().as_deref().unwrap_or("?"),
        d.uapi().as_deref().unwrap_or("?"),
        hw.map(|h| format!(", hw {h}")).unwrap_or_default()
    );
    out += &format!(
        "  access     {}\n",
        match &d.access {
            Access::Ok => format!(
                "ok (this user can open it; libumd UAPI {} drives it)",
                libumd_uapi()
            ),
            Access::No(why) => format!("libumd cannot use it: {why}"),
            Access::Offline => "not checked (offline: recorded tree)".into(),
            Access::Sim => match &d.owner {
                Some(o) => format!(
                    "simulator in pid {} (backend_why {}), published in {}, updated {}",
                    o.pid,
                    o.backend_why,
                    d.debugfs.as_ref().map_or("?", |x| x.dir.as_str()),
                    util::Wall::from_unix_ms(o.updated_unix_ms).human()
                ),
                None => "in-process simulator".into(),
            },
        }
    );
    if let Some((used, total)) = d.memory() {
        let pct = if total > 0 {
            used as f64 * 100.0 / total as f64
        } else {
            0.0
        };
        out += &format!(
            "  memory     {} used of {} ({pct:.1}%)\n",
            util::bytes(used),
            util::bytes(total)
        );
    }
    if let Some(s) = st {
        let c = |k: &str| s.or_dash(k).to_string();
        out += &format!(
            "  counters   jobs {}, faults {}, hangs {}, resets {} (job timeout {} ms, hang_debug {})\n",
            c("jobs"),
            c("faults"),
            c("hangs"),
            c("resets"),
            c("job_timeout_ms"),
            c("hang_debug")
        );
    }
    let Some(dfs) = &d.debugfs else {
        out += &format!(
            "  queues, clients, contexts: not shown: {}\n",
            d.debugfs_why.as_deref().unwrap_or("debugfs not read")
        );
        return out + &crate::fdinfo::render_text(&d.fdinfo);
    };
    // A lost device's registers do not answer (they read all ones): say so instead of printing
    // the raw values as if they were a state and a job.
    let lost = d.state() == "lost";
    let rows: Vec<Vec<String>> = dfs
        .queues
        .iter()
        .map(|q| {
            vec![
                q.or_dash("queue").into(),
                q.or_dash("prio").into(),
                match q.get("state") {
                    Some("unknown") if lost => "no answer".into(),
                    s => s.unwrap_or("-").into(),
                },
                q.get("busy_pct")
                    .map(|b| format!("{b}%"))
                    .unwrap_or_else(|| "-".into()),
                q.or_dash("inflight").into(),
                q.or_dash("jobs").into(),
                match q.get("cur_job") {
                    Some("0") | None => "-".into(),
                    Some("18446744073709551615") => "- (reads all ones)".into(),
                    Some(j) => j.into(),
                },
            ]
        })
        .collect();
    out += &table(
        "  ",
        &[
            "queue",
            "prio",
            "state",
            "busy",
            "inflight",
            "jobs",
            "current job",
        ],
        &rows,
    );
    if dfs.clients.is_empty() {
        out += "  clients: none\n";
    } else {
        let rows: Vec<Vec<String>> = dfs
            .clients
            .iter()
            .map(|c| {
                vec![
                    c.or_dash("pid").into(),
                    c.or_dash("comm").into(),
                    c.num("mem").map(util::bytes).unwrap_or_else(|| "-".into()),
                    c.or_dash("objects").into(),
                    c.or_dash("contexts").into(),
                    c.or_dash("jobs").into(),
                    c.num("busy_ns").map(util::ns).unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        out += &table(
            "  ",
            &[
                "pid", "command", "memory", "objects", "contexts", "jobs", "busy",
            ],
            &rows,
        );
    }
    if dfs.contexts.is_empty() {
        out += "  contexts: none\n";
    } else {
        let rows: Vec<Vec<String>> = dfs
            .contexts
            .iter()
            .map(|c| {
                let problem = match (c.get("fault"), c.get("hung")) {
                    (Some(f), _) => format!(
                        "{f} {} at {}{}",
                        c.get("access").unwrap_or("access"),
                        c.or_dash("va"),
                        c.get("offset")
                            .map(|o| format!(" (packet offset {o})"))
                            .unwrap_or_default()
                    ),
                    (None, Some("1")) => "hung (job timeout)".into(),
                    _ => "-".into(),
                };
                vec![
                    c.or_dash("ctx").into(),
                    c.or_dash("pid").into(),
                    c.or_dash("comm").into(),
                    c.or_dash("queue").into(),
                    c.or_dash("prio").into(),
                    c.or_dash("submitted").into(),
                    c.or_dash("completed").into(),
                    c.or_dash("reset").into(),
                    problem,
                ]
            })
            .collect();
        out += &table(
            "  ",
            &[
                "ctx",
                "pid",
                "command",
                "queue",
                "prio",
                "submitted",
                "completed",
                "reset",
                "problem",
            ],
            &rows,
        );
    }
    if let Some(last) = dfs.crashes.last() {
        out += &format!(
            "  crash dumps: {} kept, last {}\n",
            dfs.crashes.len(),
            crash_line(last)
        );
    }
    out
}

/// The device view for machines.
pub fn render_json(v: &SmiView) -> Value {
    let mut out = render_json_base(v);
    // Only when there are some (the recorded machines keep their shape).
    if !v.stale_sims.is_empty() {
        out["stale_sim_dirs"] = v
            .stale_sims
            .iter()
            .map(|s| json!({"dir": s.dir, "pid": s.pid, "comm": s.comm, "why": s.why}))
            .collect();
    }
    out
}

fn render_json_base(v: &SmiView) -> Value {
    json!({
        "tool": "umd-smi",
        "version": env!("CARGO_PKG_VERSION"),
        "time": v.time.rfc3339(),
        "backend": v.backend,
        "kernel": v.kernel,
        "module_loaded": v.module_loaded,
        "module_version": v.module_version,
        "libumd_uapi": libumd_uapi(),
        "no_device": v.no_device.as_ref().map(|w| json!({
            "reason": w.describe(),
            "code": w.code().name(),
        })),
        "devices": v.devices.iter().map(device_json).collect::<Vec<_>>(),
        "not_read": v.notes.0.iter().map(|n| json!({"what": n.what, "why": n.why})).collect::<Vec<_>>(),
    })
}

fn device_json(d: &DeviceView) -> Value {
    let mut v = device_json_base(d);
    if !d.fdinfo.is_empty() {
        v["fdinfo_clients"] = crate::fdinfo::to_json(&d.fdinfo);
    }
    v
}

fn device_json_base(d: &DeviceView) -> Value {
    let dfs = d.debugfs.as_ref();
    let list = |f: fn(&DebugfsDevice) -> &Vec<Kv>| -> Value {
        match dfs {
            Some(x) => Value::from(f(x).iter().map(Kv::to_json).collect::<Vec<_>>()),
            None => Value::Null,
        }
    };
    let (used, total) = d
        .memory()
        .map(|(u, t)| (Some(u), Some(t)))
        .unwrap_or((None, None));
    let mut v = json!({
        "index": d.index,
        "name": d.name,
        "node": d.node,
        "state": d.state(),
        "driver": d.driver(),
        "uapi": d.uapi(),
        "access": match &d.access {
            Access::Ok => json!({"ok": true}),
            Access::No(w) => json!({"ok": false, "why": w}),
            Access::Offline => json!({"ok": null, "why": "offline"}),
            Access::Sim => json!({"ok": true, "why": "simulator"}),
        },
        "mem_used": used,
        "mem_total": total,
        "debugfs": dfs.map(|x| x.dir.clone()),
        "debugfs_unavailable": d.debugfs_why,
        "status": dfs.and_then(|x| x.status.as_ref()).map(Kv::to_json),
        "queues": list(|x| &x.queues),
        "clients": list(|x| &x.clients),
        "contexts": list(|x| &x.contexts),
        "crash_dumps": dfs.map(|x| x.crashes.iter().map(|c| json!({
            "name": c.name,
            "kind": c.kind,
            "time": c.time.map(|t| t.rfc3339()),
            "pid": c.pid,
            "comm": c.comm,
            "ctx": c.ctx,
            "fault": c.fault,
            "access": c.access,
            "va": c.va,
        })).collect::<Vec<_>>()),
    });
    // Only on PCI (the recorded faux and simulator devices keep their shape).
    if let Some(p) = &d.pci {
        v["pci"] = json!(p);
    }
    if let Some(o) = &d.owner {
        v["access"] = json!({"ok": true, "why": "sim"});
        v["owner"] = json!({
            "pid": o.pid,
            "comm": o.comm,
            "uid": o.uid,
            "start_time": o.start_time,
            "backend_why": o.backend_why,
            "updated": util::Wall::from_unix_ms(o.updated_unix_ms).rfc3339(),
        });
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(pci: Option<&str>) -> DeviceView {
        DeviceView {
            index: 0,
            name: "aigpu0".into(),
            node: Some("/dev/dri/renderD128".into()),
            pci: pci.map(str::to_string),
            access: Access::Offline,
            query: None,
            debugfs: None,
            debugfs_why: None,
            fdinfo: Vec::new(),
            owner: None,
        }
    }

    #[test]
    fn a_device_on_pci_shows_its_address() {
        let d = device(Some("0000:00:04.0"));
        let t = device_text(&d);
        assert!(
            t.starts_with(
                "\nGPU 0: aigpu0  /dev/dri/renderD128  state unknown\n  pci        0000:00:04.0\n"
            ),
            "{t}"
        );
        assert_eq!(device_json_base(&d)["pci"], json!("0000:00:04.0"));
    }

    #[test]
    fn a_device_off_pci_has_no_pci_line_or_field() {
        let d = device(None);
        assert!(!device_text(&d).contains("  pci "));
        assert!(device_json_base(&d).get("pci").is_none());
    }
}
