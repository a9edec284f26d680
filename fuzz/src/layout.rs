//! Structured OCI image layouts: real blobs under their real digests (so
//! the fuzzer gets past digest verification), with choices for every
//! media type, nesting of indexes, platforms, tags, `diff_ids`, and one
//! corruption at a time (sizes, digests, missing or replaced blobs,
//! broken `oci-layout` and `index.json`).

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use arbitrary::{Arbitrary, Unstructured};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::dna::{byte, pick, Dna, Encode};
use crate::tarball::{decode_layer, Layer};

/// Layer media types to pick from.
pub const LAYER_MEDIA: &[&str] = &[
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.oci.image.layer.v1.tar+zstd",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
    "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip",
    "application/octet-stream",
];
/// Config media types to pick from.
pub const CONFIG_MEDIA: &[&str] = &[
    "application/vnd.oci.image.config.v1+json",
    "application/vnd.docker.container.image.v1+json",
    "",
    "application/octet-stream",
];
/// Manifest media types to pick from.
pub const MANIFEST_MEDIA: &[&str] = &[
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "",
    "application/vnd.oci.image.index.v1+json",
    "text/plain",
];
/// The tags an unpack asks for.
pub const TAGS: &[Option<&str>] = &[
    None,
    Some("latest"),
    Some("other"),
    Some("docker.io/library/x:latest"),
];

/// Choice counts, in decoding order.
const CONFIGS: usize = 5;
const DIFF_IDS: usize = 5;
const INNER: usize = 3;
const SCHEMAS: usize = 2;
const WRAPS: usize = 5;
const PLATFORMS: usize = 4;
const INDEX_JSON: usize = 6;
/// Number of corruptions (0 is none).
pub const CORRUPTIONS: usize = 14;

/// One image in a layout. Every field but `layers` is a choice index.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Image {
    /// Layers (at most 3) and their declared media types
    /// ([`LAYER_MEDIA`]).
    pub layers: Vec<(Layer, u8)>,
    /// Config blob: a full config, `"config": null`, not JSON, wrong
    /// field types, `{}`.
    pub config: u8,
    /// `diff_ids`: right, absent, one wrong, one too many, malformed.
    pub diff_ids: u8,
    /// Config media type ([`CONFIG_MEDIA`]).
    pub config_media: u8,
    /// Manifest media type in its descriptor ([`MANIFEST_MEDIA`]).
    pub manifest_media: u8,
    /// `mediaType` inside the manifest: the same, absent, another.
    pub inner_media: u8,
    /// `schemaVersion`: 2 or 1.
    pub schema: u8,
    /// Indexes around the manifest: none, an OCI index, a Docker list,
    /// two levels, six levels (deeper than burrow follows).
    pub wrap: u8,
    /// Platform in the indexes: the host's, arm64/v8, none, s390x.
    pub platform: u8,
    /// `index.json`: one entry, tagged `latest`, two tagged entries of the
    /// same digest, two untagged digests, no entry, a containerd name.
    pub index_json: u8,
    /// The tag asked for ([`TAGS`]).
    pub tag: u8,
    /// See [`CORRUPTIONS`] and [`Image::write`].
    pub corrupt: u8,
}

impl<'a> Arbitrary<'a> for Image {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let n = pick(u, 3);
        let layers = (0..n)
            .map(|_| {
                let l = decode_layer(u);
                (l, byte(u))
            })
            .collect();
        Ok(Image {
            layers,
            config: byte(u),
            diff_ids: byte(u),
            config_media: byte(u),
            manifest_media: byte(u),
            inner_media: byte(u),
            schema: byte(u),
            wrap: byte(u),
            platform: byte(u),
            index_json: byte(u),
            tag: byte(u),
            corrupt: byte(u),
        })
    }
}

impl Encode for Image {
    fn encode(&self, dna: &mut Dna) {
        assert!(self.layers.len() < 3, "at most 2 layers");
        dna.pick(self.layers.len());
        for (l, m) in &self.layers {
            l.encode(dna);
            dna.byte(*m);
        }
        for b in [
            self.config,
            self.diff_ids,
            self.config_media,
            self.manifest_media,
            self.inner_media,
            self.schema,
            self.wrap,
            self.platform,
            self.index_json,
            self.tag,
            self.corrupt,
        ] {
            dna.byte(b);
        }
    }
}

