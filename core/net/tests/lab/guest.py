"""The guest's side of burrow-net's stack tests, run in the guest's network
namespace with the system's python3. One action per run; prints one line.

  tcp HOST PORT [SEND]     connect, send, print what came back or ERR <name>
  hold HOST PORT           connect, print READY, then read until EOF/error
  udp HOST PORT MSG        send a datagram, print the reply or ERR timeout
  dns NAME [tcp]           ask 10.0.2.3, print "<rcode> <a> <a>..."
  fetch NAME PORT          resolve NAME at 10.0.2.3, connect to its first A
  bulk HOST PORT           read until EOF, print the byte count
  connects HOST PORT N     connect (and read the greeting) N times, print
                           the median microseconds of one
  http NAME PORT TOKEN [TARGET [HOST]]
                           resolve NAME, GET TARGET (default /echo; {t} in it
                           becomes TOKEN) with Host: HOST (default NAME) and
                           Authorization: Bearer TOKEN, print the body (CRLF
                           as |), EOF when nothing came, or ERR <name>
  https ADDR PORT SNI CA TOKEN [TARGET [HOST]]
                           the same over TLS to ADDR (a name is resolved) as
                           SNI (HOST's default), trusting the CA file only;
                           ERR ssl <reason>
"""
import errno
import socket
import struct
import sys

DNS = "10.0.2.3"


def err(e):
    if isinstance(e, socket.timeout):
        return "ERR timeout"
    return "ERR " + errno.errorcode.get(e.errno, str(e.errno))


def query(name, qtype=1):
    q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack(">HH", qtype, 1)


def skip_name(msg, i):
    while True:
        n = msg[i]
        if n & 0xC0 == 0xC0:
            return i + 2
        if n == 0:
            return i + 1
        i += 1 + n


def parse(msg):
    rcode = msg[3] & 0xF
    qd, an = struct.unpack(">HH", msg[4:8])
    i = 12
    for _ in range(qd):
        i = skip_name(msg, i) + 4
    addrs = []
    for _ in range(an):
        i = skip_name(msg, i)
        rtype, _, _, rdlen = struct.unpack(">HHIH", msg[i : i + 10])
        i += 10
        if rtype == 1:
            addrs.append(socket.inet_ntoa(msg[i : i + 4]))
        i += rdlen
    return rcode, addrs


def dns(name, tcp=False):
    q = query(name)
    if tcp:
        s = socket.create_connection((DNS, 53), timeout=5)
        s.sendall(struct.pack(">H", len(q)) + q)
        n = struct.unpack(">H", recv_exact(s, 2))[0]
        return parse(recv_exact(s, n))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    s.sendto(q, (DNS, 53))
    return parse(s.recv(4096))


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise OSError(errno.ECONNRESET, "short")
        out += b
    return out


def request(s, host, token, target="/echo"):
    s.sendall(
        (
            "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
            "Connection: close\r\n\r\n" % (target.replace("{t}", token), host, token)
        ).encode()
    )
    out = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        out += b
    if not out:
        return "EOF"
    body = out.split(b"\r\n\r\n", 1)[-1]
    return body.decode().replace("\r\n", "|")


def address(host):
    if host[0].isdigit():
        return host
    _, addrs = dns(host)
    if not addrs:
        raise OSError(errno.EHOSTUNREACH, "no address")
    return addrs[0]


def main(argv):
    act = argv[0]
    try:
        if act == "tcp":
            s = socket.create_connection((argv[1], int(argv[2])), timeout=5)
            if len(argv) > 3:
                s.sendall(argv[3].encode())
                s.shutdown(socket.SHUT_WR)
            print(s.recv(1000).decode() or "EOF")
        elif act == "hold":
            s = socket.create_connection((argv[1], int(argv[2])), timeout=5)
            s.settimeout(30)
            print("READY", flush=True)
            while True:
                b = s.recv(65536)
                if not b:
                    print("EOF")
                    break
        elif act == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(2)
            s.sendto(argv[3].encode(), (argv[1], int(argv[2])))
            print(s.recv(1000).decode())
        elif act == "dns":
            rcode, addrs = dns(argv[1], len(argv) > 2)
            print(" ".join([str(rcode)] + addrs))
        elif act == "fetch":
            rcode, addrs = dns(argv[1])
            if not addrs:
                print("NOADDR %d" % rcode)
                return
            s = socket.create_connection((addrs[0], int(argv[2])), timeout=5)
            print(s.recv(1000).decode() or "EOF")
        elif act == "bulk":
            s = socket.create_connection((argv[1], int(argv[2])), timeout=10)
            total = 0
            while True:
                b = s.recv(1 << 20)
                if not b:
                    break
                total += len(b)
            print(total)
        elif act == "connects":
            import time

            times = []
            for _ in range(int(argv[3])):
                t = time.perf_counter()
                s = socket.create_connection((argv[1], int(argv[2])), timeout=5)
                s.recv(16)
                times.append(time.perf_counter() - t)
                s.close()
            times.sort()
            print(int(times[len(times) // 2] * 1e6))
        elif act == "http":
            s = socket.create_connection((address(argv[1]), int(argv[2])), timeout=5)
            target = argv[4] if len(argv) > 4 else "/echo"
            host = argv[5] if len(argv) > 5 else argv[1]
            print(request(s, host, argv[3], target))
        elif act == "https":
            import ssl

            ctx = ssl.create_default_context(cafile=argv[4])
            s = socket.create_connection((address(argv[1]), int(argv[2])), timeout=5)
            try:
                t = ctx.wrap_socket(s, server_hostname=argv[3])
            except ssl.SSLError as e:
                print("ERR ssl " + str(e.reason))
                return
            target = argv[6] if len(argv) > 6 else "/echo"
            host = argv[7] if len(argv) > 7 else argv[3]
            print(request(t, host, argv[5], target))
        else:
            print("ERR usage")
    except OSError as e:
        print(err(e))


main(sys.argv[1:])
