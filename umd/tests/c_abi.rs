//! Drives the C side of the ABI: compiles the C programs in tests/c against include/umd.h with
//! -Wall -Wextra -Werror, links them to the libumd.so cargo just built, and runs them; checks
//! that ignoring a result is a compile error, that the headers compile as C11 and C++17 (twice
//! included), that include/umd.h matches what cbindgen generates, and that libumd.so exports only
//! umd* symbols under the soname libumd.so.1.

use std::path::PathBuf;
use std::process::Command;

#[path = "c_util.rs"]
mod c_util;
use c_util::{compile, libumd, out_dir, root};

#[test]
fn c_abi_test_program_passes() {
    let _ = libumd();
    let exe = out_dir().join("abi_test");
    let o = compile("tests/c/abi_test.c", &exe, &["-std=c11"]);
    assert!(
        o.status.success(),
        "abi_test.c does not compile:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let run = Command::new(&exe)
        .env_remove("UMD_BACKEND")
        .output()
        .expect("run abi_test");
    let stdout = String::from_utf8_lossy(&run.stdout);
    print!("{stdout}");
    let summary = stdout.lines().last().unwrap_or("");
    assert!(
        summary.ends_with(" 0 failed") && run.status.success(),
        "abi_test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let passed: u32 = summary
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(passed >= 130, "abi_test ran only {passed} checks");
}

#[test]
fn ignoring_a_result_is_a_compile_error() {
    let exe = out_dir().join("must_use");
    let o = compile("tests/c/must_use.c", &exe, &["-std=c11"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success(),
        "ignoring a umdResult compiled without error"
    );
    assert!(
        err.contains("warn_unused_result") || err.contains("unused-result"),
        "unexpected diagnostic:\n{err}"
    );
}

#[test]
fn headers_compile_alone_twice_as_c11_and_cxx17() {
    let _ = libumd();
    for (src, std) in [
        ("tests/c/header_twice.c", "-std=c11"),
        ("tests/c/header_twice.cpp", "-std=c++17"),
    ] {
        let exe = out_dir().join(src.replace('/', "_"));
        let o = compile(src, &exe, &[std, "-pedantic"]);
        assert!(
            o.status.success(),
            "{src} ({std}) does not compile:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let run = Command::new(&exe).output().expect("run");
        assert!(
            run.status.success(),
            "{src}: seqno-0 fence query did not succeed"
        );
    }
}

#[test]
fn header_matches_cbindgen_output() {
    let cbindgen = std::env::var("CBINDGEN")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let home = std::env::var("HOME").unwrap_or_default();
            PathBuf::from(std::env::var("AIGPU_CACHE").unwrap_or(format!("{home}/.cache/aigpu")))
                .join("tools/bin/cbindgen")
        });
    assert!(
        cbindgen.exists(),
        "cbindgen not found at {} (scripts/setup-toolchain.sh installs it)",
        cbindgen.display()
    );
    let gen = out_dir().join("umd.h");
    let o = Command::new(&cbindgen)
        .current_dir(root())
        .args([
            "--quiet",
            "--config",
            "umd/cbindgen.toml",
            "--crate",
            "umd",
            "--output",
        ])
        .arg(&gen)
        .arg("umd")
        .output()
        .expect("run cbindgen");
    assert!(
        o.status.success(),
        "cbindgen failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let want = std::fs::read_to_string(&gen).expect("generated header");
    let have = std::fs::read_to_string(root().join("include/umd.h")).expect("include/umd.h");
    assert!(
        want == have,
        "include/umd.h is stale: run scripts/gen-header.sh and commit it"
    );
}

#[test]
fn exports_only_umd_symbols_with_soname() {
    let lib = libumd();
    let nm = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
        .expect("nm");
    let text = String::from_utf8_lossy(&nm.stdout);
    let syms: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    let header = std::fs::read_to_string(root().join("include/umd.h")).expect("umd.h");
    assert!(syms.len() >= 30, "too few exports: {syms:?}");
    for s in &syms {
        assert!(
            s.starts_with("umd"),
            "libumd.so exports a non-umd symbol: {s}"
        );
        assert!(
            header.contains(&format!("{s}(")),
            "exported {s} is not declared in include/umd.h"
        );
    }
    let re = Command::new("readelf")
        .arg("-d")
        .arg(&lib)
        .output()
        .expect("readelf");
    let dynamic = String::from_utf8_lossy(&re.stdout);
    assert!(
        dynamic.contains("Library soname: [libumd.so.1]"),
        "soname missing:\n{dynamic}"
    );
}
