//! Symbolisation for `hugealloc profile`: the run-time addresses of a heap profile become
//! "function (file:line)" names, read in process from each mapped file's DWARF (and symbol
//! table) with the `addr2line` crate (gimli). binutils' `addr2line` is run only for a file the
//! crate cannot load; without either, an address stays "0x... in FILE".

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

/// A mapping of the profiled process: (start, end, file offset, path), as `/proc/self/maps`
/// gave it.
pub type Mapping = (u64, u64, u64, String);

/// The address a symboliser wants for a run-time address inside mapping `m`: the ELF virtual
/// address, from the file's program headers (ET_EXEC: the address itself).
fn elf_vaddr(file: &[u8], m: &Mapping, addr: u64) -> Option<u64> {
    let u16_at = |o: usize| Some(u16::from_le_bytes(file.get(o..o + 2)?.try_into().ok()?));
    let u32_at = |o: usize| Some(u32::from_le_bytes(file.get(o..o + 4)?.try_into().ok()?));
    let u64_at = |o: usize| Some(u64::from_le_bytes(file.get(o..o + 8)?.try_into().ok()?));
    if file.get(..5)? != b"\x7fELF\x02" {
        return None;
    }
    if u16_at(16)? == 2 {
        return Some(addr); // ET_EXEC: linked at its run-time address.
    }
    let off = addr - m.0 + m.2;
    let (phoff, phentsize, phnum) = (u64_at(0x20)? as usize, u16_at(0x36)?, u16_at(0x38)?);
    for i in 0..phnum as usize {
        let h = phoff + i * phentsize as usize;
        if u32_at(h)? != 1 {
            continue; // not PT_LOAD
        }
        let (p_off, p_vaddr, p_filesz) = (u64_at(h + 8)?, u64_at(h + 16)?, u64_at(h + 32)?);
        if (p_off..p_off + p_filesz).contains(&off) {
            return Some(off - p_off + p_vaddr);
        }
    }
    None
}

/// Names every address of `addrs` (return addresses) found in `maps`.
pub fn symbolise(addrs: impl Iterator<Item = u64>, maps: &[Mapping]) -> HashMap<u64, String> {
    let mut names = HashMap::new();
    let addrs: BTreeSet<u64> = addrs.collect();
    let mut by_map: HashMap<usize, Vec<(u64, u64)>> = HashMap::new();
    let mut files: HashMap<String, Option<Vec<u8>>> = HashMap::new();
    for &a in &addrs {
        // A return address: the call is the byte before.
        let call = a.saturating_sub(1);
        let Some(k) = maps.iter().position(|m| m.0 <= call && call < m.1) else {
            names.insert(a, format!("{a:#x}"));
            continue;
        };
        let m = &maps[k];
        let file = files
            .entry(m.3.clone())
            .or_insert_with(|| std::fs::read(&m.3).ok());
        match file.as_deref().and_then(|f| elf_vaddr(f, m, call)) {
            Some(v) => by_map.entry(k).or_default().push((a, v)),
            None => {
                names.insert(a, unknown(a, &m.3));
            }
        }
    }
    for (k, list) in by_map {
        let path = &maps[k].3;
        match addr2line::Loader::new(path) {
            Ok(loader) => {
                for &(a, v) in &list {
                    let name = dwarf_name(&loader, v).unwrap_or_else(|| unknown(a, path));
                    names.insert(a, name);
                }
            }
            Err(_) => names.extend(binutils(path, &list)),
        }
    }
    names
}

/// "0x... in FILE": an address nothing could name.
fn unknown(a: u64, path: &str) -> String {
    format!("{a:#x} in {}", path.rsplit('/').next().unwrap_or(path))
}

/// The innermost function at ELF address `vaddr` with its source place (the frame of an
/// inlined call is the inlined function's, as binutils' `addr2line -f` gives it), or the
/// symbol table's name where there is no debug information.
fn dwarf_name(loader: &addr2line::Loader, vaddr: u64) -> Option<String> {
    let symbol = || {
        loader
            .find_symbol(vaddr)
            .map(|s| addr2line::demangle_auto(s.into(), None).into_owned())
    };
    let frame = loader.find_frames(vaddr).ok()?.next().ok().flatten();
    let Some(frame) = frame else {
        return symbol();
    };
    let function = frame
        .function
        .as_ref()
        .and_then(|f| f.demangle().ok())
        .map(|f| f.into_owned())
        .or_else(symbol)?;
    let place = frame.location.as_ref().and_then(|l| {
        let file = l.file?;
        Some(format!("{}:{}", file.rsplit('/').next()?, l.line?))
    });
    Some(match place {
        Some(place) => format!("{function} ({place})"),
        None => function,
    })
}

/// The fallback: binutils' `addr2line -f -C` on `path` for `list` (run-time address, ELF
/// address).
fn binutils(path: &str, list: &[(u64, u64)]) -> Vec<(u64, String)> {
    let out = Command::new("addr2line")
        .args(["-f", "-C", "-e"])
        .arg(path)
        .args(list.iter().map(|(_, v)| format!("{v:#x}")))
        .output();
    let text = out
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    list.iter()
        .enumerate()
        .map(|(i, &(a, _))| {
            let name = match (lines.get(2 * i), lines.get(2 * i + 1)) {
                (Some(f), Some(pl)) if *f != "??" => {
                    let short = pl.rsplit('/').next().unwrap_or(pl);
                    format!("{f} ({short})")
                }
                _ => unknown(a, path),
            };
            (a, name)
        })
        .collect()
}
