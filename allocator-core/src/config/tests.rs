//! Unit tests of the option table, the parser, the warnings and the order of the sources.

use super::load::suggest;
use super::*;
use crate::os::HugePageSize;
use proptest::prelude::*;
use std::string::String;
use std::vec::Vec;

/// Applies `conf` to the defaults; returns the options, the bad-pair count and the warning
/// lines.
fn run(conf: &str) -> (Options, usize, Vec<String>) {
    let mut o = Options::DEFAULT;
    let mut lines = Vec::new();
    let bad = o.apply_with(conf.as_bytes(), Source::Env, &mut |l| {
        lines.push(String::from_utf8_lossy(l).into_owned())
    });
    assert_eq!(bad, lines.len(), "one line per bad pair");
    (o, bad, lines)
}

/// Applies a conf that must be good.
fn good(conf: &str) -> Options {
    let (o, bad, lines) = run(conf);
    assert_eq!(bad, 0, "{conf:?} gave {lines:?}");
    o
}

/// The problems of every bad pair of `conf`, from the pure parser.
fn problems(conf: &str) -> Vec<Problem> {
    parse_pairs(conf.as_bytes())
        .filter_map(|p| p.err().map(|e| e.problem))
        .collect()
}

/// The one problem of a one-pair conf, checking that it leaves the defaults alone.
fn bad(conf: &str) -> Problem {
    let (o, n, _) = run(conf);
    assert_eq!(n, 1, "{conf:?}");
    assert_eq!(o, Options::DEFAULT, "{conf:?} changed something");
    let p = problems(conf);
    assert_eq!(p.len(), 1);
    p[0]
}

fn written(opts: &Options) -> Vec<String> {
    let mut items = Vec::new();
    write_options(opts, &mut |b| {
        items.push(String::from_utf8(b.to_vec()).unwrap())
    });
    items
}

fn range_text(kind: &Kind) -> String {
    let mut s = Vec::new();
    kind.write_range(&mut |b| s.extend_from_slice(b));
    String::from_utf8(s).unwrap()
}

const SIZE_ANY: Kind = Kind::Size { max: SIZE_LIMIT };

// ---- the table and the defaults ----

static IN_A_STATIC: Options = Options::DEFAULT;

#[test]
fn defaults_are_the_documented_ones() {
    let d = IN_A_STATIC;
    assert_eq!(d.narenas, 0);
    assert!(d.tcache);
    assert_eq!(d.tcache_max, 32 << 10);
    assert_eq!(d.thp, Thp::Madvise);
    assert_eq!(d.thp_threshold, 4 << 20);
    assert_eq!(d.metadata_thp, Thp::Default);
    assert_eq!(d.arena_thp, [None; ARENA_THP_MAX]);
    assert_eq!(d.dirty_decay_ms, 10_000);
    assert_eq!(d.muzzy_decay_ms, 0);
    assert_eq!(d.dirty_max, 0);
    assert!(!d.thp_collapse && !d.background_thread && !d.stats_print);
    assert!(!d.prof && d.prof_active && !d.prof_final && !d.prof_leak);
    assert_eq!((d.lg_prof_sample, d.lg_prof_interval), (19, 0));
    assert_eq!(d.prof_prefix(), b"hugealloc");
    assert_eq!(d.stats_print_opts(), b"");
    assert!(!d.abort_conf && !d.confirm_conf && !d.junk && !d.zero);
    assert_eq!(Options::default(), d);
}

#[test]
fn every_field_has_one_row() {
    // `options!` numbers fields as rows; `ARENA_ROW` and `lookup` rely on it.
    for (i, r) in OPTION_TABLE.iter().enumerate() {
        assert_eq!(r.field as usize, i, "{}", r.name);
    }
    assert_eq!(OPTION_TABLE[ARENA_ROW].name, "arena.<i>.thp");
    assert_eq!(OPTION_TABLE[ARENA_HUGETLB_ROW].name, "arena.<i>.hugetlb");
    assert_eq!(OPTION_TABLE.len(), OPTION_COUNT);
}

#[test]
fn names_are_unique_and_found() {
    let names: Vec<&str> = option_names().collect();
    for (i, n) in names.iter().enumerate() {
        assert!(!names[..i].contains(n), "{n} twice");
        if !n.starts_with("arena.<i>.") {
            let (r, index) = lookup(n.as_bytes()).unwrap();
            assert_eq!((r.name, index), (*n, 0));
        }
    }
    assert!(names.contains(&"arena.<i>.thp"));
    assert_eq!(lookup(b"arena.<i>.thp").err(), Some(Problem::UnknownKey));
    assert!(names.contains(&"arena.<i>.hugetlb"));
    assert_eq!(
        lookup(b"arena.<i>.hugetlb").err(),
        Some(Problem::UnknownKey)
    );
}

#[test]
fn defaults_come_from_the_table() {
    for r in OPTION_TABLE.iter() {
        for index in [0, ARENA_THP_MAX - 1] {
            assert_eq!(Options::DEFAULT.get(r, index), r.default, "{}", r.name);
        }
    }
}

#[test]
fn every_default_renders_and_parses_back() {
    for r in OPTION_TABLE.iter() {
        let mut text = Vec::new();
        r.default.write(&mut |b| text.extend_from_slice(b));
        assert_eq!(r.kind.parse(&text), Ok(r.default), "{}", r.name);
    }
}

