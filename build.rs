//! Build script: smarm's context switch is hand-written x86_64 assembly (asm/x86_64.S), so
//! any other target is rejected here with a clear message rather than at link time.

fn main() {
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if arch != "x86_64" || os != "linux" {
        panic!(
            "smarm supports only x86_64 Linux (its context switch is hand-written x86_64 \
             System V assembly and its stacks use Linux mmap/madvise); this target is {arch}-{os}"
        );
    }
    // Under AddressSanitizer (nightly `-Zsanitizer=address`), actor stacks must be unpoisoned
    // when an actor starts on one: ASan does not see our stack switches, so the redzones of
    // the frames a finished actor left behind (its entry never returns) would stay poisoned
    // for the next actor on that stack and be reported as overflows.
    println!("cargo:rustc-check-cfg=cfg(smarm_asan)");
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if flags.split('\x1f').any(|f| f.contains("sanitizer=address")) {
        println!("cargo:rustc-cfg=smarm_asan");
    }
    println!("cargo:rerun-if-env-changed=CARGO_ENCODED_RUSTFLAGS");
    println!("cargo:rerun-if-changed=asm/x86_64.S");
    println!("cargo:rerun-if-changed=build.rs");
}
