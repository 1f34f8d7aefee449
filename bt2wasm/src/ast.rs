//! The syntax tree of a one-liner program, as parsed (names unresolved,
//! no types). Every node carries the span its diagnostics point at.

use rpn2wasm::Span;

/// A whole program: its probes, in source order.
#[derive(Clone, Debug, Default)]
pub struct Program {
    /// The probes.
    pub probes: Vec<Probe>,
    /// C definitions (`struct`, `union`, `enum`) before, between or after them.
    pub cdefs: Vec<CDef>,
    /// `config = { key = value; ... }` entries: key, value, span of the key.
    pub config: Vec<(String, String, Span)>,
}

/// A C type as written.
#[derive(Clone, Debug, PartialEq)]
pub enum TypeSpec {
    /// Base words or a tag reference: `unsigned int`, `uint8_t`,
    /// `struct Foo`, `enum E`.
    Named(String),
    /// A structure or union defined here (`name` `None`: anonymous).
    Record {
        /// A union.
        union: bool,
        /// Its tag.
        name: Option<String>,
        /// Its members.
        members: Vec<CMember>,
    },
    /// An enumeration defined here.
    Enum {
        /// Its tag.
        name: Option<String>,
        /// Enumerators and their explicit values.
        values: Vec<(String, Option<i64>)>,
    },
}

/// One member declarator of a C record.
#[derive(Clone, Debug, PartialEq)]
pub struct CMember {
    /// Its base type.
    pub ty: TypeSpec,
    /// Pointer levels.
    pub ptr: u8,
    /// Its name (empty: an anonymous record member).
    pub name: String,
    /// Array dimensions, outermost first.
    pub dims: Vec<u32>,
    /// Bitfield width.
    pub bits: Option<u32>,
    /// Where.
    pub span: Span,
}

/// A top-level C definition.
#[derive(Clone, Debug)]
pub struct CDef {
    /// What it defines.
    pub spec: TypeSpec,
    /// Where.
    pub span: Span,
}

/// `attach_point[, attach_point...] [/predicate/] { statements }`.
#[derive(Clone, Debug)]
pub struct Probe {
    /// Attach points, raw text with spans.
    pub attach: Vec<(String, Span)>,
    /// The predicate.
    pub pred: Option<Expr>,
    /// The action block.
    pub body: Vec<Stmt>,
    /// Span of the first attach point.
    pub span: Span,
}

/// A statement.
#[derive(Clone, Debug)]
pub struct Stmt {
    /// What it is.
    pub kind: StmtKind,
    /// Where.
    pub span: Span,
}

/// Binary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinOp {
    /// `+`
    Add,
    /// `-`
    Sub,
    /// `*`
    Mul,
    /// `/`
    Div,
    /// `%`
    Mod,
    /// `&`
    BitAnd,
    /// `|`
    BitOr,
    /// `^`
    BitXor,
    /// `<<`
    Shl,
    /// `>>`
    Shr,
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `&&`
    LAnd,
    /// `||`
    LOr,
}

impl BinOp {
    /// The operator's spelling.
    pub fn text(self) -> &'static str {
        use BinOp::*;
        match self {
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Mod => "%",
            BitAnd => "&",
            BitOr => "|",
            BitXor => "^",
            Shl => "<<",
            Shr => ">>",
            Eq => "==",
            Ne => "!=",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            LAnd => "&&",
            LOr => "||",
        }
    }

    /// Whether the result is a truth value (comparisons, `&&`, `||`).
    pub fn is_comparison(self) -> bool {
        use BinOp::*;
        matches!(self, Eq | Ne | Lt | Le | Gt | Ge | LAnd | LOr)
    }
}

/// Unary operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnOp {
    /// `-x`
    Neg,
    /// `!x`
    Not,
    /// `~x`
    BitNot,
    /// `*x` (dereference)
    Deref,
}

