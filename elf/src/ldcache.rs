//! The dynamic linker's cache (`/etc/ld.so.cache`, written by `ldconfig`):
//! soname → path of the x86-64 libraries the dynamic linker would load.
//! Only the "new" format (`glibc-ld.so.cache1.1`, glibc ≥ 2.7, the only one
//! since 2.32) is read; an old-format prefix is skipped. Bounded and
//! panic-free on any bytes: a malformed cache gives no entries.

use std::path::PathBuf;

/// The cache file.
pub const CACHE: &str = "/etc/ld.so.cache";
const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const HEADER_BYTES: usize = 48;
const ENTRY_BYTES: usize = 24;
/// `FLAG_ELF_LIBC6 | FLAG_X8664_LIB64`: x86-64 glibc libraries.
const FLAGS_X86_64: i32 = 0x0303;
/// The cache is a few hundred KiB; more is not a cache.
const MAX_CACHE_BYTES: u64 = 64 << 20;

/// `(soname, path)` of every x86-64 library in the cache, in cache order
/// (the dynamic linker's preference order).
pub fn entries() -> Vec<(String, PathBuf)> {
    use std::io::Read;
    let Ok(f) = std::fs::File::open(CACHE) else {
        return Vec::new();
    };
    let mut bytes = Vec::new();
    if f.take(MAX_CACHE_BYTES).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    parse(&bytes)
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn cstr_at(b: &[u8], at: usize) -> Option<&str> {
    let rest = b.get(at..)?;
    let end = rest.iter().position(|&c| c == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// Parses a cache image (see [`entries`]).
pub fn parse(bytes: &[u8]) -> Vec<(String, PathBuf)> {
    let Some(base) = bytes.windows(MAGIC.len()).position(|w| w == MAGIC) else {
        return Vec::new();
    };
    let b = &bytes[base..];
    let Some(nlibs) = u32_at(b, 20) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for i in 0..nlibs as usize {
        let Some(at) = i
            .checked_mul(ENTRY_BYTES)
            .and_then(|o| o.checked_add(HEADER_BYTES))
        else {
            break;
        };
        let (Some(flags), Some(key), Some(value)) =
            (u32_at(b, at), u32_at(b, at + 4), u32_at(b, at + 8))
        else {
            break;
        };
        if flags as i32 & 0xffff != FLAGS_X86_64 {
            continue;
        }
        if let (Some(k), Some(v)) = (cstr_at(b, key as usize), cstr_at(b, value as usize)) {
            out.push((k.to_string(), PathBuf::from(v)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn image(entries: &[(i32, &str, &str)]) -> Vec<u8> {
        let mut strings = Vec::new();
        let strings_at = HEADER_BYTES + entries.len() * ENTRY_BYTES;
        let mut offs = Vec::new();
        for (_, k, v) in entries {
            let ko = strings_at + strings.len();
            strings.extend_from_slice(k.as_bytes());
            strings.push(0);
            let vo = strings_at + strings.len();
            strings.extend_from_slice(v.as_bytes());
            strings.push(0);
            offs.push((ko as u32, vo as u32));
        }
        let mut b = Vec::new();
        b.extend_from_slice(MAGIC);
        b.extend_from_slice(&(entries.len() as u32).to_le_bytes());
        b.extend_from_slice(&(strings.len() as u32).to_le_bytes());
        b.resize(HEADER_BYTES, 0);
        for ((flags, _, _), (k, v)) in entries.iter().zip(offs) {
            b.extend_from_slice(&flags.to_le_bytes());
            b.extend_from_slice(&k.to_le_bytes());
            b.extend_from_slice(&v.to_le_bytes());
            b.extend_from_slice(&[0u8; 12]);
        }
        b.extend_from_slice(&strings);
        b
    }

    #[test]
    fn reads_x86_64_entries_only() {
        let b = image(&[
            (0x0303, "libc.so.6", "/lib/x86_64-linux-gnu/libc.so.6"),
            (0x0003, "libc.so.6", "/lib32/libc.so.6"),
            (0x0303, "libm.so.6", "/lib/x86_64-linux-gnu/libm.so.6"),
        ]);
        assert_eq!(
            parse(&b),
            [
                (
                    "libc.so.6".to_string(),
                    PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")
                ),
                (
                    "libm.so.6".to_string(),
                    PathBuf::from("/lib/x86_64-linux-gnu/libm.so.6")
                ),
            ]
        );
        // An old-format prefix is skipped.
        let mut old = b"ld.so-1.7.0\0\0\0\0\0".to_vec();
        old.extend_from_slice(&b);
        assert_eq!(parse(&old).len(), 2);
    }

    #[test]
    fn every_prefix_and_byte_flip_is_harmless() {
        let b = image(&[(0x0303, "libc.so.6", "/lib/libc.so.6")]);
        for n in 0..b.len() {
            let _ = parse(&b[..n]);
        }
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0xff;
            let _ = parse(&c);
        }
    }

    #[test]
    fn this_machine_has_libc_in_its_cache() {
        assert!(
            entries().iter().any(|(k, _)| k == "libc.so.6"),
            "{:?}",
            entries()
        );
    }
}
