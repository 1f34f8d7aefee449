//! Fuzz target: the front end and code generator on
//! arbitrary bytes, through `rpn2wasm::fuzzing::parse_and_compile_with`;
//! every module compiled must validate. The example directory is an `-I`
//! directory, so inputs grown from the examples can include `common.inc`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::PathBuf;
use std::sync::LazyLock;

static INCLUDE_DIRS: LazyLock<Vec<PathBuf>> =
    LazyLock::new(|| vec![PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/examples")]);

fuzz_target!(|data: &[u8]| {
    for wasm in rpn2wasm::fuzzing::parse_and_compile_with(data, &INCLUDE_DIRS) {
        if let Err(e) = wasmparser::Validator::new().validate_all(&wasm) {
            panic!(
                "compiled module does not validate: {} (at offset 0x{:x})",
                e.message(),
                e.offset()
            );
        }
    }
});
