//! The AdmissionReview as the webhook reads it: only the fields a decision
//! needs. Every other field, however large, is skipped by serde without being
//! kept (`IgnoredAny`), so one review costs its body's bytes and a few small
//! strings, never a tree of JSON values.

use std::collections::BTreeMap;

use serde::Deserialize;

/// A review; `apiVersion` and `kind` are not read (the API server sends
/// what the webhook configuration asks for).
#[derive(Debug, Deserialize)]
pub struct Review {
    pub request: Option<Request>,
}

/// A missing field reads as its default (an absent `object` as `None`).
#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Request {
    pub uid: String,
    pub kind: Kind,
    /// Read as a string, not an enum: an unknown operation is answered
    /// "expected a CREATE", and its text never reaches an error message.
    pub operation: String,
    pub user_info: UserInfo,
    pub object: Option<NodeObject>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Kind {
    pub group: String,
    pub kind: String,
}

/// Who sent the request the review is about.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UserInfo {
    pub username: String,
    pub groups: Vec<String>,
}

/// The Node being created: the fields the entrance decision reads.
#[derive(Debug, Default, Deserialize)]
pub struct NodeObject {
    #[serde(default)]
    pub metadata: Metadata,
    pub spec: Option<Spec>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Metadata {
    pub name: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct Spec {
    pub taints: Option<Vec<TaintIn>>,
}

#[derive(Debug, Deserialize)]
pub struct TaintIn {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// Only the uid, read from a body that may be otherwise unusable, so that
/// even a refusal to judge carries the uid the API server expects.
#[derive(Deserialize)]
struct UidOnly {
    request: Option<UidRequest>,
}

#[derive(Deserialize)]
struct UidRequest {
    uid: Option<String>,
}

/// The review's uid, or empty when the body has none readable.
pub fn uid(body: &[u8]) -> String {
    serde_json::from_slice::<UidOnly>(body)
        .ok()
        .and_then(|r| r.request)
        .and_then(|r| r.uid)
        .unwrap_or_default()
}

/// The uid from the first bytes of a body that will not be judged (too
/// large, too slow, or no place): the API server writes `request.uid` first,
/// so it is within the first few hundred bytes. A plain scan for
/// `"uid":"…"` after `"request"`, no JSON tree; empty when not found. A
/// forged body can only name a uid the API server is not waiting for.
pub fn sniff_uid(prefix: &[u8]) -> String {
    let text = String::from_utf8_lossy(prefix);
    let sniffed = || {
        let after_request = &text[text.find("\"request\"")?..];
        let rest = after_request[after_request.find("\"uid\"")? + 5..].trim_start();
        let rest = rest.strip_prefix(':')?.trim_start().strip_prefix('"')?;
        let uid = &rest[..rest.find('"')?];
        // A uid is short and plain (a UUID); anything else is not used.
        let plain = uid.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        (uid.len() <= 128 && plain).then(|| uid.to_string())
    };
    sniffed().unwrap_or_default()
}

/// `text` with control characters (newlines included) escaped, so that
/// whatever a client put in a review cannot start a line of its own in the
/// log or in a warning.
pub fn clean(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
