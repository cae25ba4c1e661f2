#!/usr/bin/env python3
"""Assembles nodegate's container image as an OCI image-layout tar, with no
container engine: called by deploy/image/build (read that first).

A hand-written OCI writer (tarfile + hashlib + json from the standard
library; no umoci/skopeo): the format is small, and writing every byte here
is what makes the output reproducible — sorted entries, one fixed mtime,
uid/gid 0, no user/group names, canonical JSON, uncompressed layers (gzip
output depends on the zlib build; a plain tar's digest depends only on its
bytes).

Two layers:
  1. the runtime: the dynamic loader and the shared libraries the binary
     needs (its ELF NEEDED closure, taken from the Debian packages), the CA
     bundle built from ca-certificates as update-ca-certificates builds it,
     /etc/passwd, /etc/group and /etc/nsswitch.conf, /tmp, /home/nonroot,
     the packages' copyright files and their control records under
     /var/lib/dpkg/status.d (where image scanners look for them);
  2. the binary, /usr/local/bin/nodegate.
"""

import argparse
import datetime
import fcntl
import hashlib
import io
import json
import os
import posixpath
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile

BINARY_PATH = "usr/local/bin/nodegate"
USER = "65532:65532"
NONROOT = 65532
LABEL_PREFIX = "org.opencontainers.image."
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
INDEX_TYPE = "application/vnd.oci.image.index.v1+json"

# Debian architecture -> (OCI architecture, ELF e_machine, multiarch triplet).
ARCHES = {
    "amd64": ("amd64", 62, "x86_64-linux-gnu"),
    "arm64": ("arm64", 183, "aarch64-linux-gnu"),
}

PASSWD = (
    "root:x:0:0:root:/root:/sbin/nologin\n"
    "nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
)
GROUP = "root:x:0:\nnonroot:x:65532:\n"
# glibc's defaults without this file put DNS before /etc/hosts.
NSSWITCH = "passwd: files\ngroup: files\nhosts: files dns\n"


def log(msg):
    print(f"[deploy/image] {msg}", file=sys.stderr)


def die(msg):
    print(f"[deploy/image] error: {msg}", file=sys.stderr)
    sys.exit(1)


def run(cmd, what):
    try:
        out = subprocess.run(cmd, capture_output=True, check=False)
    except FileNotFoundError:
        die(f"'{cmd[0]}' is not available ({what}); deploy/image/build "
            "needs a Debian or Ubuntu machine (apt-get, apt-cache, dpkg-deb)")
    if out.returncode != 0:
        die(f"{' '.join(cmd)} failed ({what}): "
            f"{out.stderr.decode(errors='replace').strip()}")
    return out.stdout


# --- Debian packages -------------------------------------------------------

# apt options for another architecture than the machine's: package lists,
# caches and an empty dpkg status of their own (under --apt-dir), so that
# the machine's dpkg and apt state stay as they are. Empty for the
# machine's own architecture (apt as configured).
APT_OPTIONS = []

# apt's binary cache of the package lists for `apt-cache show`, kept under
# --apt-dir (set by main). Debian's container images turn apt's own off, and
# without one every call parses every list again: 0.9 s of CPU a call
# against 0.3 s with it (measured on this project's lab machine; an image is
# built some 17 times over a test run, two calls each). apt checks the cache
# against the lists and the dpkg status it was built from and builds it
# again when they changed, and writes it through a temporary file and a
# rename, so concurrent builds never read half a cache. The source-only
# half (srcpkgcache) is not kept: 37 MB more for a quicker rebuild after a
# dpkg change.
APT_CACHE = []


