//! Helpers shared by the fixture tests: copying a fixture machine into a scratch directory
//! (overlays applied), running the binaries with a clean environment, golden files.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `tools/tests/fixtures`.
pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// A scratch directory, removed when the test passes (kept for a look when it fails).
pub struct Scratch(pub PathBuf);

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A fresh scratch directory, world-readable (tests run a binary as nobody in it).
pub fn scratch(name: &str) -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("aigpu-tools-fx-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create scratch dir");
    set_mode(&d, 0o755);
    d
}

/// chmod.
pub fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// Copies a tree, recreating symlinks as symlinks.
pub fn copy_tree(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).expect("mkdir");
    for e in std::fs::read_dir(src).expect("read fixture dir").flatten() {
        let from = e.path();
        let to = dst.join(e.file_name());
        let ft = e.file_type().expect("file type");
        if ft.is_symlink() {
            let t = std::fs::read_link(&from).expect("read link");
            let _ = std::fs::remove_file(&to);
            std::os::unix::fs::symlink(t, &to).expect("symlink");
        } else if ft.is_dir() {
            copy_tree(&from, &to);
        } else {
            std::fs::copy(&from, &to).expect("copy");
        }
    }
}

/// Machine fixture `name` laid out in a scratch directory: `<dir>/root`, `<dir>/dmesg.txt`,
/// `<dir>/logs` (an empty one when the fixture has none). A fixture with an `overlay-of` file
/// is that machine with its own files laid over it.
pub fn machine(name: &str) -> Scratch {
    let d = scratch(name);
    let src = fixtures().join("machines").join(name);
    if let Ok(base) = std::fs::read_to_string(src.join("overlay-of")) {
        copy_tree(&fixtures().join("machines").join(base.trim()), &d);
    }
    copy_tree(&src, &d);
    std::fs::create_dir_all(d.join("logs")).expect("logs dir");
    Scratch(d)
}

/// The output of a command run with an empty environment.
pub fn run(bin: &str, args: &[&str]) -> Output {
    Command::new(bin)
        .args(args)
        .env_clear()
        .output()
        .expect("spawn")
}

/// Stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// This build's own UAPI version written as `<LIB>`, so a UAPI bump does not rewrite every golden
/// file (the fixtures' kernels keep their recorded versions).
pub fn uapi_neutral(text: &str) -> String {
    let lib = format!("{}.{}", uapi::UAPI_MAJOR, uapi::UAPI_MINOR);
    text.replace(&format!("libumd UAPI {lib}"), "libumd UAPI <LIB>")
        .replace(&format!("(built in): {lib}"), "(built in): <LIB>")
        .replace(
            &format!("\"libumd_uapi\": \"{lib}\""),
            "\"libumd_uapi\": \"<LIB>\"",
        )
}

/// Compares `actual` with golden file `expected/<name>`; with `UPDATE_GOLDEN=1` writes it
/// instead (review the diff before committing).
pub fn golden(name: &str, actual: &str) {
    let actual = uapi_neutral(actual);
    let actual = actual.as_str();
    let p = fixtures().join("expected").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir expected");
        std::fs::write(&p, actual).expect("write golden");
        return;
    }
    let want = std::fs::read_to_string(&p)
        .unwrap_or_else(|_| panic!("missing golden {} (UPDATE_GOLDEN=1 writes it)", p.display()));
    if want != actual {
        let diff: Vec<String> = want
            .lines()
            .zip(actual.lines())
            .enumerate()
            .filter(|(_, (a, b))| a != b)
            .take(5)
            .map(|(i, (a, b))| format!("line {}:\n  want: {a}\n  got:  {b}", i + 1))
            .collect();
        panic!(
            "{name} differs from the golden file ({} vs {} lines)\n{}\n--- got:\n{actual}",
            want.lines().count(),
            actual.lines().count(),
            diff.join("\n")
        );
    }
}

/// Replaces every occurrence of `path` by `tag`.
pub fn scrub(s: &str, path: &Path, tag: &str) -> String {
    s.replace(&path.display().to_string(), tag)
}
