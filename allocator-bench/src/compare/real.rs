//! Real programs for `compare` (issue 5): each prepares its input once in the scratch
//! directory (untimed), is started through one command whose process tree is measured, and
//! checks its output afterwards (untimed, without `LD_PRELOAD`).
//!
//! - `python`: a CPython script of dicts, lists, strings, sorting and JSON (300k entries);
//!   CPython's own small-object allocator (pymalloc) serves objects up to 512 bytes, so the
//!   preloaded `malloc` sees the larger ones, as in any default Python run.
//! - `sqlite`: `sqlite3` reads (`.read`) a script that inserts 200k rows (one `INSERT` each, one
//!   transaction) into a fresh database file, indexes them and runs aggregate and sorting
//!   queries.
//! - `git`: `git init`, `git add -A` and `git commit` of 3,000 files (nested directories) in a
//!   fresh directory, through `sh -c` (so three processes, all preloaded).
//! - `sort`: coreutils `sort` of a generated 2M-line file (`LC_ALL=C`, 2 threads).

use super::Ctx;
use crate::suite::Rng;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Python,
    Sqlite,
    Git,
    Sort,
}

pub struct Program {
    pub name: &'static str,
    kind: Kind,
    /// Entries, rows, files or lines.
    size: u64,
    /// The program's executable, found by `prepare`.
    exe: PathBuf,
    dir: PathBuf,
}

pub fn programs(scale: f64) -> Vec<Program> {
    let n = |x: f64| ((x * scale).round() as u64).max(1);
    [
        ("python", Kind::Python, n(300_000.0)),
        ("sqlite", Kind::Sqlite, n(200_000.0)),
        ("git", Kind::Git, n(3_000.0)),
        ("sort", Kind::Sort, n(2_000_000.0)),
    ]
    .into_iter()
    .map(|(name, kind, size)| Program {
        name,
        kind,
        size,
        exe: PathBuf::new(),
        dir: PathBuf::new(),
    })
    .collect()
}

/// The full path of `prog` on `PATH`.
fn which(prog: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))
}

const PYTHON: &str = r#"
import json, sys
n = int(sys.argv[1])
d = {}
for i in range(n):
    d["key-%d" % (i * 7919 % 1000003)] = [i, str(i) * (1 + i % 5), i * 0.5]
order = sorted(d, key=lambda k: d[k][1])
joined = ",".join(order)
assert len(joined.split(",")) == n
blob = json.dumps(d)
back = json.loads(blob)
assert back == d
total = sum(v[0] for v in back.values())
assert total == n * (n - 1) // 2, total
words = {}
for i in range(n):
    w = ("%x" % (i * 2654435761 % 4294967296))[:3]
    words.setdefault(w, []).append(i)
text = "".join(("%x" % i) * (1 + i % 7) for i in range(n))
print("result: sub=python n=%d total=%d groups=%d len=%d" % (n, total, len(words), len(text)))
"#;

fn git_env(cmd: &mut Command, home: &Path) {
    cmd.env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "bench")
        .env("GIT_AUTHOR_EMAIL", "bench@example.com")
        .env("GIT_COMMITTER_NAME", "bench")
        .env("GIT_COMMITTER_EMAIL", "bench@example.com")
        .env("GIT_AUTHOR_DATE", "2000-01-01T00:00:00Z")
        .env("GIT_COMMITTER_DATE", "2000-01-01T00:00:00Z");
}

impl Program {
    /// Finds the program and writes its input; an error skips the program.
    pub fn prepare(&mut self, ctx: &Ctx) -> Result<(), String> {
        self.dir = ctx.tmp.join(self.name);
        std::fs::create_dir_all(&self.dir).map_err(|e| e.to_string())?;
        let tool = match self.kind {
            Kind::Python => "python3",
            Kind::Sqlite => "sqlite3",
            Kind::Git => "git",
            Kind::Sort => "sort",
        };
        let found = which(tool).ok_or(format!("{tool} not on PATH"))?;
        self.exe = found;
        match self.kind {
            Kind::Python => {
                // A version manager's shim (pyenv) is a script; measure the interpreter itself.
                let out = Command::new(&self.exe)
                    .args(["-c", "import sys; print(sys.executable)"])
                    .output()
                    .map_err(|e| e.to_string())?;
                let real = String::from_utf8_lossy(&out.stdout).trim().to_string();
                if !real.is_empty() {
                    self.exe = PathBuf::from(real);
                }
                write(&self.dir.join("bench.py"), PYTHON)?;
            }
            Kind::Sqlite => {
                let mut sql = String::from(
                    "PRAGMA journal_mode=OFF;\nPRAGMA synchronous=OFF;\n\
                     CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, v REAL);\nBEGIN;\n",
                );
                for i in 1..=self.size {
                    let _ = writeln!(
                        sql,
                        "INSERT INTO t VALUES({i},'name-{}',{},{});",
                        i * 7919 % 1_000_003,
                        i % 97,
                        i as f64 * 0.5
                    );
                }
                sql.push_str(
                    "COMMIT;\nCREATE INDEX t_name ON t(name);\n\
                     SELECT count(*), sum(id) FROM t;\n\
                     SELECT grp, count(*), sum(v) FROM t GROUP BY grp ORDER BY grp;\n\
                     SELECT count(*) FROM t WHERE name LIKE 'name-1%';\n\
                     SELECT name, v FROM t ORDER BY name DESC;\n\
                     SELECT a.grp, count(*) FROM t a JOIN t b ON a.id = b.id + 1 GROUP BY a.grp;\n",
                );
                write(&self.dir.join("bench.sql"), &sql)?;
            }
            Kind::Git => {}
            Kind::Sort => {
                let mut rng = Rng::new(3);
                let mut text = String::with_capacity(self.size as usize * 40);
                for i in 0..self.size {
                    let _ = writeln!(
                        text,
                        "{:016x} line {i} {}",
                        rng.word(),
                        "x".repeat((i % 13) as usize)
                    );
                }
                write(&self.dir.join("input.txt"), &text)?;
            }
        }
        Ok(())
    }

