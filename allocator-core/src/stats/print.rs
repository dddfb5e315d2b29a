//! Printing the statistics: the dump [`print`] (text or JSON, parts chosen by
//! `stats_print_opts` letters, [`PrintOpts`]), the short summary at exit ([`print_summary`])
//! and the `stats_print:true` exit hook ([`at_init`]).
//!
//! Nothing here allocates: text goes out through a callback, formatted in small stack
//! buffers; [`LineBuf`] cuts it into lines for writers that want whole lines.

use super::{arena_report, ArenaFigures, ArenaReport, BinFigures, Section, Stats, ARENAS_ALL};
use crate::arena::Arena;
use crate::config::{self, Options, Value};
use crate::sync::Ordering;

/// What [`print`] prints, from `stats_print_opts` letters (jemalloc's `malloc_stats_print`
/// options): `J` JSON instead of text; each of these leaves a part out: `g` the general part
/// (version, options, process-wide figures), `m` the figures merged over arenas, `a` each
/// arena's, `b` the bins (small size classes), `l` the large and huge figures, `x` lock
/// contention, `h` THP advice. `d` (destroyed arenas) and `e` (extents) are accepted and change
/// nothing: hugealloc destroys no arena and prints no extent figures. `f` (full) leaves
/// nothing out: at exit it asks for this dump instead of the summary ([`print_summary`]).
/// Other bytes are ignored.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PrintOpts {
    pub json: bool,
    pub general: bool,
    pub merged: bool,
    pub arenas: bool,
    pub bins: bool,
    pub large: bool,
    pub mutex: bool,
    pub thp: bool,
}

impl PrintOpts {
    /// Everything, as text.
    pub const ALL: PrintOpts = PrintOpts {
        json: false,
        general: true,
        merged: true,
        arenas: true,
        bins: true,
        large: true,
        mutex: true,
        thp: true,
    };

    /// Reads `stats_print_opts` letters.
    pub fn parse(letters: &[u8]) -> PrintOpts {
        let mut o = PrintOpts::ALL;
        for &c in letters {
            match c {
                b'J' => o.json = true,
                b'g' => o.general = false,
                b'm' => o.merged = false,
                b'a' => o.arenas = false,
                b'b' => o.bins = false,
                b'l' => o.large = false,
                b'x' => o.mutex = false,
                b'h' => o.thp = false,
                _ => {}
            }
        }
        o
    }

    fn shows(&self, section: Section) -> bool {
        match section {
            Section::Main => true,
            Section::Large => self.large,
            Section::Thp => self.thp,
            Section::Mutex => self.mutex,
        }
    }
}

/// hugealloc's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Text out through a callback, with number formatting.
struct Out<'a> {
    f: &'a mut dyn FnMut(&[u8]),
}

impl Out<'_> {
    fn b(&mut self, bytes: &[u8]) {
        (self.f)(bytes);
    }

    fn s(&mut self, s: &str) {
        (self.f)(s.as_bytes());
    }

    fn dec(&mut self, v: u64) {
        let mut tmp = [0u8; 20];
        (self.f)(crate::diag::dec_digits(v, &mut tmp));
    }

    /// `v` right-aligned in `width` columns.
    fn dec_padded(&mut self, v: u64, width: usize) {
        let mut tmp = [0u8; 20];
        let digits = crate::diag::dec_digits(v, &mut tmp);
        for _ in digits.len()..width {
            (self.f)(b" ");
        }
        (self.f)(digits);
    }

    fn signed(&mut self, v: i64) {
        if v < 0 {
            self.s("-");
        }
        self.dec(v.unsigned_abs());
    }

    /// A JSON string: quotes, with `"`, `\` and control bytes escaped.
    fn json_str(&mut self, bytes: &[u8]) {
        self.s("\"");
        for &c in bytes {
            match c {
                b'"' | b'\\' => self.b(&[b'\\', c]),
                0..=0x1f | 0x7f.. => {
                    let hex = b"0123456789abcdef";
                    self.b(b"\\u00");
                    self.b(&[hex[usize::from(c >> 4)], hex[usize::from(c & 15)]]);
                }
                _ => self.b(&[c]),
            }
        }
        self.s("\"");
    }

    /// `,` before every member of a JSON object but the first.
    fn sep(&mut self, first: &mut bool) {
        if !*first {
            self.s(",");
        }
        *first = false;
    }

    /// `"key":`.
    fn key(&mut self, first: &mut bool, key: &[u8]) {
        self.sep(first);
        self.json_str(key);
        self.s(":");
    }

    /// `hugealloc: ` and the `stats.arenas.<i>.` prefix of an arena's text lines.
    fn arena_prefix(&mut self, i: usize) {
        self.s("hugealloc: stats.arenas.");
        self.dec(i as u64);
        self.s(".");
    }
}

