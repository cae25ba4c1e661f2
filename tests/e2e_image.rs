//! nodegate's container image as deploy/image/build writes it, with no
//! container engine: who it runs as, what is (not) in it, the commit its
//! binary reports, that assembling it again gives the same digest, and that
//! the Dockerfile describes the same image.
//!
//! The image is the one `deploy/image/build` prints (tests/lanes.py starts
//! that build just before the first binary that needs it; here the script
//! waits for it, finds its cargo build fresh and assembles again). Named e2e_ so that it runs among the
//! end-to-end binaries (tests/lanes.py), not before them: its first call
//! may wait minutes for the release build.

#[path = "e2e_image/dockerfile.rs"]
mod dockerfile;
#[path = "e2e_image/layout.rs"]
mod layout;

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use layout::Image;
use serde_json::{Value, json};

const IMAGE_USER: &str = "65532:65532";
const BINARY: &str = "usr/local/bin/nodegate";
/// Shells and package managers, by file name, wherever they would be.
const FORBIDDEN: &[&str] = &[
    "sh", "bash", "dash", "ash", "zsh", "busybox", "toybox", "dpkg", "apt", "apt-get", "apk",
    "rpm", "yum", "dnf", "microdnf",
];

fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn git(args: &[&str]) -> String {
    let out = Command::new("git")
        .args(args)
        .current_dir(repo())
        .output()
        .expect("run git");
    assert!(out.status.success(), "git {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The commit the image must name: HEAD, `-dirty` with uncommitted changes
/// to tracked files (as deploy/image/build names it).
fn expected_revision() -> String {
    let head = git(&["rev-parse", "HEAD"]);
    assert_eq!(head.len(), 40, "a full commit id: {head}");
    if git(&["status", "--porcelain", "--untracked-files=no"]).is_empty() {
        head
    } else {
        format!("{head}-dirty")
    }
}

/// Every file's mtime: SOURCE_DATE_EPOCH when set, else the commit's time.
fn expected_mtime() -> u64 {
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .unwrap_or_else(|_| git(&["log", "-1", "--format=%ct", "HEAD"]));
    epoch.parse().expect("SOURCE_DATE_EPOCH is a number")
}

/// Runs deploy/image/build with `args`; its stdout.
fn build(args: &[&str]) -> String {
    let out = Command::new(repo().join("deploy/image/build"))
        .args(args)
        .output()
        .expect("run deploy/image/build");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "deploy/image/build {args:?} failed:\n{stderr}"
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The image deploy/image/build prints, built (or found fresh) once.
fn image() -> &'static (PathBuf, Image) {
    static IMAGE: OnceLock<(PathBuf, Image)> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let path = PathBuf::from(build(&[]));
        let image = Image::open(&path);
        (path, image)
    })
}

fn labels(image: &Image) -> &serde_json::Map<String, Value> {
    image.config["config"]["Labels"]
        .as_object()
        .expect("the image has labels")
}

#[test]
fn image_runs_as_nonroot_with_no_shell_or_package_manager() {
    let (path, image) = image();
    let config = &image.config["config"];
    assert_eq!(config["User"], IMAGE_USER, "{}", path.display());
    let passwd = String::from_utf8_lossy(&image.entry("etc/passwd").expect("/etc/passwd").data);
    assert!(
        passwd.contains("nonroot:x:65532:65532:nonroot:/home/nonroot:"),
        "{passwd}"
    );
    let group = String::from_utf8_lossy(&image.entry("etc/group").expect("/etc/group").data);
    assert!(group.lines().any(|l| l == "nonroot:x:65532:"), "{group}");
    let home = image.entry("home/nonroot").expect("/home/nonroot");
    assert_eq!((home.uid, home.gid, home.mode), (65532, 65532, 0o700));
    assert_eq!(image.entry("tmp").expect("/tmp").mode, 0o1777);
    let epoch = expected_mtime();
    for e in image.entries().chain(&image.archive) {
        let name = e.path.rsplit('/').next().unwrap_or_default();
        assert!(
            e.kind == b'5' || !FORBIDDEN.contains(&name),
            "{} is in the image",
            e.path
        );
        // Nothing runs but nodegate and its loader: every executable file is
        // the binary or a shared library.
        if e.is_file() && e.mode & 0o111 != 0 {
            assert!(
                e.path == BINARY || name.contains(".so"),
                "{} is executable",
                e.path
            );
        }
        if e.path != "home/nonroot" {
            assert_eq!((e.uid, e.gid), (0, 0), "{} is not root's", e.path);
        }
        assert_eq!(e.mtime, epoch, "{}: mtime is not the commit's time", e.path);
    }
    let binary = image.entry(BINARY).expect("the binary");
    assert_eq!(
        binary.mode, 0o755,
        "the binary is root's, not writable by 65532"
    );
}

