#!/usr/bin/env python3
"""Joins single-platform OCI image-layout tars (as deploy/image/build writes
them, one per architecture) into one multi-platform image: an OCI image
index listing each platform's manifest, written as an OCI image-layout tar
whose index.json names that image index. Called by deploy/release.

Reproducible like the single-platform archives: the blobs are copied byte
for byte, the image index is canonical JSON with its manifests in the order
given, and the tar is written with sorted entries and one mtime. Prints the
image index's digest on stdout.

  index.py --out PATH --image REF --epoch N ARCHIVE...
"""

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile

INDEX_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def die(msg):
    print(f"[deploy/image] error: {msg}", file=sys.stderr)
    sys.exit(1)


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def read_layout(path):
    """(the one manifest descriptor of index.json, {digest: bytes})."""
    try:
        tar = tarfile.open(path)
    except (OSError, tarfile.TarError) as e:
        die(f"cannot read {path} as a tar archive: {e}")
    with tar:
        files = {m.name: tar.extractfile(m).read()
                 for m in tar.getmembers() if m.isfile()}
    if "index.json" not in files:
        die(f"{path} is not an OCI image layout (no index.json)")
    index = json.loads(files["index.json"])
    manifests = index.get("manifests", [])
    if len(manifests) != 1 or manifests[0].get("mediaType") != MANIFEST_TYPE:
        die(f"{path} must hold exactly one image manifest (it holds "
            f"{len(manifests)} entries)")
    blobs = {}
    for name, data in files.items():
        if name.startswith("blobs/sha256/"):
            digest = "sha256:" + name.rsplit("/", 1)[1]
            if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
                die(f"{path}: blob {name} does not match its digest")
            blobs[digest] = data
    desc = manifests[0]
    if desc["digest"] not in blobs:
        die(f"{path}: the manifest {desc['digest']} is not among its blobs")
    if not desc.get("platform"):
        die(f"{path}: the manifest's descriptor names no platform")
    return desc, blobs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--image", required=True, help="name:tag of the index")
    ap.add_argument("--epoch", required=True, type=int)
    ap.add_argument("archives", nargs="+")
    args = ap.parse_args()
    name = args.image.rsplit("/", 1)[-1]
    if "@" in args.image or ":" not in name:
        die(f"--image {args.image} needs a tag (name:tag) and no digest")
    tag = name.rsplit(":", 1)[1]

    blobs, manifests, platforms = {}, [], set()
    for path in args.archives:
        desc, more = read_layout(path)
        platform = desc["platform"]
        key = (platform.get("os"), platform.get("architecture"))
        if key in platforms:
            die(f"{path}: a second image for {key[0]}/{key[1]}")
        platforms.add(key)
        blobs.update(more)
        # The image index lists the manifest, its platform and nothing of
        # the single-platform archive's names.
        manifests.append({k: desc[k] for k in
                          ("mediaType", "digest", "size", "platform")})
    index = canonical({"schemaVersion": 2, "mediaType": INDEX_TYPE,
                       "manifests": manifests})
    digest = "sha256:" + hashlib.sha256(index).hexdigest()
    blobs[digest] = index
    top = {"schemaVersion": 2, "mediaType": INDEX_TYPE, "manifests": [{
        "mediaType": INDEX_TYPE, "digest": digest, "size": len(index),
        "annotations": {
            "io.containerd.image.name": args.image,
            "org.opencontainers.image.ref.name": tag,
        }}]}

    entries = [("blobs", None), ("blobs/sha256", None),
               ("index.json", canonical(top)),
               ("oci-layout", canonical({"imageLayoutVersion": "1.0.0"}))]
    entries += [(f"blobs/sha256/{d.split(':', 1)[1]}", data)
                for d, data in sorted(blobs.items())]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, data in entries:
            info = tarfile.TarInfo(path)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = args.epoch
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.mode, info.size = 0o644, len(data)
                tar.addfile(info, io.BytesIO(data))
    tmp = f"{args.out}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(buf.getvalue())
    os.replace(tmp, args.out)
    print(digest)


if __name__ == "__main__":
    main()
