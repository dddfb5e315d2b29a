//! Real programs from Debian's packages run under `LD_PRELOAD=libhugealloc.so`: each workload
//! runs once without the library and once with it, and the outputs must be identical. The
//! preloaded run must show hugealloc's start-up lines (`confirm_conf`) on stderr, and its
//! statistics at exit where the program leaves stderr open until then (coreutils' `sort`
//! closes it in an `atexit` handler that runs first). A missing program fails the test,
//! naming the package (`.ci/run` installs them).

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Output};

/// Whether the program keeps stderr open until its `atexit` handlers have run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stats {
    AtExit,
    Lost,
}

/// Runs `make()` twice, plain and preloaded, and compares stdout.
fn compare(what: &str, stats: Stats, make: impl Fn() -> Command) -> Output {
    let plain = run_ok(&mut make(), &format!("{what} (glibc)"));
    let mut cmd = make();
    let with = run_ok(preload(&mut cmd), &format!("{what} (hugealloc)"));
    assert!(
        printed_confirmation(&with.stderr),
        "{what}: no hugealloc start-up lines on stderr, so the library was not loaded:\n{}",
        tail(&with.stderr)
    );
    if stats == Stats::AtExit {
        assert!(
            printed_stats(&with.stderr),
            "{what}: no hugealloc stats on stderr at exit:\n{}",
            tail(&with.stderr)
        );
    }
    assert!(
        plain.stdout == with.stdout,
        "{what}: output differs under hugealloc\n--- glibc\n{}\n--- hugealloc\n{}",
        tail(&plain.stdout),
        tail(&with.stdout)
    );
    assert!(!plain.stdout.is_empty(), "{what}: no output");
    with
}

#[test]
fn python_workload() {
    // Debian's python3 (a pyenv shim, a bash script, would do too, but is not Debian's).
    let python = which("/usr/bin/python3").unwrap_or_else(|| require("python3", "python3"));
    let script = r#"
import collections, hashlib, json, random, re, sys
random.seed(12345)
words = ["".join(random.choice("abcdefghij") for _ in range(random.randint(1, 30)))
         for _ in range(200000)]
counts = collections.Counter(words)
index = {}
for i, w in enumerate(words):
    index.setdefault(w[:3], []).append(i)
big = [list(range(i % 500)) for i in range(20000)]
text = " ".join(words)
joined = "".join(reversed(text))
found = len(re.findall(r"a[bc]+d", text))
blob = json.dumps({"counts": counts.most_common(50), "keys": sorted(index)[:100]})
parsed = json.loads(blob)
buffers = [bytearray(i * 1000) for i in range(300)]
digest = hashlib.sha256(joined.encode()).hexdigest()
del big, buffers
print(len(counts), len(index), found, len(blob), parsed["keys"][:5], digest)
print(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10])
"#;
    for malloc in ["pymalloc", "malloc"] {
        // PYTHONMALLOC=malloc sends every object through malloc, not only the big ones.
        compare(
            &format!("python3 (PYTHONMALLOC={malloc})"),
            Stats::AtExit,
            || {
                let mut c = timed(300, &python);
                c.args(["-c", script])
                    .env("PYTHONMALLOC", malloc)
                    .env("PYTHONHASHSEED", "0");
                c
            },
        );
    }
}