def foreign_apt(arch, apt_dir):
    """Sets APT_OPTIONS for `arch` and fetches its package lists (the
    machine's sources, that architecture only) when they are missing or
    older than a day."""
    lists = os.path.join(apt_dir, "lists")
    os.makedirs(os.path.join(lists, "partial"), exist_ok=True)
    os.makedirs(os.path.join(apt_dir, "cache", "archives", "partial"),
                exist_ok=True)
    status = os.path.join(apt_dir, "status")
    if not os.path.exists(status):
        # "a": another build creating it at the same moment keeps its mtime
        # (apt would take a changed one as a reason to rebuild its cache).
        open(status, "a").close()
    APT_OPTIONS[:] = [
        "-o", f"APT::Architecture={arch}",
        "-o", f"APT::Architectures={arch}",
        "-o", f"Dir::State::Lists={lists}",
        "-o", f"Dir::State::status={status}",
        "-o", f"Dir::Cache={os.path.join(apt_dir, 'cache')}",
    ]
    if os.geteuid() == 0:
        APT_OPTIONS[:0] = ["-o", "APT::Sandbox::User=root"]
    stamp = os.path.join(apt_dir, "updated")

    def listed():
        return any("_Packages" in f for f in os.listdir(lists))

    def fresh():
        return listed() and os.path.exists(stamp) and \
            os.path.getmtime(stamp) > datetime.datetime.now().timestamp() - 86400

    if fresh():
        return
    # One update at a time: apt locks the lists directory, so a second
    # build updating at once (the test suite builds images side by side)
    # would fail with "Unable to lock directory". The second waits for the
    # first here and then finds the lists fresh (or, if the first failed,
    # updates them itself). The lock file stays: removing it could let a
    # third build lock a new file while the old one is held.
    with open(os.path.join(apt_dir, "update.lock"), "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another build's apt-get update for {arch}")
            fcntl.flock(lock, fcntl.LOCK_EX)
        if fresh():
            return
        log(f"apt-get update for {arch} (lists in {lists})")
        run(["apt-get", *APT_OPTIONS, "-q", "update"],
            f"fetching the package lists of {arch} into {lists}")
        if not listed():
            die(f"apt-get update for {arch} fetched no package list into {lists}: "
                f"do the machine's apt sources (/etc/apt) serve {arch}?")
        open(stamp, "w").close()


def candidates(names):
    """For each package in `names`: the version apt would install now, the
    .deb file name it has and its SHA256. One apt-cache call for all, on
    apt's binary cache (APT_CACHE)."""
    out = run(["apt-cache", *APT_OPTIONS, *APT_CACHE, "show", "--no-all-versions", *names],
              f"looking up packages {', '.join(names)}").decode()
    records = {}
    for record in out.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in record.splitlines()
            if ": " in line and not line.startswith(" "))
        name = fields.get("Package")
        if name in names and name not in records:
            records[name] = fields
    found = {}
    for name in names:
        fields = records.get(name, {})
        if "Version" not in fields or "Filename" not in fields:
            die(f"apt knows no installable version of {name}: "
                "run 'apt-get update' (or check /etc/apt/sources.list)")
        if "SHA256" not in fields:
            die(f"apt gives no SHA256 for {name} {fields['Version']}: the .deb "
                "could not be checked; run 'apt-get update' against a signed "
                "Debian mirror")
        found[name] = (fields["Version"], posixpath.basename(fields["Filename"]),
                       fields["SHA256"].strip().lower())
    return found


