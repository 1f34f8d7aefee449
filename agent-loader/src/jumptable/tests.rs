use super::*;

const START: u64 = 0x1000;
const TABLE: u64 = 0x2000;

/// `switch (edi) { 4 cases }` as GCC emits it position-independent:
/// the bound 3, the table at TABLE with offsets to 0x1020 + 8 * i.
fn pic() -> Vec<u8> {
    let mut c = vec![
        0x83, 0xff, 0x03, // cmp edi, 3
        0x77, 0x20, // ja default
        0x89, 0xff, // mov edi, edi
        0x48, 0x8d, 0x15, // lea rdx, [rip + TABLE - 0x100e]
    ];
    c.extend_from_slice(&((TABLE - 0x100e) as u32).to_le_bytes());
    c.extend_from_slice(&[
        0x48, 0x63, 0x04, 0xba, // movsxd rax, dword [rdx + rdi*4]
        0x48, 0x01, 0xd0, // add rax, rdx
        0xff, 0xe0, // jmp rax
    ]);
    c.resize(0x40, 0xc3);
    c
}

fn read(at: u64, len: usize) -> Option<Vec<u8>> {
    let entries: Vec<u8> = (0..8u64)
        .flat_map(|i| (((0x1020 + 8 * i) as i64 - TABLE as i64) as i32).to_le_bytes())
        .collect();
    let off = at.checked_sub(TABLE)? as usize;
    entries.get(off..off + len).map(<[u8]>::to_vec)
}

#[test]
fn a_bounded_pic_table_gives_its_entries() {
    let got = resolve(&pic(), START, &HashSet::default(), &read);
    assert_eq!(
        got,
        Ok(vec![(0x1015, vec![0x1020, 0x1028, 0x1030, 0x1038])])
    );
}

#[test]
fn anything_less_certain_stays_unresolved() {
    // No bounds check.
    let mut c = pic();
    c[0] = 0x90;
    c[1] = 0x90;
    c[2] = 0x90;
    assert_eq!(resolve(&c, START, &HashSet::default(), &read), Err(0x1015));
    // The check on another register.
    let mut c = pic();
    c[1] = 0xfe; // cmp esi, 3
    assert_eq!(resolve(&c, START, &HashSet::default(), &read), Err(0x1015));
    // A branch lands after the check: a path without it.
    for at in [0x1003, 0x1005, 0x1007, 0x1015] {
        let t: HashSet<u64> = [at].into_iter().collect();
        assert_eq!(resolve(&pic(), START, &t, &read), Err(0x1015), "{at:#x}");
    }
    // The index changed after the check.
    let mut c = pic();
    c[5] = 0xff;
    c[6] = 0xc7; // inc edi
    assert_eq!(resolve(&c, START, &HashSet::default(), &read), Err(0x1015));
    // The table unreadable.
    let none = |_: u64, _: usize| None;
    assert_eq!(
        resolve(&pic(), START, &HashSet::default(), &none),
        Err(0x1015)
    );
    // A function pointer's tail call is resolved, with no target
    // inside the function (crate::tailcall) ...
    let c = [0x48, 0x8b, 0x07, 0xff, 0xe0]; // mov rax, [rdi]; jmp rax
    assert_eq!(
        resolve(&c, START, &HashSet::default(), &read),
        Ok(vec![(0x1003, vec![])])
    );
    // ... not one inside its frame: push rbx; mov rax, [rdi]; jmp rax
    let c = [0x53, 0x48, 0x8b, 0x07, 0xff, 0xe0];
    assert_eq!(resolve(&c, START, &HashSet::default(), &read), Err(0x1004));
}

