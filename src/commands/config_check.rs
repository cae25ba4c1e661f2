//! `nodegate config check FILE`: the config file checked offline, by
//! `settings::config::check`, and what it means printed; with `--cluster`,
//! what the cluster says about it (`cluster`). Exit 0 when valid, 2 when
//! not, 3 when a check against the cluster found a problem, 1 when the
//! cluster cannot be read.

mod cluster;
mod meaning;

use std::process::ExitCode;

use serde_json::{Value, json};

use crate::commands::output::{connect, connection, encode, exit, print as print_out};
use crate::error::{EXIT_PROBLEMS, EXIT_USAGE, Result};
use crate::settings::cli::{ConfigCheckArgs, OutputFormat, RunArgs};
use crate::settings::config::check::check_file_located;
use crate::settings::config::load_file;
use crate::settings::table::GateGiven;

pub async fn main(args: ConfigCheckArgs) -> Result<ExitCode> {
    // Checked first, so that a bad flag is exit 2 before anything else.
    let conn = connection(&args.cluster)?;
    let mut run = RunArgs::default();
    run.gate.config = Some(args.file.clone());
    let file = args.file.display().to_string();
    let settings = match check_file_located(&run) {
        Ok(s) => s,
        Err(problems) => {
            let report = json!({"file": file, "valid": false, "problems": problems});
            print(&args, &report, || refused(&problems))?;
            if matches!(args.output, OutputFormat::Table | OutputFormat::Wide) {
                eprint!("{}", refused(&problems));
            }
            return Ok(ExitCode::from(EXIT_USAGE));
        }
    };
    // The file was read and checked: the gate's keys as given, for the
    // values shown as written.
    let mut raw = load_file(&run.gate).unwrap_or_default();
    let gate = GateGiven::merge(&run.gate.flags, &mut raw);
    let meaning = meaning::of(&settings, &gate);
    let findings = if args.against_cluster {
        let client = connect(&conn).await?;
        Some(cluster::check(&client, &conn, &settings).await?)
    } else {
        None
    };
    let failed = findings.iter().flatten().any(|f| f.problem);
    let report = json!({
        "file": file,
        "valid": true,
        "settings": meaning,
        "cluster": findings,
    });
    print(&args, &report, || readable(&file, &report))?;
    Ok(exit(failed, EXIT_PROBLEMS))
}

/// Every setting `nodegate run` would run with under these flags and
/// their config file, keyed by the file's keys (what `config check -o json`
/// prints as `settings`); the error names what was refused.
pub fn run_meaning(run: &RunArgs) -> std::result::Result<Value, String> {
    let settings = crate::settings::config::run_settings(run).map_err(|e| e.to_string())?;
    let mut raw = load_file(&run.gate).map_err(|e| e.to_string())?;
    let gate = GateGiven::merge(&run.gate.flags, &mut raw);
    Ok(meaning::of(&settings, &gate))
}

/// `-o json|yaml`: the report; the table formats: `text()` (on stdout; a
/// refused file's text goes to stderr instead, by the caller).
fn print(args: &ConfigCheckArgs, report: &Value, text: impl FnOnce() -> String) -> Result<()> {
    let out = match encode(report, args.output, "the check's report")? {
        Some(encoded) => encoded,
        None if report["valid"] == json!(false) => return Ok(()),
        None => text(),
    };
    print_out(out.as_bytes(), "cannot write to stdout")
}

/// One line per problem, each `error: FILE:LINE: key: what is wrong`.
fn refused(problems: &[String]) -> String {
    problems.iter().map(|p| format!("error: {p}\n")).collect()
}

/// The valid file's settings as YAML, then the cluster's findings.
fn readable(file: &str, report: &Value) -> String {
    let mut s = format!(
        "config file {file} is valid; `nodegate run --config {file}` (with no flags) runs with:\n\n"
    );
    s.push_str(&serde_saphyr::to_string(&report["settings"]).unwrap_or_default());
    if let Some(findings) = report["cluster"].as_array() {
        s.push_str("\nAgainst the cluster (read only; taints by server-side dry run):\n");
        for f in findings {
            let mark = if f["problem"] == json!(true) {
                "PROBLEM"
            } else {
                "ok"
            };
            let key = f["key"].as_str().unwrap_or_default();
            let message = f["message"].as_str().unwrap_or_default();
            s.push_str(&format!("  {mark:<7} {key}: {message}\n"));
        }
    }
    s
}
