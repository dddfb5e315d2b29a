//! THP checks that read what the kernel recorded in `/proc/self/smaps`. They skip with a
//! printed reason where THP is unavailable (no sysfs file, or `never`).

use hugealloc::testing::alloc;

fn thp_mode() -> Option<String> {
    let s = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = s.find('[')? + 1;
    let end = s[start..].find(']')? + start;
    Some(s[start..end].to_string())
}

mod common;
use common::mapping_of;

fn has_flag(flags: &str, f: &str) -> bool {
    flags.split_whitespace().any(|x| x == f)
}

#[test]
fn big_buffer_is_advised_hg_and_small_objects_are_not() {
    let Some(mode) = thp_mode() else {
        eprintln!("skipped: /sys/kernel/mm/transparent_hugepage/enabled is missing");
        return;
    };
    if mode == "never" {
        eprintln!("skipped: THP is disabled on this system (never)");
        return;
    }
    let big = alloc::malloc(8 << 20);
    assert!(!big.is_null());
    assert_eq!(
        big as usize % (2 << 20),
        0,
        "huge blocks start on a 2 MiB boundary"
    );
    // SAFETY: big is a live 8 MiB block.
    unsafe { std::ptr::write_bytes(big, 1, 8 << 20) };
    let (flags, huge_kb) = mapping_of(big as usize);
    assert!(has_flag(&flags, "hg"), "8 MiB buffer lacks hg: {flags}");
    eprintln!("8 MiB buffer: VmFlags {flags}; AnonHugePages {huge_kb} kB");

    let small = alloc::malloc(48);
    // SAFETY: small is live.
    unsafe { small.write(1) };
    let (flags, _) = mapping_of(small as usize);
    assert!(
        !has_flag(&flags, "hg"),
        "small objects' chunk is advised hg: {flags}"
    );
    // SAFETY: both are live.
    unsafe {
        alloc::free(small);
        alloc::free(big);
    }
}

#[test]
fn below_the_threshold_is_not_advised() {
    if thp_mode().is_none_or(|m| m == "never") {
        eprintln!("skipped: THP unavailable");
        return;
    }
    let p = alloc::malloc(3 << 20);
    // SAFETY: p is a live 3 MiB block.
    unsafe { std::ptr::write_bytes(p, 1, 3 << 20) };
    let (flags, _) = mapping_of(p as usize);
    assert!(
        !has_flag(&flags, "hg"),
        "3 MiB buffer (below the 4 MiB threshold) has hg: {flags}"
    );
    // SAFETY: p is live.
    unsafe { alloc::free(p) };
}

fn minor_faults() -> i64 {
    // SAFETY: getrusage writes into the zeroed struct.
    unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru.ru_minflt
    }
}

fn touch_pages(p: *mut u8, len: usize) {
    for off in (0..len).step_by(4096) {
        // SAFETY: off < len, inside the live block.
        unsafe { p.add(off).write_volatile(1) };
    }
}

#[test]
fn arenas_keep_their_own_policies() {
    if thp_mode().is_none_or(|m| m == "never") {
        eprintln!("skipped: THP unavailable");
        return;
    }
    use hugealloc::{Arena, Thp};
    let never = Arena::new(Thp::Never).unwrap();
    let default = Arena::new(Thp::Default).unwrap();
    let always = Arena::new(Thp::Always).unwrap();
    let n = alloc::alloc_in(Some(never.index()), 8 << 20, 1, false, false);
    let d = alloc::alloc_in(Some(default.index()), 8 << 20, 1, false, false);
    let a = alloc::alloc_in(Some(always.index()), 3 << 20, 1, false, false);
    let small_always = alloc::alloc_in(Some(always.index()), 64, 1, false, false);
    for p in [n, d, a, small_always] {
        assert!(!p.is_null());
        touch_pages(p, 64);
    }
    let (fnv, _) = mapping_of(n as usize);
    assert!(
        has_flag(&fnv, "nh") && !has_flag(&fnv, "hg"),
        "never: {fnv}"
    );
    let (fd, _) = mapping_of(d as usize);
    assert!(
        !has_flag(&fd, "nh") && !has_flag(&fd, "hg"),
        "default: {fd}"
    );
    let (fa, _) = mapping_of(a as usize);
    assert!(
        has_flag(&fa, "hg"),
        "always (below the threshold too): {fa}"
    );
    let (fs, _) = mapping_of(small_always as usize);
    assert!(has_flag(&fs, "hg"), "always, small objects' chunk: {fs}");
    // SAFETY: all are live.
    unsafe {
        for p in [n, d, a, small_always] {
            alloc::free(p);
        }
    }
}