#[test]
fn every_row_sets_its_own_field() {
    // A non-default value per row; setting it must change exactly that row's value.
    for r in OPTION_TABLE.iter() {
        let value = match r.kind {
            Kind::Bool => "false",
            Kind::Count { .. } => "7",
            Kind::Size { .. } => "64k",
            Kind::Millis => "-1",
            Kind::Thp => "always",
            Kind::ArenaThp => "never",
            Kind::Check => "full",
            Kind::Letters { .. } => "Jg",
            Kind::Hugetlb => "1G",
            Kind::ArenaHugetlb => "2M",
            Kind::Unwind => "fp",
        };
        let key = if r.field.per_arena() {
            r.name.replace("<i>", "5")
        } else {
            String::from(r.name)
        };
        let mut conf = std::format!("{key}:{value}");
        if r.default == Value::Bool(false) {
            conf = std::format!("{key}:true");
        }
        let o = good(&conf);
        for other in OPTION_TABLE.iter() {
            let changed = o.get(other, 5) != Options::DEFAULT.get(other, 5);
            assert_eq!(changed, core::ptr::eq(other, r), "{conf} vs {}", other.name);
        }
    }
}

#[test]
fn ranges_read_well() {
    let r = |name: &str| range_text(&lookup(name.as_bytes()).unwrap().0.kind);
    assert_eq!(r("narenas"), "0..=256");
    assert_eq!(r("tcache_max"), "0..=1792KiB");
    assert_eq!(r("thp_threshold"), "0..=isize::MAX");
    assert_eq!(r("dirty_decay_ms"), "-1..=i64::MAX");
    assert_eq!(r("thp"), "always|madvise|never|default|defer");
    assert_eq!(r("tcache"), "true|false");
    assert_eq!(r("stats_print_opts"), "at most 32 of Jgmdablxehf");
    assert_eq!(
        range_text(&OPTION_TABLE[ARENA_ROW].kind),
        "always|madvise|never|default|defer|inherit"
    );
}

// ---- every option ----

#[test]
fn narenas() {
    assert_eq!(good("narenas:0").narenas, 0);
    assert_eq!(good("narenas:4").narenas, 4);
    assert_eq!(good("narenas:256").narenas, NARENAS_MAX);
    assert_eq!(bad("narenas:257"), Problem::OutOfRange);
    assert_eq!(bad("narenas:99999999999999999999999"), Problem::OutOfRange);
    assert_eq!(bad("narenas:-1"), Problem::InvalidValue);
    assert_eq!(bad("narenas:4k"), Problem::InvalidValue);
    assert_eq!(bad("narenas: 4"), Problem::InvalidValue);
    assert_eq!(bad("narenas:auto"), Problem::InvalidValue);
}

#[test]
fn booleans() {
    for name in [
        "tcache",
        "thp_collapse",
        "background_thread",
        "stats_print",
        "abort_conf",
        "confirm_conf",
        "junk",
        "zero",
    ] {
        let (r, _) = lookup(name.as_bytes()).unwrap();
        for (text, v) in [("true", true), ("1", true), ("false", false), ("0", false)] {
            let o = good(&std::format!("{name}:{text}"));
            assert_eq!(o.get(r, 0), Value::Bool(v), "{name}:{text}");
        }
        for text in ["TRUE", "yes", "on", "2", "tru", "true "] {
            assert_eq!(bad(&std::format!("{name}:{text}")), Problem::InvalidValue);
        }
    }
    assert!(!good("tcache:false").tcache);
    assert!(good("zero:true").zero);
}

#[test]
fn size_suffixes() {
    for (text, bytes) in [
        ("0", 0),
        ("4096", 4096),
        ("4096b", 4096),
        ("64k", 64 << 10),
        ("64K", 64 << 10),
        ("64KB", 64 << 10),
        ("64kb", 64 << 10),
        ("64KiB", 64 << 10),
        ("64kib", 64 << 10),
        ("64KIB", 64 << 10),
        ("4M", 4 << 20),
        ("4m", 4 << 20),
        ("4MB", 4 << 20),
        ("2MiB", 2 << 20),
        ("1G", 1 << 30),
        ("1GiB", 1 << 30),
        ("1gb", 1 << 30),
        ("2T", 2 << 40),
        ("3TiB", 3 << 40),
        ("007m", 7 << 20),
    ] {
        assert_eq!(
            good(&std::format!("thp_threshold:{text}")).thp_threshold,
            bytes
        );
        assert_eq!(good(&std::format!("dirty_max:{text}")).dirty_max, bytes);
    }
    for text in [
        "k", "4X", "4 M", "4MiBs", "4iB", "-4M", "+4M", "1.5M", "0x10", "M4",
    ] {
        assert_eq!(
            bad(&std::format!("thp_threshold:{text}")),
            Problem::InvalidValue,
            "{text}"
        );
    }
    // Overflow is detected, in the digits and in the multiplication.
    for text in [
        "18446744073709551616",
        "99999999999999999999999",
        "17179869184G",
        "16777216T",
        "9223372036854775808", // isize::MAX + 1
    ] {
        assert_eq!(
            bad(&std::format!("dirty_max:{text}")),
            Problem::OutOfRange,
            "{text}"
        );
    }
    assert_eq!(
        good("dirty_max:9223372036854775807").dirty_max,
        isize::MAX as usize
    );
}

#[test]
fn dirty_growth_pct_is_a_percentage_up_to_10000() {
    assert_eq!(Options::DEFAULT.dirty_growth_pct, 10);
    assert_eq!(good("dirty_growth_pct:0").dirty_growth_pct, 0);
    assert_eq!(good("dirty_growth_pct:25").dirty_growth_pct, 25);
    assert_eq!(good("dirty_growth_pct:10000").dirty_growth_pct, 10_000);
    // One warning each, naming the pair; the default stays.
    assert_eq!(bad("dirty_growth_pct:10001"), Problem::OutOfRange);
    assert_eq!(bad("dirty_growth_pct:-1"), Problem::InvalidValue);
    assert_eq!(bad("dirty_growth_pct:10%"), Problem::InvalidValue);
}