#[test]
fn sqlite3_200k_rows() {
    let sqlite = require("sqlite3", "sqlite3");
    let dir = scratch("sqlite");
    let mut sql = String::with_capacity(16 << 20);
    sql.push_str(
        "PRAGMA journal_mode=WAL;\n\
         CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, val REAL, payload BLOB);\n\
         BEGIN;\n",
    );
    for i in 0..200_000u64 {
        let k = (i * 7919) % 200_000;
        sql.push_str(&format!(
            "INSERT INTO t VALUES({i}, 'name-{k:08}-{}', {}, {}.{}, zeroblob({}));\n",
            ["alpha", "beta", "gamma", "delta", "epsilon"][(i % 5) as usize],
            i % 97,
            (i * 31) % 1000,
            i % 7,
            i % 300
        ));
    }
    sql.push_str(
        "COMMIT;\n\
         CREATE INDEX t_name ON t(name);\n\
         CREATE INDEX t_grp ON t(grp, val);\n\
         SELECT count(*), sum(grp), total(val), sum(length(payload)) FROM t;\n\
         SELECT grp, count(*), round(avg(val), 6), min(name), max(name) FROM t GROUP BY grp ORDER BY grp;\n\
         SELECT name FROM t WHERE name LIKE 'name-0001%' ORDER BY name LIMIT 20;\n\
         SELECT group_concat(id) FROM (SELECT id FROM t ORDER BY val DESC, id LIMIT 100);\n\
         SELECT a.grp, count(*) FROM t a JOIN t b ON a.id = b.id + 1 WHERE a.grp = b.grp + 1 GROUP BY a.grp ORDER BY a.grp LIMIT 10;\n\
         UPDATE t SET val = val * 2, name = upper(name) WHERE grp < 10;\n\
         DELETE FROM t WHERE id % 3 = 0;\n\
         SELECT count(*), total(val), max(name) FROM t;\n\
         VACUUM;\n\
         SELECT count(*) FROM t;\n\
         PRAGMA integrity_check;\n",
    );
    let script = dir.join("workload.sql");
    std::fs::write(&script, sql).unwrap();
    let run = std::sync::atomic::AtomicUsize::new(0);
    compare("sqlite3", Stats::AtExit, || {
        let n = run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let db = dir.join(format!("db{n}.sqlite"));
        let mut c = timed(600, "sh");
        c.arg("-c").arg(format!(
            "exec '{}' '{}' < '{}'",
            sqlite.display(),
            db.display(),
            script.display()
        ));
        c
    });
}

/// Writes `n` files of deterministic text in `dir`, in 50 subfolders.
fn write_tree(dir: &Path, n: usize, salt: u64) {
    for i in 0..n {
        let sub = dir.join(format!("d{:02}", i % 50));
        std::fs::create_dir_all(&sub).unwrap();
        let mut body = String::new();
        for line in 0..(i % 40 + 1) {
            body.push_str(&format!(
                "file {i} line {line} value {}\n",
                (i as u64 * 2654435761 + line as u64 + salt) % 1_000_003
            ));
        }
        std::fs::write(sub.join(format!("f{i:05}.txt")), body).unwrap();
    }
}

#[test]
fn git_init_add_commit() {
    let git = require("git", "git");
    let base = scratch("git");
    let run = std::sync::atomic::AtomicUsize::new(0);
    let script = r#"
set -e
git init -q -b main .
git add -A
git commit -q -m "first: three thousand files"
cp -r ../more/. .
git add -A
git commit -q -m "second: changes"
git rev-parse HEAD HEAD~1
git log --stat --format='%H %s' | tail -n 20
git diff --stat HEAD~1 | tail -n 3
git ls-files | wc -l
git gc -q
git fsck --full --no-progress
git count-objects -v | grep -v size
git grep -c 'value 12' HEAD -- d01 | head -n 5
"#;
    compare("git", Stats::AtExit, || {
        let n = run.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let root = base.join(format!("run{n}"));
        let repo = root.join("repo");
        write_tree(&repo, 3000, 0);
        write_tree(&root.join("more"), 600, 7);
        let mut c = timed(600, "sh");
        c.arg("-c")
            .arg(script)
            .current_dir(&repo)
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    git.parent().unwrap().display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("HOME", &root)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "hugealloc")
            .env("GIT_AUTHOR_EMAIL", "test@example.com")
            .env("GIT_COMMITTER_NAME", "hugealloc")
            .env("GIT_COMMITTER_EMAIL", "test@example.com")
            .env("GIT_AUTHOR_DATE", "2024-01-01T00:00:00Z")
            .env("GIT_COMMITTER_DATE", "2024-01-01T00:00:00Z");
        c
    });
}

#[test]
fn sort_large_file() {
    let sort = require("sort", "coreutils");
    let dir = scratch("sort");
    let input = dir.join("input.txt");
    let mut text = String::with_capacity(48 << 20);
    let mut x: u64 = 0x2545f4914f6cdd1d;
    for i in 0..1_500_000u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!("{:016x},{},{}\n", x, x % 100_000, i % 1000));
    }
    std::fs::write(&input, text).unwrap();
    for args in [
        vec!["-S", "200M", "--parallel=2"],
        vec!["-t", ",", "-k2,2n", "-k1,1", "-S", "64M"],
        vec!["-u", "-t", ",", "-k3,3n"],
    ] {
        compare(&format!("sort {}", args.join(" ")), Stats::Lost, || {
            let mut c = timed(300, &sort);
            c.args(&args).arg(&input).env("LC_ALL", "C");
            c
        });
    }
}
