//! `hugealloc`: runs a program with `libhugealloc.so` preloaded (jemalloc's `jemalloc.sh`),
//! reports what the system does with transparent huge pages, prints a pkg-config file, and
//! installs the library, header, pkg-config file, manual page and itself under a prefix.
//!
//! An ordinary std program on glibc's allocator: it does not link the library it preloads.
//! The library is found by `--lib`, then `$HUGEALLOC_LIB`, then next to this executable
//! (`target/release/libhugealloc.so` beside `target/release/hugealloc`), then in `../lib`.
#![deny(unsafe_op_in_unsafe_fn)]

#[path = "hugealloc/symbolise.rs"]
mod symbolise;

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const LIB_NAME: &str = "libhugealloc.so";
const THP_DIR: &str = "/sys/kernel/mm/transparent_hugepage";
const PC_TEMPLATE: &str = include_str!("../../hugealloc.pc.in");
/// Installed by `install`, so an installation needs nothing from the source tree.
const HEADER: &str = include_str!("../../include/hugealloc.h");

const HELP: &str = "\
NAME
    hugealloc - run programs under the hugealloc memory allocator, and install it

SYNOPSIS
    hugealloc run [--conf STR] [--stats] [--profile DIR] [--lib PATH] [--] CMD [ARGS...]
    hugealloc profile [--top N] [--svg OUT] FILE
    hugealloc thp
    hugealloc lib [--lib PATH]
    hugealloc pkg-config [--prefix DIR] [--lib PATH]
    hugealloc install --prefix DIR [--lib PATH]
    hugealloc version | --help

