#!/usr/bin/env python3
"""The file work of deploy/release (read that first), each step as a
subcommand, all of them reproducible: archives are written with sorted
entries, one mtime, uid/gid 0 and no owner names, and gzip with no name and
no time in its header.

  release.py binary LAYOUT_TAR OUT          the nodegate binary of a
                                            single-platform image layout
  release.py rootfs LAYOUT_TAR DIR          every layer of it, unpacked
  release.py tgz OUT EPOCH DIR [NAME=PATH]  DIR's files (or the named
                                            files) as a .tar.gz
  release.py pin-chart VALUES DIGEST        image.digest in a chart's values
  release.py pin-kustomize FILE IMAGE DIGEST  the image of a kustomization
                                            pinned by digest
  release.py changelog CHANGELOG VERSION    fails unless VERSION has an entry
  release.py sums DIR                       SHA256SUMS of DIR's files
"""

import gzip
import hashlib
import io
import json
import os
import re
import sys
import tarfile

BINARY = "usr/local/bin/nodegate"


def die(msg):
    print(f"[deploy/release] error: {msg}", file=sys.stderr)
    sys.exit(1)


def layout(path):
    """{name: bytes} of an image-layout tar and its one image manifest."""
    try:
        with tarfile.open(path) as tar:
            files = {m.name: tar.extractfile(m).read()
                     for m in tar.getmembers() if m.isfile()}
    except (OSError, tarfile.TarError) as e:
        die(f"cannot read {path}: {e}")
    index = json.loads(files["index.json"])
    desc = index["manifests"][0]
    manifest = json.loads(files["blobs/sha256/" + desc["digest"].split(":")[1]])
    if "layers" not in manifest:
        die(f"{path} holds an image index, not one image")
    return files, manifest


def layers(path):
    files, manifest = layout(path)
    for l in manifest["layers"]:
        data = files["blobs/sha256/" + l["digest"].split(":")[1]]
        yield tarfile.open(fileobj=io.BytesIO(data))


def cmd_binary(path, out):
    for tar in layers(path):
        with tar:
            try:
                m = tar.getmember(BINARY)
            except KeyError:
                continue
            data = tar.extractfile(m).read()
            with open(out, "wb") as f:
                f.write(data)
            os.chmod(out, 0o755)
            return
    die(f"{path} has no /{BINARY}")


def cmd_rootfs(path, out):
    os.makedirs(out, exist_ok=True)
    for tar in layers(path):
        with tar:
            for m in tar.getmembers():
                # Symlinks are kept as links; nothing is written outside
                # `out` (the entries are ours, but check all the same).
                if m.name.startswith("/") or ".." in m.name.split("/"):
                    die(f"{path}: layer entry {m.name} leaves the root")
                if m.isdev():
                    continue
                tar.extract(m, out, set_attrs=False, filter="tar")


def tgz(out, epoch, entries):
    """entries: [(archive name, path on disk or None for a directory)]."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, path in sorted(entries, key=lambda e: e[0].split("/")):
            info = tarfile.TarInfo(name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            if path is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
                continue
            with open(path, "rb") as f:
                data = f.read()
            info.mode = 0o755 if os.access(path, os.X_OK) else 0o644
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    # mtime=0 and no file name: the gzip header says nothing of this run.
    # Level 6 (gzip's own default): on the 50 MB amd64 binary 1.9 s of CPU
    # for 13.58 MB, where level 9 took 6.5 s for 13.47 MB (0.8 % smaller);
    # a test run makes four releases, two plugin archives each (and the
    # small kustomize one).
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=0, filename="",
                       compresslevel=6) as z:
        z.write(raw.getvalue())
    tmp = f"{out}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(packed.getvalue())
    os.replace(tmp, out)


def cmd_tgz(out, epoch, src, *named):
    entries = []
    if named:
        for item in named:
            name, _, path = item.partition("=")
            if not os.path.isfile(path):
                die(f"no file {path} to put in {out} as {name}")
            entries.append((name, path))
    else:
        top = os.path.basename(os.path.normpath(src))
        for root, dirs, files in os.walk(src):
            rel = os.path.relpath(root, os.path.dirname(os.path.normpath(src)))
            entries.append((rel if rel != "." else top, None))
            for f in files:
                entries.append((f"{rel}/{f}", os.path.join(root, f)))
    tgz(out, int(epoch), entries)


def cmd_pin_chart(values, digest):
    text = open(values).read()
    # The `digest: ""` line inside the top-level `image:` block.
    pattern = re.compile(r'(^image:\n(?:[ #].*\n|\n)*?  digest: )""', re.M)
    new, n = pattern.subn(rf'\1"{digest}"', text, count=1)
    if n != 1:
        die(f"{values}: found no `digest: \"\"` under `image:` to pin "
            f"the image to {digest}")
    open(values, "w").write(new)


def cmd_pin_kustomize(path, image, digest):
    text = open(path).read()
    pattern = re.compile(
        rf"(^  - name: {re.escape(image)}\n)    newTag: \S+\n", re.M)
    new, n = pattern.subn(rf"\1    digest: {digest}\n", text, count=1)
    if n != 1:
        die(f"{path}: found no `images:` entry `- name: {image}` with a "
            f"newTag to replace by digest {digest}")
    open(path, "w").write(new)


def cmd_changelog(path, version):
    try:
        text = open(path).read()
    except OSError as e:
        die(f"cannot read {path}: {e}")
    m = re.search(rf"^## \[?{re.escape(version)}\]?(?:[ \t][^\n]*)?\n(.*?)(?=^## |\Z)",
                  text, re.M | re.S)
    if not m:
        die(f"{path} has no entry for {version}: add a `## {version}` "
            "section (what changed for someone who runs nodegate; the "
            "Unreleased section, renamed) before releasing it")
    if not re.search(r"\S", m.group(1)):
        die(f"{path}: the `## {version}` entry is empty: say what changed")


def cmd_sums(directory):
    lines = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if name == "SHA256SUMS" or not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            lines.append(f"{hashlib.sha256(f.read()).hexdigest()}  {name}\n")
    with open(os.path.join(directory, "SHA256SUMS"), "w") as f:
        f.writelines(lines)


COMMANDS = {
    "binary": (cmd_binary, 2, 2),
    "rootfs": (cmd_rootfs, 2, 2),
    "tgz": (cmd_tgz, 3, None),
    "pin-chart": (cmd_pin_chart, 2, 2),
    "pin-kustomize": (cmd_pin_kustomize, 3, 3),
    "changelog": (cmd_changelog, 2, 2),
    "sums": (cmd_sums, 1, 1),
}


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        die(f"usage: {__doc__}")
    fn, least, most = COMMANDS[sys.argv[1]]
    args = sys.argv[2:]
    if len(args) < least or (most is not None and len(args) > most):
        die(f"release.py {sys.argv[1]}: wrong number of arguments {args}")
    fn(*args)


if __name__ == "__main__":
    main()
