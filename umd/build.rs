//! libumd.so carries the soname libumd.so.1 (the ABI major), so programs link against the ABI,
//! not a file name.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libumd.so.1");
    println!("cargo:rerun-if-changed=build.rs");
}
