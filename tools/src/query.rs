//! nvidia-smi's scripting conventions on the device view: `--query-gpu=<fields>` and
//! `--query-compute-apps=<fields>` with `--format=csv[,noheader,nounits]`, the field lists
//! (`--help-query-gpu`), and `dmon`'s one line per device per sample.
//!
//! CSV as nvidia-smi writes it: `, ` between values, a header line naming the fields with their
//! unit in brackets, `[N/A]` for a value that is not known (e.g. debugfs counters when not
//! root). A value holding a comma or a quote is quoted (RFC 4180), which nvidia-smi's values
//! never need.

use crate::kv::Kv;
use crate::smi::{DeviceView, SmiView};

/// One queryable field.
pub struct Field {
    /// Its name on the command line.
    pub name: &'static str,
    /// Its unit, shown in the header (`memory.used [MiB]`) and after each value unless
    /// `nounits`.
    pub unit: Option<&'static str>,
    /// What it is, and where it comes from.
    pub help: &'static str,
}

const fn f(name: &'static str, unit: Option<&'static str>, help: &'static str) -> Field {
    Field { name, unit, help }
}

const MIB: Option<&str> = Some("MiB");

/// `--query-gpu` fields.
pub const GPU_FIELDS: &[Field] = &[
    f("timestamp", None, "the time of the view (RFC 3339, UTC)"),
    f(
        "index",
        None,
        "umd-smi's device index (render-node order; libumd's for the usable ones)",
    ),
    f("name", None, "the device name (aigpu0, sim0)"),
    f("render_node", None, "the render node (/dev/dri/renderD128)"),
    f(
        "state",
        None,
        "ok, lost (a reset failed: every ioctl fails with ENODEV), or unknown",
    ),
    f(
        "access",
        None,
        "ok when this user can drive it with libumd, else the reason",
    ),
    f("driver_version", None, "the kernel driver's version"),
    f("uapi_version", None, "the kernel's UAPI major.minor"),
    f("hw_version", None, "the hardware version (debugfs)"),
    f("memory.total", MIB, "device memory the driver may allocate"),
    f("memory.used", MIB, "device memory allocated"),
    f("memory.free", MIB, "memory.total - memory.used"),
    f(
        "utilization.gpu",
        Some("%"),
        "mean busy share of the hardware queues over the last half second (debugfs)",
    ),
    f(
        "jobs",
        None,
        "jobs completed since the module was loaded (debugfs)",
    ),
    f(
        "faults",
        None,
        "page faults and memory errors since load (debugfs)",
    ),
    f("hangs", None, "job timeouts since load (debugfs)"),
    f("resets", None, "engine resets since load (debugfs)"),
    f("clients", None, "open files (debugfs)"),
    f("contexts", None, "live contexts (debugfs)"),
    f(
        "crash_dumps",
        None,
        "crash dumps taken since load (debugfs)",
    ),
    f(
        "job_timeout",
        Some("ms"),
        "the job timeout (module parameter job_timeout_ms)",
    ),
];

/// `--query-compute-apps` fields: one row per process holding a device (debugfs `clients`).
pub const APP_FIELDS: &[Field] = &[
    f("timestamp", None, "the time of the view (RFC 3339, UTC)"),
    f(
        "gpu_index",
        None,
        "the device's index (as --query-gpu=index)",
    ),
    f("gpu_name", None, "the device's name"),
    f("pid", None, "the process id"),
    f("process_name", None, "its command name"),
    f("used_memory", MIB, "device memory it allocated"),
    f("objects", None, "its buffer objects"),
    f("contexts", None, "its contexts"),
    f("jobs", None, "jobs it submitted that completed"),
    f("busy_time", Some("ms"), "the device time its jobs took"),
];

/// Fields chosen on the command line (indices into a field table).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fields(pub Vec<usize>);

impl Fields {
    /// `a,b,c` against `table`; an unknown name is an error that names `help`.
    pub fn parse(s: &str, table: &[Field], help: &str) -> Result<Fields, String> {
        let mut v = Vec::new();
        for n in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            match table.iter().position(|f| f.name == n) {
                Some(i) => v.push(i),
                None => return Err(format!("unknown field {n:?} (the list: {help})")),
            }
        }
        if v.is_empty() {
            return Err(format!("no field given (the list: {help})"));
        }
        Ok(Fields(v))
    }
}

