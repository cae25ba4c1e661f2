//! Installed from a registry, as users install it: `deploy/release` makes two
//! versions (this commit's, and the same commit with the next version, from
//! a clone, its images carrying the first's binaries), pushes both to the lab's registry (`up --registry`, TLS with the
//! cluster's CA), then `helm install nodegate oci://…/charts/nodegate` with
//! one value pointing the chart's image at the registry: the real node's
//! containerd pulls the image by its index digest (nothing is imported),
//! both replicas turn Ready, the gated real node opens by ready, and `helm
//! upgrade` to the second version rolls the pods to its digest with never
//! two leaders. (That the pushed index and chart verify with the release's
//! key and not another is tests/e2e_release.rs's.)

use super::leaders::{Recorder, overlaps, terms};
use super::*;

/// The release tools' binary `name` (deploy/local/build --release-tools).
fn release_tool(name: &str) -> PathBuf {
    static TOOLS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let out = TOOLS.get_or_init(|| {
        must(
            "deploy/local/build --release-tools",
            run(&support::local_script("build"), &["--release-tools"], None),
        )
        .stdout
    });
    let dir = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("deploy/local/build --release-tools names no {name}"))
        .to_string();
    PathBuf::from(dir).join(name)
}

fn cargo_version(root: &Path) -> String {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).expect("read Cargo.toml");
    let package = text
        .split("[workspace.package]")
        .nth(1)
        .expect("[workspace.package]");
    let line = package
        .lines()
        .find(|l| l.trim_start().starts_with("version"))
        .expect("a workspace version");
    line.split('"').nth(1).expect("quoted").to_string()
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=e2e",
            "-c",
            "user.email=e2e@nodegate.invalid",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A clone of this commit whose workspace version is `next`, with its
/// CHANGELOG.md entry, committed: what the next release's commit would be.
fn next_version_clone(dir: &Path, current: &str, next: &str) {
    let src = repo_root();
    git(
        dir.parent().expect("a parent"),
        &[
            "clone",
            "--quiet",
            "--no-local",
            &src.to_string_lossy(),
            &dir.to_string_lossy(),
        ],
    );
    let edit = |file: &str, f: &dyn Fn(String) -> String| {
        let path = dir.join(file);
        let text = std::fs::read_to_string(&path).expect("read");
        let new = f(text.clone());
        assert_ne!(new, text, "{file} unchanged");
        std::fs::write(&path, new).expect("write");
    };
    let (cur_line, next_line) = (
        format!("version = \"{current}\""),
        format!("version = \"{next}\""),
    );
    edit("Cargo.toml", &|t| t.replacen(&cur_line, &next_line, 1));
    // The workspace's own packages in Cargo.lock (no source line).
    edit("Cargo.lock", &|t| {
        t.split("[[package]]")
            .map(|block| {
                if block.contains("\nsource = ") {
                    block.to_string()
                } else {
                    block.replacen(&cur_line, &next_line, 1)
                }
            })
            .collect::<Vec<_>>()
            .join("[[package]]")
    });
    edit("CHANGELOG.md", &|t| {
        t.replacen(
            "\n## ",
            &format!("\n## {next}\n\n- The end-to-end test's upgrade target.\n\n## "),
            1,
        )
    });
    git(
        dir,
        &["commit", "--quiet", "-am", &format!("release {next}")],
    );
}

