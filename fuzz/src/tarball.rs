//! Structured tar archives: entries with hostile paths (`..`, absolute,
//! over-long, whiteouts, opaque markers), links pointing out, every header
//! flavour (old, ustar with a prefix, GNU long names, PAX records), and
//! broken endings, rendered to real tar bytes so the fuzzer gets past the
//! header checksum.

use std::io::Write;

use arbitrary::{Arbitrary, Unstructured};
use tar::{EntryType, Header};

use crate::dna::{byte, bytes, pick, Dna, Encode};

/// Path components the generator picks from.
pub const NAMES: &[&str] = &[
    "a",
    "b",
    "c",
    "d",
    ".wh.a",
    ".wh.b",
    ".wh.c",
    ".wh.d",
    ".wh..wh..opq",
    ".wh..wh.plnk",
    ".wh.",
    ".wh..",
    ".wh...",
    "sentinel",
    "keep",
    "root",
    "\u{fc}",
];

/// One path component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    /// [`NAMES`]`[i % len]`.
    Name(u8),
    /// `..`
    Up,
    /// `.`
    Dot,
    /// An empty component (`a//b`).
    Empty,
    /// The absolute path of the arena's sentinel directory (outside the
    /// root being unpacked).
    Sentinel,
    /// One raw byte (NUL, a non-UTF-8 byte, ...).
    Raw(u8),
    /// A component of `n + 50` bytes (past the 100-byte name field and the
    /// 255-byte component limit).
    Long(u8),
}

const TOKENS: usize = 7;

impl Token {
    fn decode(u: &mut Unstructured<'_>) -> Token {
        match pick(u, TOKENS) {
            0 => Token::Name(byte(u)),
            1 => Token::Up,
            2 => Token::Dot,
            3 => Token::Empty,
            4 => Token::Sentinel,
            5 => Token::Raw(byte(u)),
            _ => Token::Long(byte(u)),
        }
    }

    fn render(&self, sentinel: &[u8], out: &mut Vec<u8>) {
        match self {
            Token::Name(i) => {
                out.extend_from_slice(NAMES[usize::from(*i) % NAMES.len()].as_bytes())
            }
            Token::Up => out.extend_from_slice(b".."),
            Token::Dot => out.push(b'.'),
            Token::Empty => {}
            Token::Sentinel => out.extend_from_slice(sentinel),
            Token::Raw(b) => out.push(*b),
            Token::Long(n) => out.extend(std::iter::repeat_n(b'l', usize::from(*n) + 50)),
        }
    }
}

impl Encode for Token {
    fn encode(&self, dna: &mut Dna) {
        match self {
            Token::Name(i) => dna.pick(0).byte(*i),
            Token::Up => dna.pick(1),
            Token::Dot => dna.pick(2),
            Token::Empty => dna.pick(3),
            Token::Sentinel => dna.pick(4),
            Token::Raw(b) => dna.pick(5).byte(*b),
            Token::Long(n) => dna.pick(6).byte(*n),
        };
    }
}

/// An entry path or link target: components joined by `/`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TarPath {
    /// Starts with `/`.
    pub absolute: bool,
    /// Components (at most 4).
    pub tokens: Vec<Token>,
}

impl TarPath {
    /// A relative path of names from [`NAMES`].
    pub fn names(names: &[&str]) -> TarPath {
        TarPath {
            absolute: false,
            tokens: names.iter().map(|n| name_token(n)).collect(),
        }
    }

    /// Renders the path; [`Token::Sentinel`] becomes `sentinel`.
    pub fn render(&self, sentinel: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.absolute {
            out.push(b'/');
        }
        for (i, t) in self.tokens.iter().enumerate() {
            if i > 0 {
                out.push(b'/');
            }
            t.render(sentinel, &mut out);
        }
        out
    }

    fn decode(u: &mut Unstructured<'_>) -> TarPath {
        let b = byte(u);
        let n = usize::from(b >> 1) % 5;
        TarPath {
            absolute: b & 1 == 1,
            tokens: (0..n).map(|_| Token::decode(u)).collect(),
        }
    }
}

/// The token for `name`: a [`NAMES`] entry, `..`, `.`, the sentinel
/// (`@sentinel`) or a long name (`@long<n>`).
pub fn name_token(name: &str) -> Token {
    match name {
        ".." => Token::Up,
        "." => Token::Dot,
        "" => Token::Empty,
        "@sentinel" => Token::Sentinel,
        _ => {
            if let Some(n) = name.strip_prefix("@long") {
                return Token::Long(n.parse().expect("@long<n>"));
            }
            let i = NAMES
                .iter()
                .position(|n| *n == name)
                .unwrap_or_else(|| panic!("{name:?} is not in NAMES"));
            Token::Name(u8::try_from(i).expect("few names"))
        }
    }
}

