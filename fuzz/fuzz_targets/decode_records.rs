//! Fuzz target: every `hostabi` decoder (record
//! header, log data with item descriptors, stack-trace area, manifest) on
//! arbitrary bytes, through `rpn2wasm::fuzzing::decode_records`.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| rpn2wasm::fuzzing::decode_records(data));
