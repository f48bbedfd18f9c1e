#!/usr/bin/env python3
"""Builds lathe's container images without a registry, a daemon or root: an OCI image (one
layer) assembled from the built binaries and exactly the shared libraries `ldd` names for
them, written as an OCI image layout packed in a tar file ("oci-archive"), which
`skopeo copy oci-archive:FILE docker://...`, `podman load -i FILE` or `docker load -i FILE`
(Docker 25 or later) take as it is.

    build-image.py --bin build/bin --image lathed|worker|worker-cuda --out FILE.tar
                   [--tag NAME:TAG] [--rootfs DIR]

  lathed       lathed; listens on 7070 (gRPC), 7071 (health, plain text), 9464 (metrics);
               database in the volume /var/lib/lathe; reads its token from /etc/lathe/token
  worker       lathe-worker and lathe-measure, CPU; spool in /var/lib/lathe-worker
  worker-cuda  the same with NVRTC's builtins, for NVIDIA's container runtime: the driver
               (libcuda.so) and the device nodes come from the host (NVIDIA_VISIBLE_DEVICES)

Every image runs as the unprivileged user 65532. --rootfs also leaves the unpacked root file
system in DIR. The archive is reproducible: the same binaries give the same digests.
deploy/container/Containerfile.* build the same images with a container engine.
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile

UID = 65532

IMAGES = {
    "lathed": {
        "binaries": ["lathed"],
        "entrypoint": ["/usr/local/bin/lathed"],
        "cmd": ["--listen", "0.0.0.0:7070", "--db", "/var/lib/lathe/tuning.db", "--health",
                "0.0.0.0:7071", "--metrics", "0.0.0.0:9464", "--token-file", "/etc/lathe/token"],
        "ports": ["7070/tcp", "7071/tcp", "9464/tcp"],
        "volume": "/var/lib/lathe",
        "env": [],
        "extra_libs": [],
        "title": "lathe tuner daemon",
    },
    "worker": {
        "binaries": ["lathe-worker", "lathe-measure"],
        "entrypoint": ["/usr/local/bin/lathe-worker"],
        "cmd": ["--device", "cpu"],
        "ports": [],
        "volume": "/var/lib/lathe-worker",
        "env": [],
        "extra_libs": [],
        "title": "lathe measurement worker (CPU)",
    },
    "worker-cuda": {
        "binaries": ["lathe-worker", "lathe-measure"],
        "entrypoint": ["/usr/local/bin/lathe-worker"],
        "cmd": ["--device", "cuda:0"],
        "ports": [],
        "volume": "/var/lib/lathe-worker",
        "env": ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"],
        # NVRTC loads its builtins with dlopen: ldd does not name them.
        "extra_libs": ["libnvrtc-builtins.so*"],
        "title": "lathe measurement worker (NVIDIA GPU)",
    },
}


def fail(msg):
    print(f"build-image: {msg}", file=sys.stderr)
    sys.exit(1)


def ldd(path):
    """The absolute paths of the shared libraries (and the loader) `path` needs."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"ldd {path}: {out.stderr.strip() or out.stdout.strip()}")
    libs = []
    for line in out.stdout.splitlines():
        if "not found" in line:
            fail(f"{path} needs a library that is not installed: {line.strip()}")
        m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)", line)
        if m:
            libs.append(m.group(1))
    return libs


