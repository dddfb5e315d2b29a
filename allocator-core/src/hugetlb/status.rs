//! Why a pool refused ([`Cause`], the warning's words), the one-page probe and the public
//! pool report ([`HugetlbStatus`], what `hugealloc::hugetlb_status` returns).

use crate::config::Hugetlb;
use crate::diag::Msg;
use crate::os::{self, HugePageSize};
use crate::size_class::LG_CHUNK;

/// Why the pool could not serve a request (the warning names it; `stats` shows the last).
#[repr(u8)]
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Cause {
    /// Nothing failed yet.
    None = 0,
    /// No pool of that page size (its sysfs directory is missing: no hugetlbfs, a container).
    Absent = 1,
    /// The pool has no pages (`nr_hugepages` is 0).
    Empty = 2,
    /// The pool has pages, but too few are available for the request.
    TooSmall = 3,
    /// The kernel refused (`EPERM`/`EACCES`: a seccomp filter, `hugetlb_shm_group`).
    Forbidden = 4,
    /// Any other refusal.
    Other = 5,
}

impl Cause {
    pub const fn from_u8(byte: u8) -> Cause {
        match byte {
            1 => Cause::Absent,
            2 => Cause::Empty,
            3 => Cause::TooSmall,
            4 => Cause::Forbidden,
            5 => Cause::Other,
            _ => Cause::None,
        }
    }

    /// The word `stats` prints.
    pub const fn name(self) -> &'static str {
        match self {
            Cause::None => "none",
            Cause::Absent => "absent",
            Cause::Empty => "empty",
            Cause::TooSmall => "too small",
            Cause::Forbidden => "forbidden",
            Cause::Other => "refused",
        }
    }

    /// Classifies a refusal with `errno` `err` of a request for `pages` pages of `size`.
    pub(super) fn classify(err: i32, size: HugePageSize) -> Cause {
        let Some(pool) = os::hugetlb_pool(size) else {
            return Cause::Absent;
        };
        match err {
            libc::ENOMEM if pool.total == 0 => Cause::Empty,
            libc::ENOMEM => Cause::TooSmall,
            libc::EPERM | libc::EACCES => Cause::Forbidden,
            _ => Cause::Other,
        }
    }
}

/// Writes what went wrong with a request for `chunks` chunks when the pool had `available`
/// pages and, where pages can be had, the command that reserves them.
pub(super) fn write_cause(
    m: &mut Msg,
    size: HugePageSize,
    cause: Cause,
    chunks: usize,
    available: u64,
) {
    let dir = size.sysfs_dir();
    let pages = ((chunks << LG_CHUNK) as u64).div_ceil(size.bytes() as u64);
    match cause {
        Cause::Absent => {
            m.str("no ")
                .str(size.name())
                .str(" hugetlb pool on this system (")
                .str(dir)
                .str(" is missing)");
            return;
        }
        Cause::Empty => {
            m.str("the ")
                .str(size.name())
                .str(" hugetlb pool is empty (nr_hugepages 0)");
        }
        Cause::TooSmall => {
            m.str("the ")
                .str(size.name())
                .str(" hugetlb pool has ")
                .dec(available)
                .str(" pages available, fewer than the ")
                .dec(pages)
                .str(" asked");
        }
        Cause::Forbidden => {
            m.str("mapping from the ")
                .str(size.name())
                .str(" hugetlb pool is forbidden here (EPERM/EACCES)");
            return;
        }
        Cause::Other | Cause::None => {
            m.str("mmap(MAP_HUGETLB) of ")
                .str(size.name())
                .str(" pages was refused");
            return;
        }
    }
    m.str("; reserve pages with: echo N > ")
        .str(dir)
        .str("nr_hugepages");
}

/// Whether one page of `size` can be had from the pool now, for the doctor: maps it, faults
/// it in and unmaps it again (the pool is as before afterwards). `Err` names why not.
pub fn probe(size: HugePageSize) -> Result<(), Cause> {
    let page = size.bytes();
    let p = os::map_hugetlb(page, size, page).map_err(|e| Cause::classify(e, size))?;
    // SAFETY: `p` is the fresh one-page hugetlb mapping just made, ours alone.
    let faulted = unsafe { os::populate_write(p, page, page) };
    os::unmap(p, page);
    if faulted {
        Ok(())
    } else {
        Err(Cause::Other)
    }
}

/// One explicit huge page pool (`/sys/kernel/mm/hugepages/hugepages-*`), as
/// [`hugetlb_status`](crate::hugetlb_status) reports it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HugetlbPoolStatus {
    /// The page source drawing from this pool: [`Hugetlb::Pages2M`] or [`Hugetlb::Pages1G`].
    pub source: Hugetlb,
    /// The page size in bytes.
    pub page_bytes: usize,
    /// Whether the kernel has this pool at all (its sysfs directory exists; not in some
    /// containers, nor without hugetlbfs).
    pub present: bool,
    /// `nr_hugepages`: pages in the pool.
    pub pages: u64,
    /// `free_hugepages`: pages backing no mapping (promised ones included).
    pub free: u64,
    /// `resv_hugepages`: free pages promised to mappings that have not touched them yet.
    pub promised: u64,
    /// Whether one page could be mapped and touched just now (it went back to the pool at
    /// once): `hugetlb:2M|1G` would get pages rather than fall back.
    pub test_page: bool,
    /// Why no test page could be had: `absent`, `empty`, `too small`, `forbidden` or `refused`
    /// (the word `stats` and the fallback warning use); `""` when one could.
    pub why_not: &'static str,
    /// The pool's sysfs directory, with a trailing `/`: root reserves `N` pages with
    /// `echo N > <sysfs_dir>nr_hugepages`.
    pub sysfs_dir: &'static str,
}

impl HugetlbPoolStatus {
    /// Pages a new mapping can still have: free and not promised.
    pub const fn available(&self) -> u64 {
        self.free.saturating_sub(self.promised)
    }
}

/// Both explicit huge page pools, 2 MiB then 1 GiB: what [`hugetlb_status`](crate::hugetlb_status)
/// returns.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct HugetlbStatus {
    pub pools: [HugetlbPoolStatus; 2],
}

/// Reads both pools and probes each for a page (see [`probe`]). Allocates nothing; the pools
/// are as before afterwards.
pub fn status() -> HugetlbStatus {
    HugetlbStatus {
        pools: HugePageSize::ALL.map(pool_status),
    }
}

fn pool_status(size: HugePageSize) -> HugetlbPoolStatus {
    let pool = os::hugetlb_pool(size);
    let probed = probe(size);
    HugetlbPoolStatus {
        source: match size {
            HugePageSize::Size2M => Hugetlb::Pages2M,
            HugePageSize::Size1G => Hugetlb::Pages1G,
        },
        page_bytes: size.bytes(),
        present: pool.is_some(),
        pages: pool.map_or(0, |p| p.total),
        free: pool.map_or(0, |p| p.free),
        promised: pool.map_or(0, |p| p.reserved),
        test_page: probed.is_ok(),
        why_not: match probed {
            Ok(()) => "",
            Err(cause) => cause.name(),
        },
        sysfs_dir: size.sysfs_dir(),
    }
}
