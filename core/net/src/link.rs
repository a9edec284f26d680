//! The container's end of the stack: a veth pair whose guest end (`eth0`)
//! is in the sandbox's network namespace, configured with the guest's
//! address and default route, and whose other end lives in a network
//! namespace of its own, read and written by a packet socket that the
//! supervisor keeps (frames sent on it reach the guest; the guest's frames
//! are read from it).
//!
//! A veth and a packet socket need only CAP_NET_ADMIN and CAP_NET_RAW in
//! the user namespace that owns the sandbox's network namespace, which a
//! rootless sandbox's own user namespace gives; a tap would also need
//! `/dev/net/tun`, which is often root's alone. Joining the namespaces
//! needs a single-threaded process (a user namespace cannot be entered by
//! a threaded one), so [`make_link`] runs in a short-lived helper (the
//! supervisor program's `__link` entry) that hands the socket back over a
//! Unix socket ([`send_fd`], [`recv_fd`]). The socket keeps the helper's
//! namespace alive after the helper exits.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;

use crate::addrs::{GATEWAY, GUEST_IP, GUEST_PREFIX, MTU};

/// The guest's interface name.
pub const GUEST_IF: &CStr = c"eth0";
/// The stack's end of the pair, in the helper's namespace.
pub const STACK_IF: &CStr = c"stack0";

const IFF_UP: libc::c_short = 0x1;

/// `struct ifreq`: a name and a 24-byte union (flags, an address, an MTU,
/// a pointer).
#[repr(C)]
struct IfReq {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: [u8; 24],
}

impl IfReq {
    fn new(name: &CStr) -> IfReq {
        let mut req = IfReq {
            name: [0; libc::IFNAMSIZ],
            data: [0; 24],
        };
        for (d, s) in req.name.iter_mut().zip(name.to_bytes()) {
            *d = *s as libc::c_char;
        }
        req
    }

    fn with_short(name: &CStr, v: libc::c_short) -> IfReq {
        let mut req = IfReq::new(name);
        req.data[..2].copy_from_slice(&v.to_ne_bytes());
        req
    }

    fn with_int(name: &CStr, v: libc::c_int) -> IfReq {
        let mut req = IfReq::new(name);
        req.data[..4].copy_from_slice(&v.to_ne_bytes());
        req
    }

    fn with_addr(name: &CStr, a: Ipv4Addr) -> IfReq {
        let mut req = IfReq::new(name);
        req.data[..16].copy_from_slice(&sockaddr_in(a));
        req
    }
}