/// Statement kinds.
#[derive(Clone, Debug)]
pub enum StmtKind {
    /// An expression evaluated for its effect (calls, `@x++`).
    Expr(Expr),
    /// `@m[k] = v`, or `@m[k] OP= v` (`op` set).
    AssignMap {
        /// The map and key.
        map: MapRef,
        /// Compound operator.
        op: Option<BinOp>,
        /// The value.
        value: Expr,
    },
    /// `$v = e`, `$v OP= e`.
    AssignVar {
        /// The variable's name (with `$`).
        name: String,
        /// Span of the variable.
        var_span: Span,
        /// Compound operator.
        op: Option<BinOp>,
        /// The value.
        value: Expr,
    },
    /// `if (c) { } else { }`.
    If {
        /// Condition.
        cond: Expr,
        /// Then block.
        then: Vec<Stmt>,
        /// Else block (an `else if` is a block with one `If`).
        els: Vec<Stmt>,
    },
    /// `unroll (n) { }`.
    Unroll {
        /// The count expression (an integer literal or a positional parameter).
        count: Expr,
        /// The body.
        body: Vec<Stmt>,
    },
    /// `while (c) { }`.
    While {
        /// Condition.
        cond: Expr,
        /// Body.
        body: Vec<Stmt>,
    },
    /// `{ ... }`: statements in a block of their own.
    Block(Vec<Stmt>),
    /// `let $x;` (with or without a type): the variable starts again from
    /// zero here (bpftrace 0.23's block-scoped declaration).
    Let {
        /// The variable.
        name: String,
    },
    /// `for ($kv : @map) { }`: the body once per entry, `$kv` the
    /// (key, value) tuple.
    For {
        /// The variable (with `$`).
        var: String,
        /// The map.
        map: MapRef,
        /// The body.
        body: Vec<Stmt>,
    },
    /// `break`.
    Break,
    /// `continue`.
    Continue,
    /// `return`.
    Return,
}

/// `@name` or `@name[k1, k2]`.
#[derive(Clone, Debug)]
pub struct MapRef {
    /// `@name` (`@` alone for the anonymous map).
    pub name: String,
    /// Key expressions (empty without `[...]`).
    pub keys: Vec<Expr>,
    /// Whether `[...]` was written (`@x[]` is not valid; `@x` has none).
    pub span: Span,
}

/// An expression.
#[derive(Clone, Debug)]
pub struct Expr {
    /// What it is.
    pub kind: ExprKind,
    /// Where.
    pub span: Span,
}

/// Expression kinds.
#[derive(Clone, Debug)]
pub enum ExprKind {
    /// Integer literal (negative literals are `Unop(Neg)` of it).
    Int(u64),
    /// String literal.
    Str(Vec<u8>),
    /// A bare identifier: builtin (`pid`, `arg0`, `comm`), stack mode, type name.
    Ident(String),
    /// A map access.
    Map(MapRef),
    /// A scratch variable `$x`.
    Var(String),
    /// `$N`.
    Param(u32),
    /// `$#`.
    ParamCount,
    /// `name(args)`.
    Call {
        /// Function name.
        name: String,
        /// Span of the name.
        name_span: Span,
        /// Arguments.
        args: Vec<Expr>,
    },
    /// Unary operation.
    Unop(UnOp, Box<Expr>),
    /// Binary operation.
    Binop(BinOp, Box<Expr>, Box<Expr>),
    /// `c ? a : b`.
    Ternary(Box<Expr>, Box<Expr>, Box<Expr>),
    /// `e.field` (also `args.x`) or `e->field` (`arrow`).
    Field {
        /// The structure.
        base: Box<Expr>,
        /// The field name.
        field: String,
        /// Written with `->`.
        arrow: bool,
    },
    /// `tuple.N`.
    TupleIndex(Box<Expr>, u64),
    /// `e[i]`.
    Index(Box<Expr>, Box<Expr>),
    /// `(type)e`, `(type *)e`, `(type[N])e`.
    Cast {
        /// Type name.
        ty: String,
        /// Pointer levels.
        ptr: u8,
        /// Array length (`(uint8[4])x`; 0 for `(uint8[])x`, the operand's size).
        array: Option<u32>,
        /// Operand.
        expr: Box<Expr>,
    },
    /// `(a, b, ...)`.
    Tuple(Vec<Expr>),
    /// `sizeof(TYPE)` (`ptr` pointer levels).
    SizeofType {
        /// The type's name (`struct Foo`, `uint64`).
        ty: String,
        /// Pointer levels.
        ptr: u8,
    },
    /// `offsetof(TYPE, a.b)`.
    Offsetof {
        /// The record type's name.
        ty: String,
        /// The field path.
        path: Vec<String>,
    },
    /// `x++`, `x--`, `++x`, `--x` on a map or variable.
    IncDec {
        /// The map or variable.
        target: Box<Expr>,
        /// `++` (else `--`).
        inc: bool,
        /// Postfix (value before the change).
        post: bool,
    },
}