/// An option's value as JSON: numbers as numbers, policies and letters as strings.
fn json_value(out: &mut Out, v: Value) {
    match v {
        Value::Bool(b) => out.s(if b { "true" } else { "false" }),
        Value::Count(n) | Value::Size(n) => out.dec(n as u64),
        Value::Millis(n) => out.signed(n),
        Value::Thp(t) | Value::ArenaThp(Some(t)) => out.json_str(t.name().as_bytes()),
        Value::ArenaThp(None) | Value::ArenaHugetlb(None) => out.json_str(b"inherit"),
        Value::Hugetlb(h) | Value::ArenaHugetlb(Some(h)) => out.json_str(h.name().as_bytes()),
        Value::Letters(s) => out.json_str(s),
        Value::Check(full) => out.json_str(if full { b"full" } else { b"cheap" }),
        Value::Unwind(u) => out.json_str(u.name().as_bytes()),
    }
}

/// Whether an arena is worth printing: it has chunks or threads.
fn in_use(r: &ArenaReport) -> bool {
    r.figures.mapped > 0 || r.figures.nthreads > 0
}

/// Writes the statistics `opts` selects through `out`, in pieces (see [`LineBuf`] for whole
/// lines). Text is one `hugealloc: <ctl name>: <value>` line per figure, and a table of the
/// bins in use per arena; JSON is one object, `{"hugealloc":{"version":...,"stats":{...},
/// "opt":{...},"arenas":{"merged":{...},"0":{...}}}}`. Arenas with neither chunks nor threads,
/// and bins that never handed out a block, are left out.
pub fn print(opts: PrintOpts, options: &Options, out: &mut dyn FnMut(&[u8])) {
    let out = &mut Out { f: out };
    let merged = arena_report(ARENAS_ALL).unwrap_or(ArenaReport::EMPTY);
    if opts.json {
        print_json(opts, options, &merged, out);
    } else {
        print_text(opts, options, &merged, out);
    }
}

fn print_text(opts: PrintOpts, options: &Options, merged: &ArenaReport, out: &mut Out) {
    if opts.general {
        out.s("hugealloc: version: ");
        out.s(VERSION);
        out.s("\n");
        config::for_each_option(options, &mut |name, value| {
            out.s("hugealloc: opt.");
            out.b(name);
            out.s(": ");
            value.write(&mut |b| out.b(b));
            out.s("\n");
        });
        for (name, value, _) in Stats::from_merged(&merged.figures).fields() {
            out.s("hugealloc: stats.");
            out.s(name);
            out.s(": ");
            out.dec(value as u64);
            out.s("\n");
        }
    }
    if opts.merged {
        print_arena_text(opts, ARENAS_ALL, merged, out);
    }
    if opts.arenas {
        for i in 0..crate::registry::narenas() {
            let r = ArenaReport::of(crate::registry::arena(i));
            if !in_use(&r) {
                continue;
            }
            let a = crate::registry::arena(i);
            out.s("hugealloc: arena.");
            out.dec(i as u64);
            out.s(".thp: ");
            out.s(a.thp().name());
            out.s("\nhugealloc: arena.");
            out.dec(i as u64);
            out.s(".dirty_decay_ms: ");
            out.signed(a.dirty_decay_ms());
            out.s("\n");
            print_arena_text(opts, i, &r, out);
        }
    }
}

