#![allow(clippy::unwrap_used)]

use super::*;

/// An upstream answer for `www.Example.com` A: a CNAME (compressed) to
/// `edge.example.net`, two A records of it and one TXT record.
fn upstream_answer() -> Vec<u8> {
    let mut m = vec![0x12, 0x34, 0x81, 0x80, 0, 1, 0, 4, 0, 0, 0, 0];
    // Question at offset 12.
    m.extend_from_slice(b"\x03www\x07Example\x03com\x00");
    m.extend_from_slice(&[0, 1, 0, 1]);
    // CNAME: owner -> pointer to 12; data: "edge" + "example" + "net".
    m.extend_from_slice(&[0xc0, 12, 0, 5, 0, 1, 0, 0, 0, 60]);
    let target = b"\x04edge\x07example\x03net\x00";
    m.extend_from_slice(&(target.len() as u16).to_be_bytes());
    let edge = m.len();
    m.extend_from_slice(target);
    for last in [7u8, 8] {
        m.extend_from_slice(&[
            0xc0, edge as u8, 0, 1, 0, 1, 0, 0, 1, 0, 0, 4, 198, 18, 0, last,
        ]);
    }
    m.extend_from_slice(&[
        0xc0, edge as u8, 0, 16, 0, 1, 0, 0, 0, 5, 0, 3, 2, b'h', b'i',
    ]);
    m
}

#[test]
fn a_query_round_trips() {
    let q = query(7, "pypi.org", TYPE_AAAA);
    let m = parse(&q).unwrap();
    assert_eq!(m.id, 7);
    assert!(!m.is_response());
    assert_eq!(m.opcode(), 0);
    assert_eq!(
        m.questions,
        vec![Question {
            name: "pypi.org".into(),
            qtype: TYPE_AAAA,
            qclass: CLASS_IN
        }]
    );
    assert!(m.answers.is_empty());
}

#[test]
fn answers_follow_compression_and_skip_other_types() {
    let m = parse(&upstream_answer()).unwrap();
    assert!(m.is_response());
    assert_eq!(m.rcode(), NOERROR);
    assert_eq!(m.questions[0].name, "www.Example.com");
    assert_eq!(m.questions[0].lower_name(), "www.example.com");
    assert_eq!(
        m.answers,
        vec![
            Record {
                name: "www.Example.com".into(),
                ttl: 60,
                data: RData::Cname("edge.example.net".into())
            },
            Record {
                name: "edge.example.net".into(),
                ttl: 256,
                data: RData::A(Ipv4Addr::new(198, 18, 0, 7))
            },
            Record {
                name: "edge.example.net".into(),
                ttl: 256,
                data: RData::A(Ipv4Addr::new(198, 18, 0, 8))
            },
        ]
    );
}

#[test]
fn a_rebuilt_response_echoes_the_question_and_parses_back() {
    let q = parse(&query(99, "Pypi.Org", TYPE_A)).unwrap();
    let answers = vec![
        Record {
            name: "Pypi.Org".into(),
            ttl: 30,
            data: RData::Cname("x.fastly.net".into()),
        },
        Record {
            name: "x.fastly.net".into(),
            ttl: 30,
            data: RData::Aaaa("2001:db8::1".parse().unwrap()),
        },
    ];
    let back = parse(&response(&q, NOERROR, &answers)).unwrap();
    assert_eq!(back.id, 99);
    assert!(back.is_response());
    assert_eq!(back.flags & RD, RD, "RD is echoed");
    assert_eq!(back.questions, q.questions);
    assert_eq!(back.answers, answers);

    let refused = parse(&response(&q, NXDOMAIN, &[])).unwrap();
    assert_eq!(refused.rcode(), NXDOMAIN);
    assert!(refused.answers.is_empty());
    let bare = parse(&error_response(5, FORMERR)).unwrap();
    assert_eq!(
        (bare.id, bare.rcode(), bare.questions.len()),
        (5, FORMERR, 0)
    );
}

#[test]
fn every_truncation_of_a_message_is_an_error_not_a_panic() {
    let full = upstream_answer();
    for n in 0..full.len() {
        assert!(parse(&full[..n]).is_err(), "cut at {n}");
    }
}

#[test]
fn hostile_names_are_refused() {
    let header = |qd: u8| vec![0, 1, 0, 0, 0, qd, 0, 0, 0, 0, 0, 0];
    // A pointer to itself, and one forwards.
    let mut m = header(1);
    m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(parse(&m), Err(DnsError::BadName));
    let mut m = header(1);
    m.extend_from_slice(&[0xc0, 20, 0, 1, 0, 1, 0, 0, 1, b'a', 0]);
    assert_eq!(parse(&m), Err(DnsError::BadName));
    // A label then a pointer back to it: a loop, cut by the jump limit.
    let mut m = header(1);
    m.extend_from_slice(&[1, b'a', 0xc0, 12, 0, 1, 0, 1]);
    assert_eq!(parse(&m), Err(DnsError::BadName));
    // The reserved label types 0x40 and 0x80.
    for t in [0x40u8, 0x80] {
        let mut m = header(1);
        m.extend_from_slice(&[t, 0, 0, 1, 0, 1]);
        assert_eq!(parse(&m), Err(DnsError::BadName));
    }
    // A byte that is not printable ASCII, and a dot inside a label.
    for label in [&[2u8, b'a', 0x00][..], &[3, b'a', b'.', b'b']] {
        let mut m = header(1);
        m.extend_from_slice(label);
        m.extend_from_slice(&[0, 0, 1, 0, 1]);
        assert_eq!(parse(&m), Err(DnsError::BadName));
    }
    // A name over 253 characters.
    let mut m = header(1);
    for _ in 0..5 {
        m.push(63);
        m.extend_from_slice(&[b'a'; 63]);
    }
    m.extend_from_slice(&[0, 0, 1, 0, 1]);
    assert_eq!(parse(&m), Err(DnsError::BadName));
    // Counts beyond the limit.
    let mut m = header(1);
    m[4] = 0xff;
    assert_eq!(parse(&m), Err(DnsError::TooMany));
}

#[test]
fn an_address_record_of_the_wrong_length_is_refused() {
    let mut m = vec![0, 1, 0x81, 0x80, 0, 0, 0, 1, 0, 0, 0, 0];
    m.extend_from_slice(&[1, b'a', 0, 0, 1, 0, 1, 0, 0, 0, 1, 0, 3, 1, 2, 3]);
    assert_eq!(parse(&m), Err(DnsError::BadRecord));
}
