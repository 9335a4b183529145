//! Checks `include/aigpu_drm.h` against the Rust UAPI: generates a C program that prints the
//! size, alignment, offset and type of every struct field and the value of every constant,
//! compiles it with `cc -std=c11 -Wall -Wextra -Werror -pedantic`, runs it and compares each
//! line with the Rust value. It also checks that every object-like `#define` in the header is
//! covered, and that every struct's field list is complete (fields tile the struct exactly).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::mem::{align_of, offset_of, size_of, size_of_val};
use std::path::PathBuf;
use std::process::Command;

use uapi::ioctl::*;
use uapi::{reason, regs, ring, version};

const HEADER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../include/aigpu_drm.h");

/// One value printed by the C program: its key, the C expression, the Rust value.
struct Check {
    key: String,
    c_expr: String,
    rust: u64,
}

#[derive(Default)]
struct Checks(Vec<Check>);

impl Checks {
    fn add(&mut self, key: impl Into<String>, c_expr: impl Into<String>, rust: impl TryInto<u64>) {
        let rust = rust
            .try_into()
            .unwrap_or_else(|_| panic!("value does not fit u64"));
        self.0.push(Check {
            key: key.into(),
            c_expr: c_expr.into(),
            rust,
        });
    }
    /// A `#define` whose C value is the macro itself.
    fn define(&mut self, name: &str, rust: impl TryInto<u64>) {
        self.add(name, name, rust);
    }
}

/// Adds size, alignment and, per field, offset, size and C type (32 or 64 bits unsigned) of a
/// struct; asserts that the listed fields tile the Rust struct with no hole, so a field missing
/// from the list cannot go unnoticed (the UAPI has explicit padding only).
macro_rules! strukt {
    ($checks:ident, $cname:literal, $ty:ty, [$($f:ident),* $(,)?]) => {{
        let c = concat!("struct ", $cname);
        $checks.add(format!("sizeof {}", $cname), format!("sizeof({c})"), size_of::<$ty>());
        $checks.add(format!("alignof {}", $cname), format!("_Alignof({c})"), align_of::<$ty>());
        let v = <$ty>::default();
        let mut end = 0usize;
        $(
            let name = stringify!($f);
            let (off, size) = (offset_of!($ty, $f), size_of_val(&v.$f));
            assert_eq!(off, end, "{}.{name}: a field before it is missing from the list", $cname);
            end = off + size;
            $checks.add(
                format!("offsetof {}.{name}", $cname),
                format!("offsetof({c}, {name})"),
                off,
            );
            $checks.add(
                format!("sizeof {}.{name}", $cname),
                format!("sizeof((({c} *)0)->{name})"),
                size,
            );
            // The exact C type: uint32_t or uint64_t (every Rust field is u32 or u64).
            $checks.add(
                format!("type {}.{name}", $cname),
                format!(
                    "_Generic((({c} *)0)->{name}, uint32_t: 32, uint64_t: 64, default: 0)"
                ),
                size * 8,
            );
        )*
        assert_eq!(end, size_of::<$ty>(), "fields missing at the end of {}", $cname);
    }};
}

