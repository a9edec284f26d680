//! Secret values out of the answers the guest reads.
//!
//! A reflecting service (a 404 page that echoes the request, a redirect
//! that repeats it, an error that quotes a header) would hand a secret's
//! value back to the guest. The stack masks, in the bytes it passes to the
//! guest, every occurrence of a value's forms ([`forms`]): the value
//! itself, its JSON-escaped spellings, its hex (any case), its
//! percent-encoding (escapes in any case) and its base64 (standard and
//! URL-safe alphabets, with and without padding, at each of the three
//! alignments the value can have inside a longer encoded text).
//!
//! **What is masked.** Every run of bytes that is a piece of at least
//! [`WINDOW`] (8) bytes of a form, and every whole form shorter than that.
//! A whole form is such a piece, so it is masked wherever it is; so is a
//! reflection that shows only part of a value (a truncated echo, an
//! encoder that spells one character differently) beyond 7 bytes around
//! each cut. Masked bytes become `*`, one for one: lengths stay, so a
//! `Content-Length` stays right.
//!
//! **Streaming.** Bytes are checked as they pass, across any cut into
//! reads, chunks or TLS records: a byte leaves once no later byte can make
//! it part of a masked run. The matcher holds back the longest tail of the
//! stream that begins a form's piece (at most `WINDOW - 1` bytes, usually
//! none: an event stream's `\n\n` begins no piece, so it is not delayed).
//! A [`Redactor`] holds those bytes and one register per alphabet; that is
//! its memory, whatever the values' lengths. Held bytes go on where a
//! message ends and where the far end pauses (the guest may be waiting for
//! them): at such a cut at most 7 bytes of a form can show. [`Forms`] (one per sandbox,
//! shared by its connections) keeps each form's 8-byte pieces, sorted, and
//! a bit filter in front of them: about 10 bytes per byte of form, and
//! about 10 bytes of form per byte of value.

use std::fmt;

/// Length of the pieces of a form that are masked wherever they are.
pub const WINDOW: usize = 8;
/// What a masked byte becomes.
pub const MASK: u8 = b'*';
/// A derived form (not the value itself) shorter than this is not
/// matched at all (a value of 1 to 3 bytes has tiny encodings that would
/// mask common text).
const MIN_DERIVED: usize = 4;

/// How bytes are compared: exactly, ignoring the case of hex digits, or
/// reading base64's URL-safe alphabet as the standard one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fold {
    Exact,
    HexCase,
    Base64,
}

impl Fold {
    fn table(self) -> [u8; 256] {
        let mut t = [0u8; 256];
        for (i, v) in t.iter_mut().enumerate() {
            let b = i as u8;
            *v = match (self, b) {
                (Fold::HexCase, b'A'..=b'F') => b.to_ascii_lowercase(),
                (Fold::Base64, b'-') => b'+',
                (Fold::Base64, b'_') => b'/',
                _ => b,
            };
        }
        t
    }
}

/// The forms of one alphabet.
struct Class {
    fold: [u8; 256],
    /// Every WINDOW-byte piece of the long forms, packed big-endian
    /// (first byte highest), sorted, without repeats.
    pieces: Vec<u64>,
    /// A bit per hash of a piece (a filter before the search).
    filter: Vec<u64>,
    filter_shift: u32,
    /// The whole forms shorter than WINDOW: packed, and their lengths.
    short: Vec<(u64, usize)>,
}

impl Class {
    fn new(fold: Fold, forms: &[Vec<u8>]) -> Class {
        let table = fold.table();
        let mut pieces = Vec::new();
        let mut short = Vec::new();
        for form in forms {
            let folded: Vec<u8> = form.iter().map(|&b| table[usize::from(b)]).collect();
            if folded.len() >= WINDOW {
                pieces.extend(folded.windows(WINDOW).map(pack));
            } else if !folded.is_empty() {
                short.push((pack(&folded), folded.len()));
            }
        }
        pieces.sort_unstable();
        pieces.dedup();
        short.sort_unstable();
        short.dedup();
        // 16 bits per piece, a power of two from 2^12 to 2^26 bits.
        let bits = (pieces.len() * 16)
            .next_power_of_two()
            .clamp(1 << 12, 1 << 26);
        let filter_shift = 64 - bits.trailing_zeros();
        let mut filter = vec![0u64; bits / 64];
        for &p in &pieces {
            let h = hash(p, filter_shift);
            filter[h / 64] |= 1 << (h % 64);
        }
        Class {
            fold: table,
            pieces,
            filter,
            filter_shift,
            short,
        }
    }

