//! `hugealloc-bench`: the project's main job. Realistic workloads run under a global allocator
//! chosen at build time (hugealloc by default; features `system`, `jemalloc`, `mimalloc`), each
//! printing wall time, minor faults, RSS and huge-backed bytes, and hugealloc's statistics at
//! the end when it is the allocator.
//!
//! ```text
//! hugealloc-bench [SUBCOMMAND] [N] [--flag VALUE]...
//!   workload [ENTRIES]   mixed job on 2 threads: maps, sorting, a boxed tree, big buffers
//!   bigbuf [ITERS]       allocate, fill, sum, drop a big buffer (--mib 512, --type f64|u8)
//!   scipp [MIB]          element-wise ops with fresh outputs, pointer chase; best of --reps 3
//!   frag [MIB]           many small objects, most freed: RSS and AnonHugePages per phase
//! ```
//!
//! hugealloc's options come from `HUGEALLOC_CONF` (e.g. `HUGEALLOC_CONF=thp:always`, see
//! `docs/configuration.md`); jemalloc's from `_RJEM_MALLOC_CONF` (tikv-jemallocator's prefix).
//!
//! Every subcommand ends with one `result:` line of `key=value` pairs for tables.

mod args;
mod bigbuf;
mod frag;
mod global;
mod measure;
mod scipp;
mod workload;

use args::Args;

const USAGE: &str = "\
usage: hugealloc-bench [SUBCOMMAND] [N] [--flag VALUE]...
  workload [ENTRIES=1000000]   mixed job on 2 threads (the default subcommand)
  bigbuf [ITERS=10]            --mib 512 --type f64|u8
  scipp [MIB=512]              --rounds 3 --reps 3 --chase-mib MIB --chase-steps 20000000
  frag [MIB=256]               --keep 64 --wait-ms 0
hugealloc options: HUGEALLOC_CONF (e.g. thp:always); jemalloc's: _RJEM_MALLOC_CONF";

fn run() -> Result<(), String> {
    let args = Args::parse(std::env::args().skip(1))?;
    if args.has("help") {
        println!("{USAGE}");
        return Ok(());
    }
    let sub = args.subcommand().unwrap_or("workload").to_string();
    global::check_conf_honoured();
    let known: &[&str] = match sub.as_str() {
        "workload" => &[],
        "bigbuf" => &["mib", "type"],
        "scipp" => &["rounds", "reps", "chase-mib", "chase-steps"],
        "frag" => &["keep", "wait-ms"],
        other => return Err(format!("unknown subcommand {other:?}\n{USAGE}")),
    };
    args.only(known)?;
    measure::print_header(&sub);
    match sub.as_str() {
        "workload" => workload::run(&args)?,
        "bigbuf" => bigbuf::run(&args)?,
        "scipp" => scipp::run(&args)?,
        _ => frag::run(&args)?,
    }
    measure::print_footer();
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("hugealloc-bench: {e}");
        std::process::exit(2);
    }
}
