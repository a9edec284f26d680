"""Hooks of the schemathesis run against `burrow serve` (core/cli/tests/schemathesis.rs).

They drop only check failures that no OpenAPI document can rule out, and
nothing else:

- An answer relayed by the demand gateway (`/gw/...`) with `Via: 1.1 burrow`
  is the target's own: any status, any content (the document says so in
  `GatewayUpstream`). Only the gateway's own answers are burrow's to check.
- A schema-valid request refused for the server's state, not its shape
  (`positive_data_acceptance`, ST202): a `session` that is not live, a host
  directory (a mount's, or an image given as a path) that does not exist on
  the server's host, a second mount on one target, a change a `vm`
  sandbox's driver refuses (less than 64 MiB, more than 8 vCPUs: the
  document cannot know the sandbox's driver), a network for a `runsc`
  sandbox (which has none yet), two published ports on one host address,
  a limit the driver cannot
  enforce on the server's host (`pids_limit` of a `vm` sandbox; any limit
  where no cgroup controller is there for it; `disk_mb` of an unprivileged
  user's container) without best-effort limits.
  And one that was not schema-valid after all: the stateful phase infers
  that the ids `GET /v1/gateway/targets` lists feed `PUT
  /v1/gateway/targets/{id}`, whose `id` must be a sandbox's; a URL
  target's `tg_...` id breaks its pattern. And a network rule whose port
  range ends before it starts (`9000-8000`), which no `pattern` can rule
  out. Each is refused with 422 and the code and subject listed below;
  any other refusal still fails the run.
- A snapshot of a sandbox whose registry image is not in the server's
  image store (never started, never pulled): `invalid_image`, 422, the
  image its subject; a snapshot never reaches out to a registry.
- The run's token is a tenant's (`st`, not the default tenant's): a host
  directory (an image given as a path, a mount's source) or a published
  port is refused to a tenant's sandboxes (`invalid_config`, the field its
  subject), whatever its shape.
- What only the default tenant may choose: syscalls added to a sandbox's
  seccomp filter (`seccomp_allow`) and no default limits
  (`default_limits: false`) are refused to the run's tenant
  (`invalid_config`, that field); a syscall name the server's host's
  filter does not know is `invalid_config`, `seccomp_allow[N]`.
- A name holding an invisible or text-reordering character the name's
  `pattern` cannot list (some are beyond the BMP), wherever the request
  carries it (the path, a body's `name`, a fork's `names`):
  `invalid_name`.
- The server's host and private networks are not the tenant's: an allow
  rule naming such an address (`invalid_config`, the rule's path its
  subject), an image whose registry is one (`invalid_config`, `image`), and
  a URL target or webhook at one (`invalid_argument`, `url`) are refused
  however well-formed (the egress ceiling and the outbound guard; the run's
  webhooks go to 127.0.0.1's discard port, which its server allows).
- A preview link's `port` on a URL target (the target's kind is the
  server's state) and a `ttl` that is not a duration of at most 24h (the
  document types it as a string): `invalid_argument`, that subject.
- A `501` (`unsupported`) to a full snapshot (`kind: "full"`) where the
  server's capabilities say `full_snapshots: false` (its default driver
  cannot save memory): the document lists it as that operation's answer
  for a backend or driver without the capability.
- A `502` or `504` that says something upstream of burrow failed: a start
  that could not fetch its image (`start_failed`: the run has no registry to
  reach), a gateway target that does not answer (`protocol`), a deadline
  (`timeout`). These are documented answers of exactly the operations that
  wait on an upstream; a `500` (`internal`) still fails the run.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import urllib.parse

import schemathesis

# (error code, subject) of the refusals that depend on state. For schema-valid
# data the subject alone tells the reason: a host path that passed the
# pattern can only be refused for not being a directory on the server's
# host, a mount target that passed it only for being taken twice.
STATE_REFUSALS = [
    ("invalid_argument", re.compile(r"session")),
    ("invalid_config", re.compile(r"mounts\[[0-9]+\]\.source\.host")),
    ("invalid_config", re.compile(r"mounts\[[0-9]+\]\.target")),
]


# Codes of the 502/504 answers: an upstream of burrow failed.
UPSTREAM_FAILURES = {(502, "start_failed"), (502, "protocol"), (504, "timeout")}


SANDBOX_ID = re.compile(r"sb_[0-7][0-9a-hjkmnp-tv-z]{25}")


def _error(response) -> dict:
    """The error envelope's `error` object ({} when the body is not one)."""
    try:
        err = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return {}
    return err if isinstance(err, dict) else {}


