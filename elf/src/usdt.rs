//! USDT probes (`sys/sdt.h`): the `.note.stapsdt` notes of a module, each
//! a probe site with its provider, name, argument specifications and
//! optional semaphore.
//!
//! Each note (owner `stapsdt`, type 3) holds the site's address, the
//! link-time address of `.stapsdt.base` as the assembler saw it, the
//! semaphore's address (0: none), then three NUL-terminated strings:
//! provider, name, arguments. When the module was prelinked (moved after
//! linking) the notes keep the old addresses and `.stapsdt.base` the new
//! one: the difference is added to the site and the semaphore, as
//! systemtap and libbpf do. Argument specs are parsed by
//! [`hostabi::usdt::parse_arg`], symbols (`NBuffers(%rip)`) resolved
//! through the module's symbol tables.

use goblin::elf::{Elf, section_header};
use hostabi::usdt::{UsdtArg, parse_arg};

use crate::info::{ElfInfo, Lookup};

/// One USDT probe site of a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsdtSite {
    /// The provider (`python`, `postgresql`).
    pub provider: String,
    /// The probe's name (`function__entry`).
    pub name: String,
    /// The site's link-time address (its `nop`), prelink-adjusted.
    pub addr: u64,
    /// The semaphore's link-time address (a 2-byte counter), if any.
    pub semaphore: Option<u64>,
    /// The semaphore's file offset (perf's `ref_ctr_offset`), if it has one.
    pub semaphore_offset: Option<u64>,
    /// The note's argument string, as written.
    pub args_text: String,
    /// The arguments, parsed; `Err` says why one could not be (the site
    /// still fires, its arguments cannot be read).
    pub args: Result<Vec<UsdtArg>, String>,
}

impl UsdtSite {
    /// `provider:name`.
    pub fn full_name(&self) -> String {
        format!("{}:{}", self.provider, self.name)
    }
}

/// Owner of USDT notes.
const OWNER: &str = "stapsdt";
/// Note type of USDT probes.
const NT_STAPSDT: u32 = 3;

fn cstr(b: &[u8]) -> Option<(&str, &[u8])> {
    let end = b.iter().position(|&c| c == 0)?;
    Some((std::str::from_utf8(&b[..end]).ok()?, &b[end + 1..]))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The USDT probe sites of `info`, in note order (a probe with several
/// sites appears once per site). A module without notes has none; a
/// malformed note is skipped.
pub fn sites(info: &ElfInfo) -> Vec<UsdtSite> {
    let bytes = info.file_bytes();
    let Ok(elf) = Elf::parse(bytes) else {
        return Vec::new();
    };
    let section = |name: &str| {
        elf.section_headers
            .iter()
            .find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))
    };
    let Some(notes) = section(".note.stapsdt").filter(|s| s.sh_type == section_header::SHT_NOTE)
    else {
        return Vec::new();
    };
    let base_addr = section(".stapsdt.base").map(|s| s.sh_addr);
    let start = notes.sh_offset as usize;
    let Some(data) = start
        .checked_add(notes.sh_size as usize)
        .and_then(|end| bytes.get(start..end))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut at = 0usize;
    let align4 = |n: usize| n.div_ceil(4) * 4;
    while at + 12 <= data.len() {
        let word =
            |k: usize| u32::from_le_bytes(data[at + k..at + k + 4].try_into().unwrap_or([0; 4]));
        let (namesz, descsz, ntype) = (word(0) as usize, word(4) as usize, word(8));
        let name_at = at + 12;
        let desc_at = name_at + align4(namesz);
        let next = desc_at + align4(descsz);
        if next > data.len() || desc_at + descsz > data.len() {
            break;
        }
        let owner = data.get(name_at..name_at + namesz.saturating_sub(1));
        if ntype == NT_STAPSDT
            && owner == Some(OWNER.as_bytes())
            && let Some(site) = site(info, &data[desc_at..desc_at + descsz], base_addr)
        {
            out.push(site);
        }
        at = next;
    }
    out
}