#[test]
fn a_computed_goto_lands_on_the_labels_data_or_code_takes() {
    // movzx edx, byte [rdi]; mov rdx, [TABLE + rdx*8]; jmp rdx;
    // lea rax, [rip + 0xc] (a label made in code: 0x1020); ret
    let mut c = vec![0x0f, 0xb6, 0x17, 0x48, 0x8b, 0x14, 0xd5];
    c.extend_from_slice(&(TABLE as u32).to_le_bytes());
    c.extend_from_slice(&[0xff, 0xe2, 0x48, 0x8d, 0x05, 0x0c, 0, 0, 0]);
    c.resize(0x40, 0xc3);
    let none = |_: u64, _: usize| None;
    let labelled = |code: &[u8], t: &HashSet<u64>, data: &[u64]| {
        resolve_with_labels(code, START, t, None, &none, Some(data), None)
    };
    let t = HashSet::default();
    // Without the data's words, unresolved (no bound: not a table).
    assert_eq!(resolve(&c, START, &t, &none), Err(0x100b));
    // The data's words inside the function, and the code's `lea`;
    // not the entry, nor an address outside.
    let data = [0x0800, START, 0x1030, 0x1038, 0x2000];
    assert_eq!(
        labelled(&c, &t, &data),
        Ok(vec![(0x100b, vec![0x1020, 0x1030, 0x1038])])
    );
    // A branch landing between the load and the jmp: rdx may come
    // from another path, but still a pointer: the labels too.
    let t: HashSet<u64> = [0x100b].into_iter().collect();
    assert_eq!(
        labelled(&c, &t, &data),
        Ok(vec![(0x100b, vec![0x1020, 0x1030, 0x1038])])
    );
    // The pointer changed after its load (add rdx, 8): arithmetic.
    let mut d = c[..0x0b].to_vec();
    d.extend_from_slice(&[0x48, 0x83, 0xc2, 0x08, 0xff, 0xe2]);
    d.resize(0x40, 0xc3);
    assert_eq!(labelled(&d, &HashSet::default(), &data), Err(0x100f));
    // A function no data or code takes an address inside of, with no
    // relative table: its jmp goes outside (a tail call, no targets).
    let mut e = c[..0x0d].to_vec();
    e.resize(0x40, 0xc3);
    assert_eq!(
        labelled(&e, &HashSet::default(), &[0x2000]),
        Ok(vec![(0x100b, vec![])])
    );
    // ... but with a relative table's read (movsxd rax, [rdx + rcx*4])
    // somewhere in it, only a pointer loaded in line is trusted.
    let mut f = e.clone();
    f[0x20..0x24].copy_from_slice(&[0x48, 0x63, 0x04, 0x8a]);
    assert_eq!(labelled(&f, &t, &[0x2000]), Err(0x100b));
    assert_eq!(
        labelled(&f, &HashSet::default(), &data),
        Ok(vec![(0x100b, vec![0x1030, 0x1038])])
    );
}