/// A `struct sockaddr_in` for `a`, port 0, as bytes.
fn sockaddr_in(a: Ipv4Addr) -> [u8; 16] {
    let mut s = [0u8; 16];
    s[..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
    s[4..8].copy_from_slice(&a.octets());
    s
}

/// `struct rtentry` of 64-bit Linux (glibc and musl).
#[repr(C)]
struct RtEntry {
    rt_pad1: libc::c_ulong,
    rt_dst: [u8; 16],
    rt_gateway: [u8; 16],
    rt_genmask: [u8; 16],
    rt_flags: libc::c_ushort,
    rt_pad2: libc::c_short,
    rt_pad3: libc::c_ulong,
    rt_pad4: *mut libc::c_void,
    rt_metric: libc::c_short,
    rt_dev: *mut libc::c_char,
    rt_mtu: libc::c_ulong,
    rt_window: libc::c_ulong,
    rt_irtt: libc::c_ushort,
}

fn cvt(rc: libc::c_int, what: &str) -> io::Result<()> {
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

fn socket(
    domain: libc::c_int,
    ty: libc::c_int,
    proto: libc::c_int,
    what: &str,
) -> io::Result<OwnedFd> {
    // SAFETY: socket() has no memory preconditions.
    let fd = unsafe { libc::socket(domain, ty | libc::SOCK_CLOEXEC, proto) };
    cvt(fd, what)?;
    // SAFETY: `fd` was just opened and is owned here alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// An interface ioctl on the configuration socket `sock`.
fn if_ioctl(sock: &OwnedFd, req: libc::c_ulong, mut ifr: IfReq, what: &str) -> io::Result<IfReq> {
    // SAFETY: `ifr` is a valid ifreq that outlives the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), req as _, &mut ifr) };
    cvt(rc, what)?;
    Ok(ifr)
}

/// Turns an ethtool feature off (`cmd`: one of the legacy `ETHTOOL_S*`).
fn ethtool_off(sock: &OwnedFd, name: &CStr, cmd: u32, what: &str) -> io::Result<()> {
    let mut value = [cmd, 0u32];
    let mut ifr = IfReq::new(name);
    ifr.data[..8].copy_from_slice(&(value.as_mut_ptr() as u64).to_ne_bytes());
    if_ioctl(sock, libc::SIOCETHTOOL, ifr, what).map(drop)
}

/// Enters the user namespace (where it is not this process's) of `pid`,
/// makes a network namespace of its own there, and in it a veth pair: its
/// end [`STACK_IF`] here, [`GUEST_IF`] in the network namespace of `pid`,
/// configured (the guest's address, [`MTU`], checksum and segmentation
/// offloads off so that every frame is whole and at most the MTU, up, the
/// default route via the gateway; loopback up). Returns a packet socket
/// bound to [`STACK_IF`].
///
/// Call only in a single-threaded process: it changes the namespaces of
/// the calling process for good.
pub fn make_link(pid: i32) -> io::Result<OwnedFd> {
    let ns = |kind: &str| {
        let path = format!("/proc/{pid}/ns/{kind}");
        File::open(&path).map_err(|e| io::Error::new(e.kind(), format!("opening {path}: {e}")))
    };
    let (user, guest_net) = (ns("user")?, ns("net")?);
    let own_user = std::fs::metadata("/proc/self/ns/user")?;
    let their_user = user.metadata()?;
    if (own_user.dev(), own_user.ino()) != (their_user.dev(), their_user.ino()) {
        // SAFETY: setns on an open namespace descriptor has no memory
        // preconditions; failure is reported through errno.
        let rc = unsafe { libc::setns(user.as_raw_fd(), libc::CLONE_NEWUSER) };
        cvt(rc, "entering the sandbox's user namespace")?;
    }
    let rc = {
        // SAFETY: unshare has no memory preconditions.
        unsafe { libc::unshare(libc::CLONE_NEWNET) }
    };
    cvt(rc, "making the stack's network namespace")?;
    crate::netlink::new_veth(STACK_IF, GUEST_IF, guest_net.as_raw_fd(), MTU as u32)?;

    let conf = socket(
        libc::AF_INET,
        libc::SOCK_DGRAM,
        0,
        "opening a configuration socket",
    )?;
    if_ioctl(
        &conf,
        libc::SIOCSIFFLAGS,
        IfReq::with_short(STACK_IF, IFF_UP),
        "bringing the stack's end up",
    )?;
    let index = if_ioctl(
        &conf,
        libc::SIOCGIFINDEX,
        IfReq::new(STACK_IF),
        "finding the stack's end",
    )?;
    let index = i32::from_ne_bytes([index.data[0], index.data[1], index.data[2], index.data[3]]);
    let proto = (libc::ETH_P_ALL as u16).to_be();
    let packets = socket(
        libc::AF_PACKET,
        libc::SOCK_RAW,
        proto.into(),
        "opening a packet socket",
    )?;
    // SAFETY: an all-zero sockaddr_ll is valid; the fields set make it a
    // binding to the interface for every protocol.
    let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = proto;
    sll.sll_ifindex = index;
    let rc = {
        // SAFETY: `sll` is a valid sockaddr_ll of the size given.
        unsafe {
            libc::bind(
                packets.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        }
    };
    cvt(rc, "binding the packet socket")?;
    let on: libc::c_int = 1;
    let rc = {
        // SAFETY: the option value is a c_int that outlives the call.
        unsafe {
            libc::setsockopt(
                packets.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_IGNORE_OUTGOING,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as u32,
            )
        }
    };
    cvt(rc, "ignoring the stack's own frames")?;

    let rc = {
        // SAFETY: as for the user namespace.
        unsafe { libc::setns(guest_net.as_raw_fd(), libc::CLONE_NEWNET) }
    };
    cvt(rc, "entering the sandbox's network namespace")?;
    let conf = socket(
        libc::AF_INET,
        libc::SOCK_DGRAM,
        0,
        "opening a configuration socket",
    )?;
    if_ioctl(
        &conf,
        libc::SIOCSIFFLAGS,
        IfReq::with_short(c"lo", IFF_UP),
        "bringing loopback up",
    )?;
    // Legacy ethtool commands: TX checksum (STXCSUM), scatter-gather
    // (SSG), TSO (STSO), GSO (SGSO).
    for (cmd, what) in [
        (0x17, "TX checksum offload"),
        (0x19, "scatter-gather"),
        (0x1f, "TSO"),
        (0x24, "GSO"),
    ] {
        ethtool_off(&conf, GUEST_IF, cmd, &format!("turning {what} off"))?;
    }
    if_ioctl(
        &conf,
        libc::SIOCSIFMTU,
        IfReq::with_int(GUEST_IF, MTU as libc::c_int),
        "setting the MTU",
    )?;
    if_ioctl(
        &conf,
        libc::SIOCSIFADDR,
        IfReq::with_addr(GUEST_IF, GUEST_IP),
        "setting the address",
    )?;
    let mask = Ipv4Addr::from(u32::MAX << (32 - u32::from(GUEST_PREFIX)));
    if_ioctl(
        &conf,
        libc::SIOCSIFNETMASK,
        IfReq::with_addr(GUEST_IF, mask),
        "setting the netmask",
    )?;
    if_ioctl(
        &conf,
        libc::SIOCSIFFLAGS,
        IfReq::with_short(GUEST_IF, IFF_UP),
        "bringing the guest's end up",
    )?;
    let mut route = RtEntry {
        rt_pad1: 0,
        rt_dst: sockaddr_in(Ipv4Addr::UNSPECIFIED),
        rt_gateway: sockaddr_in(GATEWAY),
        rt_genmask: sockaddr_in(Ipv4Addr::UNSPECIFIED),
        rt_flags: (libc::RTF_UP | libc::RTF_GATEWAY) as libc::c_ushort,
        rt_pad2: 0,
        rt_pad3: 0,
        rt_pad4: std::ptr::null_mut(),
        rt_metric: 0,
        rt_dev: GUEST_IF.as_ptr().cast_mut(),
        rt_mtu: 0,
        rt_window: 0,
        rt_irtt: 0,
    };
    let rc = {
        // SAFETY: `route` is a valid rtentry whose device name outlives the
        // call.
        unsafe { libc::ioctl(conf.as_raw_fd(), libc::SIOCADDRT as _, &mut route) }
    };
    cvt(rc, "adding the default route")?;
    Ok(packets)
}

/// Sends `fd` over the Unix socket `sock` (one byte of data with it).
pub fn send_fd(sock: RawFd, fd: RawFd) -> io::Result<()> {
    send_with_fd(sock, &[0], fd)
        .map(drop)
        .map_err(|e| io::Error::new(e.kind(), format!("sending the tap descriptor: {e}")))
}

/// Sends `data` over the Unix socket `sock` with `fd` attached to it (as
/// QEMU's monitor takes a descriptor: with the command it is for).
/// Returns the bytes sent, which may be fewer than `data`'s; the
/// descriptor went with the first of them.
pub fn send_with_fd(sock: RawFd, data: &[u8], fd: RawFd) -> io::Result<usize> {
    let mut iov = libc::iovec {
        iov_base: data.as_ptr().cast_mut().cast(),
        iov_len: data.len(),
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: an all-zero msghdr is valid; the pointers set below point
    // into `iov` and `control`, which outlive the sendmsg call (sendmsg
    // only reads the data `iov` points to).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` has a control buffer of CMSG_SPACE(one fd) bytes, so
    // the first header exists and its data holds one descriptor.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<RawFd>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>(), fd);
    }
    // SAFETY: `msg` is fully initialised and its buffers are live.
    let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// Receives a descriptor sent by [`send_fd`] on `sock`.
pub fn recv_fd(sock: RawFd) -> io::Result<OwnedFd> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE is a pure computation.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<RawFd>() as u32) } as usize;
    let mut control = vec![0u8; space];
    // SAFETY: as in send_fd.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    // SAFETY: `msg` is fully initialised and its buffers are live.
    let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    cvt(n as libc::c_int, "receiving the tap descriptor")?;
    // SAFETY: the kernel filled `msg`; CMSG_FIRSTHDR checks the length.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if n == 0 || cmsg.is_null() || (*cmsg).cmsg_type != libc::SCM_RIGHTS {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the tap helper sent no descriptor",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<RawFd>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
