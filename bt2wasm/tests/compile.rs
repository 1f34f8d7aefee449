//! Programs compile to modules that validate, with the expected manifest.

fn compile(src: &str) -> bt2wasm::Compiled {
    match bt2wasm::compile("-e", src, &bt2wasm::Options::default()) {
        Ok(c) => {
            wasmparser::Validator::new()
                .validate_all(&c.wasm)
                .unwrap_or_else(|e| panic!("{src}: invalid module: {e}"));
            c
        }
        Err((d, map)) => panic!("{src}:\n{}", d.render(&map)),
    }
}

fn errors(src: &str) -> String {
    match bt2wasm::compile("-e", src, &bt2wasm::Options::default()) {
        Ok(_) => panic!("{src}: compiled"),
        Err((d, map)) => d.render(&map),
    }
}

#[test]
fn special_probes_compile() {
    let c = compile(
        "BEGIN { printf(\"hello %d %s\\n\", 42, comm); @x[1, \"a\"] = count(); @s = sum(5); @h = hist(3); @l = lhist(5, 0, 10, 1); $v = 3; $v += 2; if ($v > 4 && @s == 0 || 1) { @y = $v / 0; } else { @y = 2; } print(@x); time(); exit(); } END { clear(@x); zero(@s); delete(@x[1, \"a\"]); $t = (1, \"x\"); print($t); @z = $t.1; } interval:ms:100 { @i++; }",
    );
    let m = c.manifest();
    assert_eq!(m.probes.len(), 3);
    assert_eq!(m.maps.len(), 7);
    assert_eq!(c.module.events.printf.len(), 1);
}

#[test]
fn errors_have_positions_and_carets() {
    let e = errors("BEGIN { @x = count(1); }");
    assert!(
        e.contains("-e:1:14: error[B0301]: count() requires 0 arguments (1 provided)"),
        "{e}"
    );
    let e = errors("kprobe:do_nanosleep { }");
    assert!(e.contains("kprobe probes are not supported"), "{e}");
    let e = errors("BEGIN { printf(\"%d\\n\", comm); }");
    assert!(
        e.contains("%d specifier expects a value of type integer (string supplied)"),
        "{e}"
    );
    let e = errors("BEGIN { @x = 1; @x = \"a\"; }");
    assert!(e.contains("Type mismatch for @x"), "{e}");
    let e = errors("BEGIN { print(@nope); $y = @nope2; }");
    assert!(e.contains("Undefined map: @nope2"), "{e}");
}
