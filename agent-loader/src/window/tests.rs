//! The window rules on hand-assembled functions.

use super::*;

fn f(code: &[u8]) -> Function<'_> {
    Function {
        start: 0x1000,
        code,
        bias: 0,
    }
}

#[test]
fn prologue_windows_and_refusals() {
    let t = BranchTargets::default();
    // push rbp; mov rbp,rsp; mov [rbp-8],rdi; ret
    let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0x7d, 0xf8, 0xc3];
    let s = plan(0x1000, f(&code), &t).unwrap();
    assert_eq!((s.addr, s.len, s.displaced.len()), (0x1000, 8, 3));
    // endbr64 is kept in place
    let code = [
        0xf3, 0x0f, 0x1e, 0xfa, 0x55, 0x48, 0x89, 0xe5, 0x48, 0x89, 0x7d, 0xf8, 0xc3,
    ];
    let s = plan(0x1000, f(&code), &t).unwrap();
    assert_eq!((s.probe, s.addr, s.len), (0x1000, 0x1004, 8));
    // too short: xor eax,eax; ret
    assert_eq!(
        plan(0x1000, f(&[0x31, 0xc0, 0xc3]), &t).unwrap_err(),
        Refusal::TooShort { room: 3 }
    );
    // a direct call ending the window is taken (the stub pushes the
    // original return address); an indirect one is not
    let code = [0x55, 0xe8, 0, 0, 0, 0, 0x5d, 0xc3];
    let s = plan(0x1000, f(&code), &t).unwrap();
    assert_eq!((s.len, s.displaced.len()), (6, 2));
    let code = [0x55, 0xff, 0xd0, 0x5d, 0x90, 0x90, 0xc3];
    assert!(matches!(
        plan(0x1000, f(&code), &t),
        Err(Refusal::Instruction { at: 0x1001, .. })
    ));
    // an indirect call ending the window is taken too (`mov edi,ebx;
    // call [rbp+0x40]`, sqlite's `sqlite3Malloc` after its mutex
    // call): the stub pushes the original return address and jumps
    // through the same operand
    let code = [0x89, 0xdf, 0xff, 0x55, 0x40, 0x89, 0xde, 0xc3];
    let s = plan(0x1000, f(&code), &t).unwrap();
    assert_eq!((s.len, s.displaced.len()), (5, 2));
    let stub = stub_of(&s, 0x20_0000);
    let jmp = stub
        .iter()
        .find(|i| i.code() == Code::Jmp_rm64)
        .expect("jmp [rbp+0x40] in the stub");
    assert_eq!(
        (jmp.memory_base(), jmp.memory_displacement64()),
        (Register::RBP, 0x40)
    );
    // (the return address fits a `push imm32`: the window's last
    // `push` is it, after the site id's)
    let pushed: Vec<u64> = stub
        .iter()
        .filter(|i| i.code() == Code::Pushq_imm32)
        .map(|i| i.immediate32to64() as u64)
        .collect();
    assert_eq!(pushed, [3, 0x1005], "{stub:?}");
    // ... but not one through memory `rsp` addresses (the push moves
    // it): push rbp; call [rsp+8]
    let code = [0x55, 0xff, 0x54, 0x24, 0x08, 0x5d, 0xc3];
    assert!(matches!(
        plan(0x1000, f(&code), &t),
        Err(Refusal::Instruction { at: 0x1001, .. })
    ));
    // a conditional branch inside the window falls through
    let code = [0x85, 0xff, 0x74, 0x03, 0x48, 0x89, 0xf8, 0xc3];
    let s = plan(0x1000, f(&code), &t).unwrap();
    assert_eq!((s.len, s.displaced.len()), (7, 3));
    // a branch target inside the window
    let mut t2 = BranchTargets::default();
    t2.0.insert(0x1001);
    let code = [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
    assert_eq!(
        plan(0x1000, f(&code), &t2).unwrap_err(),
        Refusal::BranchTarget { at: 0x1001 }
    );
    // the sweep finds a backward jump to entry+1
    let mut t3 = BranchTargets::default();
    let code = [0x55, 0x48, 0x89, 0xe5, 0xeb, 0xfb]; // jmp 0x1001
    t3.sweep(&code, 0x1000);
    assert!(t3.0.contains(&0x1001));
    // control flow before the window's end: jmp at the start
    let code = [0xeb, 0x03, 0x90, 0x90, 0x90, 0x90, 0x90, 0xc3];
    assert!(matches!(
        plan(0x1000, f(&code), &t),
        Err(Refusal::Instruction { at: 0x1000, .. })
    ));
    // mid-function in a function with an indirect jump
    let code = [0x90, 0x55, 0x48, 0x89, 0xe5, 0x5d, 0xff, 0xe0];
    assert_eq!(
        plan(0x1001, f(&code), &t).unwrap_err(),
        Refusal::IndirectJump { at: 0x1006 }
    );
}

