//! Arbitrary bytes fed to every EPMD parser, the in-process EPMD server and the client calls:
//! no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smarm::cluster::__wire::fuzz_epmd;

fuzz_target!(|data: &[u8]| {
    fuzz_epmd(data);
});
