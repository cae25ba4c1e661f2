//! What the commands share: the connection from kubectl's flags, `-o
//! json|yaml` for any report that serializes, and the words for a node
//! patch of `backfill` or `uninstall` that failed.

use std::io::Write;
use std::process::ExitCode;

use serde::Serialize;

use nodegate_core::gate::PatchOutcome;

use crate::cluster::client::{Connection, client_for};
use crate::error::{Error, Result};
use crate::settings::cli::{ClusterArgs, OutputFormat};
use crate::settings::config::ConfigError;

/// The connection the flags name; a bad value is a usage error (exit 2),
/// found before any request.
pub fn connection(cluster: &ClusterArgs) -> Result<Connection, ConfigError> {
    Connection::from_flags(
        cluster.kubeconfig.clone(),
        cluster.context.clone(),
        cluster.request_timeout.as_deref(),
    )
}

/// A client for the cluster the flags name.
pub async fn connect(c: &Connection) -> Result<kube::Client> {
    client_for(c)
        .await
        .map_err(Error::context("cannot connect to the cluster"))
}

/// Writes `text` on stdout and flushes it. A closed pipe (`nodegate … |
/// head`) is the reader's choice, not a failure; any other error is
/// `what` (`cannot write the report`).
pub fn print(text: &[u8], what: &str) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io(what)(e)),
        _ => Ok(()),
    }
}

/// One line on `out`, as [`print`] treats a closed pipe: the work that
/// writes it goes on (`uninstall … | head` must still clean every node).
pub fn line(out: &mut impl Write, text: std::fmt::Arguments, what: &str) -> Result<()> {
    match writeln!(out, "{text}") {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(Error::io(what)(e)),
        _ => Ok(()),
    }
}

/// `value` as `-o json` (pretty) or `-o yaml`, ending in a newline; `None`
/// for the table formats, which each command renders itself.
pub fn encode<T: Serialize>(value: &T, format: OutputFormat, what: &str) -> Result<Option<String>> {
    let text = match format {
        OutputFormat::Table | OutputFormat::Wide => return Ok(None),
        OutputFormat::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| e.to_string()),
        OutputFormat::Yaml => serde_saphyr::to_string(value).map_err(|e| e.to_string()),
    };
    text.map(Some)
        .map_err(|why| Error::invalid(what, format!("cannot be encoded as {format:?}: {why}")))
}

/// Rows as columns aligned on their widest cell, `gap` between two; the
/// last column is not padded.
pub fn aligned(rows: &[Vec<String>], gap: &str) -> String {
    let mut widths = vec![0; rows.first().map_or(0, Vec::len)];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |row: &Vec<String>| {
        let (last, cells) = row.split_last()?;
        let padded = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}{gap}"));
        Some(padded.collect::<String>() + last + "\n")
    };
    rows.iter().filter_map(line).collect()
}

/// The exit status `code` when `failed`, else success.
pub fn exit(failed: bool, code: u8) -> ExitCode {
    ExitCode::from(if failed { code } else { 0 })
}

/// Each of `items` as it displays, `sep` between two.
pub fn joined<T: std::fmt::Display>(items: impl IntoIterator<Item = T>, sep: &str) -> String {
    let items: Vec<String> = items.into_iter().map(|i| i.to_string()).collect();
    items.join(sep)
}

/// Why a command's node patch, neither applied nor in conflict nor on a
/// node gone, failed: its error, or `not sent` (a command takes no part in
/// leader election or withdrawal, and never gets a replace write's own
/// answers, which would be failures too).
pub fn patch_failure(outcome: PatchOutcome) -> String {
    match outcome {
        PatchOutcome::Failed(e)
        | PatchOutcome::Ambiguous(e)
        | PatchOutcome::OwnerDeleted(e)
        | PatchOutcome::OwnerFailed(e)
        | PatchOutcome::NoOwner(e) => e,
        _ => "not sent".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    struct R {
        node: &'static str,
        ready: Option<bool>,
    }

    #[test]
    fn yaml_and_json_say_the_same() {
        let r = [R {
            node: "n1",
            ready: None,
        }];
        let yaml = encode(&r, OutputFormat::Yaml, "r").ok().flatten();
        let json = encode(&r, OutputFormat::Json, "r").ok().flatten();
        let back: Option<serde_json::Value> =
            yaml.as_deref().and_then(|y| serde_saphyr::from_str(y).ok());
        let json: Option<serde_json::Value> =
            json.as_deref().and_then(|j| serde_json::from_str(j).ok());
        assert!(back.is_some());
        assert_eq!(back, json);
        assert!(
            encode(&r, OutputFormat::Table, "r")
                .ok()
                .flatten()
                .is_none()
        );
    }
}
