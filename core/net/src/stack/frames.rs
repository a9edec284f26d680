//! Frames: the in-memory device smoltcp reads and writes, what the stack
//! looks at before smoltcp does (a TCP SYN, a UDP datagram), and the UDP
//! frames it builds itself.

use std::collections::VecDeque;
use std::net::SocketAddrV4;

use smoltcp::phy::{self, Checksum, ChecksumCapabilities, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, EthernetRepr, IpProtocol, Ipv4Packet,
    Ipv4Repr, TcpPacket, UdpPacket, UdpRepr,
};

/// The stack's own MAC address (locally administered).
pub(crate) const STACK_MAC: EthernetAddress = EthernetAddress([0x02, 0x42, 0x75, 0x72, 0x72, 0x77]);

/// Frames queued for smoltcp (`rx`) and frames smoltcp wrote (`tx`).
#[derive(Debug)]
pub(crate) struct Queues {
    pub(crate) rx: VecDeque<Vec<u8>>,
    pub(crate) tx: VecDeque<Vec<u8>>,
    mtu: usize,
}

impl Queues {
    pub(crate) fn new(mtu: usize) -> Queues {
        Queues {
            rx: VecDeque::new(),
            tx: VecDeque::new(),
            mtu,
        }
    }
}

#[derive(Debug)]
pub(crate) struct RxToken(Vec<u8>);

impl phy::RxToken for RxToken {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

#[derive(Debug)]
pub(crate) struct TxToken<'a>(&'a mut VecDeque<Vec<u8>>);

impl phy::TxToken for TxToken<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut buf = vec![0; len];
        let r = f(&mut buf);
        self.0.push_back(buf);
        r
    }
}

impl phy::Device for Queues {
    type RxToken<'a> = RxToken;
    type TxToken<'a> = TxToken<'a>;

    fn receive(&mut self, _: Instant) -> Option<(RxToken, TxToken<'_>)> {
        let frame = self.rx.pop_front()?;
        Some((RxToken(frame), TxToken(&mut self.tx)))
    }

    fn transmit(&mut self, _: Instant) -> Option<TxToken<'_>> {
        Some(TxToken(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        caps.max_transmission_unit = self.mtu + 14;
        // The guest's frames come over a veth pair or a socket, never a
        // wire: checksums are written, not verified.
        let mut sums = ChecksumCapabilities::default();
        sums.ipv4 = Checksum::Tx;
        sums.tcp = Checksum::Tx;
        sums.udp = Checksum::Tx;
        sums.icmpv4 = Checksum::Tx;
        caps.checksum = sums;
        caps
    }
}

/// What the stack does with a frame from the guest.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Class {
    /// A TCP segment opening a connection (SYN without ACK).
    Syn {
        src: SocketAddrV4,
        dst: SocketAddrV4,
    },
    /// A UDP datagram (never given to smoltcp).
    Udp {
        mac: EthernetAddress,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        /// Where the payload is in the frame.
        payload: std::ops::Range<usize>,
    },
    /// Anything else of IPv4 or ARP: smoltcp's.
    Stack,
    /// Not for this stack (IPv6, a fragment, a malformed frame): dropped.
    Drop,
}

/// Classifies a frame from the guest.
pub(crate) fn classify(frame: &[u8]) -> Class {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Class::Drop;
    };
    match eth.ethertype() {
        EthernetProtocol::Arp => return Class::Stack,
        EthernetProtocol::Ipv4 => {}
        _ => return Class::Drop,
    }
    let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
        return Class::Drop;
    };
    // Fragments are not reassembled: the guest's MTU is the link's, and
    // its TCP never fragments.
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Class::Drop;
    }
    let (src_ip, dst_ip) = (ip.src_addr(), ip.dst_addr());
    let header = usize::from(ip.header_len());
    match ip.next_header() {
        IpProtocol::Tcp => {
            let Ok(tcp) = TcpPacket::new_checked(ip.payload()) else {
                return Class::Drop;
            };
            if tcp.syn() && !tcp.ack() {
                Class::Syn {
                    src: SocketAddrV4::new(src_ip, tcp.src_port()),
                    dst: SocketAddrV4::new(dst_ip, tcp.dst_port()),
                }
            } else {
                Class::Stack
            }
        }
        IpProtocol::Udp => {
            let Ok(udp) = UdpPacket::new_checked(ip.payload()) else {
                return Class::Drop;
            };
            let start = EthernetFrame::<&[u8]>::header_len() + header + 8;
            let end = EthernetFrame::<&[u8]>::header_len() + header + usize::from(udp.len());
            if end > frame.len() || end < start {
                return Class::Drop;
            }
            Class::Udp {
                mac: eth.src_addr(),
                src: SocketAddrV4::new(src_ip, udp.src_port()),
                dst: SocketAddrV4::new(dst_ip, udp.dst_port()),
                payload: start..end,
            }
        }
        _ => Class::Drop,
    }
}

/// A UDP datagram from `src` to the guest's `dst` (at `mac`), as a frame;
/// `None` when it does not fit in one frame of `mtu`.
pub(crate) fn udp_frame(
    mac: EthernetAddress,
    src: SocketAddrV4,
    dst: SocketAddrV4,
    payload: &[u8],
    mtu: usize,
) -> Option<Vec<u8>> {
    let udp = UdpRepr {
        src_port: src.port(),
        dst_port: dst.port(),
    };
    let ip = Ipv4Repr {
        src_addr: *src.ip(),
        dst_addr: *dst.ip(),
        next_header: IpProtocol::Udp,
        payload_len: udp.header_len() + payload.len(),
        hop_limit: 64,
    };
    if ip.buffer_len() + ip.payload_len > mtu {
        return None;
    }
    let eth = EthernetRepr {
        src_addr: STACK_MAC,
        dst_addr: mac,
        ethertype: EthernetProtocol::Ipv4,
    };
    let mut buf = vec![0; eth.buffer_len() + ip.buffer_len() + ip.payload_len];
    let sums = ChecksumCapabilities::default();
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut frame);
    let mut packet = Ipv4Packet::new_unchecked(frame.payload_mut());
    ip.emit(&mut packet, &sums);
    let mut datagram = UdpPacket::new_unchecked(packet.payload_mut());
    udp.emit(
        &mut datagram,
        &(*src.ip()).into(),
        &(*dst.ip()).into(),
        payload.len(),
        |b| b.copy_from_slice(payload),
        &sums,
    );
    Some(buf)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn a_built_udp_frame_classifies_back() {
        let mac = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let src = SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 3), 53);
        let dst = SocketAddrV4::new(Ipv4Addr::new(10, 0, 2, 15), 40000);
        let frame = udp_frame(mac, src, dst, b"hello", 1500).unwrap();
        match classify(&frame) {
            Class::Udp {
                src: s,
                dst: d,
                payload,
                ..
            } => {
                assert_eq!((s, d), (src, dst));
                assert_eq!(&frame[payload], b"hello");
            }
            other => panic!("{other:?}"),
        }
        assert!(udp_frame(mac, src, dst, &[0; 1473], 1500).is_none());
        assert!(udp_frame(mac, src, dst, &[0; 1472], 1500).is_some());
    }

    #[test]
    fn short_and_foreign_frames_are_dropped() {
        assert_eq!(classify(&[]), Class::Drop);
        assert_eq!(classify(&[0; 13]), Class::Drop);
        let mut v6 = vec![0u8; 60];
        v6[12] = 0x86;
        v6[13] = 0xdd;
        assert_eq!(classify(&v6), Class::Drop);
    }
}
