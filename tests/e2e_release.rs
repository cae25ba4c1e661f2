//! `deploy/release`: one command, every artifact of a release, reproducible.
//!
//! The release of the workspace's version is made twice from this commit
//! (into two folders, with two cosign keys), then: the two runs' image
//! index, images and chart are byte for byte the same; every file is in
//! SHA256SUMS with its hash; the image tag, the chart's version and
//! appVersion and `nodegate version` agree; the chart and the kustomize base
//! name the image by its index digest; the Krew manifest carries the
//! archives' real sha256; the SBOM lists every crate of Cargo.lock and the
//! image's Debian packages; the signatures verify with the key that made
//! them and not with another; the arm64 binary runs under qemu-user. And the
//! script refuses a version that has no CHANGELOG.md entry.
//!
//! Pushed to the lab's registry (`deploy/local/up --registry`, TLS with the
//! cluster's own CA), the index is there under its digest and `cosign
//! verify` passes for the image and the chart with the release's key, and
//! fails with another.
//!
//! Named e2e_ so that it runs among the end-to-end binaries (tests/lanes.py):
//! its first call builds both images (a cross build for arm64) and the
//! release tools when the caches lack them.

use nodegate_e2e as support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;
use support::TestCluster;

fn repo() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")))
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    cmd.output().unwrap_or_else(|e| panic!("{shown}: {e}"))
}

fn ok(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{shown} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The release tools' directories (cosign, syft, …), built once.
fn tool(name: &str) -> PathBuf {
    static TOOLS: OnceLock<String> = OnceLock::new();
    let lines = TOOLS
        .get_or_init(|| ok(Command::new(repo().join("deploy/local/build")).arg("--release-tools")));
    let dir = lines
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("deploy/local/build --release-tools names no {name}: {lines}"));
    PathBuf::from(dir).join(name)
}

fn cosign() -> PathBuf {
    tool("cosign")
}

/// The workspace version: the version a release of this commit must have.
fn cargo_version() -> String {
    let text = std::fs::read_to_string(repo().join("Cargo.toml")).expect("read Cargo.toml");
    let in_package = text
        .split("[workspace.package]")
        .nth(1)
        .expect("Cargo.toml has [workspace.package]");
    let line = in_package
        .lines()
        .find(|l| l.trim_start().starts_with("version"))
        .expect("[workspace.package] has a version");
    line.split('"')
        .nth(1)
        .expect("a quoted version")
        .to_string()
}

/// One release run: its folder and the key pair it was signed with.
struct Release {
    dir: PathBuf,
    key: PathBuf,
    public_key: PathBuf,
}

struct Releases {
    /// Held for the life of the test binary: a second run of this binary
    /// on the same target directory waits rather than wiping our folder.
    _lock: std::fs::File,
    first: Release,
    second: Release,
}

fn key_pair(dir: &Path) -> (PathBuf, PathBuf) {
    std::fs::create_dir_all(dir).expect("key dir");
    ok(Command::new(cosign())
        .args(["generate-key-pair"])
        .env("COSIGN_PASSWORD", "")
        .current_dir(dir));
    (dir.join("cosign.key"), dir.join("cosign.pub"))
}

fn release(tmp: &Path, name: &str) -> Release {
    let (key, public_key) = key_pair(&tmp.join(format!("key-{name}")));
    let dir = tmp.join(name);
    let printed = ok(Command::new(repo().join("deploy/release"))
        .arg(cargo_version())
        .arg("--key")
        .arg(&key)
        .arg("--out")
        .arg(&dir)
        .env("COSIGN_PASSWORD", ""));
    assert_eq!(
        printed.lines().last().map(PathBuf::from),
        Some(dir.clone()),
        "deploy/release prints its folder last"
    );
    Release {
        dir,
        key,
        public_key,
    }
}