    fn is_piece(&self, window: u64) -> bool {
        let h = hash(window, self.filter_shift);
        self.filter[h / 64] & (1 << (h % 64)) != 0 && self.pieces.binary_search(&window).is_ok()
    }

    /// Whether `tail` (folded, 1 to WINDOW-1 bytes) begins a piece or a
    /// short form.
    fn begins(&self, tail: &[u8]) -> bool {
        let n = tail.len();
        let p = pack(tail);
        let free = 8 * (WINDOW - n) as u32;
        let lo = p << free;
        let hi = lo | ((1u64 << free) - 1);
        let i = self.pieces.partition_point(|&x| x < lo);
        if self.pieces.get(i).is_some_and(|&x| x <= hi) {
            return true;
        }
        self.short
            .iter()
            .any(|&(v, len)| len > n && v >> (8 * (len - n)) == p)
    }
}

fn pack(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
}

fn hash(x: u64, shift: u32) -> usize {
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> shift) as usize
}

/// The forms of a sandbox's secret values, ready to match.
pub struct Forms {
    classes: Vec<Class>,
}

impl fmt::Debug for Forms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forms")
            .field("pieces", &self.pieces())
            .finish()
    }
}

impl Forms {
    /// The forms of `values`.
    pub fn new<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Forms {
        let mut exact = Vec::new();
        let mut hexcase = Vec::new();
        let mut b64 = Vec::new();
        for v in values {
            let all = forms(v);
            exact.extend(all.exact);
            hexcase.extend(all.hexcase);
            b64.extend(all.base64);
        }
        let classes = [
            (Fold::Exact, exact),
            (Fold::HexCase, hexcase),
            (Fold::Base64, b64),
        ]
        .into_iter()
        .filter(|(_, f)| !f.is_empty())
        .map(|(fold, f)| Class::new(fold, &f))
        .collect();
        Forms { classes }
    }

    /// Whether there is nothing to mask.
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
    }

    /// How many 8-byte pieces are kept (8 bytes each, and 2 bytes of
    /// filter).
    pub fn pieces(&self) -> usize {
        self.classes.iter().map(|c| c.pieces.len()).sum()
    }
}

/// A value's forms, by how they are compared.
#[derive(Debug, Default)]
pub struct ValueForms {
    /// Compared exactly: the value, its JSON escapes.
    pub exact: Vec<Vec<u8>>,
    /// Compared ignoring the case of `A`-`F`: hex, percent-encoding.
    pub hexcase: Vec<Vec<u8>>,
    /// Compared with `-_` read as `+/`: base64 at each alignment.
    pub base64: Vec<Vec<u8>>,
}

/// The forms of `value` that [`Forms`] matches.
pub fn forms(value: &[u8]) -> ValueForms {
    let mut f = ValueForms::default();
    let keep = |list: &mut Vec<Vec<u8>>, form: Vec<u8>, derived: bool| {
        if !form.is_empty() && (!derived || form.len() >= MIN_DERIVED) && !list.contains(&form) {
            list.push(form);
        }
    };
    keep(&mut f.exact, value.to_vec(), false);
    for style in [Json::Plain, Json::Slash, Json::Html] {
        keep(&mut f.exact, json(value, style), true);
    }
    keep(&mut f.hexcase, hex(value), true);
    keep(&mut f.hexcase, percent(value), true);
    for shift in 0..3usize {
        // The value after `shift` other bytes: the characters its bits
        // alone decide, then (where it ends the text) the last one and
        // the padding.
        let mut text = vec![0u8; shift];
        text.extend_from_slice(value);
        let enc = base64(&text);
        let first = (8 * shift).div_ceil(6);
        let whole = (8 * text.len()) / 6;
        if first < whole {
            keep(&mut f.base64, enc[first..whole].to_vec(), true);
        }
        if first < enc.len() {
            keep(&mut f.base64, enc[first..].to_vec(), true);
        }
    }
    f
}

#[derive(Clone, Copy)]
enum Json {
    /// `"`, `\` and control characters escaped.
    Plain,
    /// And `/` as `\/`.
    Slash,
    /// And `<`, `>`, `&` as `\u003c`... (Go's encoding/json).
    Html,
}

fn json(value: &[u8], style: Json) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    for &b in value {
        match (b, style) {
            (b'"', _) => out.extend_from_slice(b"\\\""),
            (b'\\', _) => out.extend_from_slice(b"\\\\"),
            (b'/', Json::Slash) => out.extend_from_slice(b"\\/"),
            (b'<' | b'>' | b'&', Json::Html) | (0..=0x1f, _) => {
                out.extend_from_slice(format!("\\u{:04x}", b).as_bytes())
            }
            _ => out.push(b),
        }
    }
    out
}

