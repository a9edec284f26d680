//! DNS messages, as the host-side resolver of a sandbox reads and writes
//! them (RFC 1035): a guest's query, an upstream server's answer, and the
//! answer the guest gets back (rebuilt, never relayed as received).
//!
//! Parsing trusts nothing: every length is checked against the message,
//! a compression pointer must point backwards (so it cannot loop) and at
//! most [`MAX_JUMPS`] are followed per name, a name is at most 255 bytes,
//! and labels are printable ASCII. Records other than A, AAAA and CNAME
//! are skipped by their length.

#[cfg(test)]
mod tests;

use std::net::{Ipv4Addr, Ipv6Addr};

/// Largest DNS message (the TCP length prefix's limit).
pub const MAX_MESSAGE: usize = 65535;
/// Most compression pointers followed in one name.
pub const MAX_JUMPS: usize = 32;
/// Most records of each section read from a message.
pub const MAX_RECORDS: usize = 256;

/// Record type A (an IPv4 address).
pub const TYPE_A: u16 = 1;
/// Record type CNAME (an alias).
pub const TYPE_CNAME: u16 = 5;
/// Record type PTR (a reverse lookup).
pub const TYPE_PTR: u16 = 12;
/// Record type AAAA (an IPv6 address).
pub const TYPE_AAAA: u16 = 28;
/// Class IN.
pub const CLASS_IN: u16 = 1;

/// Response code: no error.
pub const NOERROR: u8 = 0;
/// Response code: the query was malformed.
pub const FORMERR: u8 = 1;
/// Response code: the server failed (an upstream did not answer).
pub const SERVFAIL: u8 = 2;
/// Response code: no such name (also a name the policy does not admit).
pub const NXDOMAIN: u8 = 3;
/// Response code: not implemented (an opcode other than QUERY).
pub const NOTIMP: u8 = 4;

const QR: u16 = 0x8000;
const RD: u16 = 0x0100;
const RA: u16 = 0x0080;

/// A message that does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    /// The message ends inside a header, name or record.
    #[error("the DNS message is truncated")]
    Truncated,
    /// A name is malformed: a label type other than a length or a
    /// pointer, a pointer that does not point backwards, too many
    /// pointers, a name over 255 bytes or a label byte that is not
    /// printable ASCII.
    #[error("a name in the DNS message is malformed")]
    BadName,
    /// A record's data does not fit its type (an A record not 4 bytes).
    #[error("a record in the DNS message is malformed")]
    BadRecord,
    /// More records than [`MAX_RECORDS`] in a section.
    #[error("the DNS message has too many records")]
    TooMany,
}

/// A question: the name as sent (its case kept, for the echo), its type
/// and class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Question {
    /// The name without its trailing dot, case as sent.
    pub name: String,
    /// The record type asked for.
    pub qtype: u16,
    /// The class (IN).
    pub qclass: u16,
}

impl Question {
    /// The name in lower case (what policies match).
    pub fn lower_name(&self) -> String {
        self.name.to_ascii_lowercase()
    }
}

/// The data of a record this module reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RData {
    /// An IPv4 address.
    A(Ipv4Addr),
    /// An IPv6 address.
    Aaaa(Ipv6Addr),
    /// An alias: the canonical name.
    Cname(String),
}

/// An answer record of a type this module reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The owner name.
    pub name: String,
    /// Time to live, in seconds.
    pub ttl: u32,
    /// The data.
    pub data: RData,
}

/// A parsed message: the header fields burrow uses, the questions and
/// the answers of the types it reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The id.
    pub id: u16,
    /// The flags word (QR, opcode, AA, TC, RD, RA, rcode).
    pub flags: u16,
    /// The questions.
    pub questions: Vec<Question>,
    /// The A, AAAA and CNAME answers (others skipped).
    pub answers: Vec<Record>,
}

impl Message {
    /// Whether this is a response.
    pub fn is_response(&self) -> bool {
        self.flags & QR != 0
    }

    /// The opcode (0: QUERY).
    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0xf) as u8
    }

    /// The response code.
    pub fn rcode(&self) -> u8 {
        (self.flags & 0xf) as u8
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DnsError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(DnsError::Truncated)?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn u16(&mut self) -> Result<u16, DnsError> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, DnsError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A name at the current position (following pointers backwards).
    fn name(&mut self) -> Result<String, DnsError> {
        let mut out = String::new();
        let mut at = self.pos;
        let mut jumps = 0;
        let mut resume = None;
        loop {
            let len = *self.buf.get(at).ok_or(DnsError::Truncated)? as usize;
            match len & 0xc0 {
                0x00 if len == 0 => {
                    at += 1;
                    break;
                }
                0x00 => {
                    let label = self
                        .buf
                        .get(at + 1..at + 1 + len)
                        .ok_or(DnsError::Truncated)?;
                    if !label.iter().all(|b| b.is_ascii_graphic()) || label.contains(&b'.') {
                        return Err(DnsError::BadName);
                    }
                    if !out.is_empty() {
                        out.push('.');
                    }
                    out.push_str(std::str::from_utf8(label).map_err(|_| DnsError::BadName)?);
                    if out.len() > 253 {
                        return Err(DnsError::BadName);
                    }
                    at += 1 + len;
                }
                0xc0 => {
                    let lo = *self.buf.get(at + 1).ok_or(DnsError::Truncated)? as usize;
                    let target = ((len & 0x3f) << 8) | lo;
                    jumps += 1;
                    if target >= at || jumps > MAX_JUMPS {
                        return Err(DnsError::BadName);
                    }
                    resume.get_or_insert(at + 2);
                    at = target;
                }
                _ => return Err(DnsError::BadName),
            }
        }
        self.pos = resume.unwrap_or(at);
        Ok(out)
    }
}