fn checks() -> Checks {
    let mut k = Checks::default();
    strukt!(
        k,
        "drm_aigpu_query",
        Query,
        [
            flags,
            reason,
            uapi_major,
            uapi_minor,
            driver_major,
            driver_minor,
            driver_patch,
            num_queues,
            caps,
            va_start,
            va_end,
            page_size,
            max_cmdbufs,
            mem_total,
            mem_used,
            max_bo_size,
            max_in_fences,
            max_contexts,
        ]
    );
    strukt!(
        k,
        "drm_aigpu_gem_create",
        GemCreate,
        [size, flags, handle, reason, pad]
    );
    strukt!(
        k,
        "drm_aigpu_gem_mmap_offset",
        GemMmapOffset,
        [handle, flags, offset, reason, pad]
    );
    strukt!(
        k,
        "drm_aigpu_vm_bind",
        VmBind,
        [handle, flags, va, bo_offset, size, access, reason]
    );
    strukt!(
        k,
        "drm_aigpu_vm_unbind",
        VmUnbind,
        [flags, reason, va, size]
    );
    strukt!(
        k,
        "drm_aigpu_ctx_create",
        CtxCreate,
        [flags, priority, ctx_id, reason]
    );
    strukt!(
        k,
        "drm_aigpu_ctx_destroy",
        CtxDestroy,
        [ctx_id, flags, reason, pad]
    );
    strukt!(k, "drm_aigpu_cmdbuf", Cmdbuf, [va, size, flags]);
    strukt!(k, "drm_aigpu_fence", Fence, [ctx_id, flags, seqno]);
    strukt!(
        k,
        "drm_aigpu_submit",
        Submit,
        [
            ctx_id,
            flags,
            cmdbufs,
            in_fences,
            num_cmdbufs,
            num_in_fences,
            out_seqno,
            reason,
            bad_index,
            bad_offset,
        ]
    );
    strukt!(
        k,
        "drm_aigpu_wait",
        Wait,
        [
            ctx_id,
            flags,
            seqno,
            timeout_ns,
            completed_seqno,
            reason,
            pad,
        ]
    );
    strukt!(
        k,
        "drm_aigpu_ctx_state",
        CtxState,
        [
            ctx_id,
            flags,
            reset_status,
            fault_type,
            fault_va,
            fault_access,
            hung,
            fault_offset,
            completed_seqno,
            submitted_seqno,
            reason,
            pad,
            ban,
            dep_ctx_id,
            dep_seqno,
        ]
    );

    // Versions and capabilities.
    k.define("AIGPU_UAPI_MAJOR", version::UAPI_MAJOR);
    k.define("AIGPU_UAPI_MINOR", version::UAPI_MINOR);
    k.define("AIGPU_MIN_KERNEL_MINOR", version::MIN_KERNEL_MINOR);
    k.define("AIGPU_DRIVER_MAJOR", version::DRIVER_VERSION.0);
    k.define("AIGPU_DRIVER_MINOR", version::DRIVER_VERSION.1);
    k.define("AIGPU_DRIVER_PATCH", version::DRIVER_VERSION.2);
    k.define("AIGPU_CAP_GEMM_I8", version::CAP_GEMM_I8);
    k.define("AIGPU_CAP_ELTWISE", version::CAP_ELTWISE);
    k.define("AIGPU_CAP_WAIT_MEM", version::CAP_WAIT_MEM);
    k.define("AIGPU_CAP_TIMESTAMP", version::CAP_TIMESTAMP);
    k.define("AIGPU_CAP_HANG_DEBUG", version::CAP_HANG_DEBUG);
    k.define("AIGPU_CAP_PRIORITY", version::CAP_PRIORITY);
    k.define("AIGPU_CAPS_ALL", version::CAPS_ALL);
    k.define("AIGPU_PAGE_SIZE", version::PAGE_SIZE);
    k.define("AIGPU_VA_START", version::VA_START);
    k.define("AIGPU_VA_END", version::VA_END);

    // Ioctl numbers.
    k.define("AIGPU_DRM_IOCTL_BASE", DRM_IOCTL_BASE);
    k.define("AIGPU_DRM_COMMAND_BASE", DRM_COMMAND_BASE);
    let ioctls = [
        ("QUERY", NR_QUERY, IOCTL_QUERY),
        ("GEM_CREATE", NR_GEM_CREATE, IOCTL_GEM_CREATE),
        ("GEM_MMAP_OFFSET", NR_GEM_MMAP_OFFSET, IOCTL_GEM_MMAP_OFFSET),
        ("VM_BIND", NR_VM_BIND, IOCTL_VM_BIND),
        ("VM_UNBIND", NR_VM_UNBIND, IOCTL_VM_UNBIND),
        ("CTX_CREATE", NR_CTX_CREATE, IOCTL_CTX_CREATE),
        ("CTX_DESTROY", NR_CTX_DESTROY, IOCTL_CTX_DESTROY),
        ("SUBMIT", NR_SUBMIT, IOCTL_SUBMIT),
        ("WAIT", NR_WAIT, IOCTL_WAIT),
        ("CTX_STATE", NR_CTX_STATE, IOCTL_CTX_STATE),
    ];
    assert_eq!(ioctls.len() as u32, NUM_IOCTLS);
    for (name, nr, number) in ioctls {
        k.define(&format!("DRM_AIGPU_{name}"), nr);
        k.define(&format!("DRM_IOCTL_AIGPU_{name}"), number);
    }
    k.define("DRM_AIGPU_NUM_IOCTLS", NUM_IOCTLS);

    // Flags, enumerations and limits.
    k.define("AIGPU_VM_ACCESS_READ", VM_ACCESS_READ);
    k.define("AIGPU_VM_ACCESS_WRITE", VM_ACCESS_WRITE);
    k.define("AIGPU_PRIORITY_LOW", PRIORITY_LOW);
    k.define("AIGPU_PRIORITY_NORMAL", PRIORITY_NORMAL);
    k.define("AIGPU_PRIORITY_HIGH", PRIORITY_HIGH);
    k.define("AIGPU_RESET_NONE", RESET_NONE);
    k.define("AIGPU_RESET_GUILTY", RESET_GUILTY);
    k.define("AIGPU_RESET_INNOCENT", RESET_INNOCENT);
    k.define("AIGPU_BAN_NONE", BAN_NONE);
    k.define("AIGPU_BAN_FAULT", BAN_FAULT);
    k.define("AIGPU_BAN_HANG", BAN_HANG);
    k.define("AIGPU_BAN_DEPENDENCY", BAN_DEPENDENCY);
    k.define("AIGPU_BAN_DROPPED", BAN_DROPPED);
    k.define("AIGPU_FAULT_UNMAPPED", regs::FAULT_UNMAPPED);
    k.define("AIGPU_FAULT_PERMISSION", regs::FAULT_PERMISSION);
    k.define("AIGPU_FAULT_BAD_PTE", regs::FAULT_BAD_PTE);
    k.define("AIGPU_FAULT_MALFORMED_PACKET", regs::FAULT_MALFORMED_PACKET);
    k.define("AIGPU_FAULT_BAD_DESCRIPTOR", regs::FAULT_BAD_DESCRIPTOR);
    k.define("AIGPU_FAULT_BUS_ERROR", regs::FAULT_BUS_ERROR);
    k.define("AIGPU_ACCESS_READ", regs::ACCESS_READ);
    k.define("AIGPU_ACCESS_WRITE", regs::ACCESS_WRITE);
    k.define("AIGPU_ACCESS_FETCH", regs::ACCESS_FETCH);
    k.define("AIGPU_SUBMIT_FLAG_NO_BLOCK", SUBMIT_FLAG_NO_BLOCK);
    k.define("AIGPU_MAX_CMDBUFS", MAX_CMDBUFS);
    k.define("AIGPU_MAX_IN_FENCES", MAX_IN_FENCES);
    k.define("AIGPU_MAX_CONTEXTS", MAX_CONTEXTS);
    k.define("AIGPU_MAX_CMDBUF_SIZE", ring::MAX_CMD_SIZE);

    // Every reason code.
    for &(value, name, _) in reason::ALL {
        k.define(&format!("AIGPU_REASON_{name}"), value);
    }
    k
}

