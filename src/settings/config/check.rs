//! `nodegate config check`: the config file validated exactly as `nodegate
//! run --config FILE` validates it ([`run_settings_from`], the same code),
//! and, when it is refused, every problem that can be found, each located in
//! the file. Nothing here talks to the cluster.

use super::*;
use crate::settings::table::GateGiven;

/// The settings `nodegate run --config FILE` (with `args`' flags) would run
/// with, or every problem found, the one `run` reports first.
pub fn check_file(args: &RunArgs) -> Result<RunSettings, Vec<ConfigError>> {
    let file = load_file(&args.gate).map_err(|e| vec![e])?;
    let mut problems = match run_settings_from(args, file) {
        Ok(settings) => return Ok(settings),
        Err(first) => vec![first],
    };
    // The file parsed once, so it parses again; each pass gets its own copy.
    let fresh = || load_file(&args.gate).ok();
    // The whole gate's first problem, if it has one, is `first`.
    let mut more = Vec::new();
    if let Some(mut f) = fresh() {
        // The gate's keys without the lists checked apart below.
        (f.critical_pods, f.critical_conditions, f.condition_taints) = (None, None, None);
        (f.critical_resources, f.dra_drivers) = (None, None);
        more.push(gate_settings(&args.gate, &mut f).err());
    }
    if let Some(mut f) = fresh() {
        let _ = GateGiven::merge(&args.gate.flags, &mut f);
        f.suspend = None;
        more.push(devices::critical_resources(f.critical_resources.take()).err());
        more.push(devices::dra_drivers(f.dra_drivers.take()).err());
        more.push(members::critical_pods(f.critical_pods.take().unwrap_or_default()).err());
        more.push(conditions::critical_conditions(f.critical_conditions.take()).err());
        let managed = managed_taints(&GateGiven::defaults().taints).unwrap_or_default();
        more.push(conditions::condition_taints(f.condition_taints.take(), &managed).err());
        if let Ok(gate) = gate_settings(&GateArgs::default(), &mut FileConfig::default()) {
            more.push(run_part(args, gate, f).err());
        }
    }
    for e in more.into_iter().flatten() {
        if !problems.iter().any(|p| p.to_string() == e.to_string()) {
            problems.push(e);
        }
    }
    Err(problems)
}

/// [`check_file`] for `nodegate config check`: every problem of the file
/// as `FILE:LINE: key: what is wrong`, and more of them: each top-level key
/// is also checked on its own (with every other key at its default), so a
/// problem of one key, or an unknown key in one part of the file, never
/// hides another's.
pub fn check_file_located(args: &RunArgs) -> Result<RunSettings, Vec<String>> {
    let Some(path) = args.gate.config.clone() else {
        return check_file(args).map_err(|v| v.iter().map(ToString::to_string).collect());
    };
    let shown = path.display().to_string();
    let text = load::read_capped(&path).map_err(|e| vec![locate(&e, &shown, "", 0)])?;
    let whole = match check_file(args) {
        Ok(settings) => return Ok(settings),
        Err(whole) => whole,
    };
    let parsed = !matches!(whole.first(), Some(ConfigError::Parse { .. }));
    let mut problems: Vec<String> = Vec::new();
    // A located problem may be several (one line each: every unknown key
    // inside canary.readinessProbe, say); each is added apart.
    let mut add = |located: String| {
        for p in located.lines() {
            if !problems.iter().any(|q| q == p) {
                problems.push(p.to_string());
            }
        }
    };
    for e in &whole {
        add(locate(e, &shown, &text, 0));
    }
    let mut alone = args.clone();
    alone.gate.config = None;
    for (start, block) in top_level_blocks(&text) {
        let e = match FileConfig::parse(&block, &shown).map(|f| run_settings_from(&alone, f)) {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => e,
            // When the whole file parsed, a part that does not parse alone
            // leans on another part (a YAML alias): not a problem.
            Err(_) if parsed => continue,
            Err(e) => e,
        };
        add(locate(&e, &shown, &text, start));
    }
    Err(problems)
}

