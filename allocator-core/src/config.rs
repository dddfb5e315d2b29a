//! TEMPORARY SHIM written by the core engineer so the core compiles; the config helper replaces
//! this whole file with the real option table and parser.
use crate::thp::Thp;

pub struct Options {
    pub narenas: usize,
    pub tcache: bool,
    pub tcache_max: usize,
    pub thp: Thp,
    pub thp_threshold: usize,
    pub metadata_thp: Thp,
    pub arena_thp: [Option<Thp>; 64],
    pub stats_print: bool,
}

impl Options {
    pub const DEFAULT: Options = Options {
        narenas: 0,
        tcache: true,
        tcache_max: 32 << 10,
        thp: Thp::Madvise,
        thp_threshold: 4 << 20,
        metadata_thp: Thp::Default,
        arena_thp: [None; 64],
        stats_print: false,
    };
    pub fn thp_for_arena(&self, i: usize) -> Thp {
        self.arena_thp.get(i).copied().flatten().unwrap_or(self.thp)
    }
}

pub fn load(_opts: &mut Options, _api: Option<&[u8]>) {}
