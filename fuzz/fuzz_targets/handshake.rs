//! Arbitrary bytes, split into handshake frames, fed to a fresh acceptor and a fresh initiator
//! (`data[0]` picks the caller's decisions, see `fuzz_acceptor`/`fuzz_initiator`): no panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use smarm::cluster::__wire::{fuzz_acceptor, fuzz_initiator};

fuzz_target!(|data: &[u8]| {
    fuzz_acceptor(data);
    fuzz_initiator(data);
});
