//! `compare`'s results: every run's figures, medians per (workload, allocator), ratios to
//! glibc, geometric means; printed as markdown tables and written as CSV and SVG bar charts
//! (hand-written SVG: log-scale ratio to glibc per workload per allocator).

use super::{Config, Job, Sample};
use std::fmt::Write as _;
use std::path::Path;

/// A metric of [`Sample`].
#[derive(Clone, Copy)]
enum Metric {
    Time,
    Rss,
    Faults,
}

impl Metric {
    fn of(self, s: &Sample) -> f64 {
        match self {
            Metric::Time => s.wall_ms,
            Metric::Rss => s.maxrss_kib as f64 / 1024.0,
            Metric::Faults => s.minflt as f64,
        }
    }

    fn title(self) -> &'static str {
        match self {
            Metric::Time => "wall time, ms",
            Metric::Rss => "peak RSS, MiB",
            Metric::Faults => "minor faults",
        }
    }

    fn fmt(self, v: f64) -> String {
        match self {
            Metric::Time => format!("{v:.0}"),
            Metric::Rss => format!("{v:.1}"),
            Metric::Faults => format!("{v:.0}"),
        }
    }
}

/// One run: its repetition (from 0) and what it measured or why it failed.
type Run = (usize, Result<Sample, String>);

