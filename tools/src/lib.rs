//! aigpu triage tools: `umd-smi` (look at the GPU; `umd-smi triage`: one snapshot with a
//! layered verdict) and `umd-log` (read libumd's logs). The binaries are thin: everything is
//! here so tests can drive it with injected inputs (docs/tools.md).

pub mod cli;
pub mod debugfs;
pub mod devcoredump;
pub mod dmesg;
pub mod exporter;
pub mod fdinfo;
pub mod host;
pub mod kv;
pub mod modinfo;
pub mod query;
pub mod simdir;
pub mod smi;
pub mod system;
pub mod timeout;
pub mod triage;
pub mod umdlog;
pub mod util;
pub mod verdict;
