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
    println!("cargo:rerun-if-changed=asm/x86_64.S");
    println!("cargo:rerun-if-changed=build.rs");
}