COMMANDS
    run     Runs CMD with LD_PRELOAD=libhugealloc.so (ahead of any LD_PRELOAD already set),
            HUGEALLOC_CONF=STR (default: the environment's), and with --stats the statistics
            printed on stderr at exit (stats_print:true). With --profile, heap profiling is on
            and each process writes DIR/hugealloc.<pid>.<seq>.f.heap at exit. Exits with CMD's
            status. Child processes of CMD inherit both variables.
    profile Prints the top allocation sites of a heap profile (jemalloc's heap_v2 format, as
            `run --profile` writes it) by live bytes, symbolised from the files' DWARF.
            With --svg, also writes OUT: a flame graph of live bytes by stack (the
            allocator's own frames left out), to open in a browser.
    thp     Prints the system's transparent huge page settings, whether an 8 MiB test
            allocation advised MADV_HUGEPAGE really gets huge pages, and what to change; then
            the explicit huge page pools (2M and 1G: pages, free, reserved), whether a test
            page can be had from each, and the command that reserves pages (docs/hugetlb.md).
    lib     Prints the path of the library `run` would preload.
    pkg-config
            Prints a hugealloc.pc: for the library found (and this source tree's headers), or
            for an installation under DIR (DIR/lib, DIR/include). Its Libs carry an rpath to
            the library folder, so programs linked with it run without LD_LIBRARY_PATH.
    install Copies libhugealloc.so and libhugealloc.a to DIR/lib, hugealloc.h to
            DIR/include, hugealloc.pc to DIR/lib/pkgconfig, this launcher to DIR/bin and its
            manual page to DIR/share/man/man1. Then:
                PKG_CONFIG_PATH=DIR/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs hugealloc)
            builds a program that runs on hugealloc, and DIR/bin/hugealloc run -- CMD preloads
            the installed library.

ENVIRONMENT
    HUGEALLOC_CONF  the allocator's options, name:value pairs separated by commas
                    (thp:always, dirty_decay_ms:1000, stats_print:true, ...)
    HUGEALLOC_LIB   the library to preload when --lib is not given

FILES
    The library is looked for in --lib PATH, $HUGEALLOC_LIB, next to this program, then in
    ../lib from it. Build it with: cargo build --release -p hugealloc-ffi

SEE ALSO
    README.md, docs/c-api.md, docs/configuration.md, docs/stats.md in the source tree
";

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let Some(cmd) = args.first().and_then(|a| a.to_str()) else {
        eprint!("{HELP}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let result = match cmd {
        "run" => run(rest),
        "profile" => profile(rest),
        "thp" => thp(),
        "lib" => lib_cmd(rest),
        "pkg-config" => pkg_config(rest),
        "install" => install(rest),
        "version" | "--version" | "-V" => {
            println!("hugealloc {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        "help" | "--help" | "-h" => {
            print!("{HELP}");
            Ok(ExitCode::SUCCESS)
        }
        other => Err(format!("unknown command `{other}` (see hugealloc --help)")),
    };
    match result {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("hugealloc: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Options shared by the subcommands, parsed up to the first non-option (or `--`).
#[derive(Default)]
struct Opts {
    conf: Option<OsString>,
    stats: bool,
    profile: Option<PathBuf>,
    top: Option<usize>,
    svg: Option<PathBuf>,
    lib: Option<PathBuf>,
    prefix: Option<PathBuf>,
    /// Index in the arguments where the command starts.
    command_at: usize,
}

fn parse_opts(args: &[OsString], allowed: &[&str]) -> Result<Opts, String> {
    let mut o = Opts::default();
    let mut i = 0;
    while let Some(arg) = args.get(i) {
        let arg = arg.to_string_lossy();
        if arg == "--" {
            i += 1;
            break;
        }
        if !arg.starts_with("--") {
            break;
        }
        // `--name=value` or `--name value`.
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n, Some(OsString::from(v))),
            None => (&*arg, None),
        };
        if !allowed.contains(&name) {
            return Err(format!("unknown option {name} (see hugealloc --help)"));
        }
        if name == "--stats" {
            o.stats = true;
            i += 1;
            continue;
        }
        let value = match inline {
            Some(v) => v,
            None => {
                i += 1;
                args.get(i)
                    .cloned()
                    .ok_or_else(|| format!("{name} needs a value"))?
            }
        };
        match name {
            "--conf" => o.conf = Some(value),
            "--profile" => o.profile = Some(value.into()),
            "--top" => {
                o.top = Some(
                    value
                        .to_str()
                        .and_then(|v| v.parse().ok())
                        .ok_or("--top needs a number")?,
                )
            }
            "--lib" => o.lib = Some(value.into()),
            "--svg" => o.svg = Some(value.into()),
            _ => o.prefix = Some(value.into()),
        }
        i += 1;
    }
    o.command_at = i;
    Ok(o)
}

/// Finds the library to preload (see the module doc), as an absolute path.
fn find_lib(explicit: Option<&Path>) -> Result<PathBuf, String> {
    let mut tried = Vec::new();
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(p) = explicit {
        candidates.push(p.to_path_buf());
    } else if let Some(p) = std::env::var_os("HUGEALLOC_LIB").filter(|p| !p.is_empty()) {
        candidates.push(PathBuf::from(p));
    } else if let Some(dir) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        candidates.push(dir.join(LIB_NAME));
        candidates.push(dir.join("../lib").join(LIB_NAME));
    }
    for c in candidates {
        if c.is_file() {
            return c
                .canonicalize()
                .map_err(|e| format!("{}: {e}", c.display()));
        }
        tried.push(c.display().to_string());
    }
    Err(format!(
        "cannot find {LIB_NAME} (tried {}); build it with `cargo build --release -p hugealloc-ffi` \
         or name it with --lib PATH or HUGEALLOC_LIB",
        tried.join(", ")
    ))
}

fn run(args: &[OsString]) -> Result<ExitCode, String> {
    let o = parse_opts(args, &["--conf", "--stats", "--profile", "--lib"])?;
    let Some((program, program_args)) = args[o.command_at..].split_first() else {
        return Err("run: no command given (hugealloc run [OPTIONS] -- CMD [ARGS...])".into());
    };
    let lib = find_lib(o.lib.as_deref())?;
    let mut preload = lib.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|p| !p.is_empty()) {
        // Ours first, so that it wins over any other allocator already preloaded.
        let others: Vec<&OsStr> = split_preload(&old)
            .filter(|p| Path::new(p) != lib)
            .collect();
        for p in others {
            preload.push(":");
            preload.push(p);
        }
    }
    let mut conf = o.conf.or_else(|| std::env::var_os("HUGEALLOC_CONF"));
    if o.stats {
        let mut c = conf.unwrap_or_default();
        if !c.is_empty() {
            c.push(",");
        }
        c.push("stats_print:true");
        conf = Some(c);
    }
    if let Some(dir) = &o.profile {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let dir = dir
            .canonicalize()
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let prefix = format!("{}/hugealloc", dir.display());
        if prefix.len() > 200
            || !prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"/._-+~".contains(&b))
        {
            return Err(format!(
                "--profile {}: the folder's path must be at most 190 bytes of letters, digits and /._-+~",
                dir.display()
            ));
        }
        let mut c = conf.unwrap_or_default();
        if !c.is_empty() {
            c.push(",");
        }
        c.push(format!("prof:true,prof_final:true,prof_prefix:{prefix}"));
        conf = Some(c);
    }
    let mut command = Command::new(program);
    command.args(program_args).env("LD_PRELOAD", &preload);
    if let Some(c) = conf {
        command.env("HUGEALLOC_CONF", c);
    }
    // exec replaces this process, so CMD's exit status (or signal) is ours.
    let err = command.exec();
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    eprintln!("hugealloc: cannot run {}: {err}", program.to_string_lossy());
    Ok(ExitCode::from(code))
}

/// The entries of an `LD_PRELOAD` value (colon- or space-separated).
fn split_preload(v: &OsStr) -> impl Iterator<Item = &OsStr> {
    use std::os::unix::ffi::OsStrExt;
    v.as_bytes()
        .split(|&c| c == b':' || c == b' ')
        .filter(|p| !p.is_empty())
        .map(OsStr::from_bytes)
}

fn lib_cmd(args: &[OsString]) -> Result<ExitCode, String> {
    let o = parse_opts(args, &["--lib"])?;
    println!("{}", find_lib(o.lib.as_deref())?.display());
    Ok(ExitCode::SUCCESS)
}

/// `hugealloc.pc.in` with its comment lines dropped and its at-sign names filled in.
fn render_pc(prefix: &str, libdir: &str, includedir: &str) -> String {
    let body: String = PC_TEMPLATE
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    body.replace("@prefix@", prefix)
        .replace("@libdir@", libdir)
        .replace("@includedir@", includedir)
        .replace("@version@", env!("CARGO_PKG_VERSION"))
}

/// Prints a rendered `hugealloc.pc.in`.
fn pkg_config(args: &[OsString]) -> Result<ExitCode, String> {
    let o = parse_opts(args, &["--prefix", "--lib"])?;
    let pc = match o.prefix {
        Some(p) => render_pc(
            &p.display().to_string(),
            "${prefix}/lib",
            "${prefix}/include",
        ),
        None => {
            let lib = find_lib(o.lib.as_deref())?;
            let dir = lib.parent().unwrap_or(Path::new("/")).display().to_string();
            let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
            render_pc(&dir, &dir, &include.display().to_string())
        }
    };
    print!("{pc}");
    Ok(ExitCode::SUCCESS)
}

/// The manual page: the help text in a roff no-fill block, one section heading per
/// unindented line.
fn man_page() -> String {
    let mut out = format!(
        ".TH HUGEALLOC 1 \"\" \"hugealloc {}\" \"User Commands\"\n",
        env!("CARGO_PKG_VERSION")
    );
    for line in HELP.lines() {
        if !line.is_empty() && !line.starts_with(' ') {
            out.push_str(&format!(".SH {line}\n.nf\n"));
        } else {
            // A leading dot or quote would be read as a request; `\-` is a plain minus.
            out.push_str(&format!(
                "\\&{}\n",
                line.replace('\\', "\\e").replace('-', "\\-")
            ));
        }
    }
    out
}

/// Copies one file, making its folder; `mode` is the installed permission bits.
fn copy_file(from: &Path, to: &Path, mode: u32) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = to.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Through a temporary name and a rename, so a program running the old file keeps it.
    let tmp = to.with_extension("hugealloc-install-tmp");
    std::fs::copy(from, &tmp)
        .map_err(|e| format!("{} -> {}: {e}", from.display(), tmp.display()))?;
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode))
        .map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, to).map_err(|e| format!("{}: {e}", to.display()))
}

