#![allow(clippy::unwrap_used)]
//! TCP tunnels through the agent.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;

use burrow_protocol::{GuestErrorCode, GuestMsg, Request, Response};
use common::Agent;

/// An echo server on 127.0.0.1 that serves one connection and returns
/// everything it received once the client half-closed.
fn echo_server() -> (u16, std::thread::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let handle = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        let mut received = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = conn.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            received.extend_from_slice(&buf[..n]);
            conn.write_all(&buf[..n]).expect("echo");
        }
        // Closing our side ends the tunnel.
        received
    });
    (port, handle)
}

#[test]
fn tunnel_echo() {
    let (port, server) = echo_server();
    let mut agent = Agent::start();
    let id = agent.request(Request::Tunnel { port });
    match agent.next_for(id) {
        GuestMsg::Stdout { data, .. } => assert!(data.0.is_empty(), "connected marker"),
        other => panic!("expected the empty connected chunk, got {other:?}"),
    }
    agent.data(id, b"ping");
    match agent.next_for(id) {
        GuestMsg::Stdout { data, .. } => assert_eq!(data.0, b"ping"),
        other => panic!("expected echoed data, got {other:?}"),
    }
    let big: Vec<u8> = (0..300_000).map(|i| (i % 199) as u8).collect();
    for chunk in big.chunks(burrow_protocol::MAX_CHUNK) {
        agent.data(id, chunk);
    }
    agent.eof(id);
    let out = agent.collect(id);
    assert!(out.eof, "the guest side half-closed");
    assert_eq!(out.result, Ok(Response::Done));
    assert!(out.stdout == big);
    let received = server.join().expect("server");
    assert_eq!(received.len(), 4 + big.len());
}

#[test]
fn tunnel_to_closed_port_is_refused() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let mut agent = Agent::start();
    let out = agent.call(Request::Tunnel { port });
    assert_eq!(out.error().code, GuestErrorCode::ConnectionRefused);
}

#[test]
fn tunnel_cancel_closes_it() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let server = std::thread::spawn(move || {
        let (mut conn, _) = listener.accept().expect("accept");
        let mut rest = Vec::new();
        // Returns once the agent closed the connection.
        let _ = conn.read_to_end(&mut rest);
    });
    let mut agent = Agent::start();
    let id = agent.request(Request::Tunnel { port });
    agent.send(&burrow_protocol::HostMsg::Cancel { id });
    let out = agent.collect(id);
    assert_eq!(out.result, Ok(Response::Done));
    server.join().expect("server");
}

#[test]
fn udp_tunnel_carries_datagrams_both_ways() {
    // An echo server that answers each datagram with it, reversed.
    let server = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let port = server.local_addr().expect("addr").port();
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; 65_536];
        let mut seen = Vec::new();
        for _ in 0..3 {
            let (n, from) = server.recv_from(&mut buf).expect("recv");
            seen.push(buf[..n].to_vec());
            let mut back = buf[..n].to_vec();
            back.reverse();
            server.send_to(&back, from).expect("send");
        }
        seen
    });
    let mut agent = Agent::start();
    let id = agent.request(Request::UdpTunnel { port });
    match agent.next_for(id) {
        GuestMsg::Stdout { data, .. } => assert!(data.0.is_empty(), "ready marker"),
        other => panic!("expected the empty ready datagram, got {other:?}"),
    }
    let big: Vec<u8> = (0..60_000).map(|i| (i % 251) as u8).collect();
    let sent = [b"one".to_vec(), b"two!".to_vec(), big];
    for d in &sent {
        agent.data(id, d);
        // Datagrams keep their boundaries.
        match agent.next_for(id) {
            GuestMsg::Stdout { data, .. } => {
                let mut want = d.clone();
                want.reverse();
                assert_eq!(data.0, want);
            }
            other => panic!("expected an answer datagram, got {other:?}"),
        }
    }
    agent.eof(id);
    let out = agent.collect(id);
    assert_eq!(out.result, Ok(Response::Done));
    assert_eq!(echo.join().expect("server"), sent.to_vec());
}