/// Column width of the bin tables.
const COLUMN: usize = 11;

fn print_arena_text(opts: PrintOpts, i: usize, r: &ArenaReport, out: &mut Out) {
    for (f, v) in ArenaFigures::FIGURES.iter().zip(r.figures.values()) {
        if opts.shows(f.section) {
            out.arena_prefix(i);
            out.s(f.name);
            out.s(": ");
            out.dec(v);
            out.s("\n");
        }
    }
    if !opts.bins {
        return;
    }
    out.arena_prefix(i);
    out.s("bins.<j>:");
    for f in BinFigures::FIGURES.iter().filter(|f| opts.shows(f.section)) {
        for _ in f.name.len()..COLUMN {
            out.s(" ");
        }
        out.s(" ");
        out.s(f.name);
    }
    out.s("\n");
    for (j, bin) in r.bins.iter().enumerate().filter(|(_, b)| b.nmalloc > 0) {
        out.arena_prefix(i);
        out.s("bins.");
        out.dec(j as u64);
        out.s(":");
        // Align the rows under the header (`<j>` is three columns).
        let digits = if j < 10 { 1 } else { 2 };
        for _ in digits..3 {
            out.s(" ");
        }
        for (f, v) in BinFigures::FIGURES.iter().zip(bin.values()) {
            if opts.shows(f.section) {
                out.s(" ");
                out.dec_padded(v, COLUMN);
            }
        }
        out.s("\n");
    }
}

fn print_json(opts: PrintOpts, options: &Options, merged: &ArenaReport, out: &mut Out) {
    out.s("{\"hugealloc\":{\"version\":");
    out.json_str(VERSION.as_bytes());
    if opts.general {
        out.s(",\"stats\":{");
        let mut first = true;
        for (name, value, _) in Stats::from_merged(&merged.figures).fields() {
            out.key(&mut first, name.as_bytes());
            out.dec(value as u64);
        }
        out.s("},\n\"opt\":{");
        let mut first = true;
        config::for_each_option(options, &mut |name, value| {
            out.key(&mut first, name);
            json_value(out, value);
        });
        out.s("}");
    }
    if opts.merged || opts.arenas {
        out.s(",\n\"arenas\":{");
        let mut first = true;
        if opts.merged {
            out.key(&mut first, b"merged");
            print_arena_json(opts, None, merged, out);
        }
        if opts.arenas {
            for i in 0..crate::registry::narenas() {
                let r = ArenaReport::of(crate::registry::arena(i));
                if !in_use(&r) {
                    continue;
                }
                out.s("\n");
                let mut tmp = [0u8; 20];
                out.key(&mut first, crate::diag::dec_digits(i as u64, &mut tmp));
                print_arena_json(opts, Some(crate::registry::arena(i)), &r, out);
            }
        }
        out.s("}");
    }
    out.s("}}\n");
}

fn print_arena_json(opts: PrintOpts, arena: Option<&Arena>, r: &ArenaReport, out: &mut Out) {
    out.s("{");
    let mut first = true;
    if let Some(a) = arena {
        out.key(&mut first, b"thp");
        out.json_str(a.thp().name().as_bytes());
        out.key(&mut first, b"dirty_decay_ms");
        out.signed(a.dirty_decay_ms());
    }
    for (f, v) in ArenaFigures::FIGURES.iter().zip(r.figures.values()) {
        if opts.shows(f.section) {
            out.key(&mut first, f.name.as_bytes());
            out.dec(v);
        }
    }
    if opts.bins {
        out.key(&mut first, b"bins");
        out.s("{");
        let mut first_bin = true;
        for (j, bin) in r.bins.iter().enumerate().filter(|(_, b)| b.nmalloc > 0) {
            let mut tmp = [0u8; 20];
            out.key(&mut first_bin, crate::diag::dec_digits(j as u64, &mut tmp));
            out.s("{");
            let mut first_figure = true;
            for (f, v) in BinFigures::FIGURES.iter().zip(bin.values()) {
                if opts.shows(f.section) {
                    out.key(&mut first_figure, f.name.as_bytes());
                    out.dec(v);
                }
            }
            out.s("}");
        }
        out.s("}");
    }
    out.s("}");
}