impl Encode for TarPath {
    fn encode(&self, dna: &mut Dna) {
        assert!(self.tokens.len() < 5, "at most 4 components");
        let n = u8::try_from(self.tokens.len()).expect("few tokens");
        dna.byte((n << 1) | u8::from(self.absolute));
        for t in &self.tokens {
            t.encode(dna);
        }
    }
}

/// What an entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// A directory.
    Dir,
    /// A regular file with this content (at most 31 bytes).
    File(Vec<u8>),
    /// A symlink to this target.
    Symlink(TarPath),
    /// A hard link to this target.
    HardLink(TarPath),
    /// A fifo.
    Fifo,
    /// A character device.
    Char,
    /// A pre-POSIX directory: a regular file whose name ends with `/`.
    OldDir,
    /// Any other type flag (`g`, `x`, `L`, `S`, `V`, ...), with no data.
    Other(u8),
    /// A block device.
    Block,
}

const KINDS: usize = 9;

impl Kind {
    fn decode(u: &mut Unstructured<'_>) -> Kind {
        match pick(u, KINDS) {
            0 => Kind::Dir,
            1 => {
                let n = pick(u, 32);
                Kind::File(bytes(u, n))
            }
            2 => Kind::Symlink(TarPath::decode(u)),
            3 => Kind::HardLink(TarPath::decode(u)),
            4 => Kind::Fifo,
            5 => Kind::Char,
            6 => Kind::OldDir,
            7 => Kind::Other(byte(u)),
            _ => Kind::Block,
        }
    }
}

impl Encode for Kind {
    fn encode(&self, dna: &mut Dna) {
        match self {
            Kind::Dir => {
                dna.pick(0);
            }
            Kind::File(data) => {
                assert!(data.len() < 32, "at most 31 bytes of file content");
                dna.pick(1).pick(data.len()).bytes(data);
            }
            Kind::Symlink(t) => {
                dna.pick(2);
                t.encode(dna);
            }
            Kind::HardLink(t) => {
                dna.pick(3);
                t.encode(dna);
            }
            Kind::Fifo => {
                dna.pick(4);
            }
            Kind::Char => {
                dna.pick(5);
            }
            Kind::OldDir => {
                dna.pick(6);
            }
            Kind::Other(f) => {
                dna.pick(7).byte(*f);
            }
            Kind::Block => {
                dna.pick(8);
            }
        }
    }
}

/// Permission bits the generator picks from.
pub const MODES: [u32; 8] = [0o755, 0o644, 0o000, 0o4755, 0o700, 0o555, 0o1777, 0o7777];

/// How an entry's header is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// GNU header; long names and targets in `././@LongLink` entries.
    Gnu,
    /// ustar header; a long name split into prefix and name when it can be.
    Ustar,
    /// Pre-POSIX header; long names cut at 100 bytes.
    Old,
    /// ustar header after a PAX extended header with `path`/`linkpath`.
    Pax,
}

/// One archive entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// What it is.
    pub kind: Kind,
    /// Where.
    pub path: TarPath,
    /// Index into [`MODES`].
    pub mode: u8,
    /// Owner (0: root, 1: 1000, 2: 65534, 3: 2^33, out of range).
    pub owner: u8,
    /// Modification time (0: the epoch, 1: 2023, 2: far future, 3: largest).
    pub mtime: u8,
    /// Header flavour.
    pub style: Style,
}

impl Entry {
    /// A GNU entry owned by root, mode 0755/0644, dated 2023.
    pub fn new(path: &[&str], kind: Kind) -> Entry {
        let mode = if matches!(kind, Kind::Dir | Kind::OldDir) {
            0
        } else {
            1
        };
        Entry {
            kind,
            path: TarPath::names(path),
            mode,
            owner: 0,
            mtime: 1,
            style: Style::Gnu,
        }
    }

    /// With this header flavour.
    pub fn style(mut self, style: Style) -> Entry {
        self.style = style;
        self
    }

    /// An absolute path.
    pub fn absolute(mut self) -> Entry {
        self.path.absolute = true;
        self
    }

    fn decode(u: &mut Unstructured<'_>) -> Entry {
        let kind = Kind::decode(u);
        let path = TarPath::decode(u);
        let mode = byte(u) % 8;
        let meta = byte(u);
        let style = match (meta >> 4) % 4 {
            0 => Style::Gnu,
            1 => Style::Ustar,
            2 => Style::Old,
            _ => Style::Pax,
        };
        Entry {
            kind,
            path,
            mode,
            owner: meta % 4,
            mtime: (meta >> 2) % 4,
            style,
        }
    }
}