fn site(info: &ElfInfo, desc: &[u8], base_addr: Option<u64>) -> Option<UsdtSite> {
    let (mut pc, note_base, mut sem) = (u64_at(desc, 0)?, u64_at(desc, 8)?, u64_at(desc, 16)?);
    let (provider, rest) = cstr(desc.get(24..)?)?;
    let (name, rest) = cstr(rest)?;
    let (args_text, _) = cstr(rest).unwrap_or(("", &[]));
    if let Some(b) = base_addr
        && note_base != 0
    {
        let diff = b.wrapping_sub(note_base);
        pc = pc.wrapping_add(diff);
        if sem != 0 {
            sem = sem.wrapping_add(diff);
        }
    }
    let semaphore = (sem != 0).then_some(sem);
    let mut resolve = |sym: &str| match info.lookup(sym) {
        Lookup::Found(s) => Some(s.value),
        _ => None,
    };
    let args: Result<Vec<UsdtArg>, String> = args_text
        .split_ascii_whitespace()
        .map(|a| parse_arg(a, &mut resolve))
        .collect();
    Some(UsdtSite {
        provider: provider.to_string(),
        name: name.to_string(),
        addr: pc,
        semaphore,
        semaphore_offset: semaphore.and_then(|s| info.file_offset(s)),
        args_text: args_text.to_string(),
        args,
    })
}

