//! Fuzzes the configuration parser: any bytes, as one string and as two sources. Nothing may
//! panic or abort (`abort_conf:true` in the input included: only the non-aborting entry points
//! are used, and the sink swallows the warning lines), every warning is one well-formed line,
//! every stored value lies in its range, and `write_options` reads back to the same options.
#![no_main]

use hugealloc::testing::config::{
    load_from, parse_pairs, write_options, Kind, Options, Source, Value, ARENA_THP_MAX,
    OPTION_TABLE,
};
use libfuzzer_sys::fuzz_target;

fn in_range(o: &Options) -> bool {
    // A match on the kind with no wildcard: a new kind of option does not compile here until
    // its range is written down (a wildcard once made every input fail when kinds were added).
    OPTION_TABLE.iter().all(|r| {
        (0..ARENA_THP_MAX).all(|i| {
            let v = o.get(r, i);
            match r.kind {
                Kind::Count { max } => matches!(v, Value::Count(n) if n <= max),
                Kind::Size { max } => matches!(v, Value::Size(n) if n <= max),
                Kind::Millis => matches!(v, Value::Millis(n) if n >= -1),
                Kind::Letters { allowed, max_len } => matches!(v, Value::Letters(s)
                    if s.len() <= max_len && s.iter().all(|c| allowed.contains(c))),
                Kind::Bool => matches!(v, Value::Bool(_)),
                Kind::Thp => matches!(v, Value::Thp(_)),
                Kind::ArenaThp => matches!(v, Value::ArenaThp(_)),
                Kind::Check => matches!(v, Value::Check(_)),
                Kind::Hugetlb => matches!(v, Value::Hugetlb(_)),
                Kind::ArenaHugetlb => matches!(v, Value::ArenaHugetlb(_)),
                Kind::Unwind => matches!(v, Value::Unwind(_)),
            }
        })
    })
}

fuzz_target!(|data: &[u8]| {
    let errors = parse_pairs(data).filter(Result::is_err).count();

    let mut opts = Options::DEFAULT;
    opts.abort_conf = true;
    let mut lines = 0;
    let bad = opts.apply_with(data, Source::Env, &mut |line| {
        assert!(line.starts_with(b"hugealloc: HUGEALLOC_CONF: bad pair \""));
        assert!(line.len() < 512 && line.ends_with(b")\n"));
        assert_eq!(line.iter().filter(|&&c| c == b'\n').count(), 1);
        lines += 1;
    });
    assert_eq!(bad, errors);
    assert_eq!(lines, errors);
    assert!(in_range(&opts));

    // The rendering reads back to the same options, with no bad pair.
    let mut text = [0u8; 4096];
    let mut len = 0;
    write_options(&opts, &mut |item| {
        text[len..len + item.len()].copy_from_slice(item);
        len += item.len();
        text[len] = b',';
        len += 1;
    });
    let mut again = Options::DEFAULT;
    assert_eq!(
        again.apply_with(&text[..len - 1], Source::Api, &mut |_| {}),
        0
    );
    assert_eq!(again, opts);

    // As two sources, split in the middle: never aborts, only reports.
    let (a, b) = data.split_at(data.len() / 2);
    let mut opts = Options::DEFAULT;
    let outcome = load_from(
        &mut opts,
        &[(Source::Env, Some(a)), (Source::Api, Some(b))],
        &mut |line| assert!(line.starts_with(b"hugealloc: ")),
    );
    if outcome.abort_after.is_none() {
        assert!(outcome.bad_pairs == 0 || !opts.abort_conf);
    } else {
        assert!(outcome.bad_pairs > 0 && opts.abort_conf);
    }
    assert!(in_range(&opts));
});
