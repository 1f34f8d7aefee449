//! A thin assembler over `wasm-encoder`'s function builder that tracks the
//! structured-control stack, so branches name labels instead of counting
//! nesting depths by hand. Never emits malformed structure by itself; the
//! module is validated by `wasmparser` in every test.

use wasm_encoder::{BlockType, Function, InstructionSink, MemArg, ValType};

/// A label of the control stack (an opened block, loop or if).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Label(pub u32);

/// Function body builder.
pub struct Asm {
    f: Function,
    /// Open constructs, innermost last.
    stack: Vec<Label>,
    next_label: u32,
}

impl Asm {
    /// A new body with `params` parameters and the given extra locals.
    pub fn new(_params: u32, locals: &[(u32, ValType)]) -> Asm {
        Asm {
            f: Function::new(locals.iter().copied()),
            stack: Vec::new(),
            next_label: 0,
        }
    }

    /// The instruction sink.
    pub fn i(&mut self) -> InstructionSink<'_> {
        self.f.instructions()
    }

    fn open(&mut self) -> Label {
        let l = Label(self.next_label);
        self.next_label += 1;
        self.stack.push(l);
        l
    }

    /// `block` (no params, no results).
    pub fn block(&mut self) -> Label {
        self.i().block(BlockType::Empty);
        self.open()
    }

    /// `loop`.
    pub fn loop_(&mut self) -> Label {
        self.i().loop_(BlockType::Empty);
        self.open()
    }

    /// `if` on the i32 on top of the operand stack.
    pub fn if_(&mut self) -> Label {
        self.i().if_(BlockType::Empty);
        self.open()
    }

    /// `else` of the innermost `if`.
    pub fn else_(&mut self) {
        self.i().else_();
    }

    /// `end` of the innermost construct, which must be `l`.
    pub fn end(&mut self, l: Label) {
        let top = self.stack.pop();
        assert_eq!(top, Some(l), "codegen invariant: constructs close in order");
        self.i().end();
    }

    fn depth_of(&self, l: Label) -> u32 {
        let pos = self
            .stack
            .iter()
            .rposition(|x| *x == l)
            .expect("codegen invariant: branch to an open label");
        (self.stack.len() - 1 - pos) as u32
    }

    /// `br l`.
    pub fn br(&mut self, l: Label) {
        let d = self.depth_of(l);
        self.i().br(d);
    }

    /// `br_if l`.
    pub fn br_if(&mut self, l: Label) {
        let d = self.depth_of(l);
        self.i().br_if(d);
    }

    /// `br_table` over labels, default `default`.
    pub fn br_table(&mut self, targets: &[Label], default: Label) {
        let ts: Vec<u32> = targets.iter().map(|l| self.depth_of(*l)).collect();
        let d = self.depth_of(default);
        self.i().br_table(ts, d);
    }

    /// Finishes the body (appends the final `end`).
    pub fn finish(mut self) -> Function {
        assert!(
            self.stack.is_empty(),
            "codegen invariant: all constructs closed"
        );
        self.i().end();
        self.f
    }

    /// Byte length of the body emitted so far (for source maps of `--emit wat`).
    pub fn byte_len(&self) -> usize {
        self.f.byte_len()
    }
}

/// A memory argument at a constant offset with natural alignment `align` (log2).
pub fn mem(offset: u32, align: u32) -> MemArg {
    MemArg {
        offset: offset as u64,
        align,
        target: wasm_encoder::MemArgTarget::Memory(0),
        ordering: None,
    }
}
