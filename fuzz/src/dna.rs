//! One byte per choice: reading with [`arbitrary::Unstructured`] (a
//! missing byte reads as 0, so every input decodes), writing with [`Dna`].

use arbitrary::{Arbitrary, Unstructured};

/// The next choice byte (0 once the input is used up).
pub fn byte(u: &mut Unstructured<'_>) -> u8 {
    u8::arbitrary(u).unwrap_or(0)
}

/// One of `n` choices.
pub fn pick(u: &mut Unstructured<'_>, n: usize) -> usize {
    usize::from(byte(u)) % n
}

/// Up to `n` raw bytes (fewer when the input ends).
pub fn bytes(u: &mut Unstructured<'_>, n: usize) -> Vec<u8> {
    let n = n.min(u.len());
    u.bytes(n).map(<[u8]>::to_vec).unwrap_or_default()
}

/// Writes the bytes that the readers above decode to given choices.
#[derive(Debug, Default, Clone)]
pub struct Dna(pub Vec<u8>);

impl Dna {
    /// An empty string of choices.
    pub fn new() -> Dna {
        Dna::default()
    }

    /// A choice byte.
    pub fn byte(&mut self, b: u8) -> &mut Dna {
        self.0.push(b);
        self
    }

    /// Choice `i` (of at most 256).
    pub fn pick(&mut self, i: usize) -> &mut Dna {
        self.byte(u8::try_from(i).expect("choice index below 256"))
    }

    /// Raw bytes, as [`bytes`] reads them.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Dna {
        self.0.extend_from_slice(b);
        self
    }
}

/// Values that write their own DNA.
pub trait Encode {
    /// Appends the choices that decode to `self`.
    fn encode(&self, dna: &mut Dna);

    /// The DNA of `self` alone.
    fn to_dna(&self) -> Vec<u8> {
        let mut dna = Dna::new();
        self.encode(&mut dna);
        dna.0
    }
}