#[test]
fn tcache_max_range() {
    assert_eq!(good("tcache_max:0").tcache_max, 0);
    assert_eq!(good("tcache_max:1792KiB").tcache_max, 1792 << 10);
    assert_eq!(good("tcache_max:1835008").tcache_max, 1792 << 10);
    assert_eq!(good("tcache_max:1M").tcache_max, 1 << 20);
    assert_eq!(bad("tcache_max:1835009"), Problem::OutOfRange);
    assert_eq!(bad("tcache_max:2M"), Problem::OutOfRange);
    assert_eq!(bad("tcache_max:1G"), Problem::OutOfRange);
}

#[test]
fn thp_policies() {
    for (text, t) in [
        ("always", Thp::Always),
        ("madvise", Thp::Madvise),
        ("never", Thp::Never),
        ("default", Thp::Default),
        ("defer", Thp::Defer),
    ] {
        assert_eq!(good(&std::format!("thp:{text}")).thp, t);
        assert_eq!(good(&std::format!("metadata_thp:{text}")).metadata_thp, t);
        assert_eq!(
            good(&std::format!("arena.9.thp:{text}")).arena_thp[9],
            Some(t)
        );
    }
    for text in ["sometimes", "Always", "inherit", "yes"] {
        assert_eq!(bad(&std::format!("thp:{text}")), Problem::InvalidValue);
    }
    assert_eq!(bad("arena.1.thp:sometimes"), Problem::InvalidValue);
}

// ---- hugetlb (issue 14) ----

#[test]
fn hugetlb_page_sources() {
    assert_eq!(Options::DEFAULT.hugetlb, Hugetlb::Off);
    assert_eq!(Options::DEFAULT.arena_hugetlb, [None; ARENA_THP_MAX]);
    assert_eq!(Options::DEFAULT.hugetlb_reserve, 0);
    for (text, h) in [
        ("off", Hugetlb::Off),
        ("2M", Hugetlb::Pages2M),
        ("2m", Hugetlb::Pages2M),
        ("1G", Hugetlb::Pages1G),
        ("1g", Hugetlb::Pages1G),
    ] {
        assert_eq!(good(&std::format!("hugetlb:{text}")).hugetlb, h);
        assert_eq!(
            good(&std::format!("arena.7.hugetlb:{text}")).arena_hugetlb[7],
            Some(h)
        );
    }
    assert_eq!(Hugetlb::Pages1G.page_size(), Some(HugePageSize::Size1G));
    assert_eq!(Hugetlb::Off.page_size(), None);
    for text in ["on", "4M", "2MiB", "inherit", "Off", "1"] {
        assert_eq!(bad(&std::format!("hugetlb:{text}")), Problem::InvalidValue);
    }
    assert_eq!(bad("arena.1.hugetlb:4K"), Problem::InvalidValue);
    assert_eq!(bad("arena.64.hugetlb:2M"), Problem::ArenaIndex);
    assert_eq!(bad("arena.x.hugetlb:2M"), Problem::UnknownKey);
    // Per arena, in any order relative to the global one; `inherit` undoes an override.
    let o = good("arena.2.hugetlb:1G,hugetlb:2M,arena.3.hugetlb:off");
    assert_eq!(o.hugetlb_for_arena(2), Hugetlb::Pages1G);
    assert_eq!(o.hugetlb_for_arena(3), Hugetlb::Off);
    assert_eq!(o.hugetlb_for_arena(4), Hugetlb::Pages2M);
    assert_eq!(o.hugetlb_for_arena(64), Hugetlb::Pages2M);
    assert_eq!(
        good("arena.2.hugetlb:1G,arena.2.hugetlb:inherit").arena_hugetlb[2],
        None
    );
    // The THP policy of the same arena is a separate option.
    let o = good("arena.2.thp:never,arena.2.hugetlb:2M");
    assert_eq!(o.arena_thp[2], Some(Thp::Never));
    assert_eq!(o.arena_hugetlb[2], Some(Hugetlb::Pages2M));
    assert_eq!(good("hugetlb_reserve:1G").hugetlb_reserve, 1 << 30);
    assert_eq!(good("hugetlb_reserve:64MiB").hugetlb_reserve, 64 << 20);
    assert_eq!(bad("hugetlb_reserve:lots"), Problem::InvalidValue);
    // Written back as the parser reads them, per-arena values once per arena that has one.
    let o = good("hugetlb:1G,arena.5.hugetlb:off,hugetlb_reserve:2G");
    let items = written(&o);
    assert!(items.contains(&String::from("hugetlb:1G")), "{items:?}");
    assert!(
        items.contains(&String::from("arena.5.hugetlb:off")),
        "{items:?}"
    );
    assert!(
        items.contains(&String::from("hugetlb_reserve:2GiB")),
        "{items:?}"
    );
    assert_eq!(items.iter().filter(|i| i.contains(".hugetlb:")).count(), 1);
    assert_eq!(good(&items.join(",")), o);
}

#[test]
fn arena_overrides() {
    let o = good("thp:never,arena.0.thp:always,arena.63.thp:default");
    assert_eq!(o.thp_for_arena(0), Thp::Always);
    assert_eq!(o.thp_for_arena(1), Thp::Never);
    assert_eq!(o.thp_for_arena(63), Thp::Default);
    assert_eq!(
        o.thp_for_arena(64),
        Thp::Never,
        "past the table: the global policy"
    );
    assert_eq!(o.thp_for_arena(usize::MAX), Thp::Never);
    // `inherit` undoes an override; leading zeros are decimal.
    let o = good("arena.3.thp:always,arena.03.thp:inherit");
    assert_eq!(o.arena_thp[3], None);
    assert_eq!(o.thp_for_arena(3), Thp::Madvise);
    assert_eq!(good("arena.010.thp:never").arena_thp[10], Some(Thp::Never));
    assert_eq!(bad("arena.64.thp:always"), Problem::ArenaIndex);
    assert_eq!(
        bad("arena.99999999999999999999999.thp:always"),
        Problem::ArenaIndex
    );
    for key in [
        "arena..thp",
        "arena.x.thp",
        "arena.-1.thp",
        "arena.1.THP",
        "arena.1",
        "arena.thp",
    ] {
        assert_eq!(
            bad(&std::format!("{key}:always")),
            Problem::UnknownKey,
            "{key}"
        );
    }
}

