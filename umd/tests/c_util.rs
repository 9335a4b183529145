//! Building the C programs of tests/c against include/umd.h and the libumd.so cargo just built
//! (shared by the C-side tests; included with `#[path]`, no tests of its own).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// target/<profile>/ (the test binary lives in target/<profile>/deps/).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe path");
    exe.parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .to_path_buf()
}

/// Builds the cdylib (cargo does not refresh target/<profile>/libumd.so for integration tests)
/// and returns its path.
pub fn libumd() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let dir = profile_dir();
            let target = dir.parent().expect("target dir");
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.current_dir(root())
                .args(["build", "-q", "-p", "umd", "--lib"])
                .env("CARGO_TARGET_DIR", target);
            if dir.file_name().is_some_and(|n| n == "release") {
                cmd.arg("--release");
            }
            let st = cmd.status().expect("run cargo build");
            assert!(st.success(), "cargo build -p umd failed");
            let p = dir.join("libumd.so");
            assert!(p.exists(), "{} missing after cargo build", p.display());
            // Programs record the soname; give the loader the name it looks for.
            let so1 = dir.join("libumd.so.1");
            let _ = std::fs::remove_file(&so1);
            std::os::unix::fs::symlink("libumd.so", &so1).expect("symlink libumd.so.1");
            p
        })
        .clone()
}

pub fn out_dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_abi");
    std::fs::create_dir_all(&d).expect("tmp dir");
    d
}

pub fn cc(args: &[&str]) -> std::process::Output {
    Command::new("cc").args(args).output().expect("run cc")
}

pub fn compile(src: &str, exe: &Path, lang: &[&str]) -> std::process::Output {
    compile_with(src, exe, lang, &[])
}

/// [`compile`] with extra linker arguments (`-ldl`, `-lpthread`).
pub fn compile_with(src: &str, exe: &Path, lang: &[&str], extra: &[&str]) -> std::process::Output {
    let _ = libumd();
    let inc = root().join("include");
    let lib = profile_dir();
    let mut args: Vec<String> = lang.iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "-Wall",
            "-Wextra",
            "-Werror",
            "-I",
            inc.to_str().expect("utf8"),
            "-o",
            exe.to_str().expect("utf8"),
            root().join(src).to_str().expect("utf8"),
            "-L",
            lib.to_str().expect("utf8"),
            "-lumd",
        ]
        .map(String::from),
    );
    args.push(format!("-Wl,-rpath,{}", lib.display()));
    args.extend(extra.iter().map(|s| s.to_string()));
    let a: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
    if lang.contains(&"-std=c++17") {
        Command::new("c++").args(&a).output().expect("run c++")
    } else {
        cc(&a)
    }
}

/// Compiles `tests/c/<name>.c` (a program using `tests/c/check.h`), runs it on the simulator with
/// the log off, prints its output, and asserts that it exited 0 with its summary line
/// `<name>: <passed> passed, 0 failed`.
pub fn run_checks(name: &str, passed: u32) {
    let _ = libumd();
    let exe = out_dir().join(name);
    let src = format!("tests/c/{name}.c");
    let o = compile_with(&src, &exe, &["-std=c11"], &["-lpthread"]);
    assert!(
        o.status.success(),
        "{src} does not compile:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run = Command::new(&exe)
        .env("UMD_BACKEND", "sim")
        .env("UMD_LOG", "off")
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    let stdout = String::from_utf8_lossy(&run.stdout);
    print!("{stdout}");
    assert!(
        run.status.success() && stdout.ends_with(&format!("{name}: {passed} passed, 0 failed\n")),
        "{name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
