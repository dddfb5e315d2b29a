//! The library behind `hugealloc-bench` and `hugealloc-workloads`: workload programs, the
//! benchmark suite, and `compare`, which runs the workloads and real programs under every
//! allocator through `LD_PRELOAD` and writes the tables and charts. No global allocator is
//! chosen here: each binary chooses its own and tells [`global::set`] (see `src/main.rs`).
//!
//! ```text
//! hugealloc-bench [SUBCOMMAND] [N] [--flag VALUE]...
//!   workload [ENTRIES]   mixed job on 2 threads: maps, sorting, a boxed tree, big buffers
//!   bigbuf [ITERS]       allocate, fill, sum, drop a big buffer (--mib 512, --type f64|u8)
//!   scipp [MIB]          element-wise ops with fresh outputs, pointer chase; best of --reps 3
//!   frag [MIB]           many small objects, most freed: RSS and AnonHugePages per phase
//!   purge-latency [MS]   malloc/free latency (p50..max) of one thread while another frees
//!   cfrac, espresso, larson, xmalloc, cache-scratch, cache-thrash, mstress, rptest,
//!   sh6bench, sh8bench, realloc [SIZE]   the suite (src/suite/)
//!   compare              every workload under every allocator (src/compare/)
//! ```
//!
//! hugealloc's options come from `HUGEALLOC_CONF` (e.g. `HUGEALLOC_CONF=thp:always`, see
//! `docs/configuration.md`); jemalloc's from `_RJEM_MALLOC_CONF` (tikv-jemallocator's prefix)
//! in the `--features jemalloc` build, `MALLOC_CONF` for a preloaded libjemalloc.
//!
//! Every workload ends with one `result:` line of `key=value` pairs for tables.

#![deny(unsafe_op_in_unsafe_fn)]

pub mod args;
pub mod bigbuf;
pub mod compare;
pub mod frag;
pub mod global;
pub mod measure;
pub mod purgelat;
pub mod scipp;
pub mod suite;
pub mod workload;

use args::Args;

const USAGE: &str = "\
usage: hugealloc-bench [SUBCOMMAND] [N] [--flag VALUE]...
  workload [ENTRIES=1000000]   mixed job on 2 threads (the default subcommand)
  bigbuf [ITERS=10]            --mib 512 --type f64|u8
  scipp [MIB=512]              --rounds 3 --reps 3 --chase-mib MIB --chase-steps 20000000
  frag [MIB=256]               --keep 64 --wait-ms 0
  purge-latency [MS=2000]      malloc/free latency while another thread frees and purges
  cfrac espresso larson xmalloc cache-scratch cache-thrash mstress rptest sh6bench
  sh8bench realloc [SIZE]      the benchmark suite (--threads N where threaded)
  pairs [N=1000000]            --bytes 64 --via c|rust --free plain|sized|sdallocx --batch 1:
                               N malloc+free, K allocated then freed at a time (for callgrind;
                               --free with --via c)
  spawn FILE [K=V]... -- PROG  run PROG, write its wall ms, peak RSS KiB, minor faults
  compare                      --reps 3 --only w1,w2 --size-scale X --out DIR --no-warmup
                               --allocators a1,a2
hugealloc options: HUGEALLOC_CONF (e.g. thp:always); jemalloc's: _RJEM_MALLOC_CONF";

fn run(global_allocator: global::Global) -> Result<(), String> {
    global::set(global_allocator);
    let raw: Vec<String> = std::env::args().skip(1).collect();
    if raw.first().map(String::as_str) == Some("spawn") {
        // compare's measuring helper: exits with the program's status.
        let code = compare::spawn_main(&raw[1..])?;
        std::process::exit(code);
    }
    let args = Args::parse(std::env::args().skip(1))?;
    if args.has("help") {
        println!("{USAGE}");
        return Ok(());
    }
    let sub = args.subcommand().unwrap_or("workload").to_string();
    if sub == "compare" {
        return compare::run(&args);
    }
    global::check_conf_honoured();
    let suite = suite::find(&sub);
    let known: &[&str] = match sub.as_str() {
        "workload" => &[],
        "bigbuf" => &["mib", "type"],
        "scipp" => &["rounds", "reps", "chase-mib", "chase-steps"],
        "frag" => &["keep", "wait-ms"],
        "pairs" => &["bytes", "via", "free", "batch"],
        "purge-latency" => &[],
        _ => match suite {
            Some(w) => w.flags,
            None => return Err(format!("unknown subcommand {sub:?}\n{USAGE}")),
        },
    };
    args.only(known)?;
    measure::print_header(&sub);
    match sub.as_str() {
        "workload" => workload::run(&args)?,
        "bigbuf" => bigbuf::run(&args)?,
        "scipp" => scipp::run(&args)?,
        "frag" => frag::run(&args)?,
        "pairs" => suite::pairs(&args)?,
        "purge-latency" => purgelat::run(&args)?,
        _ => (suite.expect("checked above").run)(&args)?,
    }
    measure::print_footer();
    Ok(())
}

/// The whole program: runs the subcommand named on the command line; exits 2 on a usage
/// error (a workload whose check fails panics, which aborts: `panic = "abort"` in release).
pub fn main(global_allocator: global::Global) {
    if let Err(e) = run(global_allocator) {
        eprintln!("hugealloc-bench: {e}");
        std::process::exit(2);
    }
}
