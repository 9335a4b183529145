//! The log targets libumd has: every module of the crate, since each record's target is its
//! module path (docs/logging.md, "Levels and filters"). A filter directive whose target is a
//! prefix of none of them can never match a record (a typo such as `umd::memroy`, or a target
//! of another program): it is refused where it is given instead of silently doing nothing. The
//! test below keeps the table equal to the crate's module tree.

/// Every module path of the crate, sorted.
pub const MODULES: &[&str] = &[
    "umd",
    "umd::abi",
    "umd::abi::cmdbuf",
    "umd::abi::context",
    "umd::abi::device",
    "umd::abi::errors",
    "umd::abi::log",
    "umd::abi::memory",
    "umd::abi::sync",
    "umd::abi::types",
    "umd::backend",
    "umd::backend::kmd",
    "umd::backend::kmd::ioctl",
    "umd::backend::select",
    "umd::backend::sim",
    "umd::backend::sim::config",
    "umd::backend::sim::debugfs",
    "umd::backend::sim::gem",
    "umd::backend::sim::gpu",
    "umd::backend::sim::physmem",
    "umd::backend::sim::publish",
    "umd::backend::sim::recovery",
    "umd::backend::sim::sleep",
    "umd::backend::sim::vm",
    "umd::caller",
    "umd::cmdbuf",
    "umd::context",
    "umd::device",
    "umd::errmap",
    "umd::error",
    "umd::error::codes",
    "umd::error::detail",
    "umd::fork",
    "umd::handle",
    "umd::log",
    "umd::log::clock",
    "umd::log::config",
    "umd::log::console",
    "umd::log::fast",
    "umd::log::filter",
    "umd::log::format",
    "umd::log::lane",
    "umd::log::limit",
    "umd::log::record",
    "umd::log::record::packed",
    "umd::log::ring",
    "umd::log::rotate",
    "umd::log::signals",
    "umd::log::story",
    "umd::log::subscriber",
    "umd::log::targets",
    "umd::log::writer",
    "umd::log::writer::file",
    "umd::log::writer::filters",
    "umd::log::writer::merge",
    "umd::memory",
    "umd::memory::ids",
    "umd::memory::leaks",
    "umd::memory::oom",
    "umd::memory::pool",
    "umd::memory::pool::addr",
    "umd::memory::pool::alloc",
    "umd::memory::pool::block",
    "umd::memory::pool::cache",
    "umd::memory::pool::config",
    "umd::memory::pool::free",
    "umd::memory::pool::ghost",
    "umd::memory::pool::history",
    "umd::memory::pool::reclaim",
    "umd::memory::pool::reuse",
    "umd::memory::pool::size_class",
    "umd::memory::pool::slab",
    "umd::memory::pool::stats",
    "umd::memory::pool::validate",
    "umd::memory::va",
    "umd::pci",
    "umd::registry",
    "umd::submit",
    "umd::util",
];

/// True when a directive for `target` can match a record of libumd (filter matching is by
/// string prefix, so `umd::mem` matches `umd::memory`).
pub fn known(target: &str) -> bool {
    MODULES.iter().any(|m| m.starts_with(target))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).expect("read src") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let rel = p
                    .strip_prefix(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
                    .expect("under src")
                    .with_extension("");
                let mut parts: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if parts.last().is_some_and(|l| l == "mod" || l == "lib") {
                    parts.pop();
                }
                let mut m = String::from("umd");
                for part in parts {
                    m.push_str("::");
                    m.push_str(&part);
                }
                out.push(m);
            }
        }
    }

    #[test]
    fn the_table_is_the_module_tree() {
        let mut found = Vec::new();
        walk(
            std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/src")),
            &mut found,
        );
        found.sort();
        assert_eq!(found, MODULES, "update log/targets.rs::MODULES");
    }

    #[test]
    fn prefixes_match_typos_do_not() {
        assert!(known("umd"));
        assert!(known("umd::mem"));
        assert!(known("umd::backend::sim::gpu"));
        assert!(!known("umd::memroy"));
        assert!(!known("tokio"));
        assert!(!known("umd::memory::pool::cache::x"));
    }
}