def sha256_of(path):
    """The SHA256 of the file at path, as lowercase hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch_all(names, cache):
    """fetch() of each package in `names`, looked up together."""
    found = candidates(names)
    return [fetch(name, cache, *found[name]) for name in names]


def fetch(name, cache, version, filename, sha256):
    """The package's .deb in the cache, downloaded once per version, and
    only ever used when its SHA256 is the one apt's (signed) package index
    gives: a cached file that differs is downloaded again, a download that
    differs stops the build."""
    path = os.path.join(cache, filename)
    if os.path.exists(path) and sha256_of(path) != sha256:
        log(f"{path}: not the SHA256 apt gives for {name} {version}; "
            "downloading it again")
        os.remove(path)
    if not os.path.exists(path):
        log(f"downloading {name} {version}")
        # A directory of its own: two builds may download at once.
        tmp = tempfile.mkdtemp(prefix=".download.", dir=cache)
        cmd = ["apt-get", *APT_OPTIONS, "download", "-q", f"{name}={version}"]
        if os.geteuid() == 0 and not APT_OPTIONS:
            # apt drops to _apt for downloads, which cannot write here.
            cmd[1:1] = ["-o", "APT::Sandbox::User=root"]
        try:
            subprocess.run(cmd, cwd=tmp, check=True,
                           stdout=subprocess.DEVNULL)
            # apt-get names the file itself (an epoch becomes %3a).
            got = [f for f in os.listdir(tmp) if f.endswith(".deb")]
            if len(got) != 1:
                raise OSError(f"expected one .deb, got {got}")
            fetched = os.path.join(tmp, got[0])
            actual = sha256_of(fetched)
            if actual != sha256:
                die(f"apt-get download {name}={version}: SHA256 {actual}, "
                    f"but apt's package index says {sha256}; not used "
                    "(a mirror or proxy changed the file?)")
            os.replace(fetched, path)
        except (OSError, subprocess.CalledProcessError) as e:
            die(f"apt-get download {name}={version} failed ({e}): "
                "deploy/image/build needs apt-get and a reachable Debian "
                "mirror the first time (the .deb is cached afterwards)")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Package(name, version, path)


class Package:
    """One .deb: its control fields and the members of its data tar."""

    def __init__(self, name, version, path):
        self.name, self.version, self.path = name, version, path
        self.control = run(["dpkg-deb", "-f", path],
                           f"reading the control fields of {path}")
        data = run(["dpkg-deb", "--fsys-tarfile", path],
                   f"reading the files of {path}")
        self.members = {}
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for m in tar.getmembers():
                name = posixpath.normpath(m.name).lstrip("./")
                if not name or name == ".":
                    continue
                content = tar.extractfile(m).read() if m.isfile() else None
                self.members[name] = (m, content)

    def doc_link(self):
        """The package whose doc directory this one's links to, if any
        (libgcc-s1's copyright is gcc-N-base's)."""
        m = self.members.get(f"usr/share/doc/{self.name}")
        if m and m[0].issym() and "/" not in m[0].linkname:
            return m[0].linkname
        return None


# --- ELF: the interpreter and NEEDED of a binary -----------------------------

def elf_deps(data, what):
    """(interpreter path or None, [NEEDED names], e_machine) of an ELF64
    little-endian file."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        die(f"{what} is not a 64-bit little-endian ELF file")
    (e_machine,) = struct.unpack_from("<H", data, 18)
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 32)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from(
        "<HHHH", data, 54)
    interp = None
    for i in range(e_phnum):
        p_type, _, p_offset, _, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, e_phoff + i * e_phentsize)
        if p_type == 3:  # PT_INTERP
            interp = data[p_offset:p_offset + p_filesz].rstrip(b"\0").decode()
    sections = [struct.unpack_from("<IIQQQQII", data, e_shoff + i * e_shentsize)
                for i in range(e_shnum)]
    needed = []
    for _, sh_type, _, _, off, size, link, _ in sections:
        if sh_type != 6:  # SHT_DYNAMIC
            continue
        stroff = sections[link][4]
        for j in range(0, size, 16):
            tag, val = struct.unpack_from("<qQ", data, off + j)
            if tag == 0:
                break
            if tag == 1:  # DT_NEEDED
                end = data.index(b"\0", stroff + val)
                needed.append(data[stroff + val:end].decode())
    return interp, needed, e_machine


# --- The runtime's files ---------------------------------------------------

class Tree:
    """Files of one layer: path -> (kind, mode, uid, content or link)."""

    def __init__(self):
        self.entries = {}

    def add(self, path, kind, mode, data=None, owner=0):
        path = path.strip("/")
        parent = posixpath.dirname(path)
        while parent and parent not in self.entries:
            self.entries[parent] = ("dir", 0o755, 0, None)
            parent = posixpath.dirname(parent)
        self.entries[path] = (kind, mode, owner, data)

    def file(self, path, data, mode=0o644):
        self.add(path, "file", mode, data)


def resolve(files, path):
    """Follows symlinks within the packages' files; [path, ..., target]."""
    chain = [path]
    for _ in range(10):
        m = files.get(path)
        if m is None or not m[0].issym():
            return chain
        link = m[0].linkname
        path = posixpath.normpath(
            link.lstrip("/") if link.startswith("/")
            else posixpath.join(posixpath.dirname(path), link))
        chain.append(path)
    die(f"symlink loop at {chain[0]}")


def add_libraries(tree, packages, binary, triplet):
    """The loader and the NEEDED closure of the binary, as the packages ship
    them (symlinks kept); returns the library paths for the summary."""
    files = {}
    for p in packages:
        files.update(p.members)
    interp, needed, _ = elf_deps(binary, "the binary")
    if interp is None:
        die("the binary has no ELF interpreter (is it static?): "
            "deploy/image/build expects glibc's dynamic binary")
    todo, seen, libs = [interp.lstrip("/")], set(), []
    search = [f"lib/{triplet}", f"usr/lib/{triplet}", "lib", "usr/lib"]
    todo += [f"?{n}" for n in needed]
    while todo:
        item = todo.pop(0)
        if item.startswith("?"):
            name = item[1:]
            found = [f"{d}/{name}" for d in search if f"{d}/{name}" in files]
            if not found:
                die(f"the binary needs {name}, which none of the packages "
                    f"({', '.join(p.name for p in packages)}) ships: add the "
                    "package that has it to PACKAGES in deploy/image/build")
            item = found[0]
        if item in seen:
            continue
        seen.add(item)
        chain = resolve(files, item)
        for path in chain:
            m, content = files.get(path, (None, None))
            if m is None:
                die(f"{item} leads to {path}, which no package ships")
            if m.issym():
                tree.add(path, "link", 0o777, m.linkname)
            else:
                tree.file(path, content, 0o755 if m.mode & 0o111 else 0o644)
                libs.append("/" + path)
                _, deps, _ = elf_deps(content, path)
                todo += [f"?{n}" for n in deps]
    return sorted(set(libs))


