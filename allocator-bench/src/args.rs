//! Command-line arguments: an optional subcommand, an optional number, and `--name VALUE` (or
//! `--name=VALUE`) flags. The flags of [`SWITCHES`] take no value.

use std::str::FromStr;

/// Flags without a value.
pub const SWITCHES: &[&str] = &["help", "no-warmup", "no-build"];

#[derive(Debug, Default)]
pub struct Args {
    positional: Vec<String>,
    flags: Vec<(String, String)>,
}

impl Args {
    pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Args, String> {
        let mut a = Args::default();
        while let Some(arg) = it.next() {
            if let Some(name) = arg.strip_prefix("--") {
                if let Some((k, v)) = name.split_once('=') {
                    a.flags.push((k.to_string(), v.to_string()));
                } else if SWITCHES.contains(&name) {
                    a.flags.push((name.to_string(), String::new()));
                } else {
                    let v = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
                    a.flags.push((name.to_string(), v));
                }
            } else if arg == "-h" {
                a.flags.push(("help".to_string(), String::new()));
            } else {
                a.positional.push(arg);
            }
        }
        if a.positional.len() > 2 {
            return Err(format!("too many arguments: {:?}", a.positional));
        }
        Ok(a)
    }

    /// The first positional argument when it is not a number.
    pub fn subcommand(&self) -> Option<&str> {
        self.positional
            .first()
            .filter(|s| s.parse::<f64>().is_err())
            .map(String::as_str)
    }

    /// The numeric positional argument (after the subcommand, or alone), or `default`.
    pub fn number<T: FromStr>(&self, default: T) -> Result<T, String> {
        let rest = &self.positional[self.subcommand().map_or(0, |_| 1)..];
        match rest.first() {
            None => Ok(default),
            Some(s) => s.parse().map_err(|_| format!("not a number: {s:?}")),
        }
    }

    /// An error naming the first flag not in `known` (a misspelt flag must not be ignored).
    pub fn only(&self, known: &[&str]) -> Result<(), String> {
        match self
            .flags
            .iter()
            .find(|(k, _)| !known.contains(&k.as_str()))
        {
            Some((k, _)) => Err(format!("unknown flag --{k} (known here: {known:?})")),
            None => Ok(()),
        }
    }

    pub fn has(&self, name: &str) -> bool {
        self.flags.iter().any(|(k, _)| k == name)
    }

    /// The last value given for `--name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.flags
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `--name` parsed, or `default`.
    pub fn get<T: FromStr>(&self, name: &str, default: T) -> Result<T, String> {
        match self.value(name) {
            None => Ok(default),
            Some(v) => v
                .parse()
                .map_err(|_| format!("--{name}: cannot parse {v:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Args {
        Args::parse(s.split_whitespace().map(String::from)).unwrap()
    }

    #[test]
    fn subcommand_number_flags() {
        let a = parse("bigbuf 3 --mib 8 --type=u8");
        assert_eq!(a.subcommand(), Some("bigbuf"));
        assert_eq!(a.number(10u32), Ok(3));
        assert_eq!(a.get("mib", 512usize), Ok(8));
        assert_eq!(a.value("type"), Some("u8"));
        assert_eq!(a.get("reps", 3u32), Ok(3));
    }

    #[test]
    fn defaults_and_errors() {
        let a = parse("");
        assert_eq!(a.subcommand(), None);
        assert_eq!(a.number(7u32), Ok(7));
        let a = parse("5000");
        assert_eq!(a.subcommand(), None);
        assert_eq!(a.number(7u32), Ok(5000));
        assert!(Args::parse(["--mib".to_string()].into_iter()).is_err());
        assert!(parse("frag x").number(1u32).is_err());
        assert!(parse("--help").has("help"));
        let a = parse("compare --no-warmup --out /tmp/x");
        assert!(a.has("no-warmup"));
        assert_eq!(a.value("out"), Some("/tmp/x"));
        assert!(parse("bigbuf --mib 4").only(&["mib"]).is_ok());
        assert!(parse("bigbuf --thp always").only(&["mib"]).is_err());
    }
}
