//! `exit 3` (spec §9.1.4): an ELF core file of the traced process, as
//! `gcore` writes one — a `PT_NOTE` segment (`NT_PRSTATUS` and
//! `NT_FPREGSET` of every thread, the hit thread first, `NT_PRPSINFO`,
//! `NT_AUXV` and `NT_FILE`, which gdb needs to find a PIE's or a library's
//! load address and so its symbols) and a `PT_LOAD` segment per mapping,
//! with the contents of every readable one — loadable by `gdb EXE CORE`.
//! Memory is read as handlers read it, so the core shows the original
//! bytes under wprobe's breakpoints. The process keeps running afterwards.

use super::PtraceHit;
use hostabi::env::HitEnv;
use std::io::{Seek, SeekFrom, Write};
use std::path::PathBuf;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const NT_PRSTATUS: u32 = 1;
const NT_FPREGSET: u32 = 2;
const NT_PRPSINFO: u32 = 3;
const NT_AUXV: u32 = 6;
const NT_FILE: u32 = 0x4649_4c45;

/// Directory where core files go (`WPROBE_DUMP_DIR`, else the current directory).
pub fn dump_dir() -> PathBuf {
    std::env::var_os("WPROBE_DUMP_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn note(out: &mut Vec<u8>, ty: u32, desc: &[u8]) {
    out.extend(5u32.to_le_bytes()); // "CORE\0"
    out.extend((desc.len() as u32).to_le_bytes());
    out.extend(ty.to_le_bytes());
    out.extend(b"CORE\0\0\0\0");
    out.extend(desc);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

fn prstatus(tid: i32, r: &crate::arch::Regs, cursig: u16) -> Vec<u8> {
    let mut d = vec![0u8; 112];
    d[32..36].copy_from_slice(&(tid as u32).to_le_bytes()); // pr_pid
    d[12..14].copy_from_slice(&cursig.to_le_bytes()); // pr_cursig
    for v in [
        r.r15, r.r14, r.r13, r.r12, r.rbp, r.rbx, r.r11, r.r10, r.r9, r.r8, r.rax, r.rcx, r.rdx,
        r.rsi, r.rdi, r.orig_rax, r.rip, r.cs, r.eflags, r.rsp, r.ss, r.fs_base, r.gs_base, r.ds,
        r.es, r.fs, r.gs,
    ] {
        d.extend(v.to_le_bytes());
    }
    d.extend([0u8; 8]); // pr_fpvalid + padding
    d
}

fn fpregset(f: &crate::arch::FpRegs) -> Vec<u8> {
    crate::sys::regs::fpregs_bytes(f).to_vec()
}

/// `NT_FILE`: the file-backed mappings (start, end, offset in pages) and
/// their paths, as the kernel writes it.
fn nt_file(maps: &[crate::proc::procmaps::Mapping]) -> Vec<u8> {
    let files: Vec<_> = maps
        .iter()
        .filter(|m| m.is_file() && m.path.starts_with('/'))
        .collect();
    let mut d = Vec::new();
    d.extend((files.len() as u64).to_le_bytes());
    d.extend(4096u64.to_le_bytes());
    for m in &files {
        d.extend(m.start.to_le_bytes());
        d.extend(m.end.to_le_bytes());
        d.extend((m.offset / 4096).to_le_bytes());
    }
    for m in &files {
        d.extend(m.path.as_bytes());
        d.push(0);
    }
    d
}

fn prpsinfo(pid: i32) -> Vec<u8> {
    let mut d = vec![0u8; 136];
    d[1] = b'R';
    d[24..28].copy_from_slice(&(pid as u32).to_le_bytes());
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    let comm = comm.trim_end().as_bytes();
    let n = comm.len().min(15);
    d[40..40 + n].copy_from_slice(&comm[..n]);
    let args = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let n = args.len().min(79);
    for (i, b) in args[..n].iter().enumerate() {
        d[56 + i] = if *b == 0 { b' ' } else { *b };
    }
    d
}

/// Writes `core.wprobe.PID.N` for the process of `hit`; returns its path.
/// `others`: the other threads' registers (see
/// `PtraceTracer::other_threads_registers`).
pub fn write_core(
    pid: i32,
    hit: &mut PtraceHit,
    others: &[(i32, crate::arch::Regs, Option<crate::arch::FpRegs>)],
) -> anyhow::Result<PathBuf> {
    let maps = crate::proc::procmaps::read(pid)?;
    let mut notes = Vec::new();
    // The hit thread first: gdb's current thread.
    note(
        &mut notes,
        NT_PRSTATUS,
        &prstatus(hit.tid() as i32, hit.regs(), 5),
    );
    if let Some(f) = hit.fpregs() {
        let f = fpregset(f);
        note(&mut notes, NT_FPREGSET, &f);
    }
    for (tid, r, f) in others {
        note(&mut notes, NT_PRSTATUS, &prstatus(*tid, r, 0));
        if let Some(f) = f {
            note(&mut notes, NT_FPREGSET, &fpregset(f));
        }
    }
    note(&mut notes, NT_PRPSINFO, &prpsinfo(pid));
    if let Ok(auxv) = std::fs::read(format!("/proc/{pid}/auxv")) {
        note(&mut notes, NT_AUXV, &auxv);
    }
    note(&mut notes, NT_FILE, &nt_file(&maps));
    let segs: Vec<_> = maps.iter().filter(|m| m.path != "[vsyscall]").collect();
    let phnum = 1 + segs.len();
    let mut off = 64 + 56 * phnum as u64;
    let note_off = off;
    off += notes.len() as u64;
    off = off.next_multiple_of(4096);
    let mut phdrs = Vec::new();
    let ph = |out: &mut Vec<u8>,
              ty: u32,
              flags: u32,
              offset: u64,
              vaddr: u64,
              filesz: u64,
              memsz: u64,
              align: u64| {
        out.extend(ty.to_le_bytes());
        out.extend(flags.to_le_bytes());
        for v in [offset, vaddr, 0, filesz, memsz, align] {
            out.extend(v.to_le_bytes());
        }
    };
    ph(
        &mut phdrs,
        PT_NOTE,
        0,
        note_off,
        0,
        notes.len() as u64,
        0,
        4,
    );
    let mut layout = Vec::new();
    for m in &segs {
        let size = m.end - m.start;
        let filesz = if m.read { size } else { 0 };
        let flags = (m.read as u32) << 2 | (m.write as u32) << 1 | m.exec as u32;
        ph(&mut phdrs, PT_LOAD, flags, off, m.start, filesz, size, 4096);
        layout.push((m.start, filesz, off));
        off += filesz;
    }
    let mut hdr = Vec::with_capacity(64);
    hdr.extend([0x7f, b'E', b'L', b'F', 2, 1, 1, 0]);
    hdr.extend([0u8; 8]);
    hdr.extend(4u16.to_le_bytes()); // ET_CORE
    hdr.extend(62u16.to_le_bytes()); // EM_X86_64
    hdr.extend(1u32.to_le_bytes());
    hdr.extend(0u64.to_le_bytes()); // entry
    hdr.extend(64u64.to_le_bytes()); // phoff
    hdr.extend(0u64.to_le_bytes()); // shoff
    hdr.extend(0u32.to_le_bytes()); // flags
    for v in [64u16, 56, phnum as u16, 64, 0, 0] {
        hdr.extend(v.to_le_bytes());
    }
    let dir = dump_dir();
    let mut n = 0;
    let path = loop {
        let p = dir.join(format!("core.wprobe.{pid}.{n}"));
        if !p.exists() {
            break p;
        }
        n += 1;
    };
    let mut f = std::fs::File::create(&path)?;
    f.write_all(&hdr)?;
    f.write_all(&phdrs)?;
    f.write_all(&notes)?;
    let mut buf = vec![0u8; 1 << 16];
    for (start, filesz, file_off) in layout {
        f.seek(SeekFrom::Start(file_off))?;
        let mut done = 0;
        while done < filesz {
            let n = buf.len().min((filesz - done) as usize);
            // Read as handlers do (our breakpoints show their original bytes);
            // unreadable pages (guard pages, I/O) are written as zeros.
            let got = hit.read_mem(start + done, &mut buf[..n]);
            buf[got..n].fill(0);
            f.write_all(&buf[..n])?;
            done += n as u64;
        }
    }
    f.flush()?;
    Ok(path)
}
