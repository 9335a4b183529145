//! Per-client usage from fdinfo: `/proc/<pid>/fdinfo/<fd>` of an open aigpu file holds the
//! kernel's drm-usage-stats keys and aigpu's own `aigpu-` keys (docs/kmd.md, "fdinfo"). A
//! process's fdinfo is readable by its own user, so `umd-smi` shows a user their own clients
//! when debugfs (root only) is not readable.
//!
//! The format: one `<key>:<whitespace><value>[ <unit>]` per line; the VFS's own lines (`pos`,
//! `flags`, `mnt_id`, `ino`) come first. Memory values are bytes, or `KiB` / `MiB`; engine values
//! are `ns`.

use crate::host::Host;
use crate::system::Holder;

/// The usage of one open DRM file, as its fdinfo says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    /// `drm-driver`.
    pub driver: String,
    /// `drm-client-id`.
    pub client_id: Option<u64>,
    /// `drm-pdev` (PCI devices only).
    pub pdev: Option<String>,
    /// `drm-engine-<name>`: (name, busy ns).
    pub engines: Vec<(String, u64)>,
    /// `drm-<stat>-<region>` memory keys: (stat, region, bytes), e.g. (`total`, `memory`, 4096).
    pub memory: Vec<(String, String, u64)>,
    /// `<driver>-<key>` counters: (key without the prefix, value).
    pub driver_keys: Vec<(String, u64)>,
}

const VFS_KEYS: [&str; 4] = ["pos", "flags", "mnt_id", "ino"];
const MEMORY_STATS: [&str; 5] = ["total", "shared", "resident", "purgeable", "active"];

/// `<uint>[ <unit>]` -> (value, unit).
fn number(v: &str) -> Option<(u64, &str)> {
    let (n, unit) = v.split_once(' ').unwrap_or((v, ""));
    Some((n.parse().ok()?, unit))
}

/// Parses an fdinfo text; the error says which line breaks the format (or that `drm-driver` is
/// missing: not a DRM file, or a driver without fdinfo).
pub fn parse(text: &str) -> Result<Usage, String> {
    let mut u = Usage::default();
    let mut driver = None;
    for (i, line) in text.lines().enumerate() {
        let bad = |why: &str| format!("line {}: {why}: '{line}'", i + 1);
        let Some((key, value)) = line.split_once(':') else {
            return Err(bad("no ':'"));
        };
        if key.is_empty() || key.chars().any(char::is_whitespace) {
            return Err(bad("key empty or with whitespace"));
        }
        let value = value.trim_start();
        if VFS_KEYS.contains(&key) {
            continue;
        }
        if key == "drm-driver" {
            driver = Some(value.to_string());
            continue;
        }
        match key {
            "drm-client-id" => {
                u.client_id = Some(number(value).ok_or_else(|| bad("not a number"))?.0)
            }
            "drm-pdev" => u.pdev = Some(value.to_string()),
            "drm-client-name" => {}
            _ => {
                if let Some(engine) = key.strip_prefix("drm-engine-") {
                    if engine.starts_with("capacity-") {
                        continue;
                    }
                    match number(value) {
                        Some((ns, "ns")) => u.engines.push((engine.to_string(), ns)),
                        _ => return Err(bad("engine time is not '<uint> ns'")),
                    }
                } else if let Some(rest) = key.strip_prefix("drm-") {
                    let Some((stat, region)) = rest.split_once('-') else {
                        continue; // a key of a later spec: not ours to judge
                    };
                    if !MEMORY_STATS.contains(&stat) {
                        continue;
                    }
                    let bytes = match number(value) {
                        Some((n, "")) => n,
                        Some((n, "KiB")) => n << 10,
                        Some((n, "MiB")) => n << 20,
                        _ => return Err(bad("memory is not '<uint>[ KiB|MiB]'")),
                    };
                    u.memory.push((stat.to_string(), region.to_string(), bytes));
                } else if let Some(d) = driver.as_deref() {
                    if let Some(k) = key.strip_prefix(d).and_then(|k| k.strip_prefix('-')) {
                        if let Some((n, _)) = number(value) {
                            u.driver_keys.push((k.to_string(), n));
                        }
                    }
                }
            }
        }
    }
    u.driver = driver.ok_or("no drm-driver key (not a DRM file, or a driver without fdinfo)")?;
    Ok(u)
}

impl Usage {
    /// Busy ns of `engine`.
    pub fn engine_ns(&self, engine: &str) -> Option<u64> {
        self.engines
            .iter()
            .find(|(e, _)| e == engine)
            .map(|(_, v)| *v)
    }

    /// Bytes of `stat` (`total`, `resident`, ...) in `region`.
    pub fn memory(&self, stat: &str, region: &str) -> Option<u64> {
        self.memory
            .iter()
            .find(|(s, r, _)| s == stat && r == region)
            .map(|(_, _, v)| *v)
    }

    /// A driver key's value (`jobs-submitted` for `aigpu-jobs-submitted`).
    pub fn driver_key(&self, key: &str) -> Option<u64> {
        self.driver_keys
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| *v)
    }
}

/// One open aigpu file of a process, with its usage.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FdClient {
    /// The process and the descriptor (`target` is the node).
    pub holder: Holder,
    /// What its fdinfo says.
    pub usage: Usage,
}

/// The aigpu files among `holders` whose fdinfo this user can read (others are left out: a
/// process of another user, or a file of another driver).
pub fn clients(host: &Host, holders: &[Holder]) -> Vec<FdClient> {
    holders
        .iter()
        .filter_map(|h| {
            let text = host
                .read(&format!("/proc/{}/fdinfo/{}", h.pid, h.fd))
                .ok()?;
            let usage = parse(&text).ok()?;
            (usage.driver == "aigpu").then(|| FdClient {
                holder: h.clone(),
                usage,
            })
        })
        .collect()
}

