#!/usr/bin/env python3
"""Writes an OCI image layout tar of one uncompressed layer: oci-image.py ROOTFS REF TAR CONFIG-JSON.

ROOTFS is a directory (its files owned by root in the image, mtimes zeroed);
REF the name containerd imports it as (`ctr images import`); CONFIG-JSON the
image config's "config" object (Entrypoint, Env, ...)."""
import hashlib, io, json, os, sys, tarfile
rootfs, ref, out, config = sys.argv[1:5]

def norm(ti):
    if os.path.basename(ti.name) == ".complete":
        return None
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    ti.mtime = 0
    return ti

def blob(data):
    return "sha256:" + hashlib.sha256(data).hexdigest(), data

buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
    for name in sorted(os.listdir(rootfs)):
        t.add(os.path.join(rootfs, name), arcname=name, filter=norm)
layer = blob(buf.getvalue())
cfg = {"architecture": "amd64", "os": "linux", "config": json.loads(config),
       "rootfs": {"type": "layers", "diff_ids": [layer[0]]},
       "history": [{"created_by": "burrow scripts/k8s/build.sh"}]}
cfg = blob(json.dumps(cfg, sort_keys=True).encode())
manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": cfg[0], "size": len(cfg[1])},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer[0], "size": len(layer[1])}]}
manifest = blob(json.dumps(manifest, sort_keys=True).encode())
index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                        "digest": manifest[0], "size": len(manifest[1]),
                        "platform": {"architecture": "amd64", "os": "linux"},
                        "annotations": {"io.containerd.image.name": ref,
                                        "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]}}]}
files = [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'),
         ("index.json", json.dumps(index, sort_keys=True).encode())]
files += [("blobs/sha256/" + d[len("sha256:"):], data) for d, data in (layer, cfg, manifest)]
with tarfile.open(out + ".tmp", mode="w", format=tarfile.PAX_FORMAT) as t:
    for d in ("blobs", "blobs/sha256"):
        ti = tarfile.TarInfo(d); ti.type = tarfile.DIRTYPE; ti.mode = 0o755
        t.addfile(ti)
    for name, data in files:
        ti = tarfile.TarInfo(name); ti.size = len(data); ti.mode = 0o644
        t.addfile(ti, io.BytesIO(data))
os.rename(out + ".tmp", out)