#[test]
fn a_window_taking_its_own_address_keeps_it() {
    let t = BranchTargets::default();
    // lea rax,[rip-7] (the function's own address); cmp rax,rdi; sete al; ret
    let code = [
        0x48, 0x8d, 0x05, 0xf9, 0xff, 0xff, 0xff, 0x48, 0x39, 0xf8, 0x0f, 0x94, 0xc0, 0xc3,
    ];
    let s = plan(0x1000, f(&code), &t).unwrap();
    assert_eq!((s.addr, s.len), (0x1000, 7));
    // In the stub, the address is moved in whole: the block encoder
    // would have pointed a RIP-relative `lea` at the stub's own copy.
    let stub_at = 0x7000_0000;
    let bytes = crate::stub::generate(&s, 3, stub_at + 0x1000, stub_at).unwrap();
    let mut d = Decoder::with_ip(64, &bytes, stub_at, DecoderOptions::NONE);
    let insns: Vec<Instruction> = d.iter().collect();
    assert!(
        insns.iter().any(|i| i.code() == Code::Mov_r64_imm64
            && i.op0_register() == iced_x86::Register::RAX
            && i.immediate64() == 0x1000),
        "{insns:?}"
    );
    assert!(
        !insns
            .iter()
            .any(|i| i.mnemonic() == Mnemonic::Lea && i.is_ip_rel_memory_operand())
    );
    // 32-bit: lea eax,[rip-6]; ret | padding
    let code = [0x8d, 0x05, 0xfa, 0xff, 0xff, 0xff, 0xc3];
    let s = plan(0x1000, f(&code), &t).unwrap();
    let bytes = crate::stub::generate(&s, 3, stub_at + 0x1000, stub_at).unwrap();
    let mut d = Decoder::with_ip(64, &bytes, stub_at, DecoderOptions::NONE);
    assert!(
        d.iter()
            .any(|i| i.code() == Code::Mov_r32_imm32 && i.immediate32() == 0x1000)
    );
    // Reading the window's own bytes is refused: they are the jump now.
    // mov eax,[rip-6]; ret
    let code = [0x8b, 0x05, 0xfa, 0xff, 0xff, 0xff, 0xc3];
    assert_eq!(
        plan(0x1000, f(&code), &t).unwrap_err(),
        Refusal::Instruction {
            at: 0x1000,
            what: "mov".into(),
            why: "it reads or writes the bytes the jump replaces",
        }
    );
    // ... but not other RIP-relative data: mov eax,[rip+0x100]; ret
    let code = [0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0xc3];
    assert!(plan(0x1000, f(&code), &t).is_ok());
}

#[test]
fn return_windows() {
    let t = BranchTargets::default();
    // push rbp; mov rbp,rsp; pop rbp; ret | nop dword [rax+rax]
    let code = [0x55, 0x48, 0x89, 0xe5, 0x5d, 0xc3];
    let pad = [0x0f, 0x1f, 0x44, 0x00, 0x00];
    let s = plan_ret(0x1005, f(&code), &pad, &t).unwrap();
    // the `ret` and 4 bytes of the 5-byte `nop` (never run: the rest
    // stays free for a near jump's cave)
    assert_eq!((s.addr, s.len, s.displaced.len()), (0x1005, 5, 0));
    assert_eq!(s.ret.map(|r| r.ip()), Some(0x1005));
    // no padding: the epilogue back to 5 bytes
    let s = plan_ret(0x1005, f(&code), &[], &t).unwrap();
    assert_eq!((s.addr, s.len, s.displaced.len()), (0x1001, 5, 2));
    // `pop rbp` is a branch target: no window
    let mut t2 = BranchTargets::default();
    t2.0.insert(0x1004);
    let e = plan_ret(0x1005, f(&code), &[], &t2).unwrap_err();
    assert!(
        e.to_string()
            .contains("0x1004, inside the 5 bytes the jump replaces, is a branch target"),
        "{e}"
    );
    // padding that is a branch target is code
    let mut t3 = BranchTargets::default();
    t3.0.insert(0x1006);
    let s = plan_ret(0x1005, f(&code), &pad, &t3).unwrap();
    assert_eq!(s.addr, 0x1001);
    // not a ret
    assert_eq!(
        plan_ret(0x1004, f(&code), &pad, &t).unwrap_err(),
        Refusal::Undecodable { at: 0x1004 }
    );
}