#[test]
fn the_binary_in_the_image_reports_the_commit() {
    let (_, image) = image();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let root = dir.path();
    image.unpack(root);
    // The image's own loader and libraries, not the host's: the loader is
    // the one regular file named ld-linux*, the libraries beside it.
    let loader = image
        .entries()
        .find(|e| {
            e.is_file()
                && e.path
                    .rsplit('/')
                    .next()
                    .is_some_and(|n| n.starts_with("ld-linux"))
        })
        .expect("a dynamic loader in the image");
    let loader = root.join(&loader.path);
    let libs = loader
        .parent()
        .expect("the library directory")
        .to_path_buf();
    let binary = root.join(BINARY);
    let run = |args: &[&str]| -> String {
        let out = Command::new(&loader)
            .arg("--library-path")
            .arg(&libs)
            .args(args)
            .env_clear()
            .output()
            .expect("run the image's loader");
        assert!(out.status.success(), "{args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let bin = binary.to_str().expect("a UTF-8 path");
    // Every library the binary loads resolves inside the image.
    for line in run(&["--list", bin]).lines().filter(|l| l.contains("=>")) {
        assert!(
            line.contains(libs.to_str().unwrap_or("?")),
            "{line} is not the image's"
        );
    }
    let revision = expected_revision();
    assert_eq!(
        run(&[bin, "--version"]),
        format!("nodegate {} ({revision})\n", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        labels(image)["org.opencontainers.image.revision"],
        revision.as_str()
    );
}

#[test]
fn assembling_again_gives_the_same_digest() {
    let (_, image) = image();
    // The same binary, assembled twice more, in other directories and at
    // other times (each assembly takes seconds): a time, a path or an order
    // that leaked into the image would change the digest.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = dir.path().join("nodegate");
    std::fs::write(&binary, &image.entry(BINARY).expect("the binary").data).expect("write");
    let digests: Vec<String> = ["a", "b"]
        .iter()
        .map(|name| {
            let out = dir.path().join(name).join("image.tar");
            let digest = build(&[
                "--binary",
                binary.to_str().expect("a UTF-8 path"),
                "--out",
                out.to_str().expect("a UTF-8 path"),
                "--print-digest",
            ]);
            assert_eq!(Image::open(&out).manifest_digest, digest, "--print-digest");
            digest
        })
        .collect();
    assert_eq!(digests[0], image.manifest_digest, "the first assembly");
    assert_eq!(digests[1], image.manifest_digest, "the second assembly");
}

#[test]
fn the_archive_is_named_for_ctr_import() {
    let (_, image) = image();
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        image.index["manifests"][0]["annotations"],
        json!({
            "io.containerd.image.name": format!("ghcr.io/nodegate/nodegate:{version}"),
            "org.opencontainers.image.ref.name": version,
        })
    );
    assert_eq!(image.index["manifests"][0]["platform"]["os"], "linux");
    assert_eq!(image.config["os"], "linux");
    // Uncompressed layers: each layer's digest is its diff_id.
    let layers: Vec<&Value> = image.manifest["layers"]
        .as_array()
        .expect("the manifest's layers")
        .iter()
        .map(|l| &l["digest"])
        .collect();
    let diff_ids: Vec<&Value> = image.config["rootfs"]["diff_ids"]
        .as_array()
        .expect("the config's diff_ids")
        .iter()
        .collect();
    assert_eq!(layers, diff_ids);
}

#[test]
fn the_dockerfile_describes_the_same_image() {
    let (_, image) = image();
    let text = std::fs::read_to_string(repo().join("Dockerfile")).expect("read the Dockerfile");
    let all = dockerfile::instructions(&text);
    let runtime = dockerfile::final_stage(&all);
    let config = &image.config["config"];
    assert_eq!(dockerfile::only(runtime, "USER"), IMAGE_USER);
    // Exec form (JSON), as the image has them: a shell form needs /bin/sh.
    let exec_form = |k: &str| -> Value {
        let args = dockerfile::only(runtime, k);
        serde_json::from_str(args).unwrap_or_else(|e| panic!("{k} {args} is not exec form: {e}"))
    };
    assert_eq!(exec_form("ENTRYPOINT"), config["Entrypoint"]);
    assert_eq!(exec_form("CMD"), config["Cmd"]);
    assert_eq!(config["Entrypoint"], json!([format!("/{BINARY}")]));
    assert!(
        runtime.iter().all(|i| i.keyword != "RUN"),
        "a RUN in the runtime stage needs a shell"
    );
    // The binary: built by the same command, copied to the same path.
    let copy = dockerfile::only(runtime, "COPY");
    assert!(copy.ends_with(&format!(" /{BINARY}")), "COPY {copy}");
    let built = dockerfile::only(dockerfile::stage(&all, "build"), "RUN");
    let script =
        std::fs::read_to_string(repo().join("deploy/image/build")).expect("read the script");
    let cargo = "cargo build --release --locked --bin nodegate";
    assert!(
        built.contains(cargo) && script.contains(cargo),
        "both build with `{cargo}`"
    );
    assert!(
        built.contains("NODEGATE_REVISION=\"${REVISION}\""),
        "RUN {built}"
    );
    // The labels: the same keys; the same values, or for a build argument
    // the value deploy/image/build gives it.
    let from_dockerfile = dockerfile::labels(runtime);
    let in_image = labels(image);
    assert_eq!(
        from_dockerfile.keys().collect::<Vec<_>>(),
        in_image.keys().collect::<Vec<_>>()
    );
    let args = dockerfile::arg_defaults(runtime);
    for (key, value) in &from_dockerfile {
        let expected = match dockerfile::build_arg(value) {
            Some("VERSION") => {
                assert_eq!(
                    args["VERSION"],
                    env!("CARGO_PKG_VERSION"),
                    "the Dockerfile's VERSION"
                );
                env!("CARGO_PKG_VERSION").to_string()
            }
            Some("REVISION") => expected_revision(),
            Some(other) => panic!("label {key} takes build argument {other}, unknown here"),
            None => value.clone(),
        };
        assert_eq!(in_image[key], expected.as_str(), "label {key}");
    }
}

/// python3 running `script`, which finds deploy/image/assemble.py's
/// directory as its first argument (arguments added after it follow).
fn with_assemble(script: &str) -> Command {
    let mut python = Command::new("python3");
    python
        .arg("-c")
        .arg(script)
        .arg(repo().join("deploy/image"));
    python
}

/// Runs deploy/image/assemble.py's `fetch_all` for one package against the
/// cache `cache`, with apt answered by stand-ins: apt's package index gives
/// the SHA256 of `REAL`, and `apt-get download` writes `downloaded`.
/// Returns (success, the bytes fetch handed on, stderr).
fn fetch_with(cache: &std::path::Path, downloaded: &str) -> (bool, String, String) {
    const SCRIPT: &str = r#"
import hashlib, os, sys
sys.path.insert(0, sys.argv[1])
import assemble
cache, downloaded = sys.argv[2], sys.argv[3]
real = b"REAL"
assemble.candidates = lambda names: {
    name: ("1.0", "pkg_1.0_amd64.deb", hashlib.sha256(real).hexdigest()) for name in names}
def download(cmd, cwd=None, check=False, stdout=None):
    with open(os.path.join(cwd, "pkg_1.0_amd64.deb"), "w") as f:
        f.write(downloaded)
assemble.subprocess.run = download
assemble.Package = lambda name, version, path: path
with open(assemble.fetch_all(["pkg"], cache)[0]) as f:
    print(f.read(), end="")
"#;
    let out = with_assemble(SCRIPT)
        .arg(cache)
        .arg(downloaded)
        .output()
        .expect("run python3");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A .deb is used only when its SHA256 is the one apt's package index
/// gives: a cached file that differs is fetched again, a download that
/// differs stops the build, and a cached file that matches is used as it
/// is. Needs python3 only, not the image.
#[test]
fn a_deb_is_used_only_with_the_sha256_apt_gives() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cached = dir.path().join("pkg_1.0_amd64.deb");
    std::fs::write(&cached, "TAMPERED").expect("write the cached file");
    let (ok, used, err) = fetch_with(dir.path(), "REAL");
    assert!(ok, "{err}");
    assert_eq!(used, "REAL", "the tampered cache was used: {err}");
    assert!(err.contains("downloading it again"), "{err}");

    std::fs::remove_file(&cached).expect("empty the cache");
    let (ok, used, err) = fetch_with(dir.path(), "TAMPERED");
    assert!(!ok, "a download with another SHA256 was used: {used}");
    assert!(err.contains("SHA256") && err.contains("not used"), "{err}");
    assert!(
        !cached.exists(),
        "the bad download must not reach the cache"
    );

    std::fs::write(&cached, "REAL").expect("write the cached file");
    let (ok, used, err) = fetch_with(dir.path(), "TAMPERED");
    assert!(ok, "{err}");
    assert_eq!(used, "REAL", "a matching cached file is used, not fetched");
}

/// Starts deploy/image/assemble.py's `foreign_apt` for arm64 on the apt
/// directory `apt_dir` as build `me`, with `apt-get update` answered by a
/// stand-in that holds the lists as apt does (a second update at the same
/// time fails with apt's "Unable to lock directory") until build `other`
/// has looked at the lists (at most 20 s), and a second more, then writes a
/// package list. `me` says it looked by a file written just after it listed
/// the lists directory, so `other` cannot have seen the package list then.
fn update_lists(apt_dir: &std::path::Path, me: &str, other: &str) -> std::process::Child {
    const SCRIPT: &str = r#"
import os, sys, time
sys.path.insert(0, sys.argv[1])
import assemble
apt_dir, me, other = sys.argv[2], sys.argv[3], sys.argv[4]
lists = os.path.join(apt_dir, "lists")
def run(cmd, what):
    if cmd[-1] != "update":
        assemble.die(f"unexpected command {cmd}")
    try:
        os.mkdir(os.path.join(lists, "held"))
    except FileExistsError:
        assemble.die(f"E: Unable to lock directory {lists}/")
    with open(os.path.join(apt_dir, "updates"), "a") as f:
        f.write(me + "\n")
    for _ in range(200):
        if os.path.exists(os.path.join(apt_dir, other + ".started")):
            break
        time.sleep(0.1)
    time.sleep(1)
    open(os.path.join(lists, "deb.example_dists_stable_main_binary-arm64_Packages"), "w").close()
    os.rmdir(os.path.join(lists, "held"))
    return b""
assemble.run = run
listdir = os.listdir
def looked(path):
    names = listdir(path)
    open(os.path.join(apt_dir, me + ".started"), "w").close()
    return names
os.listdir = looked
assemble.foreign_apt("arm64", apt_dir)
"#;
    with_assemble(SCRIPT)
        .arg(apt_dir)
        .arg(me)
        .arg(other)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run python3")
}

/// Two image builds for another architecture at once on an empty apt
/// directory (a cold test run builds images side by side): one fetches the
/// package lists, the other waits for it and uses them, and neither fails on
/// apt's lock. Needs python3 only, not the image.
#[test]
fn two_builds_at_once_fetch_the_package_lists_once() {
    let dir = tempfile::tempdir().expect("temp dir");
    let builds = [
        update_lists(dir.path(), "first", "second"),
        update_lists(dir.path(), "second", "first"),
    ];
    for build in builds {
        let out = build.wait_with_output().expect("wait for python3");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "a build failed: {err}");
    }
    let updates = std::fs::read_to_string(dir.path().join("updates")).expect("read the updates");
    assert_eq!(updates.lines().count(), 1, "updates by build: {updates:?}");
}
