//! Fuzz target `open_bytes`: a thin wrapper around `cairndb::fuzzing::run_target`
//! (the logic, and what it checks, is documented there).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = cairndb::fuzzing::run_target("open_bytes", data) {
        panic!("open_bytes: {violation}");
    }
});