#[test]
fn decay_times() {
    for name in ["dirty_decay_ms", "muzzy_decay_ms"] {
        let (r, _) = lookup(name.as_bytes()).unwrap();
        for (text, v) in [
            ("-1", -1),
            ("0", 0),
            ("-0", 0),
            ("10000", 10_000),
            ("9223372036854775807", i64::MAX),
        ] {
            assert_eq!(
                good(&std::format!("{name}:{text}")).get(r, 0),
                Value::Millis(v)
            );
        }
        for text in [
            "-2",
            "-9223372036854775808",
            "9223372036854775808",
            "99999999999999999999",
        ] {
            assert_eq!(
                bad(&std::format!("{name}:{text}")),
                Problem::OutOfRange,
                "{text}"
            );
        }
        for text in ["-", "--1", "+5", "1.5", "10s", "never"] {
            assert_eq!(
                bad(&std::format!("{name}:{text}")),
                Problem::InvalidValue,
                "{text}"
            );
        }
    }
}

#[test]
fn stats_print_opts() {
    assert_eq!(good("stats_print_opts:J").stats_print_opts(), b"J");
    assert_eq!(
        good("stats_print_opts:Jgmdablxeh").stats_print_opts(),
        b"Jgmdablxeh"
    );
    let o = good("stats_print_opts:gm,stats_print_opts:");
    assert_eq!(
        o.stats_print_opts(),
        b"",
        "the empty value is valid: print everything"
    );
    let max = "a".repeat(STATS_PRINT_OPTS_MAX);
    assert_eq!(
        good(&std::format!("stats_print_opts:{max}")).stats_print_opts(),
        max.as_bytes()
    );
    assert_eq!(
        bad(&std::format!("stats_print_opts:{max}a")),
        Problem::OutOfRange
    );
    for text in ["z", "Jz", "j", "J g", "J:"] {
        let p = problems(&std::format!("stats_print_opts:{text}"));
        assert_eq!(p[0], Problem::InvalidValue, "{text}");
    }
}

#[test]
fn prof_unwind_option() {
    assert_eq!(Options::DEFAULT.prof_unwind, Unwind::Libgcc);
    assert_eq!(good("prof_unwind:fp").prof_unwind, Unwind::Fp);
    assert_eq!(
        good("prof_unwind:fp,prof_unwind:libgcc").prof_unwind,
        Unwind::Libgcc
    );
    // A bad value: one warning, naming the option and the values it takes; the default stays.
    for text in ["frame", "FP", "libunwind"] {
        let conf = std::format!("prof_unwind:{text}");
        assert_eq!(bad(&conf), Problem::InvalidValue, "{conf}");
        let (_, n, lines) = run(&conf);
        assert_eq!(n, 1);
        assert!(
            lines[0].contains("prof_unwind") && lines[0].contains("libgcc|fp"),
            "{lines:?}"
        );
    }
}

#[test]
fn prof_options() {
    let o = good("prof:true,prof_active:false,lg_prof_sample:10,prof_final:true,prof_leak:true,lg_prof_interval:30");
    assert!(o.prof && !o.prof_active && o.prof_final && o.prof_leak);
    assert_eq!((o.lg_prof_sample, o.lg_prof_interval), (10, 30));
    assert_eq!(good("lg_prof_sample:62").lg_prof_sample, 62);
    assert_eq!(bad("lg_prof_sample:63"), Problem::OutOfRange);
    assert_eq!(bad("lg_prof_interval:63"), Problem::OutOfRange);
    assert_eq!(
        good("prof_prefix:/tmp/run-1/x.y_z+~").prof_prefix(),
        b"/tmp/run-1/x.y_z+~"
    );
    // A path prefix is longer than any other letters option: all of it is kept.
    let max = "p".repeat(PROF_PREFIX_MAX);
    assert_eq!(
        good(&std::format!("prof_prefix:{max}")).prof_prefix(),
        max.as_bytes()
    );
    assert_eq!(
        bad(&std::format!("prof_prefix:{max}p")),
        Problem::OutOfRange
    );
    for text in ["a b", "a%b", "a=b"] {
        let p = problems(&std::format!("prof_prefix:{text}"));
        assert_eq!(p[0], Problem::InvalidValue, "{text}");
    }
}

// ---- bad input ----

#[test]
fn every_kind_of_bad_pair() {
    assert_eq!(bad("bogus:1"), Problem::UnknownKey);
    assert_eq!(
        bad("THP:always"),
        Problem::UnknownKey,
        "keys are case-sensitive"
    );
    assert_eq!(bad(" thp:always"), Problem::UnknownKey, "no trimming");
    assert_eq!(bad("thp:sometimes"), Problem::InvalidValue);
    assert_eq!(bad("tcache_max:4M"), Problem::OutOfRange);
    assert_eq!(bad("thp"), Problem::MissingColon);
    assert_eq!(bad(":always"), Problem::EmptyKey);
    assert_eq!(bad("thp:"), Problem::EmptyValue);
    assert_eq!(bad("narenas:"), Problem::EmptyValue);
    assert_eq!(bad("arena.70.thp:never"), Problem::ArenaIndex);
    assert_eq!(bad("thp:always:never"), Problem::InvalidValue);
    assert_eq!(problems(""), []);
    assert_eq!(problems(","), [Problem::EmptyPair, Problem::TrailingComma]);
    assert_eq!(problems(",thp:never"), [Problem::EmptyPair]);
    assert_eq!(problems("thp:never,"), [Problem::TrailingComma]);
    assert_eq!(problems("thp:never,,narenas:2"), [Problem::EmptyPair]);
    assert_eq!(problems(":"), [Problem::EmptyKey]);
    assert_eq!(
        problems("bogus:"),
        [Problem::UnknownKey],
        "the key is checked first"
    );
}