/// The longest piece [`LineBuf`] hands on at once.
pub const LINE_MAX: usize = 512;

/// Collects text into lines and hands each whole line, newline included, to a callback (a
/// line longer than [`LINE_MAX`] goes in pieces). One call per line keeps processes sharing
/// stderr from interleaving inside a line.
pub struct LineBuf<'a> {
    out: &'a mut dyn FnMut(&[u8]),
    buf: [u8; LINE_MAX],
    len: usize,
}

impl<'a> LineBuf<'a> {
    pub fn new(out: &'a mut dyn FnMut(&[u8])) -> LineBuf<'a> {
        LineBuf {
            out,
            buf: [0; LINE_MAX],
            len: 0,
        }
    }

    /// Appends text; hands on each line it completes.
    pub fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = b;
                self.len += 1;
            }
            if b == b'\n' || self.len >= LINE_MAX {
                self.flush();
            }
        }
    }

    /// Hands on what is buffered, if anything.
    pub fn flush(&mut self) {
        if self.len > 0 {
            (self.out)(self.buf.get(..self.len).unwrap_or(&[]));
            self.len = 0;
        }
    }
}

/// [`print`] through a [`LineBuf`]: `out` gets whole lines.
pub fn print_lines(opts: PrintOpts, options: &Options, out: &mut dyn FnMut(&[u8])) {
    let mut lines = LineBuf::new(out);
    print(opts, options, &mut |b| lines.push(b));
    lines.flush();
}

// ---- the summary at exit -----------------------------------------------------------------

/// How many bins the summary lists.
const SUMMARY_BINS: usize = 5;

/// `bytes` as `34.1 MiB` (one decimal, binary units), right-aligned in 10 columns.
fn human(out: &mut Out, bytes: u64) {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut unit = 0;
    let mut scaled = bytes;
    while scaled >= 1024 * 1024 && unit + 2 < UNITS.len() {
        scaled /= 1024;
        unit += 1;
    }
    // `scaled` < 1 MiB of the current unit: print it in the next unit with one decimal.
    let (whole, tenths, name) = if scaled < 1024 {
        (scaled, None, UNITS[unit])
    } else {
        let tenths = (scaled * 10 + 512) / 1024;
        (tenths / 10, Some(tenths % 10), UNITS[unit + 1])
    };
    let mut tmp = [0u8; 20];
    let digits = crate::diag::dec_digits(whole, &mut tmp).len();
    let len = digits + if tenths.is_some() { 2 } else { 0 } + 1 + name.len();
    for _ in len..10 {
        out.s(" ");
    }
    out.dec(whole);
    if let Some(t) = tenths {
        out.s(".");
        out.dec(t);
    }
    out.s(" ");
    out.s(name);
}