fn releases() -> &'static Releases {
    static RELEASES: OnceLock<Releases> = OnceLock::new();
    RELEASES.get_or_init(|| {
        // A static is never dropped, so a `TempDir` here would leave two
        // releases (180 MB) in /tmp after every run. One fixed folder under
        // the target directory instead: each run empties it first.
        let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let lock_path = root.join("e2e_release.lock");
        let lock = std::fs::File::create(&lock_path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", lock_path.display()));
        lock.lock()
            .unwrap_or_else(|e| panic!("cannot lock {}: {e}", lock_path.display()));
        let tmp = root.join("e2e_release");
        match std::fs::remove_dir_all(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("cannot empty {}: {e}", tmp.display()),
        }
        let first = release(&tmp, "first");
        let second = release(&tmp, "second");
        Releases {
            _lock: lock,
            first,
            second,
        }
    })
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

fn sha256(path: &Path) -> String {
    let out = ok(Command::new("sha256sum").arg(path));
    out.split_whitespace().next().expect("a hash").to_string()
}

/// `digests`: `index sha256:…`, `linux/amd64 sha256:…`, …
fn digests(dir: &Path) -> BTreeMap<String, String> {
    String::from_utf8_lossy(&read(&dir.join("digests")))
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// One file out of a tar (gzipped or not), by `tar -xOf`.
fn from_tar(archive: &Path, member: &str) -> Vec<u8> {
    let out = run(Command::new("tar").arg("-xOf").arg(archive).arg(member));
    assert!(
        out.status.success(),
        "{} has no {member}: {}",
        archive.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn yaml_field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().trim_matches('"'))
}

#[test]
fn two_releases_of_one_commit_give_one_image_index_and_one_chart() {
    let r = releases();
    let version = cargo_version();
    let (a, b) = (digests(&r.first.dir), digests(&r.second.dir));
    assert!(
        a["index"].starts_with("sha256:") && a["index"].len() == 71,
        "{a:?}"
    );
    assert_eq!(a, b, "the image digests of two runs");
    assert_ne!(a["linux/amd64"], a["linux/arm64"], "two images, not one");
    for name in [
        format!("nodegate-{version}-oci.tar"),
        format!("nodegate-{version}-index.json"),
        format!("nodegate-{version}.tgz"),
        format!("nodegate-{version}-kustomize.tar.gz"),
        format!("nodegate-{version}-linux-amd64.tar.gz"),
        format!("nodegate-{version}-linux-arm64.tar.gz"),
        "krew-nodegate.yaml".to_string(),
    ] {
        assert_eq!(
            sha256(&r.first.dir.join(&name)),
            sha256(&r.second.dir.join(&name)),
            "{name} differs between two runs on one commit"
        );
    }
    // The index names both platforms' images, each by its digest.
    let index: Value = serde_json::from_slice(&read(
        &r.first.dir.join(format!("nodegate-{version}-index.json")),
    ))
    .expect("the index is JSON");
    let listed: BTreeMap<String, String> = index["manifests"]
        .as_array()
        .expect("manifests")
        .iter()
        .map(|m| {
            (
                format!(
                    "{}/{}",
                    m["platform"]["os"].as_str().unwrap_or_default(),
                    m["platform"]["architecture"].as_str().unwrap_or_default()
                ),
                m["digest"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(listed.get("linux/amd64"), a.get("linux/amd64"), "{index}");
    assert_eq!(listed.get("linux/arm64"), a.get("linux/arm64"), "{index}");
    assert_eq!(listed.len(), 2, "{index}");
}

#[test]
fn sha256sums_lists_every_artifact_with_its_hash() {
    let dir = &releases().first.dir;
    let sums = String::from_utf8_lossy(&read(&dir.join("SHA256SUMS"))).into_owned();
    let mut listed = BTreeSet::new();
    for line in sums.lines() {
        let (hash, name) = line.split_once("  ").expect("HASH  NAME");
        assert_eq!(hash, sha256(&dir.join(name)), "{name}");
        listed.insert(name.to_string());
    }
    let present: BTreeSet<String> = std::fs::read_dir(dir)
        .expect("list the release")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n != "SHA256SUMS")
        .collect();
    assert_eq!(listed, present);
    let version = cargo_version();
    for want in [
        format!("nodegate-{version}-linux-amd64.spdx.json"),
        format!("nodegate-{version}-linux-arm64.spdx.json"),
        format!("nodegate-{version}.tgz.sig"),
        format!("nodegate-{version}-index.json.sig"),
    ] {
        assert!(present.contains(&want), "no {want} in {present:?}");
    }
}

#[test]
fn image_tag_chart_version_and_binary_version_agree() {
    let r = releases();
    let dir = &r.first.dir;
    let version = cargo_version();
    let index_digest = digests(dir)["index"].clone();
    // The image's tag, as the OCI layout names it.
    let top: Value = serde_json::from_slice(&from_tar(
        &dir.join(format!("nodegate-{version}-oci.tar")),
        "index.json",
    ))
    .expect("index.json");
    let entry = &top["manifests"][0];
    assert_eq!(entry["digest"], index_digest.as_str(), "{top}");
    assert_eq!(
        entry["annotations"]["org.opencontainers.image.ref.name"],
        version.as_str(),
        "{top}"
    );
    // The chart: version = appVersion = the release; image pinned by digest.
    let chart = dir.join(format!("nodegate-{version}.tgz"));
    let chart_yaml = String::from_utf8_lossy(&from_tar(&chart, "nodegate/Chart.yaml")).into_owned();
    assert_eq!(
        yaml_field(&chart_yaml, "version"),
        Some(version.as_str()),
        "{chart_yaml}"
    );
    assert_eq!(
        yaml_field(&chart_yaml, "appVersion"),
        Some(version.as_str()),
        "{chart_yaml}"
    );
    let values = String::from_utf8_lossy(&from_tar(&chart, "nodegate/values.yaml")).into_owned();
    assert!(
        values.contains(&format!("  digest: \"{index_digest}\"\n")),
        "the chart's image.digest is not the index's {index_digest}"
    );
    // The kustomize base: pinned by the same digest, no tag left.
    let kustomization = String::from_utf8_lossy(&from_tar(
        &dir.join(format!("nodegate-{version}-kustomize.tar.gz")),
        "kustomize/base/kustomization.yaml",
    ))
    .into_owned();
    assert!(
        kustomization.contains(&format!("    digest: {index_digest}\n")),
        "{kustomization}"
    );
    assert!(!kustomization.contains("newTag:"), "{kustomization}");
    // The binary of the amd64 plugin archive (the image's own).
    let bin = tempfile::tempdir().expect("temp dir");
    ok(Command::new("tar")
        .arg("-xzf")
        .arg(dir.join(format!("nodegate-{version}-linux-amd64.tar.gz")))
        .arg("-C")
        .arg(bin.path()));
    let printed =
        ok(Command::new(bin.path().join("nodegate")).args(["version", "--client", "-o", "json"]));
    let printed: Value = serde_json::from_str(&printed).expect("version -o json");
    assert_eq!(printed["client"], version.as_str(), "{printed}");
}

#[test]
fn krew_manifest_carries_the_archives_real_sha256() {
    let dir = &releases().first.dir;
    let version = cargo_version();
    let manifest = String::from_utf8_lossy(&read(&dir.join("krew-nodegate.yaml"))).into_owned();
    assert!(
        manifest.contains(&format!("version: \"v{version}\"")),
        "{manifest}"
    );
    assert!(!manifest.contains('@'), "a placeholder is left: {manifest}");
    for arch in ["amd64", "arm64"] {
        let archive = format!("nodegate-{version}-linux-{arch}.tar.gz");
        let hash = sha256(&dir.join(&archive));
        let uri = manifest
            .lines()
            .position(|l| l.contains(&format!("/{archive}\"")))
            .unwrap_or_else(|| panic!("no uri of {archive} in {manifest}"));
        let next = manifest.lines().nth(uri + 1).unwrap_or_default();
        assert_eq!(next.trim(), format!("sha256: \"{hash}\""), "{archive}");
    }
    assert!(
        !manifest.contains("darwin"),
        "no darwin archive is built: {manifest}"
    );
}

/// Cargo.lock's packages: (name, version, from a registry).
fn locked_crates() -> BTreeSet<(String, String, bool)> {
    let lock = std::fs::read_to_string(repo().join("Cargo.lock")).expect("read Cargo.lock");
    let mut crates = BTreeSet::new();
    for block in lock.split("[[package]]").skip(1) {
        let field = |key: &str| {
            block
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key} = \"")))
                .map(|v| v.trim_end_matches('"').to_string())
        };
        let (Some(name), Some(version)) = (field("name"), field("version")) else {
            panic!("a Cargo.lock package without name or version: {block}");
        };
        let registry = field("source").is_some_and(|s| s.starts_with("registry+"));
        crates.insert((name, version, registry));
    }
    assert!(
        crates.len() > 100,
        "Cargo.lock lists {} crates",
        crates.len()
    );
    crates
}

#[test]
fn sbom_lists_every_crate_of_cargo_lock_and_the_images_debian_packages() {
    let dir = &releases().first.dir;
    let version = cargo_version();
    let crates = locked_crates();
    for arch in ["amd64", "arm64"] {
        let name = format!("nodegate-{version}-linux-{arch}.spdx.json");
        let sbom: Value = serde_json::from_slice(&read(&dir.join(&name))).expect("SPDX JSON");
        assert!(
            sbom["spdxVersion"]
                .as_str()
                .is_some_and(|v| v.starts_with("SPDX-")),
            "{name}: not SPDX"
        );
        let packages = sbom["packages"].as_array().expect("packages");
        let purls: BTreeSet<String> = packages
            .iter()
            .flat_map(|p| p["externalRefs"].as_array().cloned().unwrap_or_default())
            .filter(|r| r["referenceType"] == "purl")
            .filter_map(|r| r["referenceLocator"].as_str().map(str::to_string))
            .collect();
        // Every crate from crates.io (the workspace's own may be listed too).
        // A package URL writes a version's `+` (build metadata) as `%2B`.
        let missing: Vec<_> = crates
            .iter()
            .filter(|(n, v, registry)| {
                *registry && !purls.contains(&format!("pkg:cargo/{n}@{}", v.replace('+', "%2B")))
            })
            .collect();
        assert!(
            missing.is_empty(),
            "{name} lacks crates of Cargo.lock: {missing:?}"
        );
        let extra: Vec<_> = purls
            .iter()
            .filter_map(|p| p.strip_prefix("pkg:cargo/"))
            .filter_map(|p| p.split_once('@'))
            .filter(|(n, v)| {
                let v = v.replace("%2B", "+");
                !crates.iter().any(|(cn, cv, _)| cn == n && *cv == v)
            })
            .collect();
        assert!(
            extra.is_empty(),
            "{name} has crates Cargo.lock does not: {extra:?}"
        );
        // The runtime's Debian packages, of this architecture.
        for deb in ["libc6", "libgcc-s1", "ca-certificates"] {
            let prefix = format!("pkg:deb/debian/{deb}@");
            let found = purls.iter().find(|p| p.starts_with(&prefix));
            let found = found.unwrap_or_else(|| panic!("{name} lacks the Debian package {deb}"));
            if deb != "ca-certificates" {
                assert!(found.contains(&format!("arch={arch}")), "{found}");
            }
        }
    }
}

fn verify_blob(public_key: &Path, file: &Path) -> Output {
    let sig = PathBuf::from(format!("{}.sig", file.display()));
    run(Command::new(cosign())
        .arg("verify-blob")
        .arg("--key")
        .arg(public_key)
        .arg("--signature")
        .arg(&sig)
        .arg("--insecure-ignore-tlog=true")
        .arg(file)
        .env("TUF_ROOT", std::env::temp_dir().join("nodegate-e2e-tuf"))
        // Local trust material: cosign then fetches no public trust root
        // (no tlog entry is checked against it).
        .env("SIGSTORE_REKOR_PUBLIC_KEY", public_key))
}

#[test]
fn signatures_verify_with_the_release_key_and_not_with_another() {
    let r = releases();
    let version = cargo_version();
    for name in [
        format!("nodegate-{version}-index.json"),
        format!("nodegate-{version}.tgz"),
    ] {
        let file = r.first.dir.join(&name);
        let good = verify_blob(&r.first.public_key, &file);
        assert!(
            good.status.success(),
            "cosign verify-blob {name} with the release's key: {}",
            String::from_utf8_lossy(&good.stderr)
        );
        let other = verify_blob(&r.second.public_key, &file);
        assert!(
            !other.status.success(),
            "{name}'s signature verified with another key"
        );
    }
    // A changed byte fails with the right key too.
    let tampered = tempfile::tempdir().expect("temp dir");
    let name = format!("nodegate-{version}-index.json");
    let mut bytes = read(&r.first.dir.join(&name));
    bytes.push(b'\n');
    let copy = tampered.path().join(&name);
    std::fs::write(&copy, bytes).expect("write");
    std::fs::copy(
        r.first.dir.join(format!("{name}.sig")),
        tampered.path().join(format!("{name}.sig")),
    )
    .expect("copy the signature");
    assert!(!verify_blob(&r.first.public_key, &copy).status.success());
}

#[test]
fn arm64_binary_runs_version_and_config_check_under_qemu() {
    let dir = &releases().first.dir;
    let version = cargo_version();
    let bin = tempfile::tempdir().expect("temp dir");
    ok(Command::new("tar")
        .arg("-xzf")
        .arg(dir.join(format!("nodegate-{version}-linux-arm64.tar.gz")))
        .arg("-C")
        .arg(bin.path()));
    let nodegate = bin.path().join("nodegate");
    let elf = read(&nodegate);
    assert_eq!(&elf[..4], b"\x7fELF");
    assert_eq!(
        u16::from_le_bytes([elf[18], elf[19]]),
        183,
        "not an aarch64 binary"
    );
    // Debian's arm64 loader and libraries, as the image has them: the
    // image's own files, unpacked, are the sysroot.
    let root = tempfile::tempdir().expect("temp dir");
    ok(Command::new("python3")
        .arg(repo().join("deploy/release.py"))
        .arg("rootfs")
        .arg(oci_of(dir, &version, "arm64", root.path()))
        .arg(root.path().join("rootfs")));
    let qemu = |args: &[&str]| {
        run(Command::new("qemu-aarch64-static")
            .arg("-L")
            .arg(root.path().join("rootfs"))
            .arg(&nodegate)
            .args(args))
    };
    let out = qemu(&["version", "--client", "-o", "json"]);
    assert!(out.status.success(), "{out:?}");
    let printed: Value = serde_json::from_slice(&out.stdout).expect("version -o json");
    assert_eq!(printed["client"], version.as_str());
    let config = root.path().join("config.yaml");
    std::fs::write(&config, "timeout: 3m\nonTimeout: open\n").expect("write config");
    let out = qemu(&["config", "check", config.to_str().expect("utf-8 path")]);
    assert!(
        out.status.success(),
        "config check of a valid file under qemu: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&config, "timeout: 3m\nonTimeout: sometimes\n").expect("write config");
    let out = qemu(&["config", "check", config.to_str().expect("utf-8 path")]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a bad onTimeout is refused as bad usage: {out:?}"
    );
    let said =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("onTimeout"), "{said}");
}

/// The single-platform layout of `arch`, cut out of the release's index
/// layout: index.json pointing at that platform's manifest.
fn oci_of(dir: &Path, version: &str, arch: &str, work: &Path) -> PathBuf {
    let layout = work.join("layout");
    std::fs::create_dir_all(&layout).expect("layout dir");
    ok(Command::new("tar")
        .arg("-xf")
        .arg(dir.join(format!("nodegate-{version}-oci.tar")))
        .arg("-C")
        .arg(&layout));
    let digest = digests(dir)[&format!("linux/{arch}")].clone();
    let manifest = read(
        &layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:")),
    );
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": manifest.len(),
        }],
    });
    std::fs::write(layout.join("index.json"), index.to_string()).expect("write index.json");
    let tar = work.join(format!("oci-{arch}.tar"));
    ok(Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .arg("-C")
        .arg(&layout)
        .args(["index.json", "oci-layout", "blobs"]));
    tar
}