#[test]
fn an_absolute_table_gives_its_entries() {
    // cmp edi, 1; ja; mov eax, edi; jmp [TABLE + rax*8]
    let mut c = vec![0x83, 0xff, 0x01, 0x77, 0x20, 0x89, 0xf8, 0xff, 0x24, 0xc5];
    c.extend_from_slice(&(TABLE as u32).to_le_bytes());
    c.resize(0x40, 0xc3);
    let abs = |at: u64, len: usize| {
        let e: Vec<u8> = [0x1020u64, 0x1030]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let off = at.checked_sub(TABLE)? as usize;
        e.get(off..off + len).map(<[u8]>::to_vec)
    };
    assert_eq!(
        resolve(&c, START, &HashSet::default(), &abs),
        Ok(vec![(0x1007, vec![0x1020, 0x1030])])
    );
    // V8's: the check on a byte, the index its zero-extension, other
    // moves between: cmp sil, 1; ja; movzx eax, sil; mov r12, rdi;
    // jmp [TABLE + rax*8]
    let mut c = vec![
        0x40, 0x80, 0xfe, 0x01, 0x77, 0x20, 0x40, 0x0f, 0xb6, 0xc6, 0x49, 0x89, 0xfc, 0xff, 0x24,
        0xc5,
    ];
    c.extend_from_slice(&(TABLE as u32).to_le_bytes());
    c.resize(0x40, 0xc3);
    assert_eq!(
        resolve(&c, START, &HashSet::default(), &abs),
        Ok(vec![(0x100d, vec![0x1020, 0x1030])])
    );
    // ... not when the index is another byte than the one checked
    // (movzx eax, dil).
    c[9] = 0xc7;
    assert_eq!(resolve(&c, START, &HashSet::default(), &abs), Err(0x100d));
    // OpenSSL's: the byte checked in memory, then read into the index:
    // cmp byte [r12], 1; ja; movzx eax, byte [r12]; jmp [TABLE + rax*8]
    let mut c = vec![
        0x41, 0x80, 0x3c, 0x24, 0x01, 0x77, 0x20, 0x41, 0x0f, 0xb6, 0x04, 0x24, 0xff, 0x24, 0xc5,
    ];
    c.extend_from_slice(&(TABLE as u32).to_le_bytes());
    c.resize(0x40, 0xc3);
    assert_eq!(
        resolve(&c, START, &HashSet::default(), &abs),
        Ok(vec![(0x100c, vec![0x1020, 0x1030])])
    );
    // ... not another byte than the one checked ([r12+1]).
    let mut other = c.clone();
    other[10] = 0x44;
    other.splice(12..12, [0x01]);
    other.truncate(0x40);
    assert_eq!(
        resolve(&other, START, &HashSet::default(), &abs),
        Err(0x100d)
    );
}
/// Bytes as objdump prints them.
pub(super) fn hex(s: &str) -> Vec<u8> {
    s.split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect()
}

/// A table of 4096 relative entries at `table`, entry `i` to
/// `to + 8 * i`: the resolver's bound alone decides how many it gives.
pub(super) fn rel_table(table: u64, to: u64) -> impl Fn(u64, usize) -> Option<Vec<u8>> {
    move |at, len| {
        let e: Vec<u8> = (0..MAX_ENTRIES)
            .flat_map(|i| ((to + 8 * i) as i64 - table as i64).to_le_bytes()[..4].to_vec())
            .collect();
        let off = at.checked_sub(table)? as usize;
        e.get(off..off + len).map(<[u8]>::to_vec)
    }
}

/// The first `n` targets of [`rel_table`]'s entries.
fn rel_targets(to: u64, n: u64) -> Vec<u64> {
    (0..n).map(|i| to + 8 * i).collect()
}

#[test]
fn a_word_check_bounds_its_table() {
    // Perl's `Perl_scalarvoid` (Debian's /usr/bin/perl 5.36, 0x5267e):
    // cmp bp, 0x79 (a 16-bit immediate); ja; lea rcx, [rip + TABLE];
    // movzx edx, bp; movsxd rdx, [rcx + rdx*4]; add rdx, rcx; jmp rdx
    let c = hex(
        "66 83 fd 79  0f 87 e2 00 00 00  48 8d 0d 11 c1 18 00  0f b7 d5
                 48 63 14 91  48 01 ca  ff e2",
    );
    let r = rel_table(0x1de7a0, 0x52700);
    assert_eq!(
        resolve(&c, 0x5267e, &HashSet::default(), &r),
        Ok(vec![(0x52699, rel_targets(0x52700, 0x7a))])
    );
}