impl Encode for Entry {
    fn encode(&self, dna: &mut Dna) {
        self.kind.encode(dna);
        self.path.encode(dna);
        dna.byte(self.mode % 8);
        let style = match self.style {
            Style::Gnu => 0,
            Style::Ustar => 1,
            Style::Old => 2,
            Style::Pax => 3,
        };
        dna.byte((self.owner % 4) | ((self.mtime % 4) << 2) | (style << 4));
    }
}

/// Layer compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain tar.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

/// How an archive ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// Two zero blocks.
    End,
    /// Cut: this many times 37 bytes (plus one) removed from the end.
    Cut(u8),
    /// No end-of-archive blocks.
    NoEnd,
    /// The end blocks, then this many bytes of garbage.
    Garbage(u8),
}

/// One layer: a tar archive, maybe compressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// Compression.
    pub compression: Compression,
    /// Ending.
    pub tail: Tail,
    /// Entries, in order (at most 15).
    pub entries: Vec<Entry>,
}

impl Layer {
    /// A plain, well-ended layer of `entries`.
    pub fn new(entries: Vec<Entry>) -> Layer {
        Layer {
            compression: Compression::None,
            tail: Tail::End,
            entries,
        }
    }

    /// With this compression.
    pub fn compressed(mut self, c: Compression) -> Layer {
        self.compression = c;
        self
    }

    fn decode(u: &mut Unstructured<'_>) -> Layer {
        let b = byte(u);
        let compression = match b % 4 {
            2 => Compression::Gzip,
            3 => Compression::Zstd,
            _ => Compression::None,
        };
        let tail = match (b >> 2) % 4 {
            0 => Tail::End,
            1 => Tail::Cut(byte(u)),
            2 => Tail::NoEnd,
            _ => Tail::Garbage(byte(u)),
        };
        let n = pick(u, 16);
        let entries = (0..n).map(|_| Entry::decode(u)).collect();
        Layer {
            compression,
            tail,
            entries,
        }
    }

    /// The layer's bytes as a registry would serve them; `sentinel` is
    /// what [`Token::Sentinel`] renders as.
    pub fn render(&self, sentinel: &[u8]) -> Vec<u8> {
        compress(&self.tar(sentinel), self.compression)
    }

    /// The uncompressed tar stream (what the layer's diff id hashes).
    pub fn tar(&self, sentinel: &[u8]) -> Vec<u8> {
        let mut tar = Vec::new();
        for e in &self.entries {
            render_entry(e, sentinel, &mut tar);
        }
        match self.tail {
            Tail::End => tar.extend_from_slice(&[0; 1024]),
            Tail::Cut(n) => {
                tar.extend_from_slice(&[0; 1024]);
                let cut = (usize::from(n) * 37 + 1).min(tar.len());
                tar.truncate(tar.len() - cut);
            }
            Tail::NoEnd => {}
            Tail::Garbage(n) => {
                tar.extend_from_slice(&[0; 1024]);
                tar.extend(std::iter::repeat_n(b'A', usize::from(n)));
            }
        }
        tar
    }
}

impl Encode for Layer {
    fn encode(&self, dna: &mut Dna) {
        let c = match self.compression {
            Compression::None => 0,
            Compression::Gzip => 2,
            Compression::Zstd => 3,
        };
        let (t, extra) = match self.tail {
            Tail::End => (0, None),
            Tail::Cut(n) => (1, Some(n)),
            Tail::NoEnd => (2, None),
            Tail::Garbage(n) => (3, Some(n)),
        };
        dna.byte(c | (t << 2));
        if let Some(n) = extra {
            dna.byte(n);
        }
        assert!(self.entries.len() < 16, "at most 15 entries");
        dna.pick(self.entries.len());
        for e in &self.entries {
            e.encode(dna);
        }
    }
}

/// One to three layers, applied in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Archive {
    /// The layers.
    pub layers: Vec<Layer>,
}

impl<'a> Arbitrary<'a> for Archive {
    fn arbitrary(u: &mut Unstructured<'a>) -> arbitrary::Result<Self> {
        let n = 1 + pick(u, 3);
        Ok(Archive {
            layers: (0..n).map(|_| Layer::decode(u)).collect(),
        })
    }
}

impl Encode for Archive {
    fn encode(&self, dna: &mut Dna) {
        assert!((1..=3).contains(&self.layers.len()), "1 to 3 layers");
        dna.pick(self.layers.len() - 1);
        for l in &self.layers {
            l.encode(dna);
        }
    }
}

/// Decodes one layer (for the layout generator).
pub fn decode_layer(u: &mut Unstructured<'_>) -> Layer {
    Layer::decode(u)
}

fn compress(tar: &[u8], c: Compression) -> Vec<u8> {
    match c {
        Compression::None => tar.to_vec(),
        Compression::Gzip => {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(tar).expect("gzip into memory");
            enc.finish().expect("gzip into memory")
        }
        Compression::Zstd => zstd::stream::encode_all(tar, 1).expect("zstd into memory"),
    }
}

