use super::*;

fn ok(src: &str) -> Program {
    let (p, d) = parse(src.as_bytes(), 0);
    assert!(d.is_empty(), "{src}: {:?}", d.list);
    p
}

fn err(src: &str) -> Vec<String> {
    let (_, d) = parse(src.as_bytes(), 0);
    assert!(!d.is_empty(), "{src} parsed");
    d.list.into_iter().map(|d| d.message).collect()
}

#[test]
fn one_liners_parse() {
    for src in [
        "BEGIN { printf(\"hello\\n\"); exit(); }",
        "uprobe:/bin/bash:readline { @[comm] = count(); }",
        "u:./t:f /arg0 > 3 && pid == 5/ { @h = hist(arg0) }",
        "uprobe:./t:f, uprobe:./t:g { @x[tid] = nsecs; } uretprobe:./t:f /@x[tid]/ { @l = hist(nsecs - @x[tid]); delete(@x[tid]); }",
        "interval:s:1 { print(@); clear(@); }",
        "BEGIN { $a = 1; $a += 2; $a++; if ($a == 4) { printf(\"%d\\n\", $a) } else if ($a > 4) { exit() } else { return } }",
        "BEGIN { unroll(3) { @i++ } while ($i < 10) { $i = $i + 1; if ($i == 5) { break } } }",
        "BEGIN { $t = (1, \"two\"); printf(\"%d %s\\n\", $t.0, $t.1); @x = (int8)-1 ? 2 : 3 }",
        "uprobe:./t:f { printf(\"%s\\n\", str(args->name)); @[ustack(perf, 3)] = count() }",
        "#!/usr/bin/env bpftrace\n// comment\nBEGIN /* c */ { @ = 1 }",
        "BEGIN { @ = 4 / 2 / 1; }",
        "u:./t:f /arg0 / 2 == 1/ { @ = 1 }",
    ] {
        ok(src);
    }
}

#[test]
fn precedence() {
    let p = ok("BEGIN { @ = 1 + 2 * 3 == 7 && !0 }");
    let StmtKind::AssignMap { value, .. } = &p.probes[0].body[0].kind else {
        panic!()
    };
    let ExprKind::Binop(BinOp::LAnd, l, _) = &value.kind else {
        panic!("{value:?}")
    };
    assert!(matches!(l.kind, ExprKind::Binop(BinOp::Eq, _, _)));
}

#[test]
fn errors_are_reported_and_recovered() {
    let m = err("BEGIN { @x = ; printf(\"a\") @y = 1; }");
    assert!(m[0].contains("unexpected `;`"), "{m:?}");
    assert!(m.len() >= 2, "{m:?}");
    assert!(err("BEGIN { 1 = 2 }")[0].contains("only maps and variables"));
    assert!(err("BEGIN")[0].contains("expected {"));
    assert!(err("")[0].contains("no probes"));
    assert!(err("#include <linux/sched.h>\nBEGIN {}")[0].contains("preprocessor"));
    assert!(err("struct x { int a; }")[0].contains("no probes"));
    assert!(err("struct x BEGIN {}")[0].contains("body"));
    assert!(err("BEGIN { for ($i : 0..3) {} }")[0].contains("for"));
    assert!(matches!(
        ok("BEGIN { for ($kv : @m) { print($kv.0); } }").probes[0].body[0].kind,
        StmtKind::For { .. }
    ));
    let deep = format!("BEGIN {{ @ = {}1{} }}", "(".repeat(500), ")".repeat(500));
    assert!(err(&deep)[0].contains("nesting"));
}

#[test]
fn c_definitions_and_config() {
    let p = ok(
        "struct Foo { int a, *b; char c[2][3]; unsigned int d:4; struct { int e; } } \
                enum E { A, B = -5, }; config = { stack_mode = raw; max_strlen = 9 } \
                BEGIN { $x = (struct Foo *)0; @ = sizeof(struct Foo) + offsetof(struct Foo, d); }",
    );
    assert_eq!(p.cdefs.len(), 2);
    let TypeSpec::Record { members, .. } = &p.cdefs[0].spec else {
        panic!()
    };
    let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "c", "d", ""]);
    assert_eq!(
        (members[1].ptr, &members[2].dims, members[3].bits),
        (1, &vec![2, 3], Some(4))
    );
    assert_eq!(p.config.len(), 2);
    assert_eq!(p.probes.len(), 1);
}