/// `--format`: csv with options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CsvFormat {
    /// Print the header line.
    pub header: bool,
    /// Print the units after the values.
    pub units: bool,
}

impl CsvFormat {
    /// `csv`, `csv,noheader`, `csv,nounits`, `csv,noheader,nounits` (any order after csv).
    pub fn parse(s: &str) -> Result<CsvFormat, String> {
        let mut parts = s.split(',').map(str::trim);
        if parts.next() != Some("csv") {
            return Err("only csv is supported: csv[,noheader][,nounits]".into());
        }
        let mut f = CsvFormat {
            header: true,
            units: true,
        };
        for p in parts {
            match p {
                "noheader" => f.header = false,
                "nounits" => f.units = false,
                o => return Err(format!("unknown csv option {o:?} (noheader, nounits)")),
            }
        }
        Ok(f)
    }
}

/// The text of `--help-query-gpu` / `--help-query-compute-apps`.
pub fn help(title: &str, table: &[Field]) -> String {
    let mut s = format!("{title}\n\n");
    for f in table {
        s += &format!(
            "{}{}\n    {}\n",
            f.name,
            f.unit.map(|u| format!(" [{u}]")).unwrap_or_default(),
            f.help
        );
    }
    s
}

const NA: &str = "[N/A]";

fn csv_cell(v: &str) -> String {
    if v.contains(',') || v.contains('"') {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v.to_string()
    }
}

