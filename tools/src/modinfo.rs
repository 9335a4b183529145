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

/// The `key=value` strings of an ELF file's `.modinfo` section.
pub fn modinfo_section(d: &[u8]) -> Result<Vec<(String, String)>, String> {
    if d.len() < 64 || &d[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    let is64 = match d[4] {
        1 => false,
        2 => true,
        _ => return Err("unknown ELF class".into()),
    };
    let le = match d[5] {
        1 => true,
        2 => false,
        _ => return Err("unknown ELF byte order".into()),
    };
    let rd = |off: usize, n: usize| -> Result<u64, String> {
        let b = off
            .checked_add(n)
            .and_then(|end| d.get(off..end))
            .ok_or_else(|| "truncated ELF file".to_string())?;
        let mut v: u64 = 0;
        for i in 0..n {
            let byte = if le { b[n - 1 - i] } else { b[i] } as u64;
            v = (v << 8) | byte;
        }
        Ok(v)
    };
    let (shoff, shentsize, shnum, shstrndx) = if is64 {
        (rd(0x28, 8)?, rd(0x3a, 2)?, rd(0x3c, 2)?, rd(0x3e, 2)?)
    } else {
        (rd(0x20, 4)?, rd(0x2e, 2)?, rd(0x30, 2)?, rd(0x32, 2)?)
    };
    let sh = |i: u64| -> Result<(u64, u64, u64), String> {
        let base = i
            .checked_mul(shentsize)
            .and_then(|x| x.checked_add(shoff))
            .and_then(|x| usize::try_from(x).ok())
            .ok_or("bad ELF section header offset")?;
        if is64 {
            Ok((rd(base, 4)?, rd(base + 0x18, 8)?, rd(base + 0x20, 8)?))
        } else {
            Ok((rd(base, 4)?, rd(base + 0x10, 4)?, rd(base + 0x14, 4)?))
        }
    };
    if shstrndx >= shnum {
        return Err("no section name table".into());
    }
    let range = |off: u64, size: u64| -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(off).ok()?;
        Some(start..start.checked_add(usize::try_from(size).ok()?)?)
    };
    let (_, stroff, strsize) = sh(shstrndx)?;
    let strtab = range(stroff, strsize)
        .and_then(|r| d.get(r))
        .ok_or("truncated ELF file")?;
    for i in 0..shnum {
        let (name, off, size) = sh(i)?;
        let n = strtab
            .get(name as usize..)
            .and_then(|s| s.split(|&b| b == 0).next())
            .unwrap_or(b"");
        if n == b".modinfo" {
            let sec = range(off, size)
                .and_then(|r| d.get(r))
                .ok_or("truncated .modinfo section")?;
            return Ok(sec
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .filter_map(|s| {
                    let t = String::from_utf8_lossy(s);
                    t.split_once('=')
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                })
                .collect());
        }
    }
    Err("no .modinfo section (not a kernel module?)".into())
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
