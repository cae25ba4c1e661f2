//! Reading the config file: at most [`MAX_CONFIG_BYTES`] (a larger or
//! endless file, `/dev/zero` say, is refused after reading one byte more,
//! in bounded memory), UTF-8, then parsed; an unknown key is refused with
//! the nearest valid key suggested and the line it is on.

use std::io::Read;
use std::path::Path;

use super::ConfigError;

/// The largest config file read: far above any real one (a file listing
/// thousands of exclusions is tens of KiB), far below what hurts.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;

/// The file's text, read through a cap: never more than
/// [`MAX_CONFIG_BYTES`] + 1 bytes are read, whatever the file is.
pub fn read_capped(path: &Path) -> Result<String, ConfigError> {
    let shown = path.display().to_string();
    let read_err = |err| ConfigError::Read {
        path: shown.clone(),
        err,
    };
    let file = std::fs::File::open(path).map_err(read_err)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::Parse {
            path: shown,
            err: format!(
                "larger than {} KiB, the most nodegate reads; is it the right file?",
                MAX_CONFIG_BYTES / 1024
            ),
        });
    }
    String::from_utf8(bytes).map_err(|e| ConfigError::Parse {
        path: shown,
        err: format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ),
    })
}

/// serde's "unknown field `x`, expected one of `a`, `b`" (or "expected `a`"),
/// rewritten: the nearest valid key suggested instead of the whole list, and
/// the line of `text` where the key is written when the parser gave none.
pub fn explain_unknown_key(message: &str, text: &str) -> Option<String> {
    let (prefix, rest) = message.split_once("unknown field `")?;
    let rest = rest.split("unknown field `").next().unwrap_or(rest);
    let (key, rest) = rest.split_once('`')?;
    // serde writes "expected `a` or `b`", the parser "expected one of a, b".
    let list = rest.split_once("expected ").map_or("", |(_, l)| l);
    let list = list.strip_prefix("one of ").unwrap_or(list);
    let list = list.split(" at line ").next().unwrap_or_default();
    let valid: Vec<&str> = list
        .split(", ")
        .flat_map(|k| k.split(" or "))
        .map(|k| k.trim().trim_matches('`'))
        .filter(|k| !k.is_empty())
        .collect();
    // The parser's own prefix (e.g. "criticalPods[0]: ") names where.
    let mut out = match prefix.trim_end() {
        "" => format!("unknown key `{key}`"),
        prefix => format!("{prefix} unknown key `{key}`"),
    };
    match nearest(key, &valid) {
        Some(best) => out.push_str(&format!("; did you mean `{best}`?")),
        None if valid.is_empty() => {}
        // The top level has over fifty keys: a list that long helps no one.
        None if valid.len() > 12 => out.push_str(
            "; no key is like it (`nodegate config check` on an empty file prints every key)",
        ),
        None => out.push_str(&format!("; the keys here are {}", valid.join(", "))),
    }
    if let Some(at) = message.rfind(" at line ") {
        out.push_str(&message[at..]);
    } else if let Some(line) = line_of_key(text, key) {
        out.push_str(&format!(" at line {line}"));
    }
    Some(out)
}

/// The valid key closest to `key`, if close enough to be a typo: by
/// Jaro-Winkler similarity (strsim, as clap uses for flags), case ignored.
pub fn nearest<'a>(key: &str, valid: &[&'a str]) -> Option<&'a str> {
    let lower = key.to_ascii_lowercase();
    valid
        .iter()
        .map(|v| (strsim::jaro_winkler(&lower, &v.to_ascii_lowercase()), *v))
        .filter(|(score, _)| *score > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, v)| v)
}

/// The first line (1-based) where `key` is written as a mapping key.
fn line_of_key(text: &str, key: &str) -> Option<usize> {
    let written = |l: &str| {
        let l = l.trim_start().trim_start_matches("- ").trim_start();
        let l = l.trim_start_matches('{').trim_start();
        l.strip_prefix(key)
            .is_some_and(|r| r.trim_start().starts_with(':'))
            || l.contains(&format!(" {key}:"))
            || l.contains(&format!("{{{key}:"))
            || l.contains(&format!(",{key}:"))
    };
    text.lines().position(written).map(|i| i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typo_gets_the_nearest_key_and_its_line() {
        let m = "unknown field `timout`, expected one of taints, timeout, onTimeout";
        let got = explain_unknown_key(m, "taints: []\ntimout: 3m\n").unwrap_or_default();
        assert_eq!(
            got,
            "unknown key `timout`; did you mean `timeout`? at line 2"
        );
    }

    #[test]
    fn nothing_close_lists_the_keys() {
        let m = "x: unknown field `zzz`, expected `type` or `status` at line 3 column 5";
        let got = explain_unknown_key(m, "").unwrap_or_default();
        assert_eq!(
            got,
            "x: unknown key `zzz`; the keys here are type, status at line 3 column 5"
        );
    }

    #[test]
    fn an_endless_file_is_refused_after_the_cap() {
        let e = read_capped(Path::new("/dev/zero")).map(|_| ()).unwrap_err();
        assert!(e.to_string().contains("larger than 1024 KiB"), "{e}");
    }
}
