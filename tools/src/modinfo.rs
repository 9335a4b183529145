//! `modinfo` without the `modinfo` program: finds `aigpu.ko` for the running kernel and reads
//! its `.modinfo` ELF section (NUL-separated `key=value` strings: `version`, `vermagic`,
//! `license`, `parm`, ...). Works unprivileged, in a busybox guest and on a recorded tree.

use crate::host::{Host, ReadErr};
use std::path::PathBuf;

/// The module file found and what its `.modinfo` says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModInfo {
    /// Machine path of the file.
    pub path: String,
    /// The `key=value` entries in file order.
    pub entries: Vec<(String, String)>,
}

impl ModInfo {
    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The kernel release it was built for (first word of `vermagic`).
    pub fn built_for(&self) -> Option<&str> {
        self.get("vermagic")
            .and_then(|v| v.split_whitespace().next())
    }

    /// `modinfo`-style text.
    pub fn text(&self) -> String {
        let mut s = format!("{:<16}{}\n", "filename:", self.path);
        for (k, v) in &self.entries {
            s += &format!("{:<16}{v}\n", format!("{k}:"));
        }
        s
    }
}

/// Where `aigpu.ko` is looked for: `/lib/modules/<release>/` (any depth up to 6, the first
/// match in name order), then `/lib/modules/aigpu.ko` (the test guest's place).
pub fn find(host: &Host, release: Option<&str>) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(r) = release {
        walk(host, &format!("/lib/modules/{r}"), 0, &mut found);
    }
    if host.exists("/lib/modules/aigpu.ko") {
        found.push("/lib/modules/aigpu.ko".into());
    }
    found
}

fn walk(host: &Host, dir: &str, depth: usize, found: &mut Vec<String>) {
    if depth > 6 {
        return;
    }
    let Ok(names) = host.list(dir) else { return };
    for n in names {
        let p = format!("{dir}/{n}");
        if n == "aigpu.ko" || n.starts_with("aigpu.ko.") {
            found.push(p);
        } else if n != "build" && n != "source" {
            let real: PathBuf = host.path(&p);
            if std::fs::symlink_metadata(&real).is_ok_and(|m| m.is_dir()) {
                walk(host, &p, depth + 1, found);
            }
        }
    }
}

/// Reads `.modinfo` of machine file `path` (plain or gzip-compressed).
pub fn read(host: &Host, path: &str) -> Result<ModInfo, String> {
    let real = host.path(path);
    let data = std::fs::read(&real).map_err(|e| ReadErr::from_io(&e).describe())?;
    let data = if path.ends_with(".gz") {
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&data[..]), &mut out)
            .map_err(|e| format!("gzip: {e}"))?;
        out
    } else if path.ends_with(".xz") || path.ends_with(".zst") {
        return Err("compressed with xz/zstd: not read (use modinfo)".into());
    } else {
        data
    };
    let entries = modinfo_section(&data)?;
    Ok(ModInfo {
        path: path.to_string(),
        entries,
    })
}

/// The `key=value` strings of an ELF file's `.modinfo` section (ELF parsing: the `object`
/// crate, 32- or 64-bit, either byte order).
pub fn modinfo_section(d: &[u8]) -> Result<Vec<(String, String)>, String> {
    use object::read::elf::{ElfFile32, ElfFile64};
    use object::{Endianness, FileKind, Object, ObjectSection};
    fn section<'a>(f: &impl Object<'a>) -> Result<&'a [u8], String> {
        f.section_by_name(".modinfo")
            .ok_or("no .modinfo section (not a kernel module?)")?
            .data()
            .map_err(|_| "truncated .modinfo section".to_string())
    }
    let sec = match FileKind::parse(d) {
        Ok(FileKind::Elf32) => {
            section(&ElfFile32::<Endianness>::parse(d).map_err(|e| format!("bad ELF file: {e}"))?)?
        }
        Ok(FileKind::Elf64) => {
            section(&ElfFile64::<Endianness>::parse(d).map_err(|e| format!("bad ELF file: {e}"))?)?
        }
        _ => return Err("not an ELF file".into()),
    };
    Ok(sec
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let t = String::from_utf8_lossy(s);
            t.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_never_panics() {
        assert!(modinfo_section(b"not an elf").is_err());
        let mut d = vec![0u8; 64];
        d[..4].copy_from_slice(b"\x7fELF");
        d[4] = 2;
        d[5] = 1;
        // Section headers far outside the file, huge counts and sizes.
        for v in [0xffu8, 0x7f, 0x01] {
            for b in d.iter_mut().skip(0x28) {
                *b = v;
            }
            assert!(modinfo_section(&d).is_err());
        }
    }
}