#[test]
fn a_base_set_once_for_the_function_is_the_table() {
    // Perl's `Perl_leave_scope` (0x15ee50): lea r11, [rip + TABLE]
    // once before its loop (0x15ee76); the loop's head a branch
    // target; then cmp cl, 0x37; ja; movzx eax, cl;
    // movsxd rax, [r11 + rax*4]; add rax, r11; jmp rax (0x15eed6).
    let mut c = hex("4c 8d 1d c3 8a 1e 00");
    c.resize(0x15eed6 - 0x15ee76, 0x90);
    c.extend(hex(
        "80 f9 37  0f 87 1a 15 00 00  0f b6 c1  49 63 04 83  4c 01 d8  ff e0",
    ));
    let r = rel_table(0x347940, 0x15ef00);
    let head: HashSet<u64> = [0x15ee90].into_iter().collect();
    assert_eq!(
        resolve(&c, 0x15ee76, &head, &r),
        Ok(vec![(0x15eee9, rel_targets(0x15ef00, 0x38))])
    );
    // Another write of r11 in the function (mov r11, rdi): the base
    // may hold something else.
    let mut d = c.clone();
    d[0x20..0x23].copy_from_slice(&hex("49 89 fb"));
    assert_eq!(resolve(&d, 0x15ee76, &head, &r), Err(0x15eee9));
}

#[test]
fn a_callee_saved_base_set_once_is_the_table() {
    // As Perl's `Perl_scalar` (r12) or `perl_parse` (r15): lea r12,
    // [rip + TABLE] (0x1000, TABLE 0x2000); a loop; cmp cl, 0x37; ja;
    // movzx eax, cl; movsxd rax, [r12 + rax*4]; add rax, r12; jmp rax;
    // the epilogue's pop r12; ret.
    let mut c = hex("4c 8d 25 f9 0f 00 00");
    c.resize(0x40, 0x90);
    c.extend(hex(
        "80 f9 37  0f 87 10 00 00 00  0f b6 c1  49 63 04 84  4c 01 e0  ff e0
                  41 5c  c3",
    ));
    let r = rel_table(TABLE, 0x1100);
    let head: HashSet<u64> = [START + 0x10].into_iter().collect();
    assert_eq!(
        resolve(&c, START, &head, &r),
        Ok(vec![(0x1053, rel_targets(0x1100, 0x38))])
    );
    // Another `lea` of the same table: the same value.
    let mut d = c.clone();
    d[0x20..0x27].copy_from_slice(&hex("4c 8d 25 d9 0f 00 00"));
    assert_eq!(
        resolve(&d, START, &head, &r),
        Ok(vec![(0x1053, rel_targets(0x1100, 0x38))])
    );
    // ... of another address (TABLE + 0x10): either.
    d[0x23] = 0xe9;
    assert_eq!(resolve(&d, START, &head, &r), Err(0x1053));
    // The popped value going back into the function (pop r12; jmp
    // back to the loop): the caller's r12 may reach the `jmp`.
    let mut d = c.clone();
    d.truncate(0x57);
    d.extend(hex("eb b7"));
    assert_eq!(resolve(&d, START, &head, &r), Err(0x1053));
}

#[test]
fn a_masked_index_bounds_its_table() {
    // Perl's 0xb7490 (in `Perl_padlist_dup`'s module): mov rax, [r15 +
    // 0x20]; lea rdx, [rip + TABLE]; mov eax, [rax + 0x38]; shr eax, 7;
    // and eax, 7; movsxd rax, [rdx + rax*4]; add rax, rdx; jmp rax
    let c = hex(
        "49 8b 47 20  48 8d 15 79 1b 14 00  8b 40 38  c1 e8 07  83 e0 07
                 48 63 04 82  48 01 d0  ff e0",
    );
    let r = rel_table(0x1f9014, 0xb7500);
    assert_eq!(
        resolve(&c, 0xb7490, &HashSet::default(), &r),
        Ok(vec![(0xb74ab, rel_targets(0xb7500, 8))])
    );
    // A byte's `and` (and al, 7) leaves the rest of eax.
    let mut d = c.clone();
    d[0x11..0x14].copy_from_slice(&hex("24 07 90"));
    assert_eq!(resolve(&d, 0xb7490, &HashSet::default(), &r), Err(0xb74ab));
    // A branch landing between the `and` and the `jmp`.
    let t: HashSet<u64> = [0xb74a4].into_iter().collect();
    assert_eq!(resolve(&c, 0xb7490, &t, &r), Err(0xb74ab));
}