#[test]
fn always_costs_a_fiftieth_of_the_faults_of_never() {
    if thp_mode().is_none_or(|m| m == "never") {
        eprintln!("skipped: THP unavailable");
        return;
    }
    use hugealloc::{Arena, Thp};
    const LEN: usize = 64 << 20;
    let measure = |policy: Thp| {
        let arena = Arena::new(policy).unwrap();
        let p = alloc::alloc_in(Some(arena.index()), LEN, 1, false, false);
        assert!(!p.is_null());
        let before = minor_faults();
        touch_pages(p, LEN);
        let faults = minor_faults() - before;
        let (_, huge_kb) = mapping_of(p as usize);
        (p, faults, huge_kb, arena.huge_backed_bytes())
    };
    let (pn, never_faults, never_huge, never_arena) = measure(Thp::Never);
    let (pa, always_faults, always_huge, always_arena) = measure(Thp::Always);
    eprintln!("huge-backed bytes per arena: never {never_arena}, always {always_arena}");
    eprintln!("64 MiB touched page by page: never {never_faults} faults ({never_huge} kB huge), always {always_faults} faults ({always_huge} kB huge)");
    if always_huge == 0 {
        eprintln!("skipped: the kernel gave no huge page (fragmented memory or THP defrag off)");
    } else {
        assert!(
            always_faults * 50 <= never_faults,
            "always {always_faults} vs never {never_faults}"
        );
        assert_eq!(never_huge, 0);
        // The per-arena figure sees the same huge pages, and none in the `never` arena.
        assert_eq!(never_arena, 0);
        assert!(
            always_arena >= 32 << 20,
            "always arena: {always_arena} bytes huge-backed"
        );
    }
    // SAFETY: both are live.
    unsafe {
        alloc::free(pn);
        alloc::free(pa);
    }
}

#[test]
fn thp_status_matches_sysfs() {
    let st = hugealloc::thp_status();
    let read =
        |f: &str| std::fs::read_to_string(format!("/sys/kernel/mm/transparent_hugepage/{f}")).ok();
    let active = |text: &str| {
        text.split('[')
            .nth(1)
            .and_then(|r| r.split(']').next())
            .map(str::to_string)
    };
    match read("enabled").as_deref().and_then(active) {
        None => {
            assert_eq!(st.enabled, hugealloc::SystemMode::Unknown);
            assert!(!st.advice_effective);
        }
        Some(word) => {
            let want = match word.as_str() {
                "always" => hugealloc::SystemMode::Always,
                "madvise" => hugealloc::SystemMode::Madvise,
                "never" => hugealloc::SystemMode::Never,
                _ => hugealloc::SystemMode::Unknown,
            };
            assert_eq!(st.enabled, want);
            assert_eq!(st.advice_effective, word == "always" || word == "madvise");
        }
    }
    let defrag = read("defrag").as_deref().and_then(active);
    let want = match defrag.as_deref() {
        Some("always") => hugealloc::Defrag::Always,
        Some("defer") => hugealloc::Defrag::Defer,
        Some("defer+madvise") => hugealloc::Defrag::DeferMadvise,
        Some("madvise") => hugealloc::Defrag::Madvise,
        Some("never") => hugealloc::Defrag::Never,
        _ => hugealloc::Defrag::Unknown,
    };
    assert_eq!(st.defrag, want);
}
