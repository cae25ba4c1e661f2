//! What the doctor says: one [`Check`] per thing looked at, and how the
//! report reads (`-o table`) or serializes (`-o json|yaml`). The field names
//! of [`Check`] and [`Report`] are the JSON interface, documented in
//! docs/troubleshooting.md ("nodegate doctor"): keep them stable.

use serde::Serialize;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Nothing to change (`✓`).
    Ok,
    /// Something to change (`✗`): the doctor exits 3.
    Problem,
    /// Not checked, or nothing there to check (`–`): not a failure.
    Skipped,
}

impl Status {
    pub fn mark(self) -> &'static str {
        match self {
            Status::Ok => "✓",
            Status::Problem => "✗",
            Status::Skipped => "–",
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Which check: `karpenter`, `cluster-autoscaler`, `admission`,
    /// `leader`, `rbac` or `nodes`.
    pub check: &'static str,
    /// What it is about, e.g. `NodePool default` or `node n1`.
    pub subject: String,
    pub status: Status,
    /// What was found.
    pub message: String,
    /// For a problem: what to change, naming the flag or field.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Something worth knowing about the line (a listed startup taint's
    /// registration wait, an autoscaler at replicas 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A check's name (`CHECK` in each module of `checks`), which makes its
/// lines: `CHECK.ok(subject, message)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Name(pub &'static str);

impl Name {
    pub fn ok(self, subject: impl Into<String>, message: impl Into<String>) -> Check {
        self.line(subject, Status::Ok, message, None)
    }

    pub fn problem(
        self,
        subject: impl Into<String>,
        message: impl Into<String>,
        fix: impl Into<String>,
    ) -> Check {
        self.line(subject, Status::Problem, message, Some(fix.into()))
    }

    pub fn skipped(self, subject: impl Into<String>, message: impl Into<String>) -> Check {
        self.line(subject, Status::Skipped, message, None)
    }

    fn line(
        self,
        subject: impl Into<String>,
        status: Status,
        message: impl Into<String>,
        fix: Option<String>,
    ) -> Check {
        Check {
            check: self.0,
            subject: subject.into(),
            status,
            message: message.into(),
            fix,
            note: None,
        }
    }
}

impl Check {
    pub fn with_note(mut self, note: impl Into<String>) -> Self {
        self.note = Some(note.into());
        self
    }
}

/// The whole report (`-o json|yaml`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Where nodegate's settings came from: `flags` or
    /// `deployment NAMESPACE/NAME`.
    pub source: String,
    /// How many checks found a problem.
    pub problems: usize,
    pub checks: Vec<Check>,
}

impl Report {
    pub fn new(source: String, checks: Vec<Check>) -> Report {
        Report {
            source,
            problems: checks
                .iter()
                .filter(|c| c.status == Status::Problem)
                .count(),
            checks,
        }
    }

    /// The readable report: one line per check, the fix (or note) indented
    /// under it, and a summary.
    pub fn text(&self) -> String {
        let mut s = format!("nodegate's settings from {}\n", self.source);
        for c in &self.checks {
            s.push_str(&format!(
                "{} {:<18} {}: {}\n",
                c.status.mark(),
                c.check,
                c.subject,
                c.message
            ));
            if let Some(fix) = &c.fix {
                s.push_str(&format!("    fix: {fix}\n"));
            }
            if let Some(note) = &c.note {
                s.push_str(&format!("    note: {note}\n"));
            }
        }
        s.push_str(&match self.problems {
            0 => "no problems found\n".to_string(),
            1 => "1 problem found\n".to_string(),
            n => format!("{n} problems found\n"),
        });
        s
    }
}