def _refusal(response) -> dict:
    """The error of a 422 answer ({} for any other)."""
    return _error(response) if response.status_code == 422 else {}


def _relayed(response) -> bool:
    return any("burrow" in v for v in response.headers.get("via", []))


def _state_refusal(response) -> bool:
    err = _refusal(response)
    code, subject = err.get("code"), err.get("subject", "")
    return any(code == c and s.fullmatch(subject) for c, s in STATE_REFUSALS)


LIMITS = ("memory_mb", "cpus", "pids_limit", "disk_mb")


def _limit_refused(case, response) -> bool:
    # A change's limits (PATCH) or a new sandbox's (its config): what the
    # driver and the host can enforce is the server's, not the document's.
    err = _refusal(response)
    return (
        case.method.upper() in ("PATCH", "POST", "PUT")
        and err.get("code") == "invalid_config"
        and err.get("subject") in LIMITS
    )


def _network_refused(case, response) -> bool:
    # A network where the runtime has none yet (`runsc`): a new sandbox's
    # config says so, a change's sandbox is the server's.
    err = _refusal(response)
    if err.get("code") != "invalid_config" or err.get("subject") != "network":
        return False
    if case.method.upper() == "PATCH":
        return True
    body = case.body if isinstance(case.body, dict) else {}
    config = body.get("config") or {}
    return config.get("runtime") == "runsc"


def _ports_twice(case, response) -> bool:
    # Two published ports on one host address and protocol: each matches
    # the `pattern`, no schema says "unique by address".
    err = _refusal(response)
    if err.get("code") != "invalid_config" or err.get("subject") != "ports":
        return False
    body = case.body if isinstance(case.body, dict) else {}
    ports = (body.get("config") or {}).get("ports") or []
    return isinstance(ports, list) and len(ports) > 1


SECRET_PATH = re.compile(r"secrets(?:\[([0-9]+)\]\.(name|hosts\[([0-9]+)\]|headers\[([0-9]+)\]))?")
# Header names a secret may not name (burrow_net::secrets::FORBIDDEN_HEADERS):
# each is a token the schema's `pattern` accepts.
SECRET_FORBIDDEN_HEADERS = frozenset(
    "host content-length transfer-encoding connection keep-alive proxy-connection"
    " te trailer upgrade expect accept-encoding".split()
)


def _preview_refused(case, response) -> bool:
    # A preview link's port is for a sandbox target only (a URL target has
    # none: the target's kind is the server's state), and its ttl is a
    # duration of at most 24h (any string passes the document's type).
    err = _refusal(response)
    return (
        case.operation.path == "/v1/gateway/targets/{id}/previews"
        and err.get("code") == "invalid_argument"
        and err.get("subject") in ("port", "ttl")
    )