/// `deploy/release` from `root` (a checkout), with `args` after VERSION and
/// `env` set.
fn release(root: &Path, version: &str, args: &[&str], env: &[(&str, &Path)]) -> Output {
    let mut all = vec![version];
    all.extend_from_slice(args);
    let out = Command::new(root.join("deploy/release"))
        .args(&all)
        .current_dir(root)
        .env("COSIGN_PASSWORD", "")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .expect("run deploy/release");
    let o = Output {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    eprintln!("[e2e release] deploy/release {all:?}:\n{}", o.stderr);
    must(&format!("deploy/release {all:?}"), o)
}

fn digest_of(dir: &Path, what: &str) -> String {
    std::fs::read_to_string(dir.join("digests"))
        .expect("read digests")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{what} ")))
        .unwrap_or_else(|| panic!("no {what} in {}/digests", dir.display()))
        .to_string()
}

/// The binaries of the release in `dir` (its plugin archives hold the
/// images' own), as `BIN/ARCH/nodegate` for NODEGATE_RELEASE_BINARIES.
fn release_binaries(dir: &Path, version: &str, bin: &Path) {
    for arch in ["amd64", "arm64"] {
        let to = bin.join(arch);
        std::fs::create_dir_all(&to).expect("binary dir");
        let archive = dir.join(format!("nodegate-{version}-linux-{arch}.tar.gz"));
        let out = Command::new("tar")
            .arg("-xzf")
            .arg(&archive)
            .arg("-C")
            .arg(&to)
            .arg("nodegate")
            .output()
            .expect("run tar");
        assert!(
            out.status.success(),
            "no nodegate in {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A cosign key pair (no password) in `dir`: the private key's path.
fn key_pair(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).expect("key dir");
    let out = Command::new(release_tool("cosign"))
        .arg("generate-key-pair")
        .env("COSIGN_PASSWORD", "")
        .current_dir(dir)
        .output()
        .expect("run cosign generate-key-pair");
    assert!(out.status.success(), "{out:?}");
    dir.join("cosign.key")
}

/// The images the live nodegate pods run: (spec image, status imageID).
async fn pod_images(cluster: &TestCluster) -> Vec<(String, String)> {
    nodegate_pods(cluster, NS)
        .await
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let spec = p
                .spec
                .as_ref()
                .map(|s| s.containers[0].image.clone().unwrap_or_default())
                .unwrap_or_default();
            let id = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .map(|c| c.image_id.clone())
                .unwrap_or_default();
            (spec, id)
        })
        .collect()
}

#[tokio::test]
async fn installed_from_the_registry_pulled_by_digest_and_upgraded() {
    let started = std::time::Instant::now();
    let phase = |what: &str| {
        eprintln!(
            "[e2e release-registry] {:>5.0}s {what}",
            started.elapsed().as_secs_f64()
        )
    };
    let work = tempfile::tempdir().expect("temp dir");
    let key = key_pair(&work.path().join("key"));
    let v1 = cargo_version(&repo_root());
    // The next patch version.
    let mut parts: Vec<u64> = v1
        .split('.')
        .map(|p| p.parse().expect("the workspace version is x.y.z"))
        .collect();
    parts[2] += 1;
    let v2 = format!("{}.{}.{}", parts[0], parts[1], parts[2]);
    // Both releases are made before the cluster starts: the real node's
    // gate deadline runs from its registration.
    let (out1, out2) = (work.path().join("v1"), work.path().join("v2"));
    let key_arg = key.to_string_lossy().into_owned();
    release(
        &repo_root(),
        &v1,
        &["--key", &key_arg, "--out", &out1.to_string_lossy()],
        &[],
    );
    phase(&format!("release {v1} made"));
    // The second version differs from the first in its version alone, which
    // would recompile every crate of the workspace for both architectures
    // (a quarter of an hour on two cores): its images get the first's
    // binaries instead (NODEGATE_RELEASE_BINARIES). Its chart, its images'
    // labels and so their digests are its own; what is upgraded here is the
    // chart and the image the registry serves, not the code.
    let bin = work.path().join("bin");
    release_binaries(&out1, &v1, &bin);
    let clone = work.path().join("next");
    next_version_clone(&clone, &v1, &v2);
    release(
        &clone,
        &v2,
        &["--key", &key_arg, "--out", &out2.to_string_lossy()],
        &[("NODEGATE_RELEASE_BINARIES", bin.as_path())],
    );
    phase(&format!("release {v2} made"));
    let (index1, index2) = (digest_of(&out1, "index"), digest_of(&out2, "index"));
    assert_ne!(index1, index2, "two versions, two images");

    let lock = TestCluster::real_node_lock("release-registry");
    phase("the real node's lock taken");
    let cluster = TestCluster::start_real_node_with_registry("release-registry", lock).await;
    let dir = state_dir(&cluster);
    let registry = std::fs::read_to_string(dir.join("registry/address"))
        .expect("up --registry wrote registry/address")
        .trim()
        .to_string();
    let ca = dir.join("registry/ca.crt");
    let ca_arg = ca.to_string_lossy().into_owned();
    for (root, version, out) in [(repo_root(), &v1, &out1), (clone.clone(), &v2, &out2)] {
        release(
            &root,
            version,
            &[
                "--key",
                &key_arg,
                "--out",
                &out.to_string_lossy(),
                "--push",
                &registry,
                "--ca-file",
                &ca_arg,
                "--no-build",
            ],
            &[],
        );
    }
    phase("both releases pushed");

    // The gated real node, its agent (not Ready until the test says so).
    let nodes: Api<Node> = Api::all(cluster.client.clone());
    let n = nodes
        .get(REAL_NODE)
        .await
        .expect("the real node registered");
    assert!(has_taint(&n, TAINT), "registered without {TAINT}");
    let gate_dir = dir.join("agent-gate");
    apply(&cluster, "the agent DaemonSet", &agent_daemonset(&gate_dir));

    // As a user installs it: the chart from the registry, and one value
    // (image.repository) pointing its image, pinned by the release to the
    // index digest, at the same registry.
    let helm = |what: &str, verb: &str, version: &str| {
        let kubeconfig = cluster.kubeconfig.to_string_lossy().into_owned();
        let chart = format!("oci://{registry}/charts/nodegate");
        let image = format!("image.repository={registry}/nodegate");
        let mut args = vec![verb, "nodegate", chart.as_str(), "--version", version];
        if verb == "install" {
            args.push("--create-namespace");
        }
        args.extend([
            "--namespace",
            NS,
            "--kubeconfig",
            kubeconfig.as_str(),
            "--ca-file",
            ca_arg.as_str(),
            "--set",
            image.as_str(),
            "--set-json",
            r#"nodeSelector={"nodegate.dev/local-real-node":"true"}"#,
        ]);
        must(what, run(&helm_bin(), &args, None));
    };
    let leaders = Recorder::start(dir.join("node/pod-logs"), NS);
    helm("helm install from the registry", "install", &v1);
    both_ready_one_leader(&cluster, NS).await;
    phase(&format!("{v1} installed, both replicas Ready"));
    // Pulled, not imported: the runtime's reference for the image it runs
    // is the registry's name with the index digest (an imported image would
    // be known by the name it was imported under).
    let want = format!("{registry}/nodegate@{index1}");
    let images = pod_images(&cluster).await;
    assert_eq!(images.len(), 2, "{images:?}");
    for (spec, id) in images {
        assert_eq!(spec, want, "the pod's image is the index, by digest");
        assert_eq!(
            id, want,
            "containerd ran {id}, not {want} pulled from the registry"
        );
    }

    std::fs::write(gate_dir.join("ready"), "").expect("write the agent's ready file");
    let (by, _) = wait_opened(&cluster, REAL_NODE, NS).await;
    assert_eq!(by, "ready");
    phase("the real node opened by ready");

    // The upgrade: the second version's chart and image, pulled by digest.
    helm("helm upgrade to the second version", "upgrade", &v2);
    let want = format!("{registry}/nodegate@{index2}");
    wait_for(
        "both pods rolled to the second version's image",
        Duration::from_secs(180),
        || async {
            let images = pod_images(&cluster).await;
            let rolled = images
                .iter()
                .filter(|(spec, id)| spec == &want && id == &want)
                .count();
            if rolled == 2 && images.len() == 2 {
                Ok(())
            } else {
                Err(format!("{images:?}"))
            }
        },
    )
    .await;
    both_ready_one_leader(&cluster, NS).await;
    phase(&format!("upgraded to {v2}, both replicas Ready"));
    let logs = leaders.stop();
    let t = terms(&logs);
    eprintln!("leader terms: {t:?}");
    let twice = overlaps(&t);
    assert!(
        twice.is_empty(),
        "two leaders at once: {twice:?}\nterms: {t:?}"
    );
    // Every first-version pod went: the lead passed at least once, so the
    // logs were read (an empty record would show no overlap either).
    assert!(t.len() >= 2, "the leader changed at least once: {t:?}");
}