def ca_bundle(package):
    """/etc/ssl/certs/ca-certificates.crt as update-ca-certificates writes
    it with the package's default configuration: every certificate under
    /usr/share/ca-certificates, in sorted order, each ending in a newline."""
    prefix = "usr/share/ca-certificates/"
    certs = sorted(p for p, (m, _) in package.members.items()
                   if p.startswith(prefix) and p.endswith(".crt") and m.isfile())
    if not certs:
        die(f"{package.path} has no certificates under /{prefix}")
    out = b""
    for p in certs:
        pem = package.members[p][1]
        out += pem if pem.endswith(b"\n") else pem + b"\n"
    return out, len(certs)


def runtime_tree(packages, binary, triplet):
    by_name = {p.name: p for p in packages}
    tree = Tree()
    libs = add_libraries(tree, packages, binary, triplet)
    bundle, count = ca_bundle(by_name["ca-certificates"])
    tree.file("etc/ssl/certs/ca-certificates.crt", bundle)
    tree.file("etc/passwd", PASSWD.encode())
    tree.file("etc/group", GROUP.encode())
    tree.file("etc/nsswitch.conf", NSSWITCH.encode())
    tree.add("tmp", "dir", 0o1777)
    tree.add("root", "dir", 0o700)
    tree.add("home/nonroot", "dir", 0o700, owner=NONROOT)
    for p in packages:
        doc = f"usr/share/doc/{p.name}"
        link = p.doc_link()
        if link:
            tree.add(doc, "link", 0o777, link)
        elif f"{doc}/copyright" in p.members:
            tree.file(f"{doc}/copyright", p.members[f"{doc}/copyright"][1])
        else:
            die(f"{p.path} has no /{doc}/copyright")
        tree.file(f"var/lib/dpkg/status.d/{p.name}", p.control)
    return tree, libs, count


def binary_tree(binary):
    tree = Tree()
    tree.file(BINARY_PATH, binary, 0o755)
    return tree


# --- Writing: tars and the OCI layout ---------------------------------------