pub struct Results {
    jobs: Vec<(String, &'static str)>,
    configs: Vec<&'static str>,
    /// runs[job][config]: (rep, outcome).
    runs: Vec<Vec<Vec<Run>>>,
}

/// The median of `v` (the mean of the two middle values for an even count); `None` if empty.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// The geometric mean of positive values; `None` if there are none.
pub fn geomean(v: &[f64]) -> Option<f64> {
    let v: Vec<f64> = v
        .iter()
        .copied()
        .filter(|x| *x > 0.0 && x.is_finite())
        .collect();
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

impl Results {
    pub fn new(jobs: &[Job], configs: &[Config]) -> Results {
        Results {
            jobs: jobs.iter().map(|j| (j.name.clone(), j.group)).collect(),
            configs: configs.iter().map(|c| c.name).collect(),
            runs: vec![vec![Vec::new(); configs.len()]; jobs.len()],
        }
    }

    pub fn add(&mut self, job: usize, config: usize, rep: usize, r: Result<Sample, String>) {
        self.runs[job][config].push((rep, r));
    }

    pub fn failures(&self) -> usize {
        self.runs
            .iter()
            .flatten()
            .flatten()
            .filter(|(_, r)| r.is_err())
            .count()
    }

    /// The median of a metric over the successful runs of a cell; `None` if any run failed.
    fn cell(&self, job: usize, config: usize, m: Metric) -> Option<f64> {
        let runs = &self.runs[job][config];
        if runs.is_empty() || runs.iter().any(|(_, r)| r.is_err()) {
            return None;
        }
        median(
            runs.iter()
                .filter_map(|(_, r)| r.as_ref().ok())
                .map(|s| m.of(s))
                .collect(),
        )
    }

    fn config_index(&self, name: &str) -> Option<usize> {
        self.configs.iter().position(|c| *c == name)
    }

    /// cell(job, config) / cell(job, base).
    fn ratio(&self, job: usize, config: usize, base: usize, m: Metric) -> Option<f64> {
        let (a, b) = (self.cell(job, config, m)?, self.cell(job, base, m)?);
        (b > 0.0).then(|| a / b)
    }

    fn jobs_in(&self, group: &str) -> Vec<usize> {
        (0..self.jobs.len())
            .filter(|&j| self.jobs[j].1 == group)
            .collect()
    }

    /// The geometric mean over the group's workloads of config's ratio to base.
    fn geo(&self, group: &str, config: usize, base: usize, m: Metric) -> Option<f64> {
        let r: Vec<f64> = self
            .jobs_in(group)
            .into_iter()
            .filter_map(|j| self.ratio(j, config, base, m))
            .collect();
        geomean(&r)
    }

    fn groups(&self) -> Vec<&'static str> {
        let mut g: Vec<&'static str> = Vec::new();
        for (_, grp) in &self.jobs {
            if !g.contains(grp) {
                g.push(grp);
            }
        }
        g
    }

    /// The markdown tables: per group and metric, median (ratio to glibc), geometric mean.
    pub fn tables(&self) -> String {
        let mut s = String::new();
        for group in self.groups() {
            let jobs = self.jobs_in(group);
            for m in [Metric::Time, Metric::Rss, Metric::Faults] {
                let _ = writeln!(s, "\n{group}: {} (median; ratio to glibc)\n", m.title());
                let _ = writeln!(s, "| workload | {} |", self.configs.join(" | "));
                let _ = writeln!(s, "|---|{}", "---|".repeat(self.configs.len()));
                for &j in &jobs {
                    let _ = write!(s, "| {} |", self.jobs[j].0);
                    for c in 0..self.configs.len() {
                        let _ = match (self.cell(j, c, m), self.ratio(j, c, 0, m)) {
                            (Some(v), Some(r)) => write!(s, " {} ({r:.2}) |", m.fmt(v)),
                            (Some(v), None) => write!(s, " {} |", m.fmt(v)),
                            _ => write!(s, " FAIL |"),
                        };
                    }
                    s.push('\n');
                }
                let _ = write!(s, "| **geomean** |");
                for c in 0..self.configs.len() {
                    let _ = match self.geo(group, c, 0, m) {
                        Some(g) => write!(s, " **{g:.2}** |"),
                        None => write!(s, " - |"),
                    };
                }
                s.push('\n');
            }
            // geometric means against glibc, jemalloc, mimalloc
            let bases: Vec<(usize, &str)> = ["glibc", "jemalloc", "mimalloc"]
                .into_iter()
                .filter_map(|b| Some((self.config_index(b)?, b)))
                .collect();
            let _ = writeln!(
                s,
                "\n{group}: geometric means of ratios (below 1 is better)\n"
            );
            let _ = write!(s, "| allocator |");
            for (_, b) in &bases {
                let _ = write!(s, " time vs {b} | RSS vs {b} |");
            }
            let _ = writeln!(s, "\n|---|{}", "---|---|".repeat(bases.len()));
            for c in 0..self.configs.len() {
                let _ = write!(s, "| {} |", self.configs[c]);
                for &(b, _) in &bases {
                    for m in [Metric::Time, Metric::Rss] {
                        let _ = match self.geo(group, c, b, m) {
                            Some(g) => write!(s, " {g:.2} |"),
                            None => write!(s, " - |"),
                        };
                    }
                }
                s.push('\n');
            }
        }
        s
    }

    pub fn print(&self, command: &str) {
        println!("compare: `{command}`");
        println!("{}", self.tables());
        let failed: Vec<String> = self
            .runs
            .iter()
            .enumerate()
            .flat_map(|(j, per)| {
                per.iter().enumerate().flat_map(move |(c, runs)| {
                    runs.iter().filter_map(move |(rep, r)| {
                        r.as_ref().err().map(|e| {
                            format!(
                                "{} {} rep {}: {e}",
                                self.jobs[j].0,
                                self.configs[c],
                                rep + 1
                            )
                        })
                    })
                })
            })
            .collect();
        for f in failed {
            println!("FAILED: {f}");
        }
    }

    pub fn raw_csv(&self) -> String {
        let mut s =
            String::from("group,workload,allocator,rep,status,wall_ms,peak_rss_kib,minor_faults\n");
        for (j, per) in self.runs.iter().enumerate() {
            for (c, runs) in per.iter().enumerate() {
                for (rep, r) in runs {
                    let (g, w, a) = (self.jobs[j].1, &self.jobs[j].0, self.configs[c]);
                    let _ = match r {
                        Ok(x) => writeln!(
                            s,
                            "{g},{w},{a},{},ok,{:.1},{},{}",
                            rep + 1,
                            x.wall_ms,
                            x.maxrss_kib,
                            x.minflt
                        ),
                        Err(_) => writeln!(s, "{g},{w},{a},{},failed,,,", rep + 1),
                    };
                }
            }
        }
        s
    }

    pub fn summary_csv(&self) -> String {
        let mut s = String::from(
            "group,workload,allocator,median_wall_ms,median_peak_rss_mib,median_minor_faults,\
             time_ratio_glibc,rss_ratio_glibc,faults_ratio_glibc\n",
        );
        let f = |v: Option<f64>, d: usize| v.map_or(String::new(), |v| format!("{v:.d$}"));
        for j in 0..self.jobs.len() {
            for c in 0..self.configs.len() {
                let _ = writeln!(
                    s,
                    "{},{},{},{},{},{},{},{},{}",
                    self.jobs[j].1,
                    self.jobs[j].0,
                    self.configs[c],
                    f(self.cell(j, c, Metric::Time), 1),
                    f(self.cell(j, c, Metric::Rss), 1),
                    f(self.cell(j, c, Metric::Faults), 0),
                    f(self.ratio(j, c, 0, Metric::Time), 3),
                    f(self.ratio(j, c, 0, Metric::Rss), 3),
                    f(self.ratio(j, c, 0, Metric::Faults), 3),
                );
            }
        }
        s
    }

    /// A grouped bar chart of one metric's ratio to glibc: a group per workload (and one per
    /// group's geometric mean), a bar per allocator other than glibc, log scale.
    fn svg(&self, m: Metric) -> String {
        let configs: Vec<usize> = (1..self.configs.len()).collect();
        // (label, ratios per config)
        let mut groups: Vec<(String, Vec<Option<f64>>)> = Vec::new();
        for g in self.groups() {
            for j in self.jobs_in(g) {
                groups.push((
                    self.jobs[j].0.clone(),
                    configs.iter().map(|&c| self.ratio(j, c, 0, m)).collect(),
                ));
            }
            groups.push((
                format!("geomean {g}"),
                configs.iter().map(|&c| self.geo(g, c, 0, m)).collect(),
            ));
        }
        let vals: Vec<f64> = groups
            .iter()
            .flat_map(|g| g.1.iter().flatten().copied())
            .collect();
        let lo = vals
            .iter()
            .copied()
            .fold(1.0f64, f64::min)
            .log2()
            .floor()
            .max(-4.0);
        let hi = vals
            .iter()
            .copied()
            .fold(1.0f64, f64::max)
            .log2()
            .ceil()
            .min(5.0)
            .max(lo + 1.0);
        let (bar, gap) = (7.0, 12.0);
        let gw = bar * configs.len() as f64 + gap;
        let (left, top, plot_h, bottom) = (60.0, 50.0, 300.0, 120.0);
        let width = left + gw * groups.len() as f64 + 20.0;
        let height = top + plot_h + bottom;
        let y = |r: f64| top + (hi - r.log2().clamp(lo, hi)) / (hi - lo) * plot_h;
        let colour = |name: &str| match name {
            "hugealloc" => "#d62728",
            "hugealloc-thp" => "#ff9896",
            "jemalloc" => "#1f77b4",
            "jemalloc-thp" => "#aec7e8",
            "mimalloc" => "#2ca02c",
            "tcmalloc" => "#9467bd",
            _ => "#7f7f7f",
        };
        let mut s = String::new();
        let _ = writeln!(
            s,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width:.0}\" height=\"{height:.0}\" \
             font-family=\"sans-serif\" font-size=\"11\">"
        );
        let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
        let _ = writeln!(
            s,
            "<text x=\"{left}\" y=\"18\" font-size=\"14\">{} relative to glibc (log scale; below 1 is better)</text>",
            m.title()
        );
        // legend
        for (k, &c) in configs.iter().enumerate() {
            let x = left + k as f64 * 110.0;
            let _ = writeln!(
                s,
                "<rect x=\"{x}\" y=\"28\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{}\" y=\"37\">{}</text>",
                colour(self.configs[c]),
                x + 14.0,
                self.configs[c]
            );
        }
        // grid: powers of two
        let mut e = lo;
        while e <= hi {
            let r = 2f64.powf(e);
            let yy = y(r);
            let label = if e >= 0.0 {
                format!("{r:.0}")
            } else {
                format!("1/{:.0}", 1.0 / r)
            };
            let stroke = if e == 0.0 { "#000" } else { "#ddd" };
            let _ = writeln!(
                s,
                "<line x1=\"{left}\" x2=\"{:.0}\" y1=\"{yy:.1}\" y2=\"{yy:.1}\" stroke=\"{stroke}\"/>\
                 <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{label}</text>",
                width - 20.0,
                left - 4.0,
                yy + 4.0
            );
            e += 1.0;
        }
        let base = y(1.0);
        for (g, (label, ratios)) in groups.iter().enumerate() {
            let x0 = left + g as f64 * gw + gap / 2.0;
            for (k, r) in ratios.iter().enumerate() {
                let x = x0 + k as f64 * bar;
                let name = self.configs[configs[k]];
                match r {
                    Some(r) => {
                        let yy = y(*r);
                        let (y1, h) = if yy < base {
                            (yy, base - yy)
                        } else {
                            (base, yy - base)
                        };
                        let _ = writeln!(
                            s,
                            "<rect x=\"{x:.1}\" y=\"{y1:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{}\">\
                             <title>{label} {name}: {r:.2}</title></rect>",
                            bar - 1.0,
                            h.max(0.5),
                            colour(name)
                        );
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            "<text x=\"{x:.1}\" y=\"{:.1}\" font-size=\"8\">x</text>",
                            base - 2.0
                        );
                    }
                }
            }
            let lx = x0 + gw / 2.0 - gap / 2.0;
            let ly = top + plot_h + 10.0;
            let _ = writeln!(
                s,
                "<text x=\"{lx:.1}\" y=\"{ly:.1}\" text-anchor=\"end\" transform=\"rotate(-45 {lx:.1} {ly:.1})\">{label}</text>"
            );
        }
        s.push_str("</svg>\n");
        s
    }

    pub fn write_files(&self, dir: &Path) -> Result<(), String> {
        let files = [
            ("bench-results.csv", self.raw_csv()),
            ("bench-summary.csv", self.summary_csv()),
            ("bench-time.svg", self.svg(Metric::Time)),
            ("bench-rss.svg", self.svg(Metric::Rss)),
        ];
        for (name, text) in files {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn results() -> Results {
        let mut r = Results {
            jobs: vec![("a".to_string(), "suite"), ("b".to_string(), "suite")],
            configs: vec!["glibc", "hugealloc"],
            runs: vec![vec![Vec::new(); 2]; 2],
        };
        let s = |ms: f64, kib: u64| {
            Ok(Sample {
                wall_ms: ms,
                maxrss_kib: kib,
                minflt: 10,
            })
        };
        r.add(0, 0, 0, s(100.0, 1024));
        r.add(0, 1, 0, s(50.0, 2048));
        r.add(1, 0, 0, s(100.0, 1024));
        r.add(1, 1, 0, s(200.0, 1024));
        r
    }

    #[test]
    fn medians_and_means() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0]), Some(2.5));
        assert_eq!(median(vec![]), None);
        assert!((geomean(&[0.5, 2.0]).unwrap() - 1.0).abs() < 1e-12);
        let r = results();
        assert!((r.geo("suite", 1, 0, Metric::Time).unwrap() - 1.0).abs() < 1e-12);
        assert!((r.geo("suite", 1, 0, Metric::Rss).unwrap() - 2f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn a_failed_run_marks_its_cell() {
        let mut r = results();
        r.add(1, 1, 1, Err("boom".to_string()));
        assert_eq!(r.failures(), 1);
        let t = r.tables();
        assert!(t.contains("| b | 100 (1.00) | FAIL |"), "{t}");
        assert!(r.raw_csv().contains("suite,b,hugealloc,2,failed"));
    }

    #[test]
    fn svg_is_well_formed() {
        let svg = results().svg(Metric::Time);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(
            svg.matches("<rect").count(),
            svg.matches("</rect>").count() + 1 + 1
        );
        assert!(svg.contains("geomean suite"));
    }
}