    /// The command of one run (for `git`, after making a fresh tree: untimed).
    pub fn command(&self, _ctx: &Ctx) -> Result<Command, String> {
        let d = &self.dir;
        Ok(match self.kind {
            Kind::Python => {
                let mut c = Command::new(&self.exe);
                c.arg(d.join("bench.py")).arg(self.size.to_string());
                c
            }
            Kind::Sqlite => {
                let db = d.join("bench.db");
                let _ = std::fs::remove_file(&db);
                let mut c = Command::new(&self.exe);
                c.arg(&db)
                    .arg(format!(".read {}", d.join("bench.sql").display()));
                c
            }
            Kind::Git => {
                let tree = d.join("tree");
                let _ = std::fs::remove_dir_all(&tree);
                for i in 0..self.size {
                    let sub = tree.join(format!("d{:02}/e{:02}", i % 37, i % 11));
                    std::fs::create_dir_all(&sub).map_err(|e| e.to_string())?;
                    let mut body = String::new();
                    for l in 0..(20 + i % 60) {
                        let _ = writeln!(
                            body,
                            "file {i} line {l}: {:x}",
                            crate::workload::mix(i * 1000 + l)
                        );
                    }
                    write(&sub.join(format!("f{i}.txt")), &body)?;
                }
                let git = self.exe.display().to_string();
                let mut c = Command::new("sh");
                c.current_dir(&tree).args([
                    "-c",
                    &format!("{git} init -q && {git} add -A && {git} commit -q -m bench"),
                ]);
                git_env(&mut c, d);
                c
            }
            Kind::Sort => {
                let mut c = Command::new(&self.exe);
                c.env("LC_ALL", "C")
                    .arg("--parallel=2")
                    .arg("-o")
                    .arg(d.join("sorted.txt"))
                    .arg(d.join("input.txt"));
                c
            }
        })
    }

    /// Checks a run's output (its stdout is in `out`).
    pub fn check(&self, _ctx: &Ctx, out: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        let n = self.size;
        match self.kind {
            Kind::Python => {
                let want = format!("total={}", n * (n - 1) / 2);
                if !text
                    .lines()
                    .any(|l| l.starts_with("result: sub=python") && l.contains(&want))
                {
                    return Err(format!("python printed no result with {want}"));
                }
            }
            Kind::Sqlite => {
                let want = format!("{n}|{}", n * (n + 1) / 2);
                if !text.lines().any(|l| l == want) {
                    return Err(format!("sqlite printed no line {want}"));
                }
                let lines = text.lines().count() as u64;
                if lines < n {
                    return Err(format!("sqlite printed {lines} lines, fewer than {n}"));
                }
            }
            Kind::Git => {
                let mut c = Command::new(&self.exe);
                c.current_dir(self.dir.join("tree")).args(["ls-files"]);
                git_env(&mut c, &self.dir);
                let o = c.output().map_err(|e| e.to_string())?;
                let files = String::from_utf8_lossy(&o.stdout).lines().count() as u64;
                if files != n {
                    return Err(format!("git tracks {files} files, not {n}"));
                }
                let log = Command::new(&self.exe)
                    .current_dir(self.dir.join("tree"))
                    .args(["rev-list", "--count", "HEAD"])
                    .output()
                    .map_err(|e| e.to_string())?;
                if String::from_utf8_lossy(&log.stdout).trim() != "1" {
                    return Err("git made no commit".to_string());
                }
            }
            Kind::Sort => {
                let sorted = self.dir.join("sorted.txt");
                let a = std::fs::metadata(self.dir.join("input.txt")).map_err(|e| e.to_string())?;
                let b = std::fs::metadata(&sorted).map_err(|e| e.to_string())?;
                if a.len() != b.len() {
                    return Err("sort's output is not as long as its input".to_string());
                }
                let st = Command::new(&self.exe)
                    .env("LC_ALL", "C")
                    .arg("-c")
                    .arg(&sorted)
                    .status()
                    .map_err(|e| e.to_string())?;
                if !st.success() {
                    return Err("sort's output is not sorted".to_string());
                }
            }
        }
        Ok(())
    }
}