#[test]
fn release_refuses_a_version_without_a_changelog_entry_or_not_semver() {
    let out_dir = tempfile::tempdir().expect("temp dir");
    let key = out_dir.path().join("unused.key");
    std::fs::write(&key, "not read").expect("write");
    let attempt = |version: &str| {
        run(Command::new(repo().join("deploy/release"))
            .arg(version)
            .arg("--key")
            .arg(&key)
            .arg("--out")
            .arg(out_dir.path().join("out")))
    };
    // No CHANGELOG.md entry: refused, naming the version and the file.
    let out = attempt("99.0.0");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("CHANGELOG.md has no entry for 99.0.0"),
        "{said}"
    );
    // A leading v: refused, naming the value.
    let out = attempt("v1.0.0");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("VERSION 'v1.0.0' is not a semantic version"),
        "{said}"
    );
    assert!(
        !out_dir.path().join("out").exists(),
        "a refused release wrote its folder"
    );
}

/// A cosign command that trusts the registry's CA and fetches no public
/// trust root (local trust material instead; no tlog entry is checked).
fn cosign_with(ca: &Path, public_key: &Path) -> Command {
    let mut cmd = Command::new(cosign());
    cmd.env("SSL_CERT_FILE", ca)
        .env("TUF_ROOT", std::env::temp_dir().join("nodegate-e2e-tuf"))
        .env("SIGSTORE_REKOR_PUBLIC_KEY", public_key);
    cmd
}