/// The stub of `s` at `at`, decoded.
fn stub_of(s: &Site, at: u64) -> Vec<Instruction> {
    let bytes = crate::stub::generate(s, 3, at + 0x1000, at).unwrap();
    Decoder::with_ip(64, &bytes, at, DecoderOptions::NONE)
        .iter()
        .collect()
}

/// In the stub, the relocated `jcc` lands on the dispatch before the
/// `ret` (the `lea rsp, [rsp-128]` that starts it).
fn assert_lands_on_dispatch(insns: &[Instruction]) {
    let jcc = insns
        .iter()
        .find(|i| {
            i.flow_control() == FlowControl::ConditionalBranch
                && i.near_branch_target() >= 0x7000_0000
        })
        .unwrap_or_else(|| panic!("{insns:?}"));
    let at = insns
        .iter()
        .position(|i| i.ip() == jcc.near_branch_target())
        .unwrap_or_else(|| panic!("{insns:?}"));
    assert_eq!(insns[at].mnemonic(), Mnemonic::Lea, "{insns:?}");
    assert_eq!(insns[at].memory_displacement64() as i64, -128, "{insns:?}");
    assert_eq!(insns[at + 2].mnemonic(), Mnemonic::Call, "{insns:?}");
    assert_eq!(insns[at + 4].mnemonic(), Mnemonic::Ret, "{insns:?}");
}

#[test]
fn a_return_window_takes_the_branches_to_its_ret() {
    // CPython's _PyTrash_end: a `je` to the `ret`, two bytes of
    // padding after it, code after that.
    let code = [
        0x8b, 0x87, 0xa8, 0, 0, 0, // mov eax,[rdi+0xa8]
        0x83, 0xe8, 0x01, // sub eax,1
        0x48, 0x83, 0xbf, 0xb0, 0, 0, 0, 0x00, // cmp qword [rdi+0xb0],0
        0x89, 0x87, 0xa8, 0, 0, 0, // mov [rdi+0xa8],eax
        0x74, 0x04, // 0x1017: je 0x101d
        0x85, 0xc0, // test eax,eax
        0x7e, 0x03, // jle 0x1020
        0xc3, // 0x101d: ret
        0x66, 0x90, // xchg ax,ax
        0x31, 0xc0, 0xc3, // 0x1020: xor eax,eax; ret
    ];
    let mut t = BranchTargets::default();
    t.sweep(&code, 0x1000);
    let s = plan_ret(0x101d, f(&code), &[], &t).unwrap();
    assert_eq!((s.addr, s.len, s.displaced.len()), (0x1017, 7, 3));
    assert_lands_on_dispatch(&stub_of(&s, 0x7000_0000));
    // Another branch to the `ret`, after it: no window takes both.
    let mut t2 = t.clone();
    *t2.2.get_mut(&0x101d).unwrap() += 1;
    assert_eq!(
        plan_ret(0x101d, f(&code), &[], &t2).unwrap_err(),
        Refusal::ShortReturn {
            at: 0x101d,
            why: "0x101d, inside the 5 bytes the jump replaces, is a branch target".into()
        }
    );
    // A jump table lands there too.
    let mut t3 = t.clone();
    t3.add_other([0x101d]);
    assert!(plan_ret(0x101d, f(&code), &[], &t3).is_err());

    // CPython's PyObject_GC_UnTrack: the `je` nine instructions before
    // the `ret`, which ends the function.
    let code = [
        0x48, 0x8b, 0x47, 0xf0, // mov rax,[rdi-0x10]
        0x48, 0x85, 0xc0, // test rax,rax
        0x74, 0x26, // 0x1007: je 0x102f
        0x48, 0x8b, 0x4f, 0xf8, // mov rcx,[rdi-8]
        0x48, 0x8b, 0x50, 0x08, // mov rdx,[rax+8]
        0x48, 0x83, 0xe1, 0xfc, // and rcx,-4
        0x83, 0xe2, 0x03, // and edx,3
        0x48, 0x09, 0xca, // or rdx,rcx
        0x48, 0x89, 0x01, // mov [rcx],rax
        0x48, 0x89, 0x50, 0x08, // mov [rax+8],rdx
        0x48, 0x83, 0x67, 0xf8, 0x01, // and qword [rdi-8],1
        0x48, 0xc7, 0x47, 0xf0, 0, 0, 0, 0,    // mov qword [rdi-0x10],0
        0xc3, // 0x102f: ret
    ];
    let mut t = BranchTargets::default();
    t.sweep(&code, 0x1000);
    let s = plan_ret(0x102f, f(&code), &[], &t).unwrap();
    assert_eq!((s.addr, s.len, s.displaced.len()), (0x1007, 41, 10));
    assert_lands_on_dispatch(&stub_of(&s, 0x7000_0000));
    // The entry's window ends where that one starts.
    let e = plan(0x1000, f(&code), &t).unwrap();
    assert_eq!(e.addr + e.len as u64, 0x1007);
    // Both in one window (the whole function's) take it as well.
    let w = plan_whole(0x1000, f(&code), &[], &t).unwrap();
    assert_eq!((w.addr, w.len), (0x1000, 0x30));
    assert_lands_on_dispatch(&stub_of(&w, 0x7000_0000));
    // Nothing but a direct branch inside may reach it.
    let mut t2 = t.clone();
    t2.add_other([0x102f]);
    assert_eq!(
        plan_whole(0x1000, f(&code), &[], &t2).unwrap_err(),
        Refusal::BranchTarget { at: 0x102f }
    );
}