/// Object-like macros the header defines (`#define NAME value`), minus its include guard.
fn header_defines(header: &str) -> BTreeSet<String> {
    header
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("#define "))
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // Function-like macros have '(' right after the name.
            let object_like = !rest[name.len()..].starts_with('(');
            (object_like && name != "AIGPU_DRM_H").then_some(name)
        })
        .collect()
}

fn c_program(checks: &Checks) -> String {
    let mut p = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"aigpu_drm.h\"\n\nint main(void)\n{\n",
    );
    for c in &checks.0 {
        writeln!(
            p,
            "\tprintf(\"%s %llu\\n\", \"{}\", (unsigned long long)({}));",
            c.key, c.c_expr
        )
        .unwrap();
    }
    p.push_str("\tprintf(\"AIGPU_DRIVER_NAME %s\\n\", AIGPU_DRIVER_NAME);\n");
    p.push_str("\treturn 0;\n}\n");
    p
}

#[test]
fn c_header_matches_rust_uapi() {
    let checks = checks();

    // Every object-like #define of the header is checked, and nothing is checked twice.
    let header = std::fs::read_to_string(HEADER).expect("read include/aigpu_drm.h");
    let mut keys = BTreeSet::new();
    for c in &checks.0 {
        assert!(keys.insert(c.key.clone()), "{} checked twice", c.key);
    }
    let unchecked: Vec<String> = header_defines(&header)
        .into_iter()
        .filter(|d| d != "AIGPU_DRIVER_NAME" && !keys.contains(d))
        .collect();
    assert!(
        unchecked.is_empty(),
        "#defines not checked against Rust: {unchecked:?}"
    );

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("c_layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, c_program(&checks)).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let include = PathBuf::from(HEADER).parent().unwrap().to_path_buf();
    let out = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(&include)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler `{cc}`: {e}"));
    assert!(
        out.status.success(),
        "C compile failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run the layout program");
    assert!(run.status.success());
    let stdout = String::from_utf8(run.stdout).unwrap();
    let printed: BTreeMap<&str, &str> = stdout
        .lines()
        .map(|l| l.rsplit_once(' ').expect("key value"))
        .collect();

    let mut mismatches = Vec::new();
    for c in &checks.0 {
        let got = printed.get(c.key.as_str()).copied();
        if got != Some(c.rust.to_string().as_str()) {
            mismatches.push(format!("{}: C {:?}, Rust {}", c.key, got, c.rust));
        }
    }
    assert!(
        mismatches.is_empty(),
        "C/Rust mismatches:\n{}",
        mismatches.join("\n")
    );
    assert_eq!(
        printed.get("AIGPU_DRIVER_NAME"),
        Some(&version::DRIVER_NAME)
    );
    assert_eq!(printed.len(), checks.0.len() + 1);
    // The header defines exactly the Rust reason codes, no more.
    let header_reasons = header_defines(&header)
        .into_iter()
        .filter(|d| d.starts_with("AIGPU_REASON_"))
        .count();
    assert_eq!(header_reasons, reason::ALL.len());
}