#[tokio::test]
async fn pushed_to_the_registry_the_index_and_chart_verify_with_the_release_key_only() {
    let r = releases();
    let version = cargo_version();
    // Pushing adds the chart's digest to `digests`: a copy, so that the
    // other tests read the release as it was made.
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path().join("release");
    ok(Command::new("cp").arg("-r").arg(&r.first.dir).arg(&dir));

    let cluster = TestCluster::start_with_registry("release-push").await;
    let state = cluster.state_dir().expect("a cluster of its own");
    let registry = std::fs::read_to_string(state.join("registry/address"))
        .expect("up --registry wrote registry/address")
        .trim()
        .to_string();
    let ca = state.join("registry/ca.crt");
    // The registry serves TLS with a certificate of the cluster's CA only.
    let plain = run(Command::new("curl")
        .args(["-fsS", "--max-time", "5"])
        .arg(format!("https://{registry}/v2/")));
    assert!(
        !plain.status.success(),
        "the registry's certificate passed without its CA"
    );
    ok(Command::new("curl")
        .args(["-fsS", "--max-time", "5", "--cacert"])
        .arg(&ca)
        .arg(format!("https://{registry}/v2/")));

    ok(Command::new(repo().join("deploy/release"))
        .arg(&version)
        .arg("--key")
        .arg(&r.first.key)
        .arg("--out")
        .arg(&dir)
        .args(["--push", &registry, "--ca-file"])
        .arg(&ca)
        .arg("--no-build")
        .env("COSIGN_PASSWORD", ""));
    let d = digests(&dir);
    let index = &d["index"];
    let chart = d.get("chart").expect("the chart's digest after the push");

    // The tag resolves to the index, whose bytes are the release's.
    let pushed = ok(Command::new(tool("crane"))
        .args(["manifest", &format!("{registry}/nodegate:{version}")])
        .env("SSL_CERT_FILE", &ca));
    assert_eq!(
        pushed.as_bytes(),
        read(&dir.join(format!("nodegate-{version}-index.json"))).as_slice(),
        "the registry's index is not the release's"
    );

    for reference in [
        format!("{registry}/nodegate@{index}"),
        format!("{registry}/charts/nodegate@{chart}"),
    ] {
        let good = run(cosign_with(&ca, &r.first.public_key)
            .args(["verify", "--insecure-ignore-tlog=true", "--key"])
            .arg(&r.first.public_key)
            .arg(&reference));
        assert!(
            good.status.success(),
            "cosign verify {reference} with the release key: {}",
            String::from_utf8_lossy(&good.stderr)
        );
        let bad = run(cosign_with(&ca, &r.second.public_key)
            .args(["verify", "--insecure-ignore-tlog=true", "--key"])
            .arg(&r.second.public_key)
            .arg(&reference));
        assert!(
            !bad.status.success(),
            "{reference} verified with another key"
        );
    }
    // The SBOMs are attached to each platform's image.
    for arch in ["amd64", "arm64"] {
        let image = format!("{registry}/nodegate@{}", d[&format!("linux/{arch}")]);
        let sbom = ok(cosign_with(&ca, &r.first.public_key)
            .args(["download", "sbom"])
            .arg(&image));
        let sbom: Value = serde_json::from_str(&sbom).expect("the attached SBOM is JSON");
        let local: Value = serde_json::from_slice(&read(
            &dir.join(format!("nodegate-{version}-linux-{arch}.spdx.json")),
        ))
        .expect("SPDX JSON");
        assert_eq!(sbom, local, "the SBOM attached to {image}");
    }
}