#[test]
fn the_other_pairs_still_apply() {
    let (o, n, lines) = run("narenas:3,thp:sometimes,,bogus,dirty_max:1G,tcache_max:9G,zero:true,");
    assert_eq!(n, 5, "{lines:?}");
    assert_eq!(o.narenas, 3);
    assert_eq!(o.dirty_max, 1 << 30);
    assert!(o.zero);
    assert_eq!(o.thp, Thp::Madvise, "a bad value leaves the old one");
    assert_eq!(o.tcache_max, 32 << 10);
}

#[test]
fn repeated_keys_last_wins() {
    let o = good("thp:always,narenas:2,thp:never,narenas:5,thp:default");
    assert_eq!((o.thp, o.narenas), (Thp::Default, 5));
    // A bad repeat keeps the last good one.
    let (o, n, _) = run("thp:never,thp:bogus");
    assert_eq!((o.thp, n), (Thp::Never, 1));
}

#[test]
fn a_bad_pair_is_reported_with_its_source() {
    let mut o = Options::DEFAULT;
    let mut out = Vec::new();
    let n = o.apply_with(b"thp:sometimes,narenas:2", Source::Env, &mut |l| {
        out.extend_from_slice(l)
    });
    assert_eq!(n, 1);
    assert_eq!(o.narenas, 2);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "hugealloc: HUGEALLOC_CONF: bad pair \"thp:sometimes\" \
         (invalid value; expected always|madvise|never|default|defer)\n"
    );
}

#[test]
fn warning_texts() {
    let line = |conf: &str, source: Source| {
        let mut o = Options::DEFAULT;
        let mut out = Vec::new();
        o.apply_with(conf.as_bytes(), source, &mut |l| out.extend_from_slice(l));
        String::from_utf8(out).unwrap()
    };
    let cases = [
        (
            "tcache_max:2M",
            Source::Api,
            "hugealloc: HugeAlloc::with_conf: bad pair \"tcache_max:2M\" \
             (out of range; expected a size like 65536, 64k, 2MiB in 0..=1792KiB)\n",
        ),
        (
            "thp_treshold:8M",
            Source::Symbol,
            "hugealloc: hugealloc_conf: bad pair \"thp_treshold:8M\" \
             (unknown option; did you mean thp_threshold?)\n",
        ),
        (
            "NARENAS:4",
            Source::EtcFile,
            "hugealloc: /etc/hugealloc.conf: bad pair \"NARENAS:4\" \
             (unknown option; did you mean narenas?)\n",
        ),
        (
            "frobnicate:4",
            Source::Builtin,
            "hugealloc: HUGEALLOC_DEFAULT_CONF (built in): bad pair \"frobnicate:4\" \
             (unknown option; see docs/configuration.md)\n",
        ),
        (
            "arena.64.thp:never",
            Source::Env,
            "hugealloc: HUGEALLOC_CONF: bad pair \"arena.64.thp:never\" \
             (arena index out of range; expected arena.<i>.thp with i in 0..=63)\n",
        ),
        (
            "arena.2.tph:never",
            Source::Env,
            "hugealloc: HUGEALLOC_CONF: bad pair \"arena.2.tph:never\" \
             (unknown option; did you mean arena.<i>.thp?)\n",
        ),
        (
            "dirty_decay_ms:",
            Source::Env,
            "hugealloc: HUGEALLOC_CONF: bad pair \"dirty_decay_ms:\" \
             (empty value; expected milliseconds in -1..=i64::MAX)\n",
        ),
        (
            "narenas:x",
            Source::Env,
            "hugealloc: HUGEALLOC_CONF: bad pair \"narenas:x\" \
             (invalid value; expected a decimal number in 0..=256)\n",
        ),
        (
            "thp",
            Source::Env,
            "hugealloc: HUGEALLOC_CONF: bad pair \"thp\" (missing colon; expected key:value)\n",
        ),
        (
            ":x",
            Source::Env,
            "hugealloc: HUGEALLOC_CONF: bad pair \":x\" (empty key; expected key:value)\n",
        ),
        (
            "zero:true,,junk:true,",
            Source::Env,
            "hugealloc: HUGEALLOC_CONF: bad pair \"\" (empty pair; remove the extra comma)\n\
             hugealloc: HUGEALLOC_CONF: bad pair \"\" (trailing comma; remove it)\n",
        ),
        (
            "stats_print_opts:Jq",
            Source::Env,
            "hugealloc: HUGEALLOC_CONF: bad pair \"stats_print_opts:Jq\" \
             (invalid value; expected at most 32 of Jgmdablxehf)\n",
        ),
    ];
    for (conf, source, want) in cases {
        assert_eq!(line(conf, source), want, "{conf}");
    }
}

#[test]
fn warnings_escape_and_stay_short() {
    let mut o = Options::DEFAULT;
    let mut out = Vec::new();
    o.apply_with(b"t\"h\\p\n\xff:1", Source::Env, &mut |l| {
        out.extend_from_slice(l)
    });
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "hugealloc: HUGEALLOC_CONF: bad pair \"t\\\"h\\\\p\\x0a\\xff:1\" \
         (unknown option; see docs/configuration.md)\n"
    );
    // A long pair is cut short; the line still ends with its detail and a newline.
    let long = std::format!("thp:{}", "x".repeat(2000));
    let mut out = Vec::new();
    o.apply_with(long.as_bytes(), Source::Env, &mut |l| {
        out.extend_from_slice(l)
    });
    let text = String::from_utf8(out).unwrap();
    assert!(text.len() < 512, "{}", text.len());
    assert!(
        text.contains("xxx...\" (invalid value; expected always|madvise|never|default|defer)\n")
    );
    // Bytes that escape to four must not overrun either.
    let mut out = Vec::new();
    o.apply_with(&[0u8; 3000], Source::Env, &mut |l| out.extend_from_slice(l));
    assert!(out.len() < 512 && out.ends_with(b"(missing colon; expected key:value)\n"));
}