def assemble(image, bin_dir, root):
    spec = IMAGES[image]
    files = {}  # path in the image -> path here
    for b in spec["binaries"]:
        src = os.path.join(bin_dir, b)
        if not os.access(src, os.X_OK):
            fail(f"{src} is missing: build it first (cmake --build build -j2)")
        files[f"/usr/local/bin/{b}"] = src
        for lib in ldd(src):
            files[lib] = lib
    for pattern in spec["extra_libs"]:
        dirs = {os.path.dirname(p) for p in files if "libnvrtc" in p}
        for d in sorted(dirs):
            for name in sorted(os.listdir(d)):
                if re.fullmatch(pattern.replace(".", r"\.").replace("*", ".*"), name):
                    files[os.path.join(d, name)] = os.path.join(d, name)
    for dst, src in sorted(files.items()):
        target = os.path.join(root, dst.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy2(os.path.realpath(src), target)
    etc = os.path.join(root, "etc")
    os.makedirs(etc, exist_ok=True)
    with open(os.path.join(etc, "passwd"), "w") as f:
        f.write(f"root:x:0:0:root:/root:/sbin/nologin\nlathe:x:{UID}:{UID}:lathe:"
                f"{spec['volume']}:/sbin/nologin\n")
    with open(os.path.join(etc, "group"), "w") as f:
        f.write(f"root:x:0:\nlathe:x:{UID}:\n")
    with open(os.path.join(etc, "nsswitch.conf"), "w") as f:
        f.write("passwd: files\ngroup: files\nhosts: files dns\n")
    for d in ["tmp", "proc", "dev", "sys", "etc/lathe", spec["volume"].lstrip("/")]:
        os.makedirs(os.path.join(root, d), exist_ok=True)
    return sorted(files)


def layer_tar(root):
    """A reproducible tar of `root`: sorted, mtime 0, owned by root except the state volume
    and /tmp."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        paths = []
        for d, dirs, names in os.walk(root):
            dirs.sort()
            for n in sorted(dirs + names):
                paths.append(os.path.join(d, n))
        for p in sorted(paths):
            rel = os.path.relpath(p, root)
            info = tar.gettarinfo(p, arcname=rel)
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isdir():
                info.mode = 0o755
            if rel == "tmp":
                info.mode = 0o1777
            if rel.startswith("var/lib/lathe"):
                info.uid = info.gid = UID
                if info.isdir():
                    info.mode = 0o700
            if info.isfile():
                with open(p, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buf.getvalue()


def blob(layout, data):
    digest = hashlib.sha256(data).hexdigest()
    path = os.path.join(layout, "blobs", "sha256", digest)
    with open(path, "wb") as f:
        f.write(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="directory of the built binaries (build/bin)")
    ap.add_argument("--image", required=True, choices=sorted(IMAGES))
    ap.add_argument("--out", required=True, help="the OCI archive to write (.tar)")
    ap.add_argument("--tag", help="reference name (default lathe/IMAGE:latest)")
    ap.add_argument("--rootfs", help="also leave the root file system here")
    args = ap.parse_args()
    spec = IMAGES[args.image]
    tag = args.tag or f"lathe/{args.image}:latest"

    work = tempfile.mkdtemp(prefix="lathe-image-")
    try:
        root = os.path.join(work, "rootfs")
        files = assemble(args.image, args.bin, root)
        raw = layer_tar(root)
        layer = gzip.compress(raw, compresslevel=6, mtime=0)
        layout = os.path.join(work, "layout")
        os.makedirs(os.path.join(layout, "blobs", "sha256"))
        layer_desc = blob(layout, layer)
        layer_desc["mediaType"] = "application/vnd.oci.image.layer.v1.tar+gzip"
        env = ["PATH=/usr/local/bin:/usr/bin:/bin", f"HOME={spec['volume']}"] + spec["env"]
        config = {
            "architecture": "amd64",
            "os": "linux",
            "config": {
                "User": f"{UID}:{UID}",
                "Entrypoint": spec["entrypoint"],
                "Cmd": spec["cmd"],
                "Env": env,
                "WorkingDir": spec["volume"],
                "ExposedPorts": {p: {} for p in spec["ports"]},
                "Volumes": {spec["volume"]: {}},
                "StopSignal": "SIGTERM",
                "Labels": {"org.opencontainers.image.title": spec["title"]},
            },
            "rootfs": {"type": "layers",
                       "diff_ids": [f"sha256:{hashlib.sha256(raw).hexdigest()}"]},
            "history": [{"created_by": f"deploy/image/build-image.py --image {args.image}"}],
        }
        config_desc = blob(layout, json.dumps(config, sort_keys=True).encode())
        config_desc["mediaType"] = "application/vnd.oci.image.config.v1+json"
        manifest = {"schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": config_desc, "layers": [layer_desc]}
        manifest_desc = blob(layout, json.dumps(manifest, sort_keys=True).encode())
        manifest_desc["mediaType"] = "application/vnd.oci.image.manifest.v1+json"
        manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": tag}
        with open(os.path.join(layout, "index.json"), "w") as f:
            json.dump({"schemaVersion": 2, "manifests": [manifest_desc]}, f, sort_keys=True)
        with open(os.path.join(layout, "oci-layout"), "w") as f:
            json.dump({"imageLayoutVersion": "1.0.0"}, f)
        with tarfile.open(args.out, "w") as tar:
            for name in ["oci-layout", "index.json", "blobs"]:
                tar.add(os.path.join(layout, name), arcname=name,
                        filter=lambda i: (setattr(i, "mtime", 0), i)[1])
        if args.rootfs:
            if os.path.exists(args.rootfs):
                shutil.rmtree(args.rootfs)
            shutil.move(root, args.rootfs)
        print(f"build-image: {args.out}: {tag}, {len(files)} files, layer "
              f"{len(layer) / 2**20:.1f} MiB compressed ({len(raw) / 2**20:.1f} MiB), "
              f"manifest {manifest_desc['digest']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