fn render_entry(e: &Entry, sentinel: &[u8], out: &mut Vec<u8>) {
    let mut path = e.path.render(sentinel);
    let (kind, data, link): (EntryType, &[u8], Option<Vec<u8>>) = match &e.kind {
        Kind::Dir => (EntryType::Directory, &[], None),
        Kind::File(d) => (EntryType::Regular, d, None),
        Kind::Symlink(t) => (EntryType::Symlink, &[], Some(t.render(sentinel))),
        Kind::HardLink(t) => (EntryType::Link, &[], Some(t.render(sentinel))),
        Kind::Fifo => (EntryType::Fifo, &[], None),
        Kind::Char => (EntryType::Char, &[], None),
        Kind::Block => (EntryType::Block, &[], None),
        Kind::OldDir => {
            path.push(b'/');
            (EntryType::Regular, &[], None)
        }
        Kind::Other(f) => (EntryType::new(*f), &[], None),
    };
    let mut h = match e.style {
        Style::Gnu => Header::new_gnu(),
        Style::Ustar | Style::Pax => Header::new_ustar(),
        Style::Old => Header::new_old(),
    };
    let link = link.as_deref();
    match e.style {
        Style::Gnu => {
            if path.len() > 100 {
                long_link(b'L', &path, out);
            }
            if let Some(l) = link.filter(|l| l.len() > 100) {
                long_link(b'K', l, out);
            }
        }
        Style::Pax => {
            let mut records = pax_record("path", &path);
            if let Some(l) = link {
                records.extend(pax_record("linkpath", l));
            }
            let mut x = Header::new_ustar();
            x.set_entry_type(EntryType::XHeader);
            put(&mut x.as_old_mut().name, b"PaxHeaders/x");
            x.set_mode(0o644);
            x.set_size(records.len() as u64);
            x.set_cksum();
            append(out, &x, &records);
        }
        Style::Ustar | Style::Old => {}
    }
    h.set_entry_type(kind);
    h.set_mode(MODES[usize::from(e.mode % 8)]);
    let (uid, gid) = match e.owner % 4 {
        0 => (0, 0),
        1 => (1000, 1000),
        2 => (65534, 65534),
        _ => (1 << 33, 0),
    };
    h.set_uid(uid);
    h.set_gid(gid);
    h.set_mtime(match e.mtime % 4 {
        0 => 0,
        1 => 1_700_000_000,
        2 => 1 << 40,
        _ => (1 << 63) - 1,
    });
    h.set_size(data.len() as u64);
    if matches!(kind, EntryType::Char | EntryType::Block) {
        let _ = h.set_device_major(1);
        let _ = h.set_device_minor(3);
    }
    let split = (e.style == Style::Ustar && path.len() > 100)
        .then(|| ustar_split(&path))
        .flatten();
    match split {
        Some((prefix, name)) => {
            put(&mut h.as_old_mut().name, name);
            if let Some(u) = h.as_ustar_mut() {
                put(&mut u.prefix, prefix);
            }
        }
        None => put(&mut h.as_old_mut().name, &path),
    }
    if let Some(l) = link {
        put(&mut h.as_old_mut().linkname, l);
    }
    h.set_cksum();
    append(out, &h, data);
}

/// Copies what fits of `src` into a header field.
fn put(field: &mut [u8], src: &[u8]) {
    let n = src.len().min(field.len());
    field[..n].copy_from_slice(&src[..n]);
}

fn append(out: &mut Vec<u8>, h: &Header, data: &[u8]) {
    out.extend_from_slice(h.as_bytes());
    out.extend_from_slice(data);
    let pad = (512 - data.len() % 512) % 512;
    out.extend(std::iter::repeat_n(0, pad));
}

fn long_link(flag: u8, name: &[u8], out: &mut Vec<u8>) {
    let mut h = Header::new_gnu();
    put(&mut h.as_old_mut().name, b"././@LongLink");
    h.set_entry_type(EntryType::new(flag));
    h.set_mode(0o644);
    let mut data = name.to_vec();
    data.push(0);
    h.set_size(data.len() as u64);
    h.set_cksum();
    append(out, &h, &data);
}

/// `<len> <key>=<value>\n`, where len counts the whole record.
fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3; // space, '=', newline
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let mut r = format!("{len} {key}=").into_bytes();
    r.extend_from_slice(value);
    r.push(b'\n');
    r
}

/// Splits a long path at a `/` into a ustar prefix (at most 155 bytes)
/// and name (at most 100).
fn ustar_split(path: &[u8]) -> Option<(&[u8], &[u8])> {
    (0..path.len())
        .filter(|&i| path[i] == b'/' && i <= 155 && path.len() - i - 1 <= 100)
        .map(|i| (&path[..i], &path[i + 1..]))
        .next()
}
