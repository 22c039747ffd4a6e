//! Fuzz target `mutated_file_ops`: a thin wrapper around `cairndb::fuzzing::run_target`
//! (the logic, and what it checks, is documented there).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(violation) = cairndb::fuzzing::run_target("mutated_file_ops", data) {
        panic!("mutated_file_ops: {violation}");
    }
});