#[test]
fn suggestions() {
    assert_eq!(suggest(b"narena"), Some("narenas"));
    assert_eq!(suggest(b"tcachemax"), Some("tcache_max"));
    assert_eq!(
        suggest(b"dirty_decay"),
        Some("dirty_decay_ms"),
        "3 edits from a 14-letter name: within 1 + 14 / 5"
    );
    assert_eq!(suggest(b"decay"), None, "too far from every name");
    assert_eq!(
        suggest(b"thpp_"),
        None,
        "2 edits from a 3-letter name: too many"
    );
    assert_eq!(suggest(b"dirty_decay_m"), Some("dirty_decay_ms"));
    assert_eq!(suggest(b"Thp"), Some("thp"));
    assert_eq!(suggest(b"x"), None);
    assert_eq!(suggest(&[b'a'; 100]), None);
}

// ---- abort_conf ----

#[test]
fn abort_conf_is_decided_after_the_whole_string() {
    let confs = |list: &[(Source, &'static str)]| -> Vec<(Source, Option<&'static [u8]>)> {
        list.iter().map(|&(s, c)| (s, Some(c.as_bytes()))).collect()
    };
    let load = |list: &[(Source, &'static str)]| {
        let mut o = Options::DEFAULT;
        let outcome = load_from(&mut o, &confs(list), &mut |_| {});
        (o, outcome)
    };
    // Set before the bad pair, in the same string.
    let (_, out) = load(&[
        (Source::Env, "abort_conf:true,thp:bogus"),
        (Source::Api, "narenas:1"),
    ]);
    assert_eq!(
        out,
        LoadOutcome {
            bad_pairs: 1,
            abort_after: Some(Source::Env)
        }
    );
    // Set after the bad pair, in the same string: still aborts.
    let (o, out) = load(&[(Source::Env, "thp:bogus,abort_conf:true,narenas:2")]);
    assert_eq!(out.abort_after, Some(Source::Env));
    assert_eq!(o.narenas, 2, "the whole string is read first");
    // Set by an earlier source.
    let (o, out) = load(&[
        (Source::Symbol, "abort_conf:true"),
        (Source::Env, "bogus:1"),
        (Source::Api, "narenas:9"),
    ]);
    assert_eq!(out.abort_after, Some(Source::Env));
    assert_eq!(o.narenas, 0, "later sources are not read");
    // An earlier source's error counts once abort_conf is set (jemalloc's order).
    let (_, out) = load(&[
        (Source::Symbol, "bogus:1"),
        (Source::Env, "abort_conf:true"),
    ]);
    assert_eq!(
        out,
        LoadOutcome {
            bad_pairs: 1,
            abort_after: Some(Source::Env)
        }
    );
    // Turned off again before the end: a warning only.
    let (_, out) = load(&[(Source::Env, "abort_conf:true,bogus:1,abort_conf:false")]);
    assert_eq!(
        out,
        LoadOutcome {
            bad_pairs: 1,
            abort_after: None
        }
    );
    // No bad pair: no abort.
    let (o, out) = load(&[(Source::Env, "abort_conf:true,thp:never")]);
    assert_eq!(
        out,
        LoadOutcome {
            bad_pairs: 0,
            abort_after: None
        }
    );
    assert_eq!(o.thp, Thp::Never);
}

// ---- the sources ----

#[test]
fn later_sources_win() {
    let mut o = Options::DEFAULT;
    let mut lines = Vec::new();
    let confs: [(Source, Option<&[u8]>); 5] = [
        (
            Source::Builtin,
            Some(b"thp:always,narenas:1,dirty_max:1M,junk:true"),
        ),
        (Source::Symbol, Some(b"narenas:2,dirty_max:2M,bogus:1")),
        (Source::EtcFile, Some(b"dirty_max:3M,tcache:false")),
        (Source::Env, Some(b"dirty_max:4M,thp:never,thp:bad")),
        (Source::Api, Some(b"dirty_max:5M")),
    ];
    let out = load_from(&mut o, &confs, &mut |l| {
        lines.push(String::from_utf8_lossy(l).into_owned())
    });
    assert_eq!(
        out,
        LoadOutcome {
            bad_pairs: 2,
            abort_after: None
        }
    );
    assert_eq!(o.dirty_max, 5 << 20, "the Rust string is last");
    assert_eq!(o.thp, Thp::Never, "env over the built-in default");
    assert_eq!(o.narenas, 2, "symbol over the built-in default");
    assert!(!o.tcache && o.junk, "untouched later: earlier values stay");
    assert!(lines[0].starts_with("hugealloc: hugealloc_conf: bad pair \"bogus:1\""));
    assert!(lines[1].starts_with("hugealloc: HUGEALLOC_CONF: bad pair \"thp:bad\""));
    // Every order of two sources: the later one's value stays.
    for (i, a) in Source::ALL.iter().enumerate() {
        for b in &Source::ALL[i + 1..] {
            let mut o = Options::DEFAULT;
            let confs: [(Source, Option<&[u8]>); 2] =
                [(*a, Some(b"narenas:10")), (*b, Some(b"narenas:20"))];
            load_from(&mut o, &confs, &mut |_| {});
            assert_eq!(o.narenas, 20);
        }
    }
    // Absent sources are skipped.
    let mut o = Options::DEFAULT;
    let confs: [(Source, Option<&[u8]>); 3] = [
        (Source::Builtin, Some(b"narenas:3")),
        (Source::Env, None),
        (Source::Api, None),
    ];
    assert_eq!(load_from(&mut o, &confs, &mut |_| {}).bad_pairs, 0);
    assert_eq!(o.narenas, 3);
}

#[test]
fn confirm_conf_prints_sources_and_options() {
    let mut o = Options::DEFAULT;
    let mut text = Vec::new();
    let confs: [(Source, Option<&[u8]>); 3] = [
        (Source::Symbol, Some(b"thp:always")),
        (Source::EtcFile, None),
        (
            Source::Env,
            Some(b"confirm_conf:true,arena.2.thp:never,tcache_max:64k"),
        ),
    ];
    load_from(&mut o, &confs, &mut |l| text.extend_from_slice(l));
    let text = String::from_utf8(text).unwrap();
    let want = "hugealloc: conf from hugealloc_conf: \"thp:always\"\n\
        hugealloc: conf from HUGEALLOC_CONF: \"confirm_conf:true,arena.2.thp:never,tcache_max:64k\"\n\
        hugealloc: opt.narenas: 0\n\
        hugealloc: opt.tcache: true\n\
        hugealloc: opt.tcache_max: 64KiB\n\
        hugealloc: opt.tcache_nslots_small_max: 2048\n\
        hugealloc: opt.thp: always\n\
        hugealloc: opt.thp_threshold: 4MiB\n\
        hugealloc: opt.metadata_thp: default\n\
        hugealloc: opt.arena.2.thp: never\n\
        hugealloc: opt.dirty_decay_ms: 10000\n\
        hugealloc: opt.muzzy_decay_ms: 0\n\
        hugealloc: opt.dirty_max: 0\n\
        hugealloc: opt.dirty_growth_pct: 10\n\
        hugealloc: opt.thp_collapse: false\n\
        hugealloc: opt.thp_defer_rate: 512MiB\n\
        hugealloc: opt.background_thread: false\n\
        hugealloc: opt.stats_print: false\n\
        hugealloc: opt.stats_print_opts: \n\
        hugealloc: opt.abort_conf: false\n\
        hugealloc: opt.confirm_conf: true\n\
        hugealloc: opt.junk: false\n\
        hugealloc: opt.zero: false\n\
        hugealloc: opt.check: cheap\n\
        hugealloc: opt.hugetlb: off\n\
        hugealloc: opt.hugetlb_reserve: 0\n\
        hugealloc: opt.prof: false\n\
        hugealloc: opt.prof_active: true\n\
        hugealloc: opt.lg_prof_sample: 19\n\
        hugealloc: opt.prof_prefix: hugealloc\n\
        hugealloc: opt.prof_final: false\n\
        hugealloc: opt.prof_leak: false\n\
        hugealloc: opt.lg_prof_interval: 0\n\
        hugealloc: opt.prof_unwind: libgcc\n";
    assert_eq!(text, want);
    // Without confirm_conf, nothing is printed.
    let mut n = 0;
    load_from(&mut Options::default(), &confs[..1], &mut |_| n += 1);
    assert_eq!(n, 0);
}

#[test]
fn write_options_of_the_defaults() {
    assert_eq!(
        written(&Options::DEFAULT).join(","),
        "narenas:0,tcache:true,tcache_max:32KiB,tcache_nslots_small_max:2048,thp:madvise,thp_threshold:4MiB,\
         metadata_thp:default,dirty_decay_ms:10000,muzzy_decay_ms:0,dirty_max:0,\
         dirty_growth_pct:10,thp_collapse:false,thp_defer_rate:512MiB,background_thread:false,stats_print:false,stats_print_opts:,\
         abort_conf:false,confirm_conf:false,junk:false,zero:false,check:cheap,\
         hugetlb:off,hugetlb_reserve:0,\
         prof:false,prof_active:true,lg_prof_sample:19,prof_prefix:hugealloc,prof_final:false,\
         prof_leak:false,lg_prof_interval:0,prof_unwind:libgcc"
    );
    let o = good("arena.0.thp:always,arena.63.thp:inherit,arena.7.thp:never,dirty_max:1536KiB,tcache_max:4097");
    let items = written(&o);
    assert!(items.contains(&String::from("arena.0.thp:always")));
    assert!(items.contains(&String::from("arena.7.thp:never")));
    assert!(!items.iter().any(|i| i.starts_with("arena.63")));
    assert!(items.contains(&String::from("dirty_max:1536KiB")));
    assert!(items.contains(&String::from("tcache_max:4097")));
}

/// The longest value (a `prof_prefix` of `PROF_PREFIX_MAX` bytes) is written whole, and reads
/// back to the same options (with 96 bytes for `name:value`, 84 bytes of it were kept: found by
/// the `conf` fuzz target).
#[test]
fn write_options_keeps_the_longest_values_whole() {
    use crate::config::PROF_PREFIX_MAX;
    let prefix = "p/".repeat(PROF_PREFIX_MAX / 2);
    assert_eq!(prefix.len(), PROF_PREFIX_MAX);
    let o = good(&std::format!(
        "prof_prefix:{prefix},stats_print_opts:Jgmdablxehf,thp_threshold:9223372036854775807"
    ));
    assert_eq!(o.prof_prefix(), prefix.as_bytes());
    let items = written(&o);
    assert!(items.contains(&std::format!("prof_prefix:{prefix}")));
    let mut again = Options::DEFAULT;
    assert_eq!(
        again.apply_with(items.join(",").as_bytes(), Source::Api, &mut |_| {}),
        0
    );
    assert_eq!(again, o);
}

#[test]
fn sizes_render_with_the_largest_exact_suffix() {
    for (v, text) in [
        (0, "0"),
        (1, "1"),
        (1023, "1023"),
        (1024, "1KiB"),
        (1025, "1025"),
        (3 << 10, "3KiB"),
        (1536 << 10, "1536KiB"),
        (1 << 20, "1MiB"),
        (3 << 20, "3MiB"),
        (5 << 30, "5GiB"),
        (7 << 40, "7TiB"),
        (1 << 50, "1024TiB"),
    ] {
        let mut out = Vec::new();
        Value::Size(v).write(&mut |b| out.extend_from_slice(b));
        assert_eq!(String::from_utf8(out).unwrap(), text);
    }
}

#[test]
fn the_build_time_default_is_the_one_built_with() {
    // cargo passes the same environment to the build and to the test run: a stale build (the
    // variable not tracked) would differ here.
    let at_run_time = std::env::var("HUGEALLOC_DEFAULT_CONF").ok();
    assert_eq!(BUILTIN_CONF.map(String::from), at_run_time);
}

#[test]
fn no_symbol_in_this_binary() {
    // The unit-test binary defines no `hugealloc_conf`: the weak reference reads as absent
    // (tests/config.rs defines one and checks it is found).
    assert_eq!(crate::os::conf_symbol(), None);
}

#[test]
fn read_link_reads_the_target_not_the_contents() {
    let dir = std::env::temp_dir().join(std::format!("hugealloc-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("link");
    let file = dir.join("file");
    let _ = std::fs::remove_file(&link);
    std::fs::write(&file, "narenas:1").unwrap();
    std::os::unix::fs::symlink("thp:never,narenas:2", &link).unwrap();
    let c = |p: &std::path::Path| std::format!("{}\0", p.display()).into_bytes();
    let mut buf = [0u8; 64];
    let n = crate::os::read_link(&c(&link), &mut buf).unwrap();
    assert_eq!(&buf[..n], b"thp:never,narenas:2");
    let mut small = [0u8; 4];
    assert_eq!(
        crate::os::read_link(&c(&link), &mut small),
        Some(4),
        "cut short: full buffer"
    );
    assert_eq!(
        crate::os::read_link(&c(&file), &mut buf),
        None,
        "not a link"
    );
    assert_eq!(
        crate::os::read_link(&c(&dir.join("missing")), &mut buf),
        None
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- any input ----

/// A string of likely pieces: real keys, near-keys, values, separators, junk bytes.
fn conf_strategy() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        proptest::sample::select(OPTION_TABLE.iter().map(|r| r.name).collect::<Vec<_>>())
            .prop_map(|s| s.as_bytes().to_vec()),
        (0usize..80).prop_map(|i| std::format!("arena.{i}.thp").into_bytes()),
        (0usize..80).prop_map(|i| std::format!("arena.{i}.hugetlb").into_bytes()),
        proptest::sample::select(std::vec![
            ":",
            ",",
            "::",
            ",,",
            "true",
            "false",
            "1",
            "0",
            "-1",
            "-2",
            "always",
            "never",
            "madvise",
            "default",
            "inherit",
            "64k",
            "2MiB",
            "1G",
            "2M",
            "off",
            "99999999999999999999",
            "J",
            "gmd",
            "z",
            "",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        proptest::collection::vec(any::<u8>(), 0..6),
    ];
    proptest::collection::vec(piece, 0..24).prop_map(|v| v.concat())
}

/// Every stored value is in its row's range.
fn in_range(o: &Options) -> bool {
    OPTION_TABLE.iter().all(|r| {
        (0..ARENA_THP_MAX).all(|i| match (r.kind, o.get(r, i)) {
            (Kind::Count { max }, Value::Count(n)) => n <= max,
            (Kind::Size { max }, Value::Size(n)) => n <= max,
            (Kind::Millis, Value::Millis(n)) => n >= -1,
            (Kind::Letters { allowed, max_len }, Value::Letters(s)) => {
                s.len() <= max_len && s.iter().all(|c| allowed.contains(c))
            }
            (Kind::Bool, Value::Bool(_)) | (Kind::Thp, Value::Thp(_)) => true,
            (Kind::ArenaThp, Value::ArenaThp(_)) | (Kind::Check, Value::Check(_)) => true,
            (Kind::Hugetlb, Value::Hugetlb(_)) | (Kind::ArenaHugetlb, Value::ArenaHugetlb(_)) => {
                true
            }
            (Kind::Unwind, Value::Unwind(_)) => true,
            _ => false,
        })
    })
}

fn check_any(conf: &[u8]) {
    let errors = parse_pairs(conf).filter(|p| p.is_err()).count();
    let items = parse_pairs(conf).count();
    let commas = conf.iter().filter(|&&c| c == b',').count();
    assert_eq!(items, if conf.is_empty() { 0 } else { commas + 1 });
    let mut o = Options::DEFAULT;
    o.abort_conf = true; // apply_with never aborts, whatever the string says
    let mut lines = 0;
    let bad = o.apply_with(conf, Source::Env, &mut |l| {
        assert!(l.starts_with(b"hugealloc: HUGEALLOC_CONF: bad pair \""));
        assert!(l.len() < 512 && l.ends_with(b")\n"));
        lines += 1;
    });
    assert_eq!((bad, lines), (errors, errors));
    assert!(in_range(&o));
    // What write_options prints reads back to the same options.
    let mut again = Options::DEFAULT;
    let mut text = Vec::new();
    write_options(&o, &mut |item| {
        text.extend_from_slice(item);
        text.push(b',');
    });
    text.pop();
    assert_eq!(again.apply_with(&text, Source::Api, &mut |_| {}), 0);
    assert_eq!(again, o);
}

proptest! {
    #[test]
    fn random_bytes_never_panic(conf in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_any(&conf);
    }

    #[test]
    fn random_near_valid_strings_never_panic(conf in conf_strategy()) {
        check_any(&conf);
    }

    #[test]
    fn sizes_round_trip(v in 0usize..(1usize << 50), shift in 0u32..41) {
        let v = (v << shift) & (isize::MAX as usize);
        let mut text = Vec::new();
        Value::Size(v).write(&mut |b| text.extend_from_slice(b));
        prop_assert_eq!(SIZE_ANY.parse(&text), Ok(Value::Size(v)));
    }
}
