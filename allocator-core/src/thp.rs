//! Transparent huge page policy: the per-arena policy type, the system mode, and the one pure
//! function deciding which advice a block of memory gets. No I/O happens here; `os` reads the
//! system files and the arena applies the advice.

/// A THP policy, per arena or global (`thp:VALUE`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Thp {
    /// No advice: the system setting decides.
    Default = 0,
    /// `MADV_HUGEPAGE` on every chunk the arena maps (jemalloc's `thp:always`).
    Always = 1,
    /// `MADV_HUGEPAGE` on chunks backing blocks of at least `thp_threshold` bytes only.
    Madvise = 2,
    /// `MADV_NOHUGEPAGE` on every chunk, even where the system setting is `always`.
    Never = 3,
    /// No advice at fault time (no synchronous compaction on the allocating thread); chunks of
    /// blocks of at least `thp_threshold` bytes are queued and, once touched, collapsed into
    /// huge pages by the background thread (`MADV_COLLAPSE`; see `collapse`).
    Defer = 4,
}

impl Thp {
    /// Parses `always`, `madvise`, `never` or `default`.
    pub fn parse(s: &[u8]) -> Option<Thp> {
        match s {
            b"always" => Some(Thp::Always),
            b"madvise" => Some(Thp::Madvise),
            b"never" => Some(Thp::Never),
            b"default" => Some(Thp::Default),
            b"defer" => Some(Thp::Defer),
            _ => None,
        }
    }

    /// The policy's configuration name.
    pub fn name(self) -> &'static str {
        match self {
            Thp::Default => "default",
            Thp::Always => "always",
            Thp::Madvise => "madvise",
            Thp::Never => "never",
            Thp::Defer => "defer",
        }
    }

    /// Decodes the `repr(u8)` value (anything unknown reads as `Default`).
    pub fn from_u8(v: u8) -> Thp {
        match v {
            1 => Thp::Always,
            2 => Thp::Madvise,
            3 => Thp::Never,
            4 => Thp::Defer,
            _ => Thp::Default,
        }
    }
}

/// The system-wide setting in `/sys/kernel/mm/transparent_hugepage/enabled`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SystemMode {
    Always,
    Madvise,
    Never,
    /// The file is missing or unreadable (containers, kernels without THP).
    Unknown,
}

/// Parses the contents of `/sys/kernel/mm/transparent_hugepage/enabled` (or `defrag`'s first
/// three words): the bracketed word is the active one, e.g. `always [madvise] never`.
pub fn parse_system_mode(text: &[u8]) -> SystemMode {
    match active_word(text) {
        b"always" => SystemMode::Always,
        b"madvise" => SystemMode::Madvise,
        b"never" => SystemMode::Never,
        _ => SystemMode::Unknown,
    }
}

/// The bracketed (active) word of a sysfs choice file, e.g. `madvise` of
/// `always [madvise] never`; empty when there is none.
fn active_word(text: &[u8]) -> &[u8] {
    // `split`, not indexing: no panic path (the `no_panic` test).
    let Some(rest) = text.splitn(2, |&c| c == b'[').nth(1) else {
        return b"";
    };
    let mut parts = rest.splitn(2, |&c| c == b']');
    match (parts.next(), parts.next()) {
        (Some(word), Some(_)) => word,
        _ => b"",
    }
}

/// `/sys/kernel/mm/transparent_hugepage/defrag`: how hard a fault on an advised range tries
/// to get a huge page (`Madvise` and `Always` compact synchronously: the stall of the scipp
/// report).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Defrag {
    Always,
    Defer,
    DeferMadvise,
    Madvise,
    Never,
    Unknown,
}

/// Parses the contents of the `defrag` file (the bracketed word is the active one).
pub fn parse_defrag(text: &[u8]) -> Defrag {
    match active_word(text) {
        b"always" => Defrag::Always,
        b"defer" => Defrag::Defer,
        b"defer+madvise" => Defrag::DeferMadvise,
        b"madvise" => Defrag::Madvise,
        b"never" => Defrag::Never,
        _ => Defrag::Unknown,
    }
}

/// The system's THP settings and what they mean for hugealloc's advice.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct ThpStatus {
    /// `enabled`, read once at init.
    pub enabled: SystemMode,
    /// `defrag`, read on each call.
    pub defrag: Defrag,
    /// Whether `MADV_HUGEPAGE` advice changes anything (`enabled` is `always` or `madvise`).
    pub advice_effective: bool,
}

/// What to tell the kernel about a chunk run.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ChunkAdvice {
    None,
    Huge,
    NoHuge,
}