#[test]
fn a_check_on_the_register_the_index_was_copied_from_or_to() {
    // Perl's `Perl_sv_reftype` (0x131175): movzx edx, al; cmp al, 0xf;
    // ja; lea rcx, [rip + TABLE]; movsxd rdx, [rcx + rdx*4]; add rdx,
    // rcx; jmp rdx
    let c = hex("0f b6 d0  3c 0f  0f 87 4c 01 00 00  48 8d 0d ed 58 21 00
                 48 63 14 91  48 01 ca  ff e2");
    let r = rel_table(0x346a74, 0x131200);
    assert_eq!(
        resolve(&c, 0x131175, &HashSet::default(), &r),
        Ok(vec![(0x13118e, rel_targets(0x131200, 0x10))])
    );
    // mov edx, eax instead: edx keeps bits the check on al does not.
    let mut d = c.clone();
    d[0..3].copy_from_slice(&hex("89 c2 90"));
    assert_eq!(
        resolve(&d, 0x131175, &HashSet::default(), &r),
        Err(0x13118e)
    );
    // A branch landing between the copy and the check.
    let t: HashSet<u64> = [0x131178].into_iter().collect();
    assert_eq!(resolve(&c, 0x131175, &t, &r), Err(0x13118e));

    // Perl's `Perl_sv_upgrade` (0x131361): mov r12, r14; cmp edx, 7;
    // ja; mov r9, [rbx]; cmp r12d, 7; ja; lea rdx, [rip + TABLE];
    // movsxd rax, [rdx + r14*4]; add rax, rdx; jmp rax
    let c = hex(
        "4d 89 f4  83 fa 07  0f 87 0b 01 00 00  4c 8b 0b  41 83 fc 07
                 0f 87 f6 01 00 00  48 8d 15 33 57 21 00  4a 63 04 b2  48 01 d0  ff e0",
    );
    let r = rel_table(0x346ab4, 0x131400);
    assert_eq!(
        resolve(&c, 0x131361, &HashSet::default(), &r),
        Ok(vec![(0x131388, rel_targets(0x131400, 8))])
    );
    // r12 written between the copy and its check (mov r12, [rbx]).
    let mut d = c.clone();
    d[0x0c..0x0f].copy_from_slice(&hex("4c 8b 23"));
    assert_eq!(
        resolve(&d, 0x131361, &HashSet::default(), &r),
        Err(0x131388)
    );
}

#[test]
fn a_check_whose_flags_outlive_a_jump_and_a_move() {
    // Perl's `Perl_newSVpvn_share` (0x1285f6): cmp r15d, 0x18; jg;
    // mov ebx, [rip + x]; ja; lea rdx, [rip + TABLE]; mov eax, r15d;
    // movsxd rax, [rdx + rax*4]; add rax, rdx; jmp rax
    let c = hex(
        "41 83 ff 18  0f 8f 20 02 00 00  8b 1d 3a 7e 27 00  0f 87 54 05 00 00
                 48 8d 15 0d df 21 00  44 89 f8  48 63 04 82  48 01 d0  ff e0",
    );
    let r = rel_table(0x346520, 0x128700);
    assert_eq!(
        resolve(&c, 0x1285f6, &HashSet::default(), &r),
        Ok(vec![(0x12861d, rel_targets(0x128700, 0x19))])
    );
    // The flags set again between (test ebx, ebx for the mov).
    let mut d = c.clone();
    d[0x0a..0x10].copy_from_slice(&hex("85 db 90 90 90 90"));
    assert_eq!(
        resolve(&d, 0x1285f6, &HashSet::default(), &r),
        Err(0x12861d)
    );
}

#[test]
fn a_byte_check_of_an_index_zero_extended_from_a_byte() {
    // Perl's `Perl_isSCRIPT_RUN` (0x19923b): movzx eax, byte [rax];
    // jne; cmp al, 4; ja; lea rdx, [rip + TABLE];
    // movsxd rax, [rdx + rax*4]; add rax, rdx; jmp rax
    let c = hex("0f b6 00  0f 85 09 0d 00 00  3c 04  0f 87 ed d5 ff ff
                 48 8d 15 a5 0f 1b 00  48 63 04 82  48 01 d0  ff e0");
    let r = rel_table(0x34a1f8, 0x199300);
    assert_eq!(
        resolve(&c, 0x19923b, &HashSet::default(), &r),
        Ok(vec![(0x19925a, rel_targets(0x199300, 5))])
    );
    // A branch landing between the zero-extension and the check.
    let t: HashSet<u64> = [0x199244].into_iter().collect();
    assert_eq!(resolve(&c, 0x19923b, &t, &r), Err(0x19925a));
    // A 32-bit load instead (mov eax, [rax]; nop): bits the check on
    // al does not see.
    let mut d = c.clone();
    d[0..3].copy_from_slice(&hex("8b 00 90"));
    assert_eq!(
        resolve(&d, 0x19923b, &HashSet::default(), &r),
        Err(0x19925a)
    );
}

#[test]
fn a_check_then_a_zero_extension_of_the_index() {
    // Perl's `Perl_uvoffuni_to_utf8_flags_msgs` (0x1a7bc0): cmp ebp, 6;
    // mov ebp, ebp; ja; lea rdx, [rip + TABLE];
    // movsxd rax, [rdx + rbp*4]; add rax, rdx; jmp rax
    let c = hex("83 fd 06  89 ed  0f 87 bc 01 00 00  48 8d 15 2e f1 1a 00
                 48 63 04 aa  48 01 d0  ff e0");
    let r = rel_table(0x356d00, 0x1a7c00);
    assert_eq!(
        resolve(&c, 0x1a7bc0, &HashSet::default(), &r),
        Ok(vec![(0x1a7bd9, rel_targets(0x1a7c00, 7))])
    );
    // Another register's value instead (mov ebp, eax).
    let mut d = c.clone();
    d[3..5].copy_from_slice(&hex("89 c5"));
    assert_eq!(
        resolve(&d, 0x1a7bc0, &HashSet::default(), &r),
        Err(0x1a7bd9)
    );
}

#[test]
fn a_check_on_memory_with_loads_before_its_ja() {
    // Perl's `Perl_magic_get` (0x100950): cmp byte [rax], 0x7e;
    // movzx ecx, byte [rax + 1]; lea r13, [rax + 1]; ja;
    // movzx eax, byte [rax]; lea rdx, [rip + TABLE];
    // movsxd rax, [rdx + rax*4]; add rax, rdx; jmp rax
    let c = hex("80 38 7e  0f b6 48 01  4c 8d 68 01  77 3f  0f b6 00
                 48 8d 15 c9 30 24 00  48 63 04 82  48 01 d0  ff e0");
    let r = rel_table(0x343a30, 0x100a00);
    assert_eq!(
        resolve(&c, 0x100950, &HashSet::default(), &r),
        Ok(vec![(0x10096e, rel_targets(0x100a00, 0x7f))])
    );
    // A store between the check and the read (mov [rax], r13; nop).
    let mut d = c.clone();
    d[0x07..0x0b].copy_from_slice(&hex("4c 89 28 90"));
    assert_eq!(
        resolve(&d, 0x100950, &HashSet::default(), &r),
        Err(0x10096e)
    );
    // The address's register written between (lea rax, [rax + 1]).
    let mut d = c.clone();
    d[0x07..0x0b].copy_from_slice(&hex("48 8d 40 01"));
    assert_eq!(
        resolve(&d, 0x100950, &HashSet::default(), &r),
        Err(0x10096e)
    );
}
