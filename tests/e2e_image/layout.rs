//! Reading what deploy/image/build writes: a tar (the archive and each
//! layer; a small ustar reader, since no tar crate is in the dependency
//! tree) and the OCI image layout inside it, with every blob checked against
//! its digest.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

/// One tar entry: a header and, for a regular file, its bytes.
#[derive(Debug, Clone)]
pub struct Entry {
    pub path: String,
    /// The ustar type flag: b'0' file, b'5' directory, b'2' symlink, …
    pub kind: u8,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
    pub mtime: u64,
    pub link: String,
    pub data: Vec<u8>,
}

impl Entry {
    pub fn is_file(&self) -> bool {
        self.kind == b'0' || self.kind == 0
    }
}

fn field(block: &[u8], at: usize, len: usize) -> String {
    let raw = &block[at..at + len];
    let end = raw.iter().position(|&b| b == 0).unwrap_or(len);
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

fn octal(block: &[u8], at: usize, len: usize, what: &str) -> Result<u64, String> {
    let text = field(block, at, len);
    let text = text.trim_matches(|c: char| c == ' ' || c == '\0');
    if text.is_empty() {
        return Ok(0);
    }
    u64::from_str_radix(text, 8).map_err(|e| format!("bad {what} {text:?} in a tar header: {e}"))
}

/// The entries of a ustar archive, in archive order.
pub fn read_tar(bytes: &[u8]) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut at = 0;
    while at + 512 <= bytes.len() {
        let block = &bytes[at..at + 512];
        if block.iter().all(|&b| b == 0) {
            return Ok(entries);
        }
        if &block[257..262] != b"ustar" {
            return Err(format!("no ustar header at byte {at}"));
        }
        let size = octal(block, 124, 12, "size")? as usize;
        let kind = block[156];
        if !matches!(kind, 0 | b'0' | b'2' | b'5') {
            return Err(format!(
                "unexpected tar entry type {:?} at byte {at}",
                kind as char
            ));
        }
        let (name, prefix) = (field(block, 0, 100), field(block, 345, 155));
        let path = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let start = at + 512;
        let data = bytes
            .get(start..start + size)
            .ok_or_else(|| format!("{path}: the tar ends inside it"))?
            .to_vec();
        entries.push(Entry {
            path: path.trim_end_matches('/').to_string(),
            kind,
            mode: octal(block, 100, 8, "mode")? as u32,
            uid: octal(block, 108, 8, "uid")?,
            gid: octal(block, 116, 8, "gid")?,
            mtime: octal(block, 136, 12, "mtime")?,
            link: field(block, 157, 100),
            data,
        });
        at = start + size.div_ceil(512) * 512;
    }
    Err("the tar has no end-of-archive blocks".to_string())
}

/// sha256 of some bytes, by `sha256sum` (no hash crate is a dependency).
pub fn sha256(bytes: &[u8]) -> String {
    let mut child = Command::new("sha256sum")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("run sha256sum");
    let mut stdin = child.stdin.take().expect("sha256sum's stdin");
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().expect("sha256sum's output");
    writer
        .join()
        .expect("writer thread")
        .expect("write to sha256sum");
    assert!(out.status.success(), "sha256sum: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    format!(
        "sha256:{}",
        text.split_whitespace().next().unwrap_or_default()
    )
}

/// An OCI image layout archive with one image in it.
pub struct Image {
    /// The archive's own entries (oci-layout, index.json, blobs).
    pub archive: Vec<Entry>,
    pub index: Value,
    pub manifest_digest: String,
    pub manifest: Value,
    pub config: Value,
    /// Each layer's entries, bottom layer first.
    pub layers: Vec<Vec<Entry>>,
}

impl Image {
    pub fn open(path: &Path) -> Image {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let archive = read_tar(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut blobs = BTreeMap::new();
        for e in archive.iter().filter(|e| e.is_file()) {
            if let Some(hex) = e.path.strip_prefix("blobs/sha256/") {
                let digest = format!("sha256:{hex}");
                assert_eq!(sha256(&e.data), digest, "blob {} holds other bytes", e.path);
                blobs.insert(digest, e.data.clone());
            }
        }
        let file = |name: &str| -> Value {
            let e = archive.iter().find(|e| e.path == name);
            let e = e.unwrap_or_else(|| panic!("{} has no {name}", path.display()));
            serde_json::from_slice(&e.data).unwrap_or_else(|err| panic!("{name}: {err}"))
        };
        assert_eq!(file("oci-layout")["imageLayoutVersion"], "1.0.0");
        let index = file("index.json");
        let manifests = index["manifests"]
            .as_array()
            .expect("index.json has manifests");
        assert_eq!(manifests.len(), 1, "one image in the archive: {index}");
        let blob = |desc: &Value| -> Vec<u8> {
            let digest = desc["digest"].as_str().expect("a descriptor's digest");
            let data = blobs
                .get(digest)
                .unwrap_or_else(|| panic!("no blob {digest}"));
            assert_eq!(
                desc["size"].as_u64(),
                Some(data.len() as u64),
                "size of {digest}"
            );
            data.clone()
        };
        let json = |desc: &Value| -> Value {
            serde_json::from_slice(&blob(desc)).unwrap_or_else(|e| panic!("{desc}: {e}"))
        };
        let manifest = json(&manifests[0]);
        let config = json(&manifest["config"]);
        let layers: Vec<Vec<Entry>> = manifest["layers"]
            .as_array()
            .expect("the manifest's layers")
            .iter()
            .map(|desc| read_tar(&blob(desc)).unwrap_or_else(|e| panic!("layer {desc}: {e}")))
            .collect();
        Image {
            manifest_digest: manifests[0]["digest"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            archive,
            index,
            manifest,
            config,
            layers,
        }
    }

    /// Every entry of every layer.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.layers.iter().flatten()
    }

    pub fn entry(&self, path: &str) -> Option<&Entry> {
        self.entries().filter(|e| e.path == path).last()
    }

    /// The layers unpacked into `root` (files, directories, symlinks).
    pub fn unpack(&self, root: &Path) {
        use std::os::unix::fs::PermissionsExt as _;
        for e in self.entries() {
            let to = root.join(&e.path);
            match e.kind {
                b'5' => std::fs::create_dir_all(&to).expect("create a directory"),
                b'2' => std::os::unix::fs::symlink(&e.link, &to).expect("create a symlink"),
                _ => {
                    std::fs::write(&to, &e.data).expect("write a file");
                    let perms = std::fs::Permissions::from_mode(e.mode & 0o777);
                    std::fs::set_permissions(&to, perms).expect("chmod");
                }
            }
        }
    }
}
