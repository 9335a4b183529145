//! libumd.so carries the soname libumd.so.1 (the ABI major), so programs link against the ABI,
//! not a file name.
//!
//! `umd_frame_pointers`: set when the rustflags keep frame pointers (.cargo/config.toml), the
//! condition under which src/caller.rs may read the caller's return address from the frame
//! record.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libumd.so.1");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rustc-check-cfg=cfg(umd_frame_pointers)");
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let flags: Vec<&str> = flags.split('\x1f').collect();
    let keeps = |f: &str| {
        let v = f
            .trim_start_matches("-C")
            .trim_start_matches("force-frame-pointers=");
        f.contains("force-frame-pointers") && matches!(v, "yes" | "y" | "on" | "true")
    };
    // `-C force-frame-pointers=yes` arrives as one flag or as `-C` then the value; the last one
    // wins.
    let last = flags
        .iter()
        .rev()
        .find(|f| f.contains("force-frame-pointers"))
        .copied();
    if last.is_some_and(keeps) {
        println!("cargo:rustc-cfg=umd_frame_pointers");
    }
}