#[test]
fn a_window_takes_a_loop_and_the_jumps_inside_it() {
    // OpenSSL's bn_add_words (in node): a `jle` to the `ret` over a
    // loop entered by a `jmp` forward; two bytes of padding after.
    let code = [
        0x31, 0xc0, // xor eax,eax
        0x85, 0xc9, // test ecx,ecx
        0x7e, 0x27, // 0x1004: jle 0x102d
        0x4d, 0x29, 0xc0, // sub r8,r8
        0xeb, 0x05, // 0x1009: jmp 0x1010
        0x0f, 0x1f, 0x44, 0x00, 0x00, // nop
        0x4c, 0x8b, 0x04, 0xc6, // 0x1010: mov r8,[rsi+rax*8]
        0x4c, 0x13, 0x04, 0xc2, // adc r8,[rdx+rax*8]
        0x4c, 0x89, 0x04, 0xc7, // mov [rdi+rax*8],r8
        0x48, 0x8d, 0x40, 0x01, // lea rax,[rax+1]
        0xff, 0xc9, // dec ecx
        0x75, 0xec, // 0x1022: jne 0x1010
        0x4d, 0x19, 0xc0, // sbb r8,r8
        0x4c, 0x89, 0xc0, // mov rax,r8
        0x83, 0xe0, 0x01, // and eax,1
        0xc3, // 0x102d: ret
    ];
    let pad = [0x66, 0x90];
    let mut t = BranchTargets::default();
    t.sweep(&code, 0x1000);
    let s = plan_ret(0x102d, f(&code), &pad, &t).unwrap();
    assert_eq!((s.addr, s.len), (0x1004, 0x2a));
    // Its entry's window overlaps: the whole function in one.
    let e = plan(0x1000, f(&code), &t).unwrap();
    assert!(e.addr + e.len as u64 > s.addr);
    let w = plan_whole(0x1000, f(&code), &pad, &t).unwrap();
    assert_eq!((w.addr, w.len), (0x1000, 0x2e));
    let stub = stub_of(&w, 0x7000_0000);
    assert_lands_on_dispatch(&stub);
    // The loop's `jmp` and `jne` land on the stub's copy of its head.
    let head = stub
        .iter()
        .find(|i| i.code() == Code::Mov_r64_rm64 && i.memory_index() == iced_x86::Register::RAX)
        .unwrap_or_else(|| panic!("{stub:?}"))
        .ip();
    let to_head: Vec<Mnemonic> = stub
        .iter()
        .filter(|i| direct_branch(i) && i.near_branch_target() == head)
        .map(|i| i.mnemonic())
        .collect();
    assert_eq!(to_head, [Mnemonic::Jmp, Mnemonic::Jne], "{stub:?}");
    // Not with a jump table wprobe could not read elsewhere in the
    // function (`jmp rax` after the `ret`).
    let mut tabled = code.to_vec();
    tabled.extend_from_slice(&[0xff, 0xe0]);
    assert_eq!(
        plan_whole(0x1000, f(&tabled), &[], &t).unwrap_err(),
        Refusal::IndirectJump { at: 0x102e }
    );
    // A `jmp` past the `ret` leaves the window.
    let mut out = code;
    out[10] = 0x30; // jmp 0x103b
    let mut t2 = BranchTargets::default();
    t2.sweep(&out, 0x1000);
    assert!(matches!(
        plan_whole(0x1000, f(&out), &pad, &t2),
        Err(Refusal::Instruction { at: 0x1009, .. })
    ));
    // A branch into the middle of an instruction of the window.
    let mut mid = code;
    mid[10] = 0x06; // jmp 0x1011
    let mut t3 = BranchTargets::default();
    t3.sweep(&mid, 0x1000);
    assert_eq!(
        plan_whole(0x1000, f(&mid), &pad, &t3).unwrap_err(),
        Refusal::Instruction {
            at: 0x1009,
            what: "jmp".into(),
            why: "it branches into the middle of an instruction of the window",
        }
    );
}