def tar_bytes(entries, epoch):
    """A tar of (path, kind, mode, uid, data) in path order (parents first),
    every entry with the same mtime and no user or group names."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, kind, mode, owner, data in sorted(
                entries, key=lambda e: e[0].split("/")):
            info = tarfile.TarInfo(path)
            info.mode, info.uid, info.gid = mode, owner, owner
            info.uname = info.gname = ""
            info.mtime = epoch
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "link":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def layer(tree, epoch):
    return tar_bytes([(p, *e) for p, e in tree.entries.items()], epoch)


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def blob(blobs, data, media_type, **extra):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs[digest] = data
    return {"mediaType": media_type, "digest": digest, "size": len(data), **extra}


def image_config(args, arch, layers, packages, epoch):
    created = time_rfc3339(epoch)
    labels = dict(kv.split("=", 1) for kv in args.label)
    listed = " ".join(f"{p.name}={p.version}" for p in packages)
    return {
        "architecture": arch,
        "os": "linux",
        "created": created,
        "config": {
            "User": USER,
            "Entrypoint": ["/" + BINARY_PATH],
            "Cmd": ["run"],
            "Env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt",
            ],
            "WorkingDir": "/home/nonroot",
            "Labels": labels,
        },
        "rootfs": {
            "type": "layers",
            "diff_ids": ["sha256:" + hashlib.sha256(l).hexdigest() for l in layers],
        },
        "history": [
            {"created": created,
             "created_by": f"deploy/image/build: runtime from Debian packages {listed}"},
            {"created": created,
             "created_by": "deploy/image/build: the nodegate binary at /" + BINARY_PATH},
        ],
    }


def time_rfc3339(epoch):
    t = datetime.datetime.fromtimestamp(epoch, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def tag_of(ref):
    name = ref.rsplit("/", 1)[-1]
    if "@" in ref or ":" not in name:
        die(f"--image {ref} needs a tag (name:tag) and no digest")
    return name.rsplit(":", 1)[1]


def write_layout(path, args, arch, layers, config):
    blobs = {}
    layer_descs = [blob(blobs, l, LAYER_TYPE) for l in layers]
    config_desc = blob(blobs, canonical(config), CONFIG_TYPE)
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": config_desc,
        "layers": layer_descs,
        "annotations": {k: v for k, v in config["config"]["Labels"].items()
                        if k.startswith(LABEL_PREFIX)},
    }
    manifest_desc = blob(
        blobs, canonical(manifest), MANIFEST_TYPE,
        platform={"architecture": arch, "os": "linux"},
        annotations={
            # ctr import names the image by the first; the OCI layout's own
            # annotation carries the tag (as containerd's export writes it).
            "io.containerd.image.name": args.image,
            "org.opencontainers.image.ref.name": tag_of(args.image),
        })
    index = {"schemaVersion": 2, "mediaType": INDEX_TYPE,
             "manifests": [manifest_desc]}
    entries = [("blobs", "dir", 0o755, 0, None),
               ("blobs/sha256", "dir", 0o755, 0, None),
               ("oci-layout", "file", 0o644, 0,
                canonical({"imageLayoutVersion": "1.0.0"})),
               ("index.json", "file", 0o644, 0, canonical(index))]
    for digest, data in blobs.items():
        entries.append((f"blobs/sha256/{digest.split(':', 1)[1]}",
                        "file", 0o644, 0, data))
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(tar_bytes(entries, args.epoch))
    os.replace(tmp, path)
    return manifest_desc["digest"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--image", required=True)
    ap.add_argument("--epoch", required=True, type=int)
    ap.add_argument("--cache", required=True, help="where .debs are kept")
    ap.add_argument("--packages", required=True, help="comma-separated")
    ap.add_argument("--arch", help="Debian architecture (default: the machine's)")
    ap.add_argument("--apt-dir", help="apt state of its own for another --arch; "
                    "apt's binary cache of the package lists for any")
    ap.add_argument("--label", action="append", default=[], help="KEY=VALUE")
    args = ap.parse_args()
    tag_of(args.image)
    deb_arch = run(["dpkg", "--print-architecture"],
                   "the Debian architecture").decode().strip()
    if args.arch and args.arch != deb_arch:
        if not args.apt_dir:
            die(f"--arch {args.arch} (not this machine's {deb_arch}) needs --apt-dir")
        deb_arch = args.arch
        if deb_arch in ARCHES:
            foreign_apt(deb_arch, args.apt_dir)
    if deb_arch not in ARCHES:
        die(f"architecture {deb_arch} is not supported (only {', '.join(ARCHES)})")
    if args.apt_dir:
        os.makedirs(args.apt_dir, exist_ok=True)
        APT_CACHE[:] = [
            "-o", f"Dir::Cache::pkgcache={os.path.join(os.path.abspath(args.apt_dir), 'pkgcache.bin')}",
            "-o", "Dir::Cache::srcpkgcache=",
        ]
    arch, machine, triplet = ARCHES[deb_arch]
    with open(args.binary, "rb") as f:
        binary = f.read()
    if elf_deps(binary, args.binary)[2] != machine:
        die(f"{args.binary} is not a {deb_arch} binary")
    os.makedirs(args.cache, exist_ok=True)
    packages = fetch_all(args.packages.split(","), args.cache)
    links = []
    for p in packages:
        link = p.doc_link()
        if link and link not in {q.name for q in packages} and link not in links:
            links.append(link)
    if links:
        packages.extend(fetch_all(links, args.cache))
    runtime, libs, certs = runtime_tree(packages, binary, triplet)
    layers = [layer(runtime, args.epoch), layer(binary_tree(binary), args.epoch)]
    config = image_config(args, arch, layers, packages, args.epoch)
    digest = write_layout(args.out, args, arch, layers, config)
    size = os.path.getsize(args.out)
    labels = config["config"]["Labels"]
    revision = labels.get(LABEL_PREFIX + "revision", "?")
    names = " ".join(posixpath.basename(l) for l in libs)
    log(f"{args.image} (linux/{arch}), {size / 1e6:.1f} MB")
    log(f"  digest    {digest}")
    log(f"  revision  {revision}")
    log(f"  runtime   {names}; {certs} CA certificates; user {USER}")
    log(f"  packages  {', '.join(f'{p.name} {p.version}' for p in packages)}")
    print(digest)


if __name__ == "__main__":
    main()
