//! Command-line parsing shared by the binaries (no dependency: a handful of flags each).

use std::str::FromStr;

/// The arguments, consumed front to back. `--flag=value` is split into flag and value.
pub struct Args {
    v: Vec<String>,
    i: usize,
    pending: Option<String>,
}

impl Args {
    /// From the process arguments (without the program name).
    pub fn new(v: Vec<String>) -> Args {
        Args {
            v,
            i: 0,
            pending: None,
        }
    }

    /// The next argument or flag.
    pub fn next_arg(&mut self) -> Option<String> {
        if let Some(p) = self.pending.take() {
            return Some(p);
        }
        let a = self.v.get(self.i)?.clone();
        self.i += 1;
        if a.starts_with("--") {
            if let Some((f, val)) = a.split_once('=') {
                self.pending = Some(val.to_string());
                return Some(f.to_string());
            }
        }
        Some(a)
    }

    /// The value of `flag` (the next argument).
    pub fn value(&mut self, flag: &str) -> Result<String, String> {
        self.next_arg()
            .ok_or_else(|| format!("{flag} needs a value"))
    }

    /// The value of `flag` as a number.
    pub fn number<T: FromStr>(&mut self, flag: &str) -> Result<T, String> {
        let v = self.value(flag)?;
        v.parse()
            .map_err(|_| format!("{flag} {v:?}: not a valid number"))
    }
}