/// The short statistics printed at exit by default: the process-wide bytes that say how much
/// memory the program uses and where it went, bytes on huge pages, and the small size classes
/// holding the most bytes. Every line starts `hugealloc: `; a figure's line starts with its
/// `ctl` name (`hugealloc: stats.allocated: `). `docs/stats.md` explains each line.
pub fn print_summary(out: &mut dyn FnMut(&[u8])) {
    let out = &mut Out { f: out };
    let merged = arena_report(ARENAS_ALL).unwrap_or(ArenaReport::EMPTY);
    let s = Stats::from_merged(&merged.figures);
    out.s("hugealloc: statistics of process ");
    out.dec(u64::from(crate::os::pid()));
    out.s(" at exit (every figure: stats_print_opts:f; meanings: docs/stats.md)\n");
    let huge_backed: u64 = (0..crate::registry::narenas())
        .filter(|&i| in_use(&ArenaReport::of(crate::registry::arena(i))))
        .map(|i| crate::arena::huge_backed_bytes(i as u32))
        .sum();
    let rows: [(&str, u64, &str); 8] = [
        (
            "stats.allocated",
            s.allocated as u64,
            "in blocks the program holds",
        ),
        (
            "stats.active",
            s.active as u64,
            "in pages holding those blocks",
        ),
        (
            "stats.dirty",
            s.dirty as u64,
            "freed pages kept in RAM for reuse",
        ),
        (
            "stats.resident",
            s.resident as u64,
            "likely in RAM: active + dirty + metadata",
        ),
        (
            "stats.mapped",
            s.mapped as u64,
            "mapped by hugealloc (chunks + metadata)",
        ),
        (
            "stats.retained",
            s.retained as u64,
            "address space kept, not in RAM",
        ),
        (
            "stats.metadata",
            s.metadata as u64,
            "hugealloc's own structures",
        ),
        (
            "huge_backed",
            huge_backed,
            "on 2 MiB huge pages now (AnonHugePages)",
        ),
    ];
    for (name, bytes, meaning) in rows {
        out.s("hugealloc: ");
        out.s(name);
        out.s(": ");
        for _ in name.len()..16 {
            out.s(" ");
        }
        out.dec_padded(bytes, 13);
        out.s(" ");
        human(out, bytes);
        out.s("  ");
        out.s(meaning);
        out.s("\n");
    }
    // The bins holding the most bytes now, by repeated selection (no allocation, 5 passes).
    // Each bin is carried with its index, so nothing is looked up by index (no bounds check).
    let held = |b: &BinFigures| b.curregs * b.size;
    let mut shown = [usize::MAX; SUMMARY_BINS];
    for k in 0..SUMMARY_BINS {
        let best = merged
            .bins
            .iter()
            .enumerate()
            .filter(|(j, b)| !shown.contains(j) && b.nmalloc > 0)
            .max_by_key(|(_, b)| (held(b), b.nmalloc));
        let Some((j, b)) = best else { break };
        if let Some(slot) = shown.get_mut(k) {
            *slot = j;
        }
        if k == 0 {
            out.s("hugealloc: top bins:     size    blocks out     bytes out     slabs       nmalloc\n");
        }
        out.s("hugealloc: bins.");
        out.dec(j as u64);
        for _ in if j < 10 { 1 } else { 2 }..3 {
            out.s(" ");
        }
        out.dec_padded(b.size, 10);
        out.dec_padded(b.curregs, 14);
        out.dec_padded(held(b), 14);
        out.dec_padded(b.curslabs, 10);
        out.dec_padded(b.nmalloc, 14);
        out.s("\n");
    }
}

/// The descriptor stats are printed to at exit.
static STATS_FD: crate::sync::AtomicI32 = crate::sync::AtomicI32::new(2);

/// Hooks printing at exit when `stats_print:true`: the summary ([`print_summary`]), or where
/// `stats_print_opts` has letters, the dump ([`print`]) with the parts they select (`f`: all).
/// Every process that loads the library and has `stats_print:true` prints its own (each has
/// its own heap); the summary's first line names the process.
pub fn at_init(opts: &Options) {
    if opts.stats_print {
        // Programs (coreutils among them) close stderr in their own exit handlers, which run
        // before ours: print to a duplicate taken now.
        STATS_FD.store(crate::os::dup_stderr(), Ordering::Relaxed);
        extern "C" fn print_at_exit() {
            // Relaxed: written once at init, before this handler can run.
            let fd = STATS_FD.load(Ordering::Relaxed);
            let options = crate::config::options();
            let letters = options.stats_print_opts();
            if letters.is_empty() {
                let mut write = |line: &[u8]| crate::os::write_fd(fd, line);
                let mut lines = LineBuf::new(&mut write);
                print_summary(&mut |b| lines.push(b));
                lines.flush();
            } else {
                print_lines(PrintOpts::parse(letters), options, &mut |line| {
                    crate::os::write_fd(fd, line)
                });
            }
        }
        // atexit may allocate, which the init allows.
        if !crate::os::at_exit(print_at_exit) {
            crate::diag::warn("atexit failed: stats_print will print nothing at exit");
        }
    }
}