/// Whether `pattern` (`provider:name`, `name`, with `*`/`?` globs) selects
/// `site`: with a provider part both must match; without one, the name.
pub fn matches(site: &UsdtSite, provider: Option<&str>, name: &str) -> bool {
    provider.is_none_or(|p| crate::glob(p, &site.provider)) && crate::glob(name, &site.name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostabi::usdt::UsdtLoc;
    use std::path::Path;
    use std::process::Command;

    /// A C program with sites of every argument form, built with Debian's
    /// `sys/sdt.h` (`systemtap-sdt-dev`).
    const PROG: &str = r#"
#include <sys/sdt.h>
void gated(long x);
long g_static = 77;
struct S { long a; long b[4]; } g_s = { 1, { 10, 20, 30, 40 } };
__attribute__((noinline)) void f(long x, int y, char c, long *p, long i) {
    DTRACE_PROBE4(demo, regs, x, y, c, 42);
    STAP_PROBE2(demo, mem, p[1], g_s.b[i]);
    STAP_PROBE1(demo, stat, g_static);
    gated(x);
    DTRACE_PROBE1(demo, regs, y);
}
__attribute__((noinline)) void h(void) { STAP_PROBE1(demo, stat, g_s.b[3]); }
int main(void) { h(); long v[3] = {5, 6, 7}; f(1, -2, 'c', v, 2); return 0; }
"#;

    /// A translation unit whose probes have semaphores.
    const GATED: &str = r#"
#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>
unsigned short demo_gated_semaphore __attribute__((unused, section(".probes")));
__attribute__((noinline)) void gated(long x) {
    if (demo_gated_semaphore) DTRACE_PROBE1(demo, gated, x);
}
"#;

    fn have_sdt() -> bool {
        Path::new("/usr/include/x86_64-linux-gnu/sys/sdt.h").exists()
            || Path::new("/usr/include/sys/sdt.h").exists()
    }

    fn build(opt: &str) -> Option<ElfInfo> {
        if !have_sdt() {
            assert!(
                std::env::var_os("CI").is_none(),
                "sys/sdt.h missing (systemtap-sdt-dev): scripts/setup.sh installs it"
            );
            return None;
        }
        let dir =
            std::env::temp_dir().join(format!("wprobe-elf-usdt-{}-{opt}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let c = dir.join("p.c");
        std::fs::write(&c, PROG).unwrap();
        let c2 = dir.join("g.c");
        std::fs::write(&c2, GATED).unwrap();
        let out = dir.join("p");
        let st = Command::new("gcc")
            .args([opt, "-g", "-o"])
            .arg(&out)
            .arg(&c)
            .arg(&c2)
            .status()
            .unwrap();
        assert!(st.success());
        let info = ElfInfo::open(&out).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        Some(info)
    }

    #[test]
    fn c_program_sites_every_form() {
        let Some(info) = build("-O1") else { return };
        let s = sites(&info);
        let got: Vec<(String, &str)> = s
            .iter()
            .map(|x| (x.full_name(), x.args_text.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("demo:regs".to_string(), "-8@%rdi -4@%esi -1@%dl -4@$42"),
                ("demo:mem".to_string(), "-8@8(%rcx) -8@8(%rax,%r8,8)"),
                ("demo:stat".to_string(), "-8@g_static(%rip)"),
                ("demo:regs".to_string(), "-4@%ebx"),
                ("demo:stat".to_string(), "-8@32+g_s(%rip)"),
                ("demo:gated".to_string(), "-8@%rdi"),
            ]
        );
        // Two sites of one probe, at different addresses.
        assert_ne!(s[0].addr, s[3].addr);
        // Every site is a 1-byte nop in the code.
        for x in &s {
            assert_eq!(info.first_byte(x.addr), Some(0x90), "{}", x.full_name());
        }
        let regs = s[0].args.as_ref().unwrap();
        let sz: Vec<(u8, bool)> = regs.iter().map(|a| (a.size, a.signed)).collect();
        assert_eq!(sz, [(8, true), (4, true), (1, true), (4, true)]);
        assert_eq!(regs[3].loc, UsdtLoc::Imm(42));
        let found = |n: &str| match info.lookup(n) {
            Lookup::Found(x) => x.value,
            other => panic!("{n}: {other:?}"),
        };
        assert_eq!(
            s[2].args.as_ref().unwrap()[0].loc,
            UsdtLoc::Static(found("g_static"))
        );
        assert_eq!(
            s[4].args.as_ref().unwrap()[0].loc,
            UsdtLoc::Static(found("g_s") + 32)
        );
        let mem = s[1].args.as_ref().unwrap();
        assert!(matches!(
            mem[1].loc,
            UsdtLoc::Mem {
                index: Some(_),
                scale: 8,
                disp: 8,
                ..
            }
        ));
        // The gated probe has the semaphore; the others none.
        let sem = found("demo_gated_semaphore");
        assert_eq!(s[5].semaphore, Some(sem));
        assert_eq!(s[5].semaphore_offset, info.file_offset(sem));
        assert!(s[..5].iter().all(|x| x.semaphore.is_none()));
        assert!(matches(&s[0], Some("de*"), "reg?"));
        assert!(matches(&s[0], None, "regs"));
        assert!(!matches(&s[0], Some("x"), "regs"));
    }

    #[test]
    fn debian_python_and_postgres() {
        let py = Path::new("/usr/bin/python3.11");
        if py.exists() {
            let info = ElfInfo::open(py).unwrap();
            let s = sites(&info);
            let fe = s.iter().find(|x| x.name == "function__entry").unwrap();
            assert_eq!(fe.provider, "python");
            assert!(fe.semaphore.is_some());
            assert_eq!(fe.args.as_ref().unwrap().len(), 3, "{}", fe.args_text);
            assert!(s.iter().all(|x| x.args.is_ok()));
        }
        let pg = Path::new("/usr/lib/postgresql/15/bin/postgres");
        if pg.exists() {
            let info = ElfInfo::open(pg).unwrap();
            let s = sites(&info);
            assert!(s.len() >= 60, "{}", s.len());
            assert!(s.iter().any(|x| x.name == "query__start"));
            // Symbolic RIP-relative operands, beyond libbpf.
            let rip: Vec<_> = s
                .iter()
                .filter(|x| x.args_text.contains("(%rip)"))
                .collect();
            assert!(!rip.is_empty());
            for x in &rip {
                assert!(x.args.is_ok(), "{}: {:?}", x.args_text, x.args);
            }
            let with_off = s
                .iter()
                .find(|x| x.args_text.contains("+CheckpointStats(%rip)"));
            if let Some(x) = with_off {
                let Lookup::Found(cs) = info.lookup("CheckpointStats") else {
                    panic!()
                };
                let a = x.args.as_ref().unwrap();
                assert!(
                    a.iter().any(|a| matches!(a.loc, UsdtLoc::Static(v) if v > cs.value && v < cs.value + 256)),
                    "{}",
                    x.args_text
                );
            }
        }
    }
}