/// The clients as `umd-smi` shows them (a debugfs-less device): one text block (empty without
/// clients), and the JSON list.
pub fn render_text(clients: &[FdClient]) -> String {
    if clients.is_empty() {
        return String::new();
    }
    let rows: Vec<Vec<String>> = clients
        .iter()
        .map(|c| {
            let u = &c.usage;
            let num = |v: Option<u64>| v.map_or_else(|| "-".into(), |n| n.to_string());
            vec![
                c.holder.pid.to_string(),
                c.holder.comm.clone(),
                c.holder.fd.clone(),
                u.engine_ns("compute")
                    .map_or_else(|| "-".into(), |ns| format!("{:.1} ms", ns as f64 / 1e6)),
                u.memory("total", "memory")
                    .map_or_else(|| "-".into(), crate::util::bytes),
                num(u.driver_key("contexts")),
                num(u.driver_key("jobs-submitted")),
                num(u.driver_key("faults")),
                num(u.driver_key("lost")),
            ]
        })
        .collect();
    "  clients (this user's, from /proc/<pid>/fdinfo):\n".to_string()
        + &crate::smi::table(
            "    ",
            &[
                "pid", "comm", "fd", "busy", "memory", "contexts", "jobs", "faults", "lost",
            ],
            &rows,
        )
}

/// The clients as JSON (`umd-smi --json`).
pub fn to_json(clients: &[FdClient]) -> serde_json::Value {
    serde_json::Value::from(
        clients
            .iter()
            .map(|c| {
                let u = &c.usage;
                serde_json::json!({
                    "pid": c.holder.pid,
                    "comm": c.holder.comm,
                    "fd": c.holder.fd,
                    "client_id": u.client_id,
                    "engines": u.engines.iter().map(|(e, ns)| serde_json::json!({"engine": e, "busy_ns": ns})).collect::<Vec<_>>(),
                    "memory": u.memory.iter().map(|(s, r, b)| serde_json::json!({"stat": s, "region": r, "bytes": b})).collect::<Vec<_>>(),
                    "aigpu": u.driver_keys.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(*v))).collect::<serde_json::Map<_, _>>(),
                })
            })
            .collect::<Vec<_>>(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Real guest output (docs/kmd.md, "fdinfo").
    const TEXT: &str =
        "pos:\t0\nflags:\t02100002\nmnt_id:\t16\nino:\t7\ndrm-driver:\taigpu\ndrm-client-id:\t5\n\
drm-engine-compute:\t1234567 ns\ndrm-total-memory:\t1152 KiB\ndrm-shared-memory:\t0\n\
drm-resident-memory:\t1088 KiB\ndrm-active-memory:\t0\naigpu-client:\t3\naigpu-contexts:\t1\n\
aigpu-jobs-submitted:\t16\naigpu-lost:\t0\n";

    #[test]
    fn parses_every_key() {
        let u = parse(TEXT).unwrap();
        assert_eq!(u.driver, "aigpu");
        assert_eq!(u.client_id, Some(5));
        assert_eq!(u.pdev, None);
        assert_eq!(u.engine_ns("compute"), Some(1_234_567));
        assert_eq!(u.memory("total", "memory"), Some(1152 << 10));
        assert_eq!(u.memory("shared", "memory"), Some(0));
        assert_eq!(u.memory("resident", "memory"), Some(1088 << 10));
        assert_eq!(u.memory("active", "memory"), Some(0));
        assert_eq!(u.driver_key("jobs-submitted"), Some(16));
        assert_eq!(u.driver_key("contexts"), Some(1));
        assert_eq!(u.driver_key("lost"), Some(0));
    }

    #[test]
    fn rejects_what_breaks_the_format() {
        assert_eq!(
            parse("pos:\t0\nflags:\t02\n").unwrap_err(),
            "no drm-driver key (not a DRM file, or a driver without fdinfo)"
        );
        assert_eq!(
            parse("drm-driver:\taigpu\ndrm-engine-compute:\t12 us\n").unwrap_err(),
            "line 2: engine time is not '<uint> ns': 'drm-engine-compute:\t12 us'"
        );
        assert_eq!(
            parse("drm-driver:\taigpu\ndrm-total-memory:\t1 GiB\n").unwrap_err(),
            "line 2: memory is not '<uint>[ KiB|MiB]': 'drm-total-memory:\t1 GiB'"
        );
        assert_eq!(
            parse("drm driver:\taigpu\n").unwrap_err(),
            "line 1: key empty or with whitespace: 'drm driver:\taigpu'"
        );
    }

    #[test]
    fn clients_read_aigpu_files_only() {
        let root = std::env::temp_dir().join(format!("fdinfo-test-{}", std::process::id()));
        let fdinfo = root.join("proc/42/fdinfo");
        std::fs::create_dir_all(&fdinfo).unwrap();
        std::fs::write(fdinfo.join("5"), TEXT).unwrap();
        std::fs::write(
            fdinfo.join("6"),
            "pos:\t0\ndrm-driver:\ti915\ndrm-client-id:\t9\n",
        )
        .unwrap();
        let host = Host {
            root: root.clone(),
            offline: true,
            ..Host::default()
        };
        let holder = |fd: &str| Holder {
            pid: 42,
            comm: "train".into(),
            uid: Some(1000),
            fd: fd.into(),
            target: "/dev/dri/renderD128".into(),
        };
        let got = clients(&host, &[holder("5"), holder("6"), holder("7")]);
        std::fs::remove_dir_all(&root).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].holder.fd, "5");
        assert_eq!(got[0].usage.engine_ns("compute"), Some(1_234_567));
    }
}