/// `run --config FILE`'s error, said of the file when it came from the
/// file: `FILE:LINE: key: what is wrong`, as `config check` says it. An
/// error about a flag given on the command line (`flag_given`, the flag's
/// name without `--`) stays about the flag.
pub fn said_of_the_file(
    args: &RunArgs,
    e: ConfigError,
    flag_given: impl Fn(&str) -> bool,
) -> ConfigError {
    let Some(path) = &args.gate.config else {
        return e;
    };
    let from_flag = match &e {
        ConfigError::Read { .. } => return e,
        ConfigError::Parse { .. } => false,
        ConfigError::Invalid { source_, .. } => source_
            .strip_prefix("--")
            .map(|rest| rest.split(' ').next().unwrap_or(rest))
            .is_some_and(&flag_given),
    };
    if from_flag {
        return e;
    }
    let Ok(text) = load::read_capped(path) else {
        return e;
    };
    let file = path.display().to_string();
    let located = locate(&e, &file, &text, 0);
    // One line: the first problem, and how many more `config check` names.
    let mut lines = located.lines();
    let mut line = lines.next().unwrap_or_default().to_string();
    let more = lines.count();
    if more > 0 {
        line.push_str(&format!(
            " (and {more} more: nodegate config check {file} names each)"
        ));
    }
    // `FILE[:LINE]: key` and what is wrong, apart, as every ConfigError.
    let after_file = line.strip_prefix(&file).unwrap_or(&line);
    let seps: Vec<usize> = after_file.match_indices(": ").map(|(i, _)| i).collect();
    match seps.get(1).or(seps.first()) {
        Some(i) => {
            let at = i + (line.len() - after_file.len());
            invalid(&line[..at], &line[at + 2..])
        }
        None => invalid(file, line),
    }
}

/// The file cut at its top-level keys: each key's lines, with the index of
/// its first line.
fn top_level_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks: Vec<(usize, String)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let starts = line
            .chars()
            .next()
            .is_some_and(|c| !c.is_whitespace() && c != '-' && c != '#' && c != '}')
            && line.contains(':')
            && !line.starts_with("---");
        if starts {
            blocks.push((i, String::new()));
        } else if line.starts_with("---") || line.starts_with("...") {
            continue;
        }
        if let Some((_, b)) = blocks.last_mut() {
            b.push_str(line);
            b.push('\n');
        }
    }
    blocks
}

/// One problem as `FILE:LINE: key: what is wrong` (`FILE: …` when no line
/// can be named). A parser's position is moved by `offset` lines (the part
/// of the file it read began there); a value's problem names the key it
/// was given under, not the flag that has the same meaning.
/// Every value is echoed through [`cut_echoes`].
pub fn locate(e: &ConfigError, file: &str, text: &str, offset: usize) -> String {
    let whole = match e {
        ConfigError::Read { err, .. } => {
            let why = err.to_string();
            let why = &why[..why.find(" (os error").unwrap_or(why.len())];
            format!("{file}: cannot be read: {}", why.to_lowercase())
        }
        ConfigError::Parse { err, .. } => {
            let (message, line) = without_position(err);
            if let Some(each) = nested_keys(&message, file, text) {
                return cut_echoes(&each);
            }
            let mut message = plain(&message);
            let line = line.map(|n| n + offset);
            // A wrong type names no key: the one written on that line.
            if let Some(key) = line.and_then(|n| key_on_line(text, n))
                && !message.contains(&key)
            {
                message = format!("{key}: {message}");
            }
            format!("{}: {message}", place(file, line))
        }
        ConfigError::Invalid { source_, message } => {
            let (key, value) = key_of(source_);
            let line = line_of_path(text, &key);
            let value = value.map(|v| format!("{v}: ")).unwrap_or_default();
            format!("{}: {key}: {value}{message}", place(file, line))
        }
    };
    cut_echoes(&whole)
}

/// A message that is one problem a line, each about a nested key by its
/// full path (`canary.readinessProbe.periodSecond: unknown key; ...`, as
/// the canary's strict reading says them): each as `FILE:LINE: path: what
/// is wrong`, at the line the path is written on, not the parser's (which
/// points at the map that holds them).
fn nested_keys(message: &str, file: &str, text: &str) -> Option<String> {
    let mut out = Vec::new();
    for entry in message.split(canary::PROBLEMS_APART) {
        let (path, _) = entry.split_once(": ")?;
        let plain = |c: char| c.is_ascii_alphanumeric() || "._[]".contains(c);
        (path.contains('.') && path.chars().all(plain)).then_some(())?;
        let line = line_of_path(text, path);
        out.push((line, format!("{}: {entry}", place(file, line))));
    }
    // In the file's order.
    out.sort_by_key(|(line, _)| *line);
    let out: Vec<String> = out.into_iter().map(|(_, p)| p).collect();
    (!out.is_empty()).then(|| out.join("\n"))
}