fn sha256(data: &[u8]) -> String {
    let d = Sha256::digest(data);
    let hex: String = d.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

fn choice<T: Copy>(list: &[T], i: u8) -> T {
    list[usize::from(i) % list.len()]
}

struct Blobs<'p> {
    dir: &'p Path,
}

impl Blobs<'_> {
    fn put(&self, data: &[u8]) -> (String, u64) {
        let digest = sha256(data);
        let path = self.path(&digest);
        // Never through a symlink a corruption put there (two blobs can
        // have the same content).
        crate::arena::remove_tree(&path).expect("replacing a blob");
        fs::write(path, data).expect("writing a blob");
        (digest, data.len() as u64)
    }

    fn path(&self, digest: &str) -> std::path::PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
        self.dir.join("blobs/sha256").join(hex)
    }
}

fn descriptor(media: &str, digest: &str, size: u64) -> Value {
    let mut d = json!({ "digest": digest, "size": size });
    if !media.is_empty() {
        d["mediaType"] = json!(media);
    }
    d
}

impl Image {
    /// The tag the unpack asks for.
    pub fn tag(&self) -> Option<&'static str> {
        choice(TAGS, self.tag)
    }

    /// Writes the layout into the new directory `dir`; `sentinel` is what
    /// [`crate::tarball::Token::Sentinel`] renders as.
    pub fn write(&self, dir: &Path, sentinel: &[u8]) {
        fs::create_dir_all(dir.join("blobs/sha256")).expect("creating a layout");
        let blobs = Blobs { dir };
        let corrupt = usize::from(self.corrupt) % CORRUPTIONS;

        let mut layer_descs = Vec::new();
        let mut diff_ids = Vec::new();
        for (i, (layer, media)) in self.layers.iter().enumerate() {
            let tar = layer.tar(sentinel);
            diff_ids.push(sha256(&tar));
            let blob = layer.render(sentinel);
            let (mut digest, mut size) = blobs.put(&blob);
            if i == 0 {
                match corrupt {
                    1 => size += 1,
                    2 => size = size.saturating_sub(1),
                    5 => fs::remove_file(blobs.path(&digest)).expect("removing a blob"),
                    6 => fs::write(blobs.path(&digest), vec![0u8; blob.len()]).expect("blob"),
                    7 => digest = format!("sha256:{}", "z".repeat(64)),
                    8 => digest = format!("sha512:{}", "0".repeat(128)),
                    12 => {
                        let p = blobs.path(&digest);
                        fs::remove_file(&p).expect("removing a blob");
                        let target = Path::new(std::ffi::OsStr::from_bytes(sentinel)).join("keep");
                        std::os::unix::fs::symlink(target, &p).expect("blob symlink");
                    }
                    13 => {
                        let p = blobs.path(&digest);
                        fs::remove_file(&p).expect("removing a blob");
                        fs::create_dir(&p).expect("blob directory");
                    }
                    _ => {}
                }
            }
            layer_descs.push(descriptor(choice(LAYER_MEDIA, *media), &digest, size));
        }

        let diff_ids: Value = match usize::from(self.diff_ids) % DIFF_IDS {
            0 => json!(diff_ids),
            1 => Value::Null,
            2 => {
                let mut d = diff_ids;
                if let Some(first) = d.first_mut() {
                    *first = sha256(b"something else");
                }
                json!(d)
            }
            3 => {
                let mut d = diff_ids;
                d.push(sha256(b"one more"));
                json!(d)
            }
            _ => json!(["sha256:short"]),
        };
        let rootfs = if diff_ids.is_null() {
            Value::Null
        } else {
            json!({ "type": "layers", "diff_ids": diff_ids })
        };
        let config: Vec<u8> = match usize::from(self.config) % CONFIGS {
            0 => serde_json::to_vec(&json!({
                "architecture": "amd64",
                "os": "linux",
                "config": {
                    "Env": ["PATH=/bin", "A=1"],
                    "Cmd": ["sh"],
                    "WorkingDir": "/a",
                    "User": "1000:1000",
                },
                "rootfs": rootfs,
            }))
            .expect("json"),
            1 => serde_json::to_vec(&json!({ "config": null, "rootfs": rootfs })).expect("json"),
            2 => b"[".to_vec(),
            3 => serde_json::to_vec(&json!({ "config": { "Env": "A=1" }, "rootfs": rootfs }))
                .expect("json"),
            _ => b"{}".to_vec(),
        };
        let (mut config_digest, config_size) = blobs.put(&config);
        if corrupt == 4 {
            if let Some(d) = layer_descs.first() {
                config_digest = d["digest"].as_str().unwrap_or_default().to_owned();
            }
        }

        let declared = choice(MANIFEST_MEDIA, self.manifest_media);
        let mut manifest = json!({
            "schemaVersion": if usize::from(self.schema) % SCHEMAS == 0 { 2 } else { 1 },
            "config": descriptor(choice(CONFIG_MEDIA, self.config_media), &config_digest, config_size),
            "layers": layer_descs,
        });
        match usize::from(self.inner_media) % INNER {
            0 if !declared.is_empty() => manifest["mediaType"] = json!(declared),
            2 => manifest["mediaType"] = json!("application/vnd.oci.image.manifest.v1+json"),
            _ => {}
        }
        let (digest, size) = blobs.put(&serde_json::to_vec(&manifest).expect("json"));
        let mut top = descriptor(declared, &digest, size);

        let platform = match usize::from(self.platform) % PLATFORMS {
            0 => Some(json!({ "architecture": "amd64", "os": "linux" })),
            1 => Some(json!({ "architecture": "arm64", "os": "linux", "variant": "v8" })),
            2 => None,
            _ => Some(json!({ "architecture": "s390x", "os": "linux" })),
        };
        let levels = match usize::from(self.wrap) % WRAPS {
            0 => 0,
            1 | 2 => 1,
            3 => 2,
            _ => 6,
        };
        let list_media = if usize::from(self.wrap) % WRAPS == 2 {
            "application/vnd.docker.distribution.manifest.list.v2+json"
        } else {
            "application/vnd.oci.image.index.v1+json"
        };
        for _ in 0..levels {
            let mut entry = top.clone();
            if let Some(p) = &platform {
                entry["platform"] = p.clone();
            }
            let mut other = top.clone();
            other["platform"] = json!({ "architecture": "riscv64", "os": "linux" });
            let index = json!({
                "schemaVersion": 2,
                "mediaType": list_media,
                "manifests": [other, entry],
            });
            let (d, s) = blobs.put(&serde_json::to_vec(&index).expect("json"));
            top = descriptor(list_media, &d, s);
        }
        if corrupt == 3 {
            let s = top["size"].as_u64().unwrap_or(0);
            top["size"] = json!(s + 1);
        }

        let tagged = |tag: &str, key: &str| {
            let mut d = top.clone();
            d["annotations"] = json!({ key: tag });
            if let Some(p) = &platform {
                d["platform"] = p.clone();
            }
            d
        };
        const REF: &str = "org.opencontainers.image.ref.name";
        let manifests = match usize::from(self.index_json) % INDEX_JSON {
            0 => vec![top.clone()],
            1 => vec![tagged("latest", REF)],
            2 => vec![tagged("latest", REF), tagged("other", REF)],
            3 => vec![top.clone(), descriptor(declared, &sha256(b"missing"), 7)],
            4 => vec![],
            _ => vec![tagged(
                "docker.io/library/x:latest",
                "io.containerd.image.name",
            )],
        };
        let index = json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": manifests,
        });
        let index: Vec<u8> = if corrupt == 11 {
            b"{\"manifests\": 7}".to_vec()
        } else {
            serde_json::to_vec(&index).expect("json")
        };
        fs::write(dir.join("index.json"), index).expect("index.json");
        let layout: &[u8] = match corrupt {
            9 => br#"{"imageLayoutVersion":"2.0.0"}"#,
            10 => b"not json",
            _ => br#"{"imageLayoutVersion":"1.0.0"}"#,
        };
        fs::write(dir.join("oci-layout"), layout).expect("oci-layout");
    }
}