def _secret_refused(case, response) -> bool:
    # What no schema says of secrets: a sandbox without a network has
    # nowhere to send one; two of one name, or a name also in `env`; a
    # host whose last label is all digits but is no IPv4 address; a
    # header that routes or frames a request, or one named twice (in any
    # case).
    err = _refusal(response)
    m = SECRET_PATH.fullmatch(err.get("subject", "")) if err.get("code") == "invalid_config" else None
    if m is None:
        return False
    body = case.body if isinstance(case.body, dict) else {}
    config = body.get("config") or {}
    secrets = config.get("secrets") or []
    if m.group(1) is None:
        return config.get("network") in (None, False, "none")
    try:
        secret = secrets[int(m.group(1))]
    except (IndexError, TypeError, ValueError):
        return False
    if m.group(2) == "name":
        names = [s.get("name") for s in secrets if isinstance(s, dict)]
        return names.count(secret.get("name")) > 1 or secret.get("name") in (config.get("env") or {})
    if m.group(4) is not None:
        try:
            j = int(m.group(4))
            headers = [h.lower() for h in secret["headers"][: j + 1]]
        except (KeyError, TypeError, ValueError, AttributeError):
            return False
        return len(headers) == j + 1 and (headers[j] in SECRET_FORBIDDEN_HEADERS or headers[j] in headers[:j])
    try:
        host = secret["hosts"][int(m.group(3))]
    except (KeyError, IndexError, TypeError, ValueError):
        return False
    return host.rstrip(".").rsplit(".", 1)[-1].isdigit()


HOST_MOUNT = re.compile(r"mounts\[([0-9]+)\]\.source\.host")


def _host_refused_to_tenant(case, response) -> bool:
    # The run's token is a tenant's (not the default tenant's): its
    # sandboxes may not reach the server's host, so an image given as a
    # host path, a host directory mount and published ports are refused
    # (`invalid_config` naming the field) however well-formed.
    err = _refusal(response)
    if err.get("code") != "invalid_config":
        return False
    body = case.body if isinstance(case.body, dict) else {}
    config = body.get("config") or {}
    subject = err.get("subject", "")
    if subject == "image":
        image = config.get("image")
        return isinstance(image, str) and image.startswith(("/", ".", "oci:"))
    if subject == "ports":
        return bool(config.get("ports"))
    m = HOST_MOUNT.fullmatch(subject)
    if m is None:
        return False
    try:
        return "host" in config["mounts"][int(m.group(1))]["source"]
    except (KeyError, IndexError, TypeError, ValueError):
        return False


def _operators_own_refused_to_tenant(case, response) -> bool:
    # What only the default tenant may choose for a sandbox: syscalls added
    # to its seccomp filter, and no default limits (`invalid_config`
    # naming the field) however well-formed.
    err = _refusal(response)
    if err.get("code") != "invalid_config":
        return False
    body = case.body if isinstance(case.body, dict) else {}
    config = body.get("config") or {}
    subject = err.get("subject", "")
    if subject == "seccomp_allow":
        return bool(config.get("seccomp_allow"))
    if subject == "default_limits":
        return config.get("default_limits") is False
    return False


def _unknown_syscall(case, response) -> bool:
    # A syscall name that matches the pattern but that the server's host's
    # filter does not know (the table is the host's, not the document's).
    err = _refusal(response)
    return err.get("code") == "invalid_config" and bool(
        re.fullmatch(r"(?:config\.)?seccomp_allow\[[0-9]+\]", err.get("subject", ""))
    )