fn hex(value: &[u8]) -> Vec<u8> {
    value
        .iter()
        .flat_map(|b| format!("{b:02x}").into_bytes())
        .collect()
}

/// RFC 3986's unreserved characters kept, the rest escaped.
fn percent(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len());
    for &b in value {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(format!("%{b:02x}").as_bytes());
        }
    }
    out
}

/// Standard base64 with padding.
pub(crate) fn base64(bytes: &[u8]) -> Vec<u8> {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let n = group
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, &b)| acc | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= group.len() {
                out.push(ABC[(n >> (18 - 6 * i) & 63) as usize]);
            } else {
                out.push(b'=');
            }
        }
    }
    out
}

/// One stream's matcher: bytes in, the same bytes out with the forms'
/// pieces masked, a few held back while they may begin one.
#[derive(Debug)]
pub struct Redactor {
    forms: std::sync::Arc<Forms>,
    /// The last WINDOW bytes of the stream, folded, per class.
    regs: Vec<u64>,
    /// Bytes of the stream since the last flush (up to WINDOW).
    seen: usize,
    /// Bytes not yet passed on, as they came, and which are masked.
    held: Vec<u8>,
    dark: Vec<bool>,
}

impl Redactor {
    /// A matcher of `forms`.
    pub fn new(forms: std::sync::Arc<Forms>) -> Redactor {
        let regs = vec![0; forms.classes.len()];
        Redactor {
            forms,
            regs,
            seen: 0,
            held: Vec::new(),
            dark: Vec::new(),
        }
    }

    /// Takes the stream's next bytes; appends to `out` those that can no
    /// longer be part of a masked run.
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) {
        if self.forms.is_empty() {
            out.extend_from_slice(input);
            return;
        }
        let forms = self.forms.clone();
        let start = self.held.len();
        self.held.extend_from_slice(input);
        self.dark.resize(self.held.len(), false);
        for i in start..self.held.len() {
            let b = usize::from(self.held[i]);
            self.seen = (self.seen + 1).min(WINDOW);
            for (c, class) in forms.classes.iter().enumerate() {
                let reg = (self.regs[c] << 8) | u64::from(class.fold[b]);
                self.regs[c] = reg;
                if self.seen == WINDOW && class.is_piece(reg) {
                    self.mask(i, WINDOW);
                }
                for &(v, len) in &class.short {
                    if self.seen >= len && reg & ((1u64 << (8 * len)) - 1) == v {
                        self.mask(i, len);
                    }
                }
            }
        }
        let keep = self.tail();
        self.emit(self.held.len() - keep, out);
    }

    /// Passes on what is held: the stream ends here (the end of a message,
    /// or of the connection), and the next bytes start afresh.
    pub fn flush(&mut self, out: &mut Vec<u8>) {
        self.emit(self.held.len(), out);
        self.regs.iter_mut().for_each(|r| *r = 0);
        self.seen = 0;
    }

    /// Passes on what is held without ending the stream: the far end
    /// paused (a peer may wait for these bytes before it sends more). At
    /// most `WINDOW - 1` bytes that begin a piece show; what follows is
    /// still matched.
    pub fn release(&mut self, out: &mut Vec<u8>) {
        self.emit(self.held.len(), out);
    }

    /// Bytes held now.
    pub fn holding(&self) -> usize {
        self.held.len()
    }

    /// Masks the `len` bytes that end at `end`.
    fn mask(&mut self, end: usize, len: usize) {
        let from = (end + 1).saturating_sub(len);
        self.dark[from..=end].iter_mut().for_each(|d| *d = true);
    }

    /// The longest tail of what is held that begins a piece or a short
    /// form of some class.
    fn tail(&self) -> usize {
        let most = self.held.len().min(WINDOW - 1).min(self.seen);
        let mut folded = [0u8; WINDOW];
        for n in (1..=most).rev() {
            let tail = &self.held[self.held.len() - n..];
            for class in &self.forms.classes {
                for (f, &b) in folded.iter_mut().zip(tail) {
                    *f = class.fold[usize::from(b)];
                }
                if class.begins(&folded[..n]) {
                    return n;
                }
            }
        }
        0
    }

    fn emit(&mut self, n: usize, out: &mut Vec<u8>) {
        out.extend(
            self.held[..n]
                .iter()
                .zip(&self.dark[..n])
                .map(|(&b, &d)| if d { MASK } else { b }),
        );
        self.held.drain(..n);
        self.dark.drain(..n);
    }
}

#[cfg(test)]
#[path = "redact_tests.rs"]
mod tests;
