//! Records the commit a binary was built from, for `nodegate --version`.
//!
//! `NODEGATE_REVISION` wins when set (the container builds set it: the
//! Dockerfile's context has no `.git`, and deploy/image/build adds `-dirty`
//! itself). Otherwise a release build (`PROFILE=release`, e.g. `cargo build
//! --release`, `cargo install`) asks `git rev-parse HEAD` in the source tree,
//! or says `unknown` (a source archive without git); a debug build — every
//! test binary and `cargo run` — says `dev`.
//!
//! Why not the commit in a debug build too: the revision is a compile-time
//! constant of the `nodegate` crate, so a revision that moves with HEAD
//! recompiles that crate, and every test binary linking it, at every commit
//! (minutes of CPU a commit on two cores). The image and released binaries
//! carry the commit; the tests build only what changed.
//!
//! No `-dirty` here: cargo reruns this script only when the files named
//! below change (HEAD and the branch's ref), not on every edit, so a dirty
//! flag computed here would go stale and claim a clean tree.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=NODEGATE_REVISION");
    println!("cargo:rerun-if-changed=build.rs");
    let release = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let revision = match std::env::var("NODEGATE_REVISION") {
        Ok(r) if !r.trim().is_empty() => r.trim().to_string(),
        _ if release => from_git().unwrap_or_else(|| "unknown".to_string()),
        _ => "dev".to_string(),
    };
    println!("cargo:rustc-env=NODEGATE_BUILD_REVISION={revision}");
    code_order();
}

/// Lays out the release binary's code in the order of link/code-order.txt:
/// the functions a benchmark run executes, hottest first, together at the
/// front, so the pages the kernel maps in from the binary as it runs (and
/// counts in its resident memory) hold code that runs rather than its
/// neighbours (link/code-order.py says how the file is made and checked).
///
/// Only where the linker is known to be LLD, which takes the list: an
/// optimised build for x86_64-unknown-linux-gnu with rustc 1.90 or later
/// (its default linker there) and no linker chosen in RUSTFLAGS. Names the
/// file lists that the binary does not have are skipped, silently: a stale
/// list costs memory, never correctness.
fn code_order() {
    // Named relative to the package: cargo resolves it against the checkout
    // that builds, where a path fixed when this script was compiled would
    // name the checkout that compiled it first (the target directory is
    // shared between clones), missing in every other one, and a missing
    // file reruns this script and rebuilds the crate on every build.
    println!("cargo:rerun-if-changed={CODE_ORDER}");
    let order = package_dir().join(CODE_ORDER);
    let optimised = std::env::var("OPT_LEVEL").is_ok_and(|o| o != "0");
    let target = std::env::var("TARGET").unwrap_or_default();
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let own_linker = ["linker", "fuse-ld"].iter().any(|f| flags.contains(f));
    if !optimised || target != "x86_64-unknown-linux-gnu" || own_linker || !order.exists() {
        return;
    }
    if !rustc_links_with_lld() {
        return;
    }
    println!(
        "cargo:rustc-link-arg-bin=nodegate=-Wl,--symbol-ordering-file={}",
        order.display()
    );
    println!("cargo:rustc-link-arg-bin=nodegate=-Wl,--no-warn-symbol-ordering");
}

/// The link order's list, relative to the package.
const CODE_ORDER: &str = "link/code-order.txt";

/// The package being built, as cargo says when it runs this script (not
/// `env!`: that is the checkout this script was compiled in).
fn package_dir() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR").map_or_else(|| PathBuf::from("."), PathBuf::from)
}

/// rustc 1.90 and later link x86_64-unknown-linux-gnu programs with its own
/// LLD by default; earlier ones with the system's linker.
fn rustc_links_with_lld() -> bool {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let Ok(out) = Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(release) = text.lines().find_map(|l| l.strip_prefix("release: ")) else {
        return false;
    };
    let mut parts = release
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (1, 90)
}

/// HEAD's commit, watching the files that move when HEAD does: HEAD itself,
/// its reflog, the branch it points at and packed-refs (a worktree's `.git`
/// is a file, so the paths come from `git rev-parse --git-path`). Only
/// existing files are named: cargo reruns a script on every build while a
/// named file is missing.
fn from_git() -> Option<String> {
    let head = git(&["rev-parse", "HEAD"])?;
    let mut watched = vec![
        "HEAD".to_string(),
        "logs/HEAD".to_string(),
        "packed-refs".to_string(),
    ];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in watched {
        if let Some(path) = git(&["rev-parse", "--git-path", &name])
            && package_dir().join(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(head)
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(package_dir())
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !text.is_empty()).then_some(text)
}