# `is_hidden_char` in core/burrow/src/model/name.rs (Unicode 15's format
# characters, the line and paragraph separators, the Hangul fillers), as
# inclusive ranges of code points.
HIDDEN_CHARS = [
    (0x00AD, 0x00AD), (0x0600, 0x0605), (0x061C, 0x061C), (0x06DD, 0x06DD),
    (0x070F, 0x070F), (0x0890, 0x0891), (0x08E2, 0x08E2), (0x115F, 0x1160),
    (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E), (0x2060, 0x2064),
    (0x2066, 0x206F), (0x3164, 0x3164), (0xFEFF, 0xFEFF), (0xFFA0, 0xFFA0),
    (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
]


def _hidden_char(c: str) -> bool:
    return any(lo <= ord(c) <= hi for lo, hi in HIDDEN_CHARS)


def _name_with_hidden_char(case, response) -> bool:
    # A name the pattern lets through (it cannot list every invisible or
    # text-reordering character: some are beyond the BMP) but that holds
    # one: `invalid_name`.
    if _error(response).get("code") != "invalid_name":
        return False
    names = [str(v) for v in (case.path_parameters or {}).values()]
    # A stateful step's parameters may arrive as they go in the URL.
    names += [urllib.parse.unquote(n) for n in names]
    url = getattr(getattr(response, "request", None), "url", "")
    names += [urllib.parse.unquote(str(url))]
    # Every name of the body: `name`, a fork's `names`, a pool's, ...
    names += list(_strings(case.body))
    return any(isinstance(n, str) and any(_hidden_char(c) for c in n) for n in names)


def _strings(value):
    """Every string in a JSON value, at any depth."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _inferred_non_sandbox_id(case) -> bool:
    if case.method.upper() != "PUT" or case.operation.path != "/v1/gateway/targets/{id}":
        return False
    return not SANDBOX_ID.fullmatch(str((case.path_parameters or {}).get("id", "")))


def _missing_image_path(case, response) -> bool:
    # An image given as a path (`/`, `./`, `../`, `oci:`) must exist on the
    # server's host; a registry reference that passed the pattern must not
    # be refused.
    if _refusal(response).get("code") != "invalid_image":
        return False
    body = case.body if isinstance(case.body, dict) else {}
    image = (body.get("config") or {}).get("image")
    return isinstance(image, str) and image.startswith(("/", "./", "../", "oci:"))


RULE_PATH = re.compile(r"(?:config\.)?network\.(allow|deny)\[([0-9]+)\]")


def _descending_port_range(case, response) -> bool:
    # A network rule that matches its `pattern` but has a port range that
    # ends before it starts (`9000-8000`): no regular expression says
    # "not above". The subject is the rule's path in the body.
    err = _refusal(response)
    m = RULE_PATH.fullmatch(err.get("subject", "")) if err.get("code") == "invalid_config" else None
    if m is None:
        return False
    body = case.body if isinstance(case.body, dict) else {}
    network = (body.get("config") or {}).get("network") if "config" in body else body.get("network")
    try:
        rule = network[m.group(1)][int(m.group(2))]
    except (KeyError, IndexError, TypeError):
        return False
    rest = rule[4:] if rule[:4].lower() in ("tcp:", "udp:") else rule
    ports = rest.split("]", 1)[1][1:] if rest.startswith("[") else rest.partition(":")[2]
    for part in ports.split(","):
        first, _, last = part.partition("-")
        if last and first.isdigit() and last.isdigit() and int(first) > int(last):
            return True
    return False


def _address(host: str):
    """The address `host` spells (any spelling a resolver takes), or None."""
    h = host.strip().rstrip(".")
    if h.startswith("[") and h.endswith("]"):
        h = h[1:-1]
    h = h.split("%", 1)[0]
    try:
        return ipaddress.ip_address(h)
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.inet_aton(h))
    except (OSError, ValueError):
        return None


def _internal_host(host: str) -> bool:
    """Whether `host` (a name, an address, a CIDR) is the server's host or a
    private network's, as the egress ceiling and the outbound guard see it."""
    h = host.strip().rstrip(".").lower()
    if h.startswith("*."):
        h = h[2:]
    if h in ("localhost", "localhost.localdomain") or h.endswith(".localhost"):
        return True
    a = _address(h.split("/", 1)[0].strip("[]") if "/" in h else h)
    if a is None:
        return False
    if isinstance(a, ipaddress.IPv6Address):
        a = a.ipv4_mapped or a.sixtofour or a
    return not a.is_global or a.is_multicast


def _rule_host(rule: str) -> str:
    rest = rule[4:] if rule[:4].lower() in ("tcp:", "udp:") else rule
    if rest.startswith("["):
        return rest.split("]", 1)[0] + "]"
    return rest.split(":", 1)[0]


def _internal_refused(case, response) -> bool:
    # What the tenant may not reach, however well-formed its shape.
    err = _refusal(response)
    code, subject = err.get("code"), err.get("subject", "")
    body = case.body if isinstance(case.body, dict) else {}
    if code == "invalid_argument" and subject == "url":
        url = body.get("url")
        if not isinstance(url, str) or "://" not in url:
            return False
        authority = url.split("://", 1)[1].split("/", 1)[0]
        if authority.startswith("["):
            host = authority.split("]", 1)[0] + "]"
        else:
            host = authority.rsplit(":", 1)[0]
        return _internal_host(host)
    if code != "invalid_config":
        return False
    config = body.get("config") if "config" in body else body
    config = config if isinstance(config, dict) else {}
    if subject == "image":
        image = config.get("image")
        if not isinstance(image, str) or "/" not in image:
            return False
        first = image.split("/", 1)[0]
        if not ("." in first or ":" in first or first == "localhost"):
            return False
        host = first.split("]", 1)[0] + "]" if first.startswith("[") else first.rsplit(":", 1)[0]
        return _internal_host(host)
    m = RULE_PATH.fullmatch(subject)
    if m is None or m.group(1) != "allow":
        return False
    try:
        rule = config["network"]["allow"][int(m.group(2))]
    except (KeyError, IndexError, TypeError, ValueError):
        return False
    return isinstance(rule, str) and _internal_host(_rule_host(rule))


@schemathesis.hook
def filter_failure(ctx, failure, case, response) -> bool:
    if response is None:
        return True
    if case.operation.path.startswith("/gw/") and _relayed(response):
        return False
    if failure.code == "ST202" and (
        _state_refusal(response)
        or _missing_image_path(case, response)
        or _limit_refused(case, response)
        or _inferred_non_sandbox_id(case)
        or _descending_port_range(case, response)
        or _network_refused(case, response)
        or _ports_twice(case, response)
        or _preview_refused(case, response)
        or _secret_refused(case, response)
        or _snapshot_of_unpulled_image(case, response)
        or _host_refused_to_tenant(case, response)
        or _operators_own_refused_to_tenant(case, response)
        or _unknown_syscall(case, response)
        or _name_with_hidden_char(case, response)
        or _internal_refused(case, response)
    ):
        return False
    if failure.code == "ST101":
        code = _error(response).get("code")
        if code is None and case.method.upper() == "HEAD" and case.operation.path.startswith("/gw/"):
            # The answer to HEAD has no body: the one to GET says the code.
            code = "protocol"
        if (response.status_code, code) in UPSTREAM_FAILURES:
            return False
        if _full_snapshot_unsupported(case, response, code):
            return False
    return True


def _snapshot_of_unpulled_image(case, response) -> bool:
    return (
        case.method.upper() == "POST"
        and case.operation.path == "/v1/sandboxes/{id}/snapshot"
        and _refusal(response).get("code") == "invalid_image"
    )


def _full_snapshot_unsupported(case, response, code) -> bool:
    body = case.body if isinstance(case.body, dict) else {}
    return (
        response.status_code == 501
        and code == "unsupported"
        and case.method.upper() == "POST"
        and case.operation.path == "/v1/sandboxes/{id}/snapshot"
        and body.get("kind") == "full"
    )


# A webhook posts to the URL it was given: every schema-valid URL is
# pointed at 127.0.0.1's discard port, so the run reaches no other host
# (its deliveries fail there, and are retried and given up, unseen).
WEBHOOK_URL = re.compile(r"^https?://[^/@?#\s]+(/[^\s#]*)?$")


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    if case.operation.path == "/v1/webhooks" and case.method.upper() == "POST":
        body = case.body
        if isinstance(body, dict) and isinstance(body.get("url"), str):
            if WEBHOOK_URL.match(body["url"]) and len(body["url"]) <= 2048:
                body["url"] = "http://127.0.0.1:9/hook"