fn header(table: &[Field], fields: &Fields) -> String {
    fields
        .0
        .iter()
        .map(|&i| {
            let f = &table[i];
            match f.unit {
                Some(u) => format!("{} [{u}]", f.name),
                None => f.name.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
        + "\n"
}

fn row(
    table: &[Field],
    fields: &Fields,
    fmt: CsvFormat,
    get: impl Fn(&str) -> Option<String>,
) -> String {
    fields
        .0
        .iter()
        .map(|&i| {
            let f = &table[i];
            match get(f.name) {
                None => NA.to_string(),
                Some(v) => match (f.unit, fmt.units) {
                    (Some(u), true) => csv_cell(&format!("{v} {u}")),
                    _ => csv_cell(&v),
                },
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
        + "\n"
}

fn mib(b: u64) -> String {
    (b >> 20).to_string()
}

fn status(d: &DeviceView) -> Option<&Kv> {
    d.debugfs.as_ref().and_then(|x| x.status.as_ref())
}

/// The mean `busy_pct` of the device's queues (debugfs), rounded.
pub fn busy_pct(d: &DeviceView) -> Option<u64> {
    let q = &d.debugfs.as_ref()?.queues;
    let v: Vec<u64> = q.iter().filter_map(|q| q.num("busy_pct")).collect();
    if v.is_empty() {
        return None;
    }
    Some((v.iter().sum::<u64>() + v.len() as u64 / 2) / v.len() as u64)
}

/// One `--query-gpu` value.
pub fn gpu_value(v: &SmiView, d: &DeviceView, name: &str) -> Option<String> {
    let st = status(d);
    let num = |k: &str| st.and_then(|s| s.num(k)).map(|n| n.to_string());
    match name {
        "timestamp" => Some(v.time.rfc3339()),
        "index" => Some(d.index.to_string()),
        "name" => Some(d.name.clone()),
        "render_node" => d.node.clone(),
        "state" => Some(d.state()),
        "access" => Some(match &d.access {
            crate::smi::Access::Ok | crate::smi::Access::Sim => "ok".into(),
            crate::smi::Access::Offline => "not checked (offline)".into(),
            crate::smi::Access::No(w) => w.clone(),
        }),
        "driver_version" => d.driver(),
        "uapi_version" => d.uapi(),
        "hw_version" => st.and_then(|s| s.get("hw")).map(str::to_string),
        "memory.total" => d.memory().map(|m| mib(m.1)),
        "memory.used" => d.memory().map(|m| mib(m.0)),
        "memory.free" => d.memory().map(|m| mib(m.1.saturating_sub(m.0))),
        "utilization.gpu" => busy_pct(d).map(|b| b.to_string()),
        "jobs" | "faults" | "hangs" | "resets" | "clients" | "contexts" => num(name),
        "crash_dumps" => num("crashdumps"),
        "job_timeout" => num("job_timeout_ms"),
        _ => None,
    }
}

/// `--query-gpu` output for one view (`header`: print the header line, when asked by `fmt`).
pub fn gpu_csv(v: &SmiView, fields: &Fields, fmt: CsvFormat, header_line: bool) -> String {
    let mut out = String::new();
    if fmt.header && header_line {
        out += &header(GPU_FIELDS, fields);
    }
    for d in &v.devices {
        out += &row(GPU_FIELDS, fields, fmt, |n| gpu_value(v, d, n));
    }
    out
}

/// `--query-compute-apps` output for one view.
pub fn apps_csv(v: &SmiView, fields: &Fields, fmt: CsvFormat, header_line: bool) -> String {
    let mut out = String::new();
    if fmt.header && header_line {
        out += &header(APP_FIELDS, fields);
    }
    for d in &v.devices {
        let Some(dfs) = &d.debugfs else { continue };
        for c in &dfs.clients {
            out += &row(APP_FIELDS, fields, fmt, |n| match n {
                "timestamp" => Some(v.time.rfc3339()),
                "gpu_index" => Some(d.index.to_string()),
                "gpu_name" => Some(d.name.clone()),
                "pid" => c.get("pid").map(str::to_string),
                "process_name" => c.get("comm").map(str::to_string),
                "used_memory" => c.num("mem").map(mib),
                "objects" | "contexts" | "jobs" => c.num(n).map(|x| x.to_string()),
                "busy_time" => c.num("busy_ns").map(|ns| format!("{:.3}", ns as f64 / 1e6)),
                _ => None,
            });
        }
    }
    out
}

/// Devices whose processes `--query-compute-apps` cannot list, with the reason (debugfs not
/// read): said on standard error so the CSV stays clean.
pub fn apps_not_shown(v: &SmiView) -> Vec<String> {
    v.devices
        .iter()
        .filter(|d| d.debugfs.is_none())
        .map(|d| {
            format!(
                "{}: processes not shown: {}",
                d.name,
                d.debugfs_why.as_deref().unwrap_or("debugfs not read")
            )
        })
        .collect()
}

/// `dmon`'s two header lines.
pub fn dmon_header() -> String {
    format!(
        "{}\n{}\n",
        dmon_line([
            "# gpu", "name", "state", "mem", "mem%", "busy", "jobs", "faults", "hangs", "resets",
            "clients"
        ]),
        dmon_line(["# Idx", "-", "-", "MiB", "%", "%", "#", "#", "#", "#", "#"])
    )
}

fn dmon_line(c: [&str; 11]) -> String {
    format!(
        "{:<5} {:>8} {:>6} {:>7} {:>5} {:>4} {:>9} {:>6} {:>5} {:>6} {:>7}",
        c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8], c[9], c[10]
    )
}

/// One `dmon` sample: a line per device (`-` for what is not known).
pub fn dmon_rows(v: &SmiView) -> String {
    let mut out = String::new();
    for d in &v.devices {
        let st = status(d);
        let num = |k: &str| {
            st.and_then(|s| s.num(k))
                .map(|n| n.to_string())
                .unwrap_or_else(|| "-".into())
        };
        let (used, pct) = match d.memory() {
            Some((u, t)) if t > 0 => (mib(u), format!("{:.1}", u as f64 * 100.0 / t as f64)),
            Some((u, _)) => (mib(u), "-".into()),
            None => ("-".into(), "-".into()),
        };
        let busy = busy_pct(d)
            .map(|b| b.to_string())
            .unwrap_or_else(|| "-".into());
        let (idx, state) = (format!("{:>5}", d.index), d.state());
        out += &dmon_line([
            &idx,
            &d.name,
            &state,
            &used,
            &pct,
            &busy,
            &num("jobs"),
            &num("faults"),
            &num("hangs"),
            &num("resets"),
            &num("clients"),
        ]);
        out += "\n";
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_and_fields() {
        assert_eq!(
            CsvFormat::parse("csv,noheader,nounits"),
            Ok(CsvFormat {
                header: false,
                units: false
            })
        );
        assert!(CsvFormat::parse("json").is_err());
        assert!(CsvFormat::parse("csv,fancy").is_err());
        assert_eq!(
            Fields::parse("index, memory.used", GPU_FIELDS, "h"),
            Ok(Fields(vec![1, 10]))
        );
        assert!(Fields::parse("index,temperature.gpu", GPU_FIELDS, "h").is_err());
        assert_eq!(csv_cell("a, b"), "\"a, b\"");
    }
}