/// Parses a message.
pub fn parse(buf: &[u8]) -> Result<Message, DnsError> {
    if buf.len() > MAX_MESSAGE {
        return Err(DnsError::TooMany);
    }
    let mut r = Reader { buf, pos: 0 };
    let id = r.u16()?;
    let flags = r.u16()?;
    let counts = [r.u16()?, r.u16()?, r.u16()?, r.u16()?];
    if counts[..2].iter().any(|&c| usize::from(c) > MAX_RECORDS) {
        return Err(DnsError::TooMany);
    }
    let mut questions = Vec::with_capacity(counts[0].into());
    for _ in 0..counts[0] {
        let name = r.name()?;
        questions.push(Question {
            name,
            qtype: r.u16()?,
            qclass: r.u16()?,
        });
    }
    let mut answers = Vec::new();
    for _ in 0..counts[1] {
        let name = r.name()?;
        let (rtype, class, ttl) = (r.u16()?, r.u16()?, r.u32()?);
        let len = usize::from(r.u16()?);
        let start = r.pos;
        let data = r.take(len)?;
        if class != CLASS_IN {
            continue;
        }
        let data = match rtype {
            TYPE_A => RData::A(
                <[u8; 4]>::try_from(data)
                    .map_err(|_| DnsError::BadRecord)?
                    .into(),
            ),
            TYPE_AAAA => RData::Aaaa(
                <[u8; 16]>::try_from(data)
                    .map_err(|_| DnsError::BadRecord)?
                    .into(),
            ),
            TYPE_CNAME => {
                let mut inner = Reader { buf, pos: start };
                let target = inner.name()?;
                if inner.pos != start + len {
                    return Err(DnsError::BadRecord);
                }
                RData::Cname(target)
            }
            _ => continue,
        };
        answers.push(Record {
            name,
            ttl: ttl.min(i32::MAX as u32),
            data,
        });
    }
    Ok(Message {
        id,
        flags,
        questions,
        answers,
    })
}

fn put_name(out: &mut Vec<u8>, name: &str) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
}

/// A query for `name` of type `qtype`, recursion desired.
pub fn query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(18 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&RD.to_be_bytes());
    out.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    put_name(&mut out, name);
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    out
}

/// The response to `query` (its id, RD and first question echoed) with
/// `rcode` and `answers`, names written in full (no compression).
pub fn response(query: &Message, rcode: u8, answers: &[Record]) -> Vec<u8> {
    let mut out = Vec::with_capacity(512);
    out.extend_from_slice(&query.id.to_be_bytes());
    let flags = QR | (query.flags & (RD | 0x7800)) | RA | u16::from(rcode & 0xf);
    out.extend_from_slice(&flags.to_be_bytes());
    let q = query.questions.first();
    let qd = u16::from(q.is_some());
    let an = if q.is_some() {
        answers.len().min(MAX_RECORDS) as u16
    } else {
        0
    };
    for c in [qd, an, 0, 0] {
        out.extend_from_slice(&c.to_be_bytes());
    }
    let Some(q) = q else { return out };
    put_name(&mut out, &q.name);
    out.extend_from_slice(&q.qtype.to_be_bytes());
    out.extend_from_slice(&q.qclass.to_be_bytes());
    for rec in answers.iter().take(MAX_RECORDS) {
        put_name(&mut out, &rec.name);
        let (rtype, data) = match &rec.data {
            RData::A(a) => (TYPE_A, a.octets().to_vec()),
            RData::Aaaa(a) => (TYPE_AAAA, a.octets().to_vec()),
            RData::Cname(n) => {
                let mut d = Vec::with_capacity(n.len() + 2);
                put_name(&mut d, n);
                (TYPE_CNAME, d)
            }
        };
        out.extend_from_slice(&rtype.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&rec.ttl.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

/// The id of a message, if it has a header (for an error answer to a
/// message that does not parse).
pub fn id_of(buf: &[u8]) -> Option<u16> {
    buf.get(..2).map(|b| u16::from_be_bytes([b[0], b[1]]))
}

/// A bare error response with `id` (no question): for a query too
/// malformed to echo.
pub fn error_response(id: u16, rcode: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(12);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&(QR | RA | u16::from(rcode & 0xf)).to_be_bytes());
    out.extend_from_slice(&[0; 8]);
    out
}