fn write_file(to: &Path, contents: &str) -> Result<(), String> {
    let dir = to.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::fs::write(to, contents).map_err(|e| format!("{}: {e}", to.display()))
}

/// `install --prefix DIR`: the library (shared and static), header, pkg-config file, launcher
/// and manual page, laid out as `make install` would; prints each file installed.
fn install(args: &[OsString]) -> Result<ExitCode, String> {
    let o = parse_opts(args, &["--prefix", "--lib"])?;
    let prefix = o.prefix.ok_or(
        "install: --prefix DIR is required (e.g. --prefix /usr/local or --prefix ~/.local)",
    )?;
    let prefix = std::path::absolute(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
    let so = find_lib(o.lib.as_deref())?;
    let a = so.with_extension("a");
    let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    let libdir = prefix.join("lib");
    let mut installed = Vec::new();
    let mut copy = |from: &Path, to: PathBuf, mode: u32| -> Result<(), String> {
        copy_file(from, &to, mode)?;
        installed.push(to);
        Ok(())
    };
    copy(&so, libdir.join(LIB_NAME), 0o755)?;
    if a.is_file() {
        copy(&a, libdir.join("libhugealloc.a"), 0o644)?;
    } else {
        eprintln!(
            "hugealloc: install: no {} (static linking unavailable)",
            a.display()
        );
    }
    copy(&exe, prefix.join("bin/hugealloc"), 0o755)?;
    let files = [
        (prefix.join("include/hugealloc.h"), HEADER.to_string()),
        (
            libdir.join("pkgconfig/hugealloc.pc"),
            render_pc(
                &prefix.display().to_string(),
                "${prefix}/lib",
                "${prefix}/include",
            ),
        ),
        (prefix.join("share/man/man1/hugealloc.1"), man_page()),
    ];
    for (to, contents) in files {
        write_file(&to, &contents)?;
        installed.push(to);
    }
    for f in &installed {
        println!("{}", f.display());
    }
    eprintln!(
        "hugealloc: installed under {p}; build with\n  PKG_CONFIG_PATH={p}/lib/pkgconfig cc prog.c $(pkg-config --cflags --libs hugealloc)",
        p = prefix.display()
    );
    Ok(ExitCode::SUCCESS)
}

// ---- thp -----------------------------------------------------------------------------------

/// A sysfs file's contents, trimmed; `None` when missing.
fn read_setting(name: &str) -> Option<String> {
    std::fs::read_to_string(Path::new(THP_DIR).join(name))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The bracketed (active) word of `always [madvise] never`, or the whole value.
fn active(value: &str) -> &str {
    match (value.find('['), value.find(']')) {
        (Some(a), Some(b)) if a < b => &value[a + 1..b],
        _ => value,
    }
}

const MIB: usize = 1 << 20;
const TEST_LEN: usize = 8 * MIB;
const PMD: usize = 2 * MIB;

/// What the test allocation got.
struct Probe {
    advised: bool,
    anon_huge_kb: Option<u64>,
    collapsed_kb: Option<u64>,
}

/// Maps 8 MiB aligned to 2 MiB, advises `MADV_HUGEPAGE`, touches every page and reads the
/// mapping's `AnonHugePages` from `/proc/self/smaps`; if that is 0, tries `MADV_COLLAPSE`
/// (Linux 6.1+) and reads it again.
fn probe() -> Result<Probe, String> {
    const MADV_COLLAPSE: libc::c_int = 25;
    let over = TEST_LEN + PMD;
    // SAFETY: a fresh anonymous private mapping; it touches no existing memory.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            over,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(format!("mmap: {}", std::io::Error::last_os_error()));
    }
    let start = (raw as usize).next_multiple_of(PMD);
    let p = start as *mut u8;
    // SAFETY: [p, p + TEST_LEN) lies inside the mapping made above.
    let advised = unsafe { libc::madvise(p.cast(), TEST_LEN, libc::MADV_HUGEPAGE) } == 0;
    for off in (0..TEST_LEN).step_by(4096) {
        // SAFETY: inside the mapping, which is readable and writable.
        unsafe { p.add(off).write_volatile(1) };
    }
    let anon_huge_kb = anon_huge_pages_kb(start);
    let mut collapsed_kb = None;
    if anon_huge_kb == Some(0) {
        // SAFETY: as madvise above; EINVAL on kernels before 6.1 is harmless.
        if unsafe { libc::madvise(p.cast(), TEST_LEN, MADV_COLLAPSE) } == 0 {
            collapsed_kb = anon_huge_pages_kb(start);
        }
    }
    // SAFETY: unmaps exactly the mapping made above; nothing refers to it any more.
    unsafe { libc::munmap(raw, over) };
    Ok(Probe {
        advised,
        anon_huge_kb,
        collapsed_kb,
    })
}

/// `AnonHugePages` (kB) of the mapping of `/proc/self/smaps` that contains `addr`.
fn anon_huge_pages_kb(addr: usize) -> Option<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let first = line.split_whitespace().next().unwrap_or("");
        if let Some((lo, hi)) = first.split_once('-') {
            if let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
            {
                inside = lo <= addr && addr < hi;
                continue;
            }
        }
        if inside {
            if let Some(v) = line.strip_prefix("AnonHugePages:") {
                return v.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    None
}

fn thp() -> Result<ExitCode, String> {
    thp_transparent()?;
    hugetlb_pools();
    Ok(ExitCode::SUCCESS)
}

/// The explicit huge page pools (`hugetlb:2M|1G`): sizes, whether a test page can be had
/// (`hugealloc::hugetlb_status` maps, faults and unmaps one; the pool is as before
/// afterwards), and how to reserve pages.
fn hugetlb_pools() {
    println!();
    println!("explicit huge pages (hugetlb pools, /sys/kernel/mm/hugepages; hugetlb:2M|1G):");
    let st = hugealloc::hugetlb_status();
    let mut any_free = false;
    for pool in st.pools {
        let name = pool.source.name();
        if !pool.present {
            println!("  {name}: no pool ({} is missing)", pool.sysfs_dir);
            continue;
        }
        let test = if pool.test_page {
            any_free = true;
            "a test page can be had".to_string()
        } else {
            format!("no test page ({})", pool.why_not)
        };
        println!(
            "  {name}: nr_hugepages {}, free_hugepages {}, resv_hugepages {}; {test}",
            pool.pages, pool.free, pool.promised
        );
    }
    println!("  reserve pages (root; N pages of that size):");
    for pool in st.pools {
        println!("    echo N > {}nr_hugepages", pool.sysfs_dir);
    }
    if any_free {
        println!("  then run with HUGEALLOC_CONF=hugetlb:2M (or hugetlb:1G); see docs/hugetlb.md.");
    } else {
        println!("  until then hugetlb:2M|1G falls back to ordinary memory (one warning).");
    }
}

/// The transparent huge page settings, a test allocation and the verdict.
fn thp_transparent() -> Result<(), String> {
    println!("transparent huge pages ({THP_DIR}):");
    let Some(enabled) = read_setting("enabled") else {
        println!("  not available: {THP_DIR}/enabled is missing (a kernel without");
        println!("  CONFIG_TRANSPARENT_HUGEPAGE, or a container hiding /sys).");
        println!("  hugealloc gives no huge page advice here; nothing to change in hugealloc.");
        return Ok(());
    };
    let defrag = read_setting("defrag").unwrap_or_default();
    let settings = [
        ("enabled", Some(enabled.clone())),
        ("defrag", Some(defrag.clone())),
        ("khugepaged/defrag", read_setting("khugepaged/defrag")),
        ("hpage_pmd_size", read_setting("hpage_pmd_size")),
        ("shmem_enabled", read_setting("shmem_enabled")),
        (
            "hugepages-2048kB/enabled",
            read_setting("hugepages-2048kB/enabled"),
        ),
    ];
    for (name, value) in &settings {
        match value {
            Some(v) => println!("  {name:<26} {v:<40} -> {}", active(v)),
            None => println!("  {name:<26} (missing)"),
        }
    }
    let mode = active(&enabled).to_string();
    let pmd_mode = read_setting("hugepages-2048kB/enabled")
        .map(|v| active(&v).to_string())
        .filter(|m| m != "inherit")
        .unwrap_or_else(|| mode.clone());
    let pmd_size: Option<usize> = read_setting("hpage_pmd_size").and_then(|v| v.parse().ok());

    println!();
    let probe = probe()?;
    let got = probe.anon_huge_kb;
    print!("test allocation: 8 MiB aligned to 2 MiB");
    print!(
        ", madvise(MADV_HUGEPAGE) {}",
        if probe.advised { "ok" } else { "refused" }
    );
    match got {
        Some(kb) => println!(
            ", touched: AnonHugePages {kb} kB ({} of {} huge pages)",
            kb * 1024 / PMD as u64,
            TEST_LEN / PMD
        ),
        None => println!(", touched: AnonHugePages not found in /proc/self/smaps"),
    }
    if let Some(kb) = probe.collapsed_kb {
        println!("  after MADV_COLLAPSE: AnonHugePages {kb} kB");
    }

    println!();
    println!("verdict:");
    let full = (TEST_LEN / 1024) as u64;
    let huge_ok =
        got.is_some_and(|kb| kb >= full / 2) || probe.collapsed_kb.is_some_and(|kb| kb > 0);
    if huge_ok {
        println!("  huge pages work: advised blocks get them at fault.");
    } else {
        println!("  the test allocation got no (or few) huge pages.");
    }
    match pmd_mode.as_str() {
        "never" => {
            println!("  THP is off (enabled = never): nothing gets huge pages, advised or not.");
            println!("  to let hugealloc's advised blocks (thp:madvise, blocks of 4 MiB and more) get them:");
            println!("    echo madvise > {THP_DIR}/enabled");
            if mode != pmd_mode {
                println!("    echo inherit > {THP_DIR}/hugepages-2048kB/enabled");
            }
        }
        "madvise" => {
            println!(
                "  enabled = madvise: only advised ranges get huge pages, which is what hugealloc"
            );
            println!(
                "  is built for (thp:madvise advises blocks of thp_threshold, 4 MiB, and more;"
            );
            println!("  thp:always advises every chunk).");
        }
        "always" => {
            println!(
                "  enabled = always: every large enough anonymous range may get huge pages, also"
            );
            println!(
                "  chunks of small objects, which can raise RSS. hugealloc's default thp:madvise"
            );
            println!(
                "  does not stop that; HUGEALLOC_CONF=thp:never does (MADV_NOHUGEPAGE per chunk)."
            );
            println!("  the setting hugealloc is designed for: echo madvise > {THP_DIR}/enabled");
        }
        other => println!("  enabled = {other}: not a mode hugealloc knows."),
    }
    match active(&defrag) {
        "always" => {
            println!("  defrag = always: every huge page fault may stall for compaction.");
            println!("    echo defer+madvise > {THP_DIR}/defrag   # stall only for advised ranges");
        }
        "madvise" => {
            println!(
                "  defrag = madvise: advised ranges compact synchronously at first fault (a stall"
            );
            println!(
                "  where memory is fragmented; HUGEALLOC_CONF=thp:default switches advice off)."
            );
        }
        "defer+madvise" => {
            println!("  defrag = defer+madvise: advised ranges compact at fault, others in the background.")
        }
        "defer" | "never" => {
            println!(
                "  defrag = {}: faults never compact, so advised blocks get huge pages only while free",
                active(&defrag)
            );
            println!("  ones exist. for hugealloc: echo madvise > {THP_DIR}/defrag");
        }
        _ => {}
    }
    if !huge_ok && pmd_mode != "never" {
        println!("  huge pages are enabled but the test got none: memory may be fragmented or");
        println!(
            "  limited (cgroup). try: echo 1 > /proc/sys/vm/compact_memory, see /proc/buddyinfo."
        );
    }
    if let Some(size) = pmd_size.filter(|&s| s != PMD) {
        println!(
            "  hpage_pmd_size is {size}, not 2 MiB: hugealloc's 2 MiB chunks do not match it."
        );
    }
    defer_choice(&pmd_mode, active(&defrag));
    Ok(())
}

// ---- profile -------------------------------------------------------------------------------

/// A parsed `heap_v2` profile: the sampling period, each stack with its sampled live objects
/// and bytes, and the mappings (start, end, file offset, path).
struct HeapProfile {
    period: f64,
    stacks: Vec<(Vec<u64>, u64, u64)>,
    maps: Vec<symbolise::Mapping>,
}

fn parse_heap(text: &str) -> Result<HeapProfile, String> {
    let mut lines = text.lines();
    let head = lines.next().unwrap_or("");
    let period: f64 = head
        .strip_prefix("heap_v2/")
        .and_then(|p| p.trim().parse().ok())
        .ok_or("not a heap profile (no heap_v2/<period> header)")?;
    let mut p = HeapProfile {
        period,
        stacks: Vec::new(),
        maps: Vec::new(),
    };
    let mut pending: Option<Vec<u64>> = None;
    let mut in_maps = false;
    for line in lines {
        if in_maps {
            let f: Vec<&str> = line.split_whitespace().collect();
            if let (Some((lo, hi)), Some(off), Some(path)) = (
                f.first().and_then(|r| r.split_once('-')),
                f.get(2),
                f.get(5),
            ) {
                let hex = |t: &str| u64::from_str_radix(t, 16).ok();
                if let (Some(lo), Some(hi), Some(off)) = (hex(lo), hex(hi), hex(off)) {
                    p.maps.push((lo, hi, off, path.to_string()));
                }
            }
        } else if line == "MAPPED_LIBRARIES:" {
            in_maps = true;
        } else if let Some(rest) = line.strip_prefix("@ ") {
            pending = Some(
                rest.split_whitespace()
                    .filter_map(|a| u64::from_str_radix(a.trim_start_matches("0x"), 16).ok())
                    .collect(),
            );
        } else if line.trim_start().starts_with("t*:") {
            if let Some(frames) = pending.take() {
                let n: Vec<u64> = line
                    .split(|c: char| !c.is_ascii_digit())
                    .filter_map(|t| t.parse().ok())
                    .collect();
                if n.len() >= 2 {
                    p.stacks.push((frames, n[0], n[1]));
                }
            }
        }
    }
    Ok(p)
}

/// Sampled bytes over `count` objects scaled to the estimated true bytes (as jeprof does).
fn scaled(bytes: u64, count: u64, period: f64) -> f64 {
    if count == 0 {
        return 0.0;
    }
    let avg = bytes as f64 / count as f64;
    bytes as f64 / (1.0 - (-avg / period).exp())
}

/// Frames of the allocator itself (a Rust program linking hugealloc has them on top).
fn is_allocator_frame(name: &str) -> bool {
    [
        "hugealloc::",
        "<hugealloc::",
        "__rust_alloc",
        "__rust_realloc",
        "__rg_alloc",
        "__rg_realloc",
        "alloc::alloc::",
        "alloc::raw_vec::",
        "<alloc::alloc::Global",
    ]
    .iter()
    .any(|p| name.starts_with(p))
}

fn profile(args: &[OsString]) -> Result<ExitCode, String> {
    let o = parse_opts(args, &["--top", "--svg"])?;
    let [file] = &args[o.command_at..] else {
        return Err(
            "profile: name one profile file (hugealloc profile [--top N] [--svg OUT] FILE)".into(),
        );
    };
    let text =
        std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", Path::new(file).display()))?;
    let p = parse_heap(&text)?;
    let names = symbolise::symbolise(p.stacks.iter().flat_map(|s| s.0.iter().copied()), &p.maps);
    // Flat: the innermost frame outside the allocator; cumulative: every function on the stack.
    let mut flat: std::collections::HashMap<&str, f64> = Default::default();
    let mut cum: std::collections::HashMap<&str, f64> = Default::default();
    let mut total = 0.0;
    for (frames, objects, bytes) in &p.stacks {
        let live = scaled(*bytes, *objects, p.period);
        if live == 0.0 {
            continue;
        }
        total += live;
        let named: Vec<&str> = frames.iter().map(|a| names[a].as_str()).collect();
        let site = named
            .iter()
            .find(|n| !is_allocator_frame(n))
            .or(named.first())
            .copied()
            .unwrap_or("(no stack)");
        *flat.entry(site).or_default() += live;
        let mut seen = std::collections::HashSet::new();
        for n in named {
            if seen.insert(n) {
                *cum.entry(n).or_default() += live;
            }
        }
    }
    if let Some(out) = &o.svg {
        write_flame_graph(&p, &names, out)?;
    }
    let mut rows: Vec<(&str, f64)> = flat.into_iter().collect();
    rows.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!(
        "live: {} in {} sampled stacks (estimated; one sample every {} bytes on average)",
        human(total),
        p.stacks.len(),
        p.period
    );
    println!(
        "{:>10} {:>6} {:>10} {:>6}  site",
        "live", "%", "cum", "cum%"
    );
    for (site, live) in rows.iter().take(o.top.unwrap_or(20)) {
        let c = cum.get(site).copied().unwrap_or(*live);
        println!(
            "{:>10} {:>5.1}% {:>10} {:>5.1}%  {site}",
            human(*live),
            100.0 * live / total.max(1.0),
            human(c),
            100.0 * c / total.max(1.0)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The function of a name `symbolise` made: "function (file:line)" less the place (which
/// may hold parentheses of its own: "(t.c:5 (discriminator 3))").
fn function_of(name: &str) -> &str {
    match name.strip_suffix(')').and_then(|n| n.split_once(" (")) {
        Some((func, _)) => func,
        None => name,
    }
}

/// The profile's live bytes (scaled) as folded stacks, one line per stack, outermost frame
/// first, frames by function name: `main;grow_cache 76100000`. The allocator's own frames on
/// top of a stack are left out; stacks whose live bytes round to 0 are too.
fn folded_stacks(p: &HeapProfile, names: &std::collections::HashMap<u64, String>) -> Vec<String> {
    let mut lines = Vec::new();
    for (frames, objects, bytes) in &p.stacks {
        let live = scaled(*bytes, *objects, p.period).round() as u64;
        if live == 0 {
            continue;
        }
        let named: Vec<&str> = frames.iter().map(|a| names[a].as_str()).collect();
        let user = named
            .iter()
            .position(|n| !is_allocator_frame(n))
            .unwrap_or(0);
        // `;` separates frames in the folded format: a name may hold one (`[u8; 4]`).
        let stack: Vec<String> = named[user..]
            .iter()
            .rev()
            .map(|n| function_of(n).replace(';', ":"))
            .collect();
        let stack = if stack.is_empty() {
            "(no stack)".to_string()
        } else {
            stack.join(";")
        };
        lines.push(format!("{stack} {live}"));
    }
    lines
}

/// Writes a flame graph of the profile's live bytes by stack to `out` (`inferno`).
fn write_flame_graph(
    p: &HeapProfile,
    names: &std::collections::HashMap<u64, String>,
    out: &Path,
) -> Result<(), String> {
    let lines = folded_stacks(p, names);
    let file = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut opts = inferno::flamegraph::Options::default();
    opts.title = "Live heap bytes by stack (hugealloc profile)".to_string();
    opts.count_name = "bytes".to_string();
    inferno::flamegraph::from_lines(
        &mut opts,
        lines.iter().map(String::as_str),
        std::io::BufWriter::new(file),
    )
    .map_err(|e| format!("{}: {e}", out.display()))
}

fn human(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{v:.0} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Whether `MADV_COLLAPSE` works here: collapses the 2 MiB-aligned range of a fresh mapping
/// with one page touched (as hugealloc's own probe does: a smaller or untouched range gets
/// `EINVAL` even where the advice exists). `Ok` or the `errno` of the refusal.
fn collapse_probe() -> Result<(), i32> {
    const MADV_COLLAPSE: libc::c_int = 25;
    // SAFETY: a fresh private anonymous mapping; nothing else refers to it.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * PMD,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    let start = (raw as usize + PMD - 1) & !(PMD - 1);
    // SAFETY: [start, start + PMD) lies inside the 2*PMD mapping; it is unmapped after.
    unsafe {
        (start as *mut u8).write_volatile(1);
        let rc = libc::madvise(start as *mut libc::c_void, PMD, MADV_COLLAPSE);
        let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        libc::munmap(raw, 2 * PMD);
        if rc == 0 {
            Ok(())
        } else {
            Err(err)
        }
    }
}

/// The `thp:defer` part of the verdict: whether this machine's `defrag` makes the first touch
/// of an advised block stall, whether `MADV_COLLAPSE` works, and the policy hugealloc would
/// pick for a program that cares about that first touch.
fn defer_choice(enabled: &str, defrag: &str) {
    println!();
    println!("thp:defer (no advice at fault; the background thread collapses touched chunks):");
    let collapse = collapse_probe();
    match collapse {
        Ok(()) => println!("  MADV_COLLAPSE works here (a test range collapsed)."),
        Err(e) if e == libc::ENOMEM || e == libc::EAGAIN => println!(
            "  MADV_COLLAPSE exists but found no free huge page just now ({}).",
            std::io::Error::from_raw_os_error(e)
        ),
        Err(e) => println!(
            "  MADV_COLLAPSE refused ({}): a kernel before 6.1, or THP off; thp:defer would fall\n  \
             back to MADV_HUGEPAGE on touched chunks and leave the collapse to khugepaged.",
            std::io::Error::from_raw_os_error(e)
        ),
    }
    let stalls = matches!(defrag, "always" | "madvise" | "defer+madvise");
    let works = !matches!(collapse, Err(e) if e != libc::ENOMEM && e != libc::EAGAIN);
    let choice = if enabled == "never" {
        println!("  THP is off: no policy gets huge pages, deferred or not.");
        "never"
    } else if stalls && works {
        println!(
            "  defrag = {defrag}: the first touch of an advised block compacts memory on the\n  \
             allocating thread (the stall), so a latency-sensitive program is better served by\n  \
             thp:defer: small pages at first touch, huge pages about a second later."
        );
        "defer"
    } else if stalls {
        println!(
            "  defrag = {defrag} stalls advised faults, but without MADV_COLLAPSE thp:defer waits\n  \
             on khugepaged (slow: pages_to_scan per scan_sleep_millisecs); thp:madvise is the\n  \
             better trade here unless first-touch latency matters most."
        );
        "madvise"
    } else {
        println!(
            "  defrag = {defrag}: advised faults never compact synchronously, so thp:madvise has\n  \
             no stall to avoid and gets huge pages at fault whenever free ones exist."
        );
        "madvise"
    };
    println!("  choice on this machine: thp:{choice} (the default stays thp:madvise; docs/thp.md");
    println!("  says why). try: HUGEALLOC_CONF=thp:{choice} hugealloc run <program>");
}
