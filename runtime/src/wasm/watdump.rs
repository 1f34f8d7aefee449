//! `wprobe compile --emit wat`: the module printed as WAT, each RPN
//! instruction's code preceded by a comment with its source line
//! (`;; file:line: source`), using the code generator's instruction marks.

use rpn2wasm::SourceMap;
use rpn2wasm::ast::Program;
use rpn2wasm::codegen::Generated;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Renders `generated` (the module of `program`) as annotated WAT.
pub fn annotated_wat(
    program: &Program,
    map: &SourceMap,
    generated: &Generated,
) -> anyhow::Result<String> {
    // Module offset of the start of each function body.
    let mut body_starts = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(&generated.wasm) {
        if let wasmparser::Payload::CodeSectionEntry(body) = payload? {
            body_starts.push(body.range().start);
        }
    }
    let mut notes: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for (b, marks) in generated.marks.iter().enumerate() {
        let f = (generated.first_body_func as usize + b)
            .checked_sub(count_imports(&generated.wasm)?)
            .ok_or_else(|| anyhow::anyhow!("function index below the imports"))?;
        let Some(start) = body_starts.get(f) else {
            continue;
        };
        let body = &program.bodies[b];
        for (insn, off) in marks {
            let span = body.insns[*insn].span;
            let (line, _) = map.line_col(span.file, span.lo);
            let path = map
                .files
                .get(span.file as usize)
                .map(|f| f.path.display().to_string())
                .unwrap_or_default();
            let text = map.line_text(span.file, span.lo);
            let implicit = *insn + 1 == body.insns.len();
            let note = if implicit {
                format!(
                    ";; (implicit {}) code offset {}",
                    if matches!(body.insns[*insn].op, rpn2wasm::ast::Op::Ret) {
                        "ret"
                    } else {
                        "exit"
                    },
                    body.insns[*insn].offset
                )
            } else {
                format!(
                    ";; {path}:{line}: {}   [code offset {}]",
                    text.trim(),
                    body.insns[*insn].offset
                )
            };
            notes.entry(*start as usize + off).or_default().push(note);
        }
    }
    let mut printed = String::new();
    let mut cfg = wasmprinter::Config::new();
    cfg.print_offsets(true);
    cfg.print(
        &generated.wasm,
        &mut wasmprinter::PrintFmtWrite(&mut printed),
    )?;
    let mut out = String::with_capacity(printed.len() * 2);
    for line in printed.lines() {
        let (offset, rest) = split_offset(line);
        if let Some(lines) = offset.and_then(|o| notes.get(&o)) {
            let indent: String = rest.chars().take_while(|c| c.is_whitespace()).collect();
            for note in lines {
                let _ = writeln!(out, "{indent}{note}");
            }
        }
        let _ = writeln!(out, "{rest}");
    }
    Ok(out)
}

/// Splits a `(;@1f3;)` offset prefix from a printed line.
fn split_offset(line: &str) -> (Option<usize>, &str) {
    let t = line.trim_start();
    if let Some(rest) = t.strip_prefix("(;@")
        && let Some(end) = rest.find(";)")
    {
        let off = usize::from_str_radix(rest[..end].trim(), 16).ok();
        let body = &rest[end + 2..];
        return (off, body.strip_prefix(' ').unwrap_or(body));
    }
    (None, line)
}

fn count_imports(wasm: &[u8]) -> anyhow::Result<usize> {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let wasmparser::Payload::ImportSection(r) = payload? {
            let mut n = 0;
            for imp in r.into_imports() {
                imp?;
                n += 1;
            }
            return Ok(n);
        }
    }
    Ok(0)
}
