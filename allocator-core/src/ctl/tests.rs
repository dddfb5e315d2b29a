//! Unit tests of name resolution and MIBs (the values are tested in `tests/ctl.rs`).

use super::*;
use std::string::String;
use std::vec::Vec;

fn name_of(c: &CtlName) -> String {
    let mut v = Vec::new();
    c.write(&mut |b| v.extend_from_slice(b));
    String::from_utf8(v).unwrap()
}

#[test]
fn names_resolve_with_their_indices() {
    assert_eq!(Ctl::lookup(b"version").map(|c| c.id), Ok(0));
    let c = Ctl::lookup(b"arena.12.purge").unwrap();
    assert_eq!(c.indices(), [12, 0]);
    assert_eq!(name_of(&c.name()), "arena.<i>.purge");
    let c = Ctl::lookup(b"stats.arenas.3.bins.7.nmalloc").unwrap();
    assert_eq!(c.indices(), [3, 7]);
    assert_eq!(c.ty(), CtlType::U64);
    let c = Ctl::lookup(b"stats.arenas.4096.small.allocated").unwrap();
    assert_eq!((c.indices(), c.ty()), ([4096, 0], CtlType::Size));
    assert_eq!(
        Ctl::lookup(b"opt.arena.5.thp").map(|c| c.indices()),
        Ok([5, 0])
    );
    assert_eq!(
        Ctl::lookup(b"opt.narenas").map(|c| c.ty()),
        Ok(CtlType::Unsigned)
    );
    assert_eq!(
        Ctl::lookup(b"opt.dirty_decay_ms").map(|c| c.ty()),
        Ok(CtlType::I64)
    );
    assert_eq!(
        Ctl::lookup(b"opt.tcache").map(|c| c.ty()),
        Ok(CtlType::Bool)
    );
    for bad in [
        &b"arena.x.purge"[..],
        b"arena..purge",
        b"arena",
        b"stats",
        b"stats.allocated.x",
        b"stats.arenas.0",
        b"stats.arenas.0.bins.1",
        b"opt",
        b"opt.",
        b"opt.bogus",
        b"arena.99999999999999999999.purge",
        b"",
        b".",
    ] {
        assert_eq!(
            Ctl::lookup(bad),
            Err(CtlError::NotFound),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn every_name_resolves_to_itself_and_round_trips_through_a_mib() {
    let mut n = 0;
    for_each_name(&mut |pattern| {
        let name = name_of(pattern).replace("<i>", "2").replace("<j>", "5");
        let c = Ctl::lookup(name.as_bytes()).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(name_of(&c.name()), name_of(pattern));
        let mut mib = [0usize; 8];
        let len = c.to_mib(&mut mib).unwrap();
        assert_eq!(len, name.split('.').count(), "{name}");
        assert_eq!(Ctl::from_mib(&mib[..len]), Ok(c), "{name}");
        assert_eq!(c.to_mib(&mut mib[..len - 1]), Err(CtlError::WrongType));
        assert_eq!(Ctl::from_mib(&mib[..len - 1]), Err(CtlError::NotFound));
        n += 1;
    });
    assert_eq!(n, nnames());
    // Patterns are unique, so no name shadows another.
    let mut all = Vec::new();
    for_each_name(&mut |p| all.push(name_of(p)));
    let mut sorted = all.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), all.len());
}

#[test]
fn mibs_carry_the_index_and_check_the_rest() {
    let c = Ctl::lookup(b"stats.arenas.1.bins.4.nfills").unwrap();
    let mut mib = [0usize; 6];
    assert_eq!(c.to_mib(&mut mib), Ok(6));
    assert_eq!((mib[2], mib[4]), (1, 4));
    mib[4] = 9;
    assert_eq!(Ctl::from_mib(&mib).map(|c| c.indices()), Ok([1, 9]));
    mib[0] += 1;
    assert_eq!(Ctl::from_mib(&mib), Err(CtlError::NotFound));
    assert_eq!(Ctl::from_mib(&[]), Err(CtlError::NotFound));
    assert_eq!(Ctl::from_mib(&[usize::MAX]), Err(CtlError::NotFound));
}

#[test]
fn errors_map_to_mallctls_errno_values() {
    assert_eq!(CtlError::NotFound.errno(), libc::ENOENT);
    assert_eq!(CtlError::WrongType.errno(), libc::EINVAL);
    assert_eq!(CtlError::BadValue.errno(), libc::EINVAL);
    assert_eq!(CtlError::ReadOnly.errno(), libc::EPERM);
    assert_eq!(CtlError::NoArena.errno(), libc::EFAULT);
    assert_eq!(CtlError::Again.errno(), libc::EAGAIN);
}

#[test]
fn checks_come_before_the_handler() {
    // A write to a read-only name, and a value of the wrong type, are refused up front.
    assert_eq!(
        write("arenas.create", CtlValue::Unsigned(1)),
        Err(CtlError::ReadOnly)
    );
    assert_eq!(
        write("arena.0.purge", CtlValue::None),
        Err(CtlError::ReadOnly)
    );
    assert_eq!(
        write("thread.arena", CtlValue::U64(0)),
        Err(CtlError::WrongType)
    );
    assert_eq!(read("arena.0.purge"), Err(CtlError::WrongType));
    assert_eq!(act("version"), Err(CtlError::WrongType));
}