/// The advice for a run of chunks that backs a block of `block_bytes` (0 for chunks holding
/// slabs and page runs of small and large blocks) under `policy`, with the system in `mode`
/// and the huge threshold `threshold_bytes`.
pub const fn advice_for(
    policy: Thp,
    mode: SystemMode,
    block_bytes: usize,
    threshold_bytes: usize,
) -> ChunkAdvice {
    if let SystemMode::Unknown = mode {
        return ChunkAdvice::None;
    }
    match policy {
        Thp::Default => ChunkAdvice::None,
        Thp::Never => match mode {
            // Nothing to undo where the system never uses huge pages.
            SystemMode::Never => ChunkAdvice::None,
            _ => ChunkAdvice::NoHuge,
        },
        Thp::Always => match mode {
            SystemMode::Never => ChunkAdvice::None,
            _ => ChunkAdvice::Huge,
        },
        Thp::Madvise => match mode {
            SystemMode::Never => ChunkAdvice::None,
            _ if block_bytes >= threshold_bytes && block_bytes > 0 => ChunkAdvice::Huge,
            _ => ChunkAdvice::None,
        },
        // Never advice at fault time: that is what makes the kernel compact synchronously.
        Thp::Defer => ChunkAdvice::None,
    }
}

/// Whether the chunks backing a block of `block_bytes` are queued for a deferred collapse
/// (`MADV_COLLAPSE` off the allocating thread): under `Defer`, for the blocks `Madvise` would
/// advise, where the system uses huge pages at all.
pub const fn defers_collapse(
    policy: Thp,
    mode: SystemMode,
    block_bytes: usize,
    threshold_bytes: usize,
) -> bool {
    matches!(policy, Thp::Defer)
        && matches!(mode, SystemMode::Always | SystemMode::Madvise)
        && block_bytes >= threshold_bytes
        && block_bytes > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defrag_words() {
        assert_eq!(
            parse_defrag(b"always defer [defer+madvise] madvise never\n"),
            Defrag::DeferMadvise
        );
        assert_eq!(
            parse_defrag(b"always defer defer+madvise [madvise] never"),
            Defrag::Madvise
        );
        assert_eq!(parse_defrag(b"[never]"), Defrag::Never);
        assert_eq!(parse_defrag(b""), Defrag::Unknown);
        assert_eq!(parse_defrag(b"[bogus]"), Defrag::Unknown);
    }

    #[test]
    fn policy_names_round_trip() {
        for p in [
            Thp::Default,
            Thp::Always,
            Thp::Madvise,
            Thp::Never,
            Thp::Defer,
        ] {
            assert_eq!(Thp::parse(p.name().as_bytes()), Some(p));
            assert_eq!(Thp::from_u8(p as u8), p);
        }
        assert_eq!(Thp::parse(b"sometimes"), None);
    }

    #[test]
    fn system_mode_parse() {
        assert_eq!(
            parse_system_mode(b"always [madvise] never\n"),
            SystemMode::Madvise
        );
        assert_eq!(
            parse_system_mode(b"[always] madvise never"),
            SystemMode::Always
        );
        assert_eq!(
            parse_system_mode(b"always madvise [never]"),
            SystemMode::Never
        );
        assert_eq!(parse_system_mode(b""), SystemMode::Unknown);
        assert_eq!(parse_system_mode(b"[bogus"), SystemMode::Unknown);
    }

    #[test]
    fn advice_table() {
        use ChunkAdvice::*;
        let m = 4 << 20;
        assert_eq!(
            advice_for(Thp::Madvise, SystemMode::Madvise, 8 << 20, m),
            Huge
        );
        assert_eq!(
            advice_for(Thp::Madvise, SystemMode::Madvise, 1 << 20, m),
            None
        );
        assert_eq!(advice_for(Thp::Madvise, SystemMode::Madvise, 0, m), None);
        assert_eq!(advice_for(Thp::Always, SystemMode::Madvise, 0, m), Huge);
        assert_eq!(advice_for(Thp::Never, SystemMode::Always, 0, m), NoHuge);
        assert_eq!(
            advice_for(Thp::Never, SystemMode::Madvise, 8 << 20, m),
            NoHuge
        );
        assert_eq!(
            advice_for(Thp::Default, SystemMode::Madvise, 8 << 20, m),
            None
        );
        assert_eq!(advice_for(Thp::Always, SystemMode::Unknown, 0, m), None);
        assert_eq!(advice_for(Thp::Always, SystemMode::Never, 0, m), None);
        assert_eq!(
            advice_for(Thp::Defer, SystemMode::Madvise, 8 << 20, m),
            None
        );
        assert_eq!(advice_for(Thp::Defer, SystemMode::Always, 0, m), None);
    }

    #[test]
    fn defer_queues_big_blocks_only() {
        let m = 4 << 20;
        assert!(defers_collapse(Thp::Defer, SystemMode::Madvise, 8 << 20, m));
        assert!(defers_collapse(Thp::Defer, SystemMode::Always, m, m));
        assert!(!defers_collapse(Thp::Defer, SystemMode::Madvise, m - 1, m));
        assert!(!defers_collapse(Thp::Defer, SystemMode::Madvise, 0, 0));
        assert!(!defers_collapse(Thp::Defer, SystemMode::Never, 8 << 20, m));
        assert!(!defers_collapse(
            Thp::Defer,
            SystemMode::Unknown,
            8 << 20,
            m
        ));
        for p in [Thp::Default, Thp::Always, Thp::Madvise, Thp::Never] {
            assert!(
                !defers_collapse(p, SystemMode::Madvise, 8 << 20, m),
                "{p:?}"
            );
        }
    }
}
