//! Unit tests of the preprocessor.

use super::*;

fn run(src: &str, defines: &[(&str, &str)]) -> (Vec<String>, Vec<PpLine>, Vec<&'static str>) {
    let mut map = SourceMap::default();
    let main = map.add("m.rpn".into(), src.as_bytes().to_vec());
    let opts = Options {
        defines: defines
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        ..Options::default()
    };
    let mut sink = Sink::default();
    let pp = preprocess(&mut map, main, &opts, &mut sink);
    let codes = sink
        .finish(|s| pp.index.key(s))
        .0
        .iter()
        .map(|d| d.code)
        .collect();
    let text = pp.lines.iter().map(|l| show(&l.text)).collect();
    (text, pp.lines, codes)
}

#[test]
fn substitution_rules() {
    let (t, _, c) = run(
        "#define A x1\n#define B A+A\n#define S S S\nB \"A\" // A\nfoo.A A.b A_ 0xA A\nS\n",
        &[],
    );
    assert!(c.is_empty(), "{c:?}");
    assert_eq!(t, ["x1+x1 \"A\" // A", "foo.A A.b A_ 0xA x1", "S S"]);
}

#[test]
fn command_line_defines_and_conditionals() {
    let src = "#ifdef D\nd\n#elif E\ne\n#else\nz\n#endif\n#IFNDEF D\nnd\n#EndIf\n";
    assert_eq!(run(src, &[("D", "1")]).0, ["d"]);
    assert_eq!(run(src, &[("E", "1")]).0, ["e", "nd"]);
    assert_eq!(run(src, &[]).0, ["z", "nd"]);
    // Nested groups inside a skipped branch are tracked.
    let src = "#ifdef NO\n#ifdef X\n#else\nbad\n#endif\n#else\ngood\n#endif\n";
    assert_eq!(run(src, &[]).0, ["good"]);
    // #define replaces a -D value; #undef removes it.
    let src = "#define V 2\nV\n#undef V\nV\n";
    assert_eq!(run(src, &[("V", "1")]).0, ["2", "V"]);
    // Empty value.
    assert_eq!(run("#define E   // nothing\n[E]\n", &[]).0, ["[]"]);
}

#[test]
fn expanded_text_maps_to_the_macro_use() {
    let (t, lines, _) = run("#define LONG abcdef\n  x LONG y\n", &[]);
    assert_eq!(t, ["  x abcdef y"]);
    let l = &lines[0];
    let base = 20; // offset of line 2
    // Copied text maps byte for byte.
    assert_eq!(
        l.span(2, 3),
        Span {
            file: 0,
            lo: base + 2,
            hi: base + 3
        }
    );
    // Any byte of the expansion maps to the whole use.
    assert_eq!(
        l.span(6, 8),
        Span {
            file: 0,
            lo: base + 4,
            hi: base + 8
        }
    );
    // After the expansion, offsets shift back.
    assert_eq!(
        l.span(11, 12),
        Span {
            file: 0,
            lo: base + 9,
            hi: base + 10
        }
    );
    assert_eq!(
        l.end(),
        Span {
            file: 0,
            lo: base + 10,
            hi: base + 10
        }
    );
    // A range spanning copied and expanded text.
    assert_eq!(
        l.span(2, 12),
        Span {
            file: 0,
            lo: base + 2,
            hi: base + 10
        }
    );
}

#[test]
fn directive_errors() {
    assert_eq!(run("#define\n", &[]).2, [codes::MALFORMED_DIRECTIVE]);
    assert_eq!(
        run("#ifdef A B\n#endif\n", &[]).2,
        [codes::MALFORMED_DIRECTIVE]
    );
    assert_eq!(run("#\n", &[]).2, [codes::UNKNOWN_DIRECTIVE]);
    assert_eq!(run("#include\n", &[]).2, [codes::MALFORMED_DIRECTIVE]);
    assert_eq!(run("#include \"\"\n", &[]).2, [codes::MALFORMED_DIRECTIVE]);
    assert_eq!(run("#include <a\n", &[]).2, [codes::MALFORMED_DIRECTIVE]);
    assert_eq!(
        run("#include \"a\" b\n", &[]).2,
        [codes::MALFORMED_DIRECTIVE]
    );
    // Unknown directives in skipped branches are ignored.
    assert!(run("#ifdef X\n#pragma\n#endif\n", &[]).2.is_empty());
    // Directives themselves are never substituted.
    assert_eq!(run("#define X Y\n#ifdef X\nk\n#endif\n", &[]).0, ["k"]);
}