fn place(file: &str, line: Option<usize>) -> String {
    line.map_or(file.to_string(), |n| format!("{file}:{n}"))
}

/// The most characters of a value a problem repeats (a selector pasted
/// whole, the wrong file's contents: [`cut_echoes`]).
const ECHO_MAX: usize = 40;

/// The longest unquoted word kept whole (a key's full path is one word).
const WORD_MAX: usize = 100;

/// `line` with each quoted ("…" or `…`) value longer than [`ECHO_MAX`] cut
/// to `"first characters…" (N bytes)`, a long value already shown (or
/// a part of one) replaced by `(the same value)`, and any unquoted word
/// longer than [`WORD_MAX`] cut alike.
fn cut_echoes(line: &str) -> String {
    let cut = |body: &str, quote: &str| {
        let head: String = body.chars().take(ECHO_MAX).collect();
        format!("{quote}{head}…{quote} ({} bytes)", body.len())
    };
    let words = |plain: &str| {
        plain
            .split(' ')
            .map(|w| {
                if w.chars().count() > WORD_MAX {
                    cut(w, "")
                } else {
                    w.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut out = String::new();
    let mut shown: Vec<&str> = Vec::new();
    let mut rest = line;
    while let Some(open) = rest.find(['"', '`']) {
        // The closing quote; inside "…", a backslash escapes the next byte.
        let quote = &rest[open..=open];
        let mut escaped = false;
        let close = rest.bytes().enumerate().skip(open + 1).find(|&(_, b)| {
            let end = b == quote.as_bytes()[0] && !escaped;
            escaped = !escaped && quote == "\"" && b == b'\\';
            end
        });
        let Some((close, _)) = close else { break };
        out.push_str(&words(&rest[..open]));
        let body = &rest[open + 1..close];
        if body.chars().count() <= ECHO_MAX {
            out.push_str(&rest[open..=close]);
        } else if shown.iter().any(|s| s.contains(body)) {
            out.push_str("(the same value)");
        } else {
            out.push_str(&cut(body, quote));
            shown.push(body);
        }
        rest = &rest[close + 1..];
    }
    out.push_str(&words(rest));
    out
}

/// A parser's message without its ` at line N, column M` and the quoted
/// line after it, and the line.
fn without_position(err: &str) -> (String, Option<usize>) {
    let Some(at) = err.find(" at line ") else {
        // No position: at most the start of a quoted line.
        let message = match err.find(" (at `") {
            Some(q) if err.len() - q > 80 => {
                let quoted: String = err[q..].chars().take(70).collect();
                format!("{}{quoted} …`)", &err[..q])
            }
            _ => err.to_string(),
        };
        return (message, None);
    };
    let rest = &err[at + " at line ".len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let mut after = &rest[digits.len()..];
    for sep in [", column ", " column "] {
        if let Some(r) = after.strip_prefix(sep) {
            after = r.trim_start_matches(|c: char| c.is_ascii_digit());
        }
    }
    let message = match after.trim() {
        a if a.is_empty() || a.starts_with("(at `") => err[..at].trim().to_string(),
        a => format!("{} {a}", err[..at].trim()),
    };
    (message, digits.parse().ok())
}

/// The key written on line `n` (1-based) of `text`, if one is.
fn key_on_line(text: &str, n: usize) -> Option<String> {
    let line = text.lines().nth(n.checked_sub(1)?)?;
    let line = line.trim_start().trim_start_matches("- ").trim_start();
    let (key, _) = line.split_once(':')?;
    let key = key.trim().trim_matches('"');
    key.chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_')
        .then(|| key.to_string())
        .filter(|k| !k.is_empty())
}

/// The parser's words for a wrong type, in a person's.
fn plain(message: &str) -> String {
    let mut m = message.to_string();
    for int in ["u32", "u64", "usize", "i32", "i64"] {
        m = m.replace(&format!("invalid {int}"), "not a whole number");
    }
    m = m.replace("invalid f64", "not a number").replace(
        "invalid boolean (strict mode expects true/false)",
        "not true or false",
    );
    if let Some(at) = m.find("budget breached") {
        m = format!(
            "{}the file expands to too many nodes (YAML aliases?); nodegate refuses it to bound its memory",
            &m[..at]
        );
    }
    m
}

/// The config file's key a problem is about, and the value as given: a
/// flag's name (`--timeout "soon"`) becomes its key (`timeout`), a path
/// (`criticalPods[0] (p)`, `canary.maxInFlight 0`) stays as written.
fn key_of(source: &str) -> (String, Option<String>) {
    if let Some(rest) = source.strip_prefix("--") {
        let (flag, value) = rest.split_once(' ').unwrap_or((rest, ""));
        let key = crate::settings::table::definitions()
            .into_iter()
            .find(|d| d.flag == Some(flag))
            .map_or(format!("--{flag}"), |d| d.key.to_string());
        let value = Some(value.trim().to_string()).filter(|v| !v.is_empty());
        return (key, value);
    }
    (source.to_string(), None)
}

/// The line (1-based) a key path is written on: its top-level key, then
/// each further name of the path after it.
fn line_of_path(text: &str, path: &str) -> Option<usize> {
    let names: Vec<&str> = path
        .split(['.', '[', ' '])
        .filter(|n| !n.is_empty() && n.chars().next().is_some_and(char::is_alphabetic))
        .collect();
    let top = names.first()?;
    let lines: Vec<&str> = text.lines().collect();
    let mut at = lines.iter().position(|l| {
        l.strip_prefix(top)
            .is_some_and(|r| r.trim_start().starts_with(':'))
    })?;
    for name in names.iter().skip(1) {
        let found = lines.iter().enumerate().skip(at + 1).find(|(_, l)| {
            let l = l.trim_start().trim_start_matches("- ");
            l.starts_with(&format!("{name}:"))
                || l.contains(&format!(" {name}:"))
                || l.contains(&format!("{{{name}:"))
        });
        match found {
            Some((i, _)) => at = i,
            None => break,
        }
    }
    Some(at + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn check(yaml: &str) -> Result<RunSettings, Vec<String>> {
        let dir = tempfile::tempdir().map_err(|e| vec![e.to_string()])?;
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, yaml).map_err(|e| vec![e.to_string()])?;
        let cli = crate::settings::cli::Cli::try_parse_from([
            "nodegate",
            "run",
            "--config",
            path.to_str().unwrap_or_default(),
        ])
        .map_err(|e| vec![e.to_string()])?;
        let crate::settings::cli::Command::Run(args) = cli.command else {
            return Err(vec!["not run".to_string()]);
        };
        check_file(&args).map_err(|v| v.iter().map(|e| e.to_string()).collect())
    }

    #[test]
    fn independent_problems_are_all_named() {
        let yaml = "timeout: soon\ncriticalPods:\n- {name: p, namespace: kube-system}\n\
                    conditionTaints:\n- name: r\n  conditions: [{type: A, status: \"True\"}]\n  \
                    taint: {key: example.com/a, effect: Sometimes}\n";
        let problems = check(yaml).err().unwrap_or_default();
        let all = problems.join("\n");
        for want in ["soon", "criticalPods[0] (p)", "Sometimes"] {
            assert!(all.contains(want), "{want:?} not in {all}");
        }
    }

    fn located(yaml: &str) -> Vec<String> {
        let Ok(dir) = tempfile::tempdir() else {
            return vec!["no temp dir".to_string()];
        };
        let path = dir.path().join("c.yaml");
        if std::fs::write(&path, yaml).is_err() {
            return vec!["cannot write".to_string()];
        }
        let args = RunArgs {
            gate: GateArgs {
                config: Some(path.clone()),
                ..GateArgs::default()
            },
            ..RunArgs::default()
        };
        let shown = path.display().to_string();
        check_file_located(&args)
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|p| p.replace(&shown, "c.yaml"))
            .collect()
    }

    #[test]
    fn every_problem_is_file_line_key_and_what_is_wrong() {
        let problems =
            located("taints: [\"Bad Key\"]\ntimeout: -5s\nmaxUnavailable: 0%\nkubeBurst: lots\n");
        let all = problems.join("\n");
        for want in [
            "c.yaml:1: taints: ",
            "c.yaml:2: timeout: \"-5s\": a duration cannot be negative",
            "c.yaml:3: maxUnavailable: \"0%\": ",
            "c.yaml:4: ",
            "not a whole number",
        ] {
            assert!(all.contains(want), "{want:?} not in\n{all}");
        }
        for leak in ["invalid u32", "--timeout", "--max-unavailable"] {
            assert!(!all.contains(leak), "{leak:?} in\n{all}");
        }
        // Unknown keys in two parts of the file: both named.
        let problems = located("timout: 3m\ncanary:\n  readinessProbe:\n    periodSecond: 2\n");
        let all = problems.join("\n");
        assert!(all.contains("c.yaml:1: unknown key `timout`"), "{all}");
        assert!(all.contains("periodSecond"), "{all}");
    }

    /// Issue 38: a 10 KB value is not echoed whole, nor twice: the line
    /// stays short and names the key.
    #[test]
    fn a_long_value_is_cut_and_said_once() {
        let long = "a".repeat(10240);
        let problems = located(&format!("timeout: 2m\nnodeSelector: {long}\n"));
        assert!(!problems.is_empty(), "a 10 KB selector must be refused");
        for p in &problems {
            assert!(
                p.chars().count() < 200,
                "{} characters: {p}",
                p.chars().count()
            );
            assert!(p.starts_with("c.yaml:2: nodeSelector: "), "{p}");
            assert_eq!(p.matches(&"a".repeat(40)).count(), 1, "{p}");
            assert!(p.contains("(10240 bytes)"), "{p}");
        }
    }

    /// Issue 38: every unknown key inside canary.readinessProbe is named,
    /// each by its full path at its own line.
    #[test]
    fn every_nested_unknown_key_is_named_at_its_line() {
        let problems = located(
            "timeout: 2m\ncanary:\n  enabled: true\n  readinessProbe:\n    exec:\n      \
             command: [\"true\"]\n    initialDelaySecond: 5\n    periodSecond: 2\n",
        );
        assert_eq!(
            problems,
            [
                "c.yaml:7: canary.readinessProbe.initialDelaySecond: unknown key; \
                 did you mean `initialDelaySeconds`?",
                "c.yaml:8: canary.readinessProbe.periodSecond: unknown key; \
                 did you mean `periodSeconds`?",
            ]
        );
        // In the probe and the resources at once: both.
        let problems = located(
            "canary:\n  readinessProbe:\n    periodSecond: 2\n  resources:\n    requets: {}\n",
        );
        assert_eq!(
            problems,
            [
                "c.yaml:3: canary.readinessProbe.periodSecond: unknown key; \
                 did you mean `periodSeconds`?",
                "c.yaml:5: canary.resources.requets: unknown key; did you mean `requests`?",
            ]
        );
        // `run` says the first in one line, and that there are more.
        let Ok(dir) = tempfile::tempdir() else {
            return;
        };
        let path = dir.path().join("c.yaml");
        std::fs::write(
            &path,
            "canary:\n  resources:\n    requets: {cpu: 1m}\n    limts: {}\n",
        )
        .unwrap_or_default();
        let args = RunArgs {
            gate: GateArgs {
                config: Some(path.clone()),
                ..GateArgs::default()
            },
            ..RunArgs::default()
        };
        let e = run_settings(&args)
            .err()
            .map(|e| said_of_the_file(&args, e, |_| false).to_string())
            .unwrap_or_default()
            .replace(&path.display().to_string(), "c.yaml");
        assert_eq!(
            e,
            "c.yaml:3: canary.resources.requets: unknown key; did you mean `requests`? \
             (and 1 more: nodegate config check c.yaml names each)"
        );
    }

    #[test]
    fn run_says_a_file_s_problem_of_the_file_and_a_flag_s_of_the_flag() {
        let Ok(dir) = tempfile::tempdir() else {
            return;
        };
        let path = dir.path().join("c.yaml");
        std::fs::write(&path, "onTimeout: keep\ntimeout: -5s\n").unwrap_or_default();
        let args = RunArgs {
            gate: GateArgs {
                config: Some(path.clone()),
                ..GateArgs::default()
            },
            ..RunArgs::default()
        };
        let shown = path.display().to_string();
        let e = run_settings(&args)
            .err()
            .map(|e| said_of_the_file(&args, e, |_| false));
        assert_eq!(
            e.map(|e| e.to_string().replace(&shown, "c.yaml"))
                .as_deref(),
            Some("c.yaml:2: timeout: \"-5s\": a duration cannot be negative")
        );
        let e = run_settings(&args)
            .err()
            .map(|e| said_of_the_file(&args, e, |f| f == "timeout"));
        assert!(
            e.is_some_and(|e| e.to_string().starts_with("--timeout \"-5s\"")),
            "a flag's problem names the flag"
        );
    }

    #[test]
    fn a_valid_file_yields_run_settings() {
        let s = check("timeout: 5m\n");
        assert!(
            s.as_ref()
                .is_ok_and(|s| s.timeout == Some(Duration::from_secs(300))),
            "{s:?}"
        );
    }
}
