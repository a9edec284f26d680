//! The one rtnetlink request the stack needs: a veth pair whose peer goes
//! to another network namespace (there is no ioctl for it).

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

const RTM_NEWLINK: u16 = 16;
const NLM_F_REQUEST: u16 = 0x1;
const NLM_F_ACK: u16 = 0x4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const NLMSG_ERROR: u16 = 2;
const IFLA_IFNAME: u16 = 3;
const IFLA_MTU: u16 = 4;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const NLA_F_NESTED: u16 = 0x8000;
/// `struct ifinfomsg`: family, pad, type, index, flags, change.
const IFINFOMSG_LEN: usize = 16;

/// A netlink message under construction, attributes nested by offset.
struct Msg {
    buf: Vec<u8>,
}

impl Msg {
    fn align(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    fn attr(&mut self, ty: u16, data: &[u8]) {
        self.buf
            .extend_from_slice(&((4 + data.len()) as u16).to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.align();
    }

    fn name(&mut self, name: &CStr) {
        self.attr(IFLA_IFNAME, name.to_bytes_with_nul());
    }

    /// Opens a nested attribute: its offset, for [`Msg::end`].
    fn begin(&mut self, ty: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
        at
    }

    fn end(&mut self, at: usize) {
        let len = (self.buf.len() - at) as u16;
        self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
    }
}

/// Creates the veth pair `name` (in this network namespace) and `peer`
/// (in the namespace of `peer_ns`), both with `mtu`.
pub(crate) fn new_veth(name: &CStr, peer: &CStr, peer_ns: RawFd, mtu: u32) -> io::Result<()> {
    let mut m = Msg { buf: vec![0; 16] };
    m.buf.extend_from_slice(&[0; IFINFOMSG_LEN]);
    m.name(name);
    m.attr(IFLA_MTU, &mtu.to_ne_bytes());
    let info = m.begin(IFLA_LINKINFO);
    m.attr(IFLA_INFO_KIND, b"veth");
    let data = m.begin(IFLA_INFO_DATA);
    let peer_at = m.begin(VETH_INFO_PEER);
    m.buf.extend_from_slice(&[0; IFINFOMSG_LEN]);
    m.name(peer);
    m.attr(IFLA_MTU, &mtu.to_ne_bytes());
    m.attr(IFLA_NET_NS_FD, &(peer_ns as u32).to_ne_bytes());
    m.end(peer_at);
    m.end(data);
    m.end(info);
    let len = m.buf.len() as u32;
    m.buf[0..4].copy_from_slice(&len.to_ne_bytes());
    m.buf[4..6].copy_from_slice(&RTM_NEWLINK.to_ne_bytes());
    let flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL;
    m.buf[6..8].copy_from_slice(&flags.to_ne_bytes());
    m.buf[8..12].copy_from_slice(&1u32.to_ne_bytes());

    // SAFETY: socket() has no memory preconditions.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned here alone.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the buffer is valid for its length.
    let sent = unsafe { libc::send(sock.as_raw_fd(), m.buf.as_ptr().cast(), m.buf.len(), 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut reply = [0u8; 1024];
    // SAFETY: the buffer is valid for its length.
    let n = unsafe { libc::recv(sock.as_raw_fd(), reply.as_mut_ptr().cast(), reply.len(), 0) };
    if n < 20 {
        return Err(io::Error::other("no answer to the veth request"));
    }
    let ty = u16::from_ne_bytes([reply[4], reply[5]]);
    let code = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
    if ty != NLMSG_ERROR {
        return Err(io::Error::other(format!(
            "unexpected netlink answer type {ty}"
        )));
    }
    if code != 0 {
        let e = io::Error::from_raw_os_error(-code);
        return Err(io::Error::new(
            e.kind(),
            format!("making the veth pair: {e}"),
        ));
    }
    Ok(())
}
