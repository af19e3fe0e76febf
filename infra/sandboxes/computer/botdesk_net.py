"""A bot's network policy, enforced where no bot reaches: in the screen gateway's process
(botdesk-screen, uid 990), which a bot can neither signal, trace nor replace.

start.sh sends every TCP connection a bot (uid 1000 and up) opens to an address that is not this
computer's own to this module's port (iptables REDIRECT by uid, in the computer's own network
namespace; a bot's other traffic is refused there by policy, see `botdesk-helper net-policy`).
Here the bot's policy decides: the connection is joined to where it was going, or refused. A
refused web page gets a page saying why (over TLS too: with a certificate whose key only the
services read, which the bot's Chromium is told to accept); anything else is closed. Each refusal
is kept (the last 2,000; the same one at most once in 10 s) for the engine's `net` request.

Policies are files /tmp/botdesk-policy/<uid>.json that only root writes (`botdesk-helper
net-policy`); a change is seen within half a second, and connections already open are checked
again then: those the new policy refuses are closed. A bot without a file is `open`.
  {"mode": "open"}                   the internet: public addresses only (never this machine,
                                     the LAN, link-local and metadata addresses, other computers)
  {"mode": "offline"}                nothing
  {"mode": "allow", "allow": [..]}   only those: a domain (and its subdomains), or an address
                                     (a.b.c.d or a.b.c.d/n), even a private one
A domain's connection is let through when the name the client sent (TLS SNI or the HTTP Host)
is on the list and the address it went to is one the name resolves to here; the host's own
addresses, loopback and link-local stay refused to a domain (not to an address listed as such).
"""
import asyncio, collections, ipaddress, json, os, secrets, socket, struct, sys, time

PORT = 3129
POLICIES = "/tmp/botdesk-policy"
BLOCK_KEY = "/tmp/botdesk-gw/blocked.key"
BLOCK_CERT = "/tmp/botdesk-gw/blocked.crt"
PUBLIC = "/tmp/botdesk-net"
SO_ORIGINAL_DST = 80
# What `open` never reaches (start.sh fences the same ranges for every other protocol).
PRIVATE = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.168.0.0/16", "198.18.0.0/15", "224.0.0.0/4", "240.0.0.0/4")]
NEVER_BY_NAME = [ipaddress.ip_network(n) for n in ("0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4")]
MAX_EVENTS = 2000
PEEK_BYTES = 16384
PEEK_SECONDS = 3
CONNECT_SECONDS = 15
RESOLVE_SECONDS = 30

BOOT = secrets.token_hex(8)
EVENTS = collections.deque(maxlen=MAX_EVENTS)
SEQ = [0]
LAST_SAID = {}
LIVE = set()
# Rechecks under way (a task the loop holds only weakly is kept here until it ends).
RECHECKS = set()


class Policies:
    def __init__(self):
        self.stamp = None
        self.by_uid = {}
        self.fence = []

    def reload(self):
        """Reads the policies again if their folder changed; whether it did."""
        try:
            stamp = os.stat(POLICIES).st_mtime_ns
        except FileNotFoundError:
            stamp = None
        if stamp == self.stamp:
            return False
        self.stamp, by_uid = stamp, {}
        try:
            names = os.listdir(POLICIES)
        except FileNotFoundError:
            names = []
        for name in names:
            path = os.path.join(POLICIES, name)
            try:
                if name == "fence":
                    with open(path) as f:
                        self.fence = [ipaddress.ip_network(n, strict=False) for n in f.read().split()]
                elif name.endswith(".json") and name[:-5].isdigit():
                    with open(path) as f:
                        by_uid[int(name[:-5])] = parse_policy(json.load(f))
            except (OSError, ValueError) as e:
                # Only root writes here, checked; a file that cannot be read refuses everything.
                print(f"botdesk-net: policy {name}: {e}", file=sys.stderr)
                if name.endswith(".json") and name[:-5].isdigit():
                    by_uid[int(name[:-5])] = {"mode": "offline", "nets": [], "domains": []}
        self.by_uid = by_uid
        return True

    def of(self, uid):
        return self.by_uid.get(uid, {"mode": "open", "nets": [], "domains": []})


def parse_policy(p):
    mode = p.get("mode") if isinstance(p, dict) else None
    if mode not in ("open", "offline", "allow"):
        raise ValueError(f"unknown mode {mode!r}")
    nets, domains = [], []
    for entry in p.get("allow", []) if mode == "allow" else []:
        try:
            nets.append(ipaddress.IPv4Network(entry, strict=False))
        except ValueError:
            domains.append(str(entry).lower().rstrip("."))
    return {"mode": mode, "nets": nets, "domains": domains}


POLICY = Policies()


def refusal(uid, host, port, why):
    """Keeps a refusal for the engine (the same one at most once in 10 s)."""
    now = time.time()
    key = (uid, host, port, why)
    if now - LAST_SAID.get(key, 0) < 10:
        return
    if len(LAST_SAID) > 4 * MAX_EVENTS:
        LAST_SAID.clear()
    LAST_SAID[key] = now
    SEQ[0] += 1
    EVENTS.append({"seq": SEQ[0], "at": int(now * 1000), "uid": uid, "host": host, "port": port, "why": why})


def events(uid, after, most=100):
    """The `net` answer: this boot's refusals of `uid` after `after`, oldest first."""
    picked = [dict((k, v) for k, v in e.items() if k != "uid") for e in EVENTS if e["uid"] == uid and e["seq"] > after][:most]
    return {"boot": BOOT, "next": SEQ[0], "events": picked}


def hex_addr(ip, port):
    return "%08X:%04X" % (struct.unpack("<I", socket.inet_aton(str(ip)))[0], port)


def uid_of(peer, dst, port):
    """The uid owning the connecting socket: the one at `peer`, connected to `dst`:`port`. When
    netfilter gave the connection another source port here (its port was in use towards us, for
    another address), the socket is the one connected from the peer's address to `dst`:`port`
    (this process's own excepted), if all such belong to one uid. The kernel lists sockets a page
    at a time, and one can slip between pages while others come and go: read up to 5 times."""
    exact, far = hex_addr(peer[0], peer[1]), hex_addr(dst, port)
    ip = exact.split(":")[0]
    me = str(os.getuid())
    for _ in range(5):
        uids = set()
        with open("/proc/net/tcp") as f:
            next(f)
            for line in f:
                parts = line.split()
                # Established (01), with a socket (a closed one's leftovers have inode 0).
                if len(parts) <= 9 or parts[3] != "01" or parts[9] == "0":
                    continue
                if parts[1] == exact and parts[2] == far:
                    return int(parts[7])
                if parts[2] == far and parts[1].split(":")[0] == ip and parts[7] != me:
                    uids.add(int(parts[7]))
        if len(uids) == 1:
            return uids.pop()
    return None


def private(addr):
    return any(addr in n for n in PRIVATE) or any(addr in n for n in POLICY.fence)


def by_address(policy, dst):
    """(True|False|None, why): None when the name the client sends decides."""
    mode = policy["mode"]
    if mode == "offline":
        return False, "this bot is offline"
    if mode == "open":
        return (False, "a private address (this machine, the LAN or another computer)") if private(dst) else (True, None)
    if any(dst in n for n in policy["nets"]):
        return True, None
    return None, None


RESOLVED = {}


async def resolves_to(name, dst):
    """Whether `name` resolves to `dst` here (answers kept 30 s; a name's addresses add up)."""
    now = time.monotonic()
    hit = RESOLVED.get(name)
    if hit and now - hit[0] < RESOLVE_SECONDS and dst in hit[1]:
        return True
    try:
        infos = await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo(name, None, family=socket.AF_INET, type=socket.SOCK_STREAM), 5)
    except (OSError, asyncio.TimeoutError, UnicodeError):
        return False
    addrs = {ipaddress.IPv4Address(i[4][0]) for i in infos}
    if hit and now - hit[0] < RESOLVE_SECONDS:
        addrs |= hit[1]
    if len(RESOLVED) > 1000:
        RESOLVED.clear()
    RESOLVED[name] = (hit[0] if hit and now - hit[0] < RESOLVE_SECONDS else now, addrs)
    return dst in addrs


async def by_name(policy, dst, name):
    if not name or not any(name == d or name.endswith("." + d) for d in policy["domains"]):
        return False, "not on the allowlist"
    if any(dst in n for n in NEVER_BY_NAME) or any(dst in n for n in POLICY.fence):
        return False, f"{name} leads to {dst}, which no name may reach"
    if not await resolves_to(name, dst):
        return False, f"{name} does not lead to {dst} here"
    return True, None


async def decide(policy, dst, name):
    ok, why = by_address(policy, dst)
    if ok is None:
        ok, why = await by_name(policy, dst, name)
    return ok, why


def sni(head):
    """The server name of a TLS ClientHello, or None."""
    try:
        if head[0] != 0x16 or head[5] != 1:
            return None
        i = 9 + 2 + 32  # record header, handshake header, version, random
        i += 1 + head[i]  # session id
        i += 2 + int.from_bytes(head[i:i + 2], "big")  # cipher suites
        i += 1 + head[i]  # compression methods
        end = i + 2 + int.from_bytes(head[i:i + 2], "big")
        i += 2
        while i + 4 <= end:
            kind, size = int.from_bytes(head[i:i + 2], "big"), int.from_bytes(head[i + 2:i + 4], "big")
            if kind == 0:
                body = head[i + 4:i + 4 + size]
                if body[2] == 0:
                    n = int.from_bytes(body[3:5], "big")
                    return body[5:5 + n].decode("ascii").lower().rstrip(".")
            i += 4 + size
    except (IndexError, UnicodeDecodeError):
        return None
    return None


def http_host(head):
    """The Host of an HTTP/1 request head, or None."""
    if b"\r\n" not in head or not head.split(b" ", 1)[0].isalpha():
        return None
    for line in head.split(b"\r\n\r\n", 1)[0].split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"host":
            host = v.strip().decode("ascii", "replace").lower()
            if host.startswith("["):
                return None
            return host.rsplit(":", 1)[0].rstrip(".") if ":" in host else host.rstrip(".")
    return None


async def peek(reader):
    """What the client sends first: a whole TLS ClientHello or an HTTP request head, or what came
    within PEEK_SECONDS (nothing, for a protocol where the server speaks first)."""
    head = b""
    deadline = time.monotonic() + PEEK_SECONDS
    while len(head) < PEEK_BYTES:
        if head[:1] == b"\x16" and len(head) >= 5 and len(head) >= 5 + int.from_bytes(head[3:5], "big"):
            break
        if head[:1] != b"\x16" and b"\r\n\r\n" in head:
            break
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            more = await asyncio.wait_for(reader.read(PEEK_BYTES - len(head)), left)
        except asyncio.TimeoutError:
            break
        if not more:
            break
        head += more
    return head


def page(host, port, why):
    body = f"""<!doctype html><html><head><meta charset="utf-8"><title>Blocked by Botdesk</title></head>
<body style="font:16px sans-serif;margin:3em;max-width:40em;color:#222">
<h1 style="font-size:1.6em">Botdesk blocked this page</h1>
<p><b>{esc(host)}:{port}</b>: {esc(why)}.</p>
<p>The person who runs this bot chose where it may go. They can change it in the bot's settings,
or with <code>botdesk bot network</code>.</p></body></html>""".encode()
    return (b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/html; charset=utf-8\r\ncache-control: no-store\r\n"
            b"connection: close\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def esc(s):
    return str(s).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


TLS = [None]


def tls():
    """The block page's TLS (loaded on the first refused TLS connection: the gateway starts
    without the ssl module)."""
    if TLS[0] is None:
        if sys.modules.get("ssl", 0) is None:
            del sys.modules["ssl"]
        import ssl
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(BLOCK_CERT, BLOCK_KEY)
        ctx.set_alpn_protocols(["http/1.1"])
        TLS[0] = (ssl, ctx)
    return TLS[0]


async def refuse(head, reader, writer, host, port, why):
    """Answers a refused web request with the page; anything else is closed."""
    try:
        if head[:1] == b"\x16":
            await tls_page(head, reader, writer, page(host, port, why))
        elif http_host(head) is not None:
            writer.write(page(host, port, why))
            await writer.drain()
    except (OSError, asyncio.TimeoutError, ValueError) as e:
        print(f"botdesk-net: block page for {host}:{port}: {e}", file=sys.stderr)


async def tls_page(head, reader, writer, response):
    ssl, ctx = tls()
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing, server_side=True)
    incoming.write(head)

    async def more():
        writer.write(outgoing.read())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(65536), 5)
        if not data:
            raise ValueError("closed during the block page")
        incoming.write(data)

    while True:
        try:
            conn.do_handshake()
            break
        except ssl.SSLWantReadError:
            await more()
    request = b""
    while b"\r\n\r\n" not in request and len(request) < PEEK_BYTES:
        try:
            request += conn.read(65536)
        except ssl.SSLWantReadError:
            await more()
    conn.write(response)
    writer.write(outgoing.read())
    await writer.drain()


async def pump(reader, writer, first=None):
    """Copies until the end; `first` sees the first bytes (the client's: the name it sends)."""
    try:
        while data := await reader.read(65536):
            if first is not None:
                first(data)
                first = None
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (OSError, asyncio.CancelledError):
        pass


class Conn:
    def __init__(self, uid, dst, port, name, writers):
        self.uid, self.dst, self.port, self.name, self.writers = uid, dst, port, name, writers

    def close(self):
        for w in self.writers:
            try:
                w.transport.abort()
            except Exception:
                pass


async def serve(reader, writer):
    head = b""
    try:
        sock = writer.get_extra_info("socket")
        try:
            raw = sock.getsockopt(socket.SOL_IP, SO_ORIGINAL_DST, 16)
            port, packed = struct.unpack("!2xH4s8x", raw)
            dst = ipaddress.IPv4Address(packed)
        except (OSError, ValueError, struct.error):
            return
        if dst.is_loopback:
            return
        uid = uid_of(writer.get_extra_info("peername"), dst, port)
        if uid is None:
            # Not a bot's connection that could be told apart: refused, saying so.
            head = await peek(reader)
            await refuse(head, reader, writer, sni(head) or http_host(head) or str(dst), port, "Botdesk could not tell which bot opened it")
            return
        # A policy set a moment ago holds for the next connection (a stat of its folder).
        if POLICY.reload():
            task = asyncio.get_running_loop().create_task(recheck())
            RECHECKS.add(task)
            task.add_done_callback(RECHECKS.discard)
        policy = POLICY.of(uid)
        ok, why = by_address(policy, dst)
        name = None
        if ok is not True:
            head = await peek(reader)
            name = sni(head) or http_host(head)
            if ok is None:
                ok, why = await by_name(policy, dst, name)
        if not ok:
            host = name or str(dst)
            refusal(uid, host, port, why)
            await refuse(head, reader, writer, host, port, why)
            return
        try:
            up_r, up_w = await asyncio.wait_for(asyncio.open_connection(str(dst), port), CONNECT_SECONDS)
        except (OSError, asyncio.TimeoutError):
            return
        conn = Conn(uid, dst, port, name, (writer, up_w))
        LIVE.add(conn)

        def named(data):
            # Let through by its address alone: the name its client sends is kept, so a later
            # policy that lists that name keeps the connection open.
            conn.name = sni(data) or http_host(data)

        try:
            if head:
                up_w.write(head)
            await asyncio.gather(pump(reader, up_w, None if head else named), pump(up_r, writer))
        finally:
            LIVE.discard(conn)
            conn.close()
    except (OSError, asyncio.TimeoutError):
        pass
    finally:
        # Closed in order (a refusal's page is all sent before the end), within 5 s.
        try:
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), 5)
        except Exception:
            writer.transport.abort()


async def recheck():
    """Closes the open connections the policies now refuse."""
    for conn in list(LIVE):
        ok, why = await decide(POLICY.of(conn.uid), conn.dst, conn.name)
        if not ok and conn in LIVE:
            LIVE.discard(conn)
            refusal(conn.uid, conn.name or str(conn.dst), conn.port, f"{why} (an open connection was closed)")
            conn.close()


async def watch():
    """Reads changed policies within half a second, and closes the open connections they refuse."""
    while True:
        await asyncio.sleep(0.5)
        try:
            changed = POLICY.reload()
        except OSError as e:
            print(f"botdesk-net: reading the policies: {e}", file=sys.stderr)
            continue
        if changed:
            await recheck()


def make_block_certificate():
    """The block page's key and certificate (the services' alone), and its public key's SHA-256
    in /tmp/botdesk-net/spki for the bots' Chromium (`--ignore-certificate-errors-spki-list`)."""
    import subprocess
    if not os.path.exists(BLOCK_CERT):
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                        "-keyout", BLOCK_KEY, "-out", BLOCK_CERT, "-subj", "/CN=Blocked by Botdesk", "-days", "3650"],
                       check=True, capture_output=True)
    pub = subprocess.run(["openssl", "x509", "-in", BLOCK_CERT, "-pubkey", "-noout"], check=True, capture_output=True).stdout
    der = subprocess.run(["openssl", "pkey", "-pubin", "-outform", "der"], input=pub, check=True, capture_output=True).stdout
    import base64, hashlib
    tmp = os.path.join(PUBLIC, "spki.tmp")
    with open(tmp, "w") as f:
        f.write(base64.b64encode(hashlib.sha256(der).digest()).decode() + "\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, os.path.join(PUBLIC, "spki"))


async def start(listening):
    """Serves the bots' redirected connections on `listening` (127.0.0.1:3129, taken by the
    launcher before any bot runs)."""
    POLICY.reload()
    await asyncio.get_running_loop().run_in_executor(None, make_block_certificate)
    server = await asyncio.start_server(serve, sock=listening, limit=PEEK_BYTES)
    asyncio.get_running_loop().create_task(watch())
    return server


def self_test():
    """The parsers, on what Chromium and curl send."""
    name = b"example.org"
    ext = (0).to_bytes(2, "big") + (len(name) + 5).to_bytes(2, "big") + (len(name) + 3).to_bytes(2, "big") + b"\0" + len(name).to_bytes(2, "big") + name
    body = b"\x03\x03" + b"\0" * 32 + b"\0" + b"\x00\x02\xc0\x2f" + b"\x01\x00" + len(ext).to_bytes(2, "big") + ext
    hs = b"\x01" + len(body).to_bytes(3, "big") + body
    hello = b"\x16\x03\x01" + len(hs).to_bytes(2, "big") + hs
    assert sni(hello) == "example.org", sni(hello)
    assert http_host(b"GET / HTTP/1.1\r\nHost: Web.Test:8080\r\n\r\n") == "web.test"
    assert http_host(b"SSH-2.0-OpenSSH\r\n") is None
    p = parse_policy({"mode": "allow", "allow": ["example.org", "10.1.2.3", "10.9.0.0/16"]})
    assert by_address(p, ipaddress.IPv4Address("10.9.3.4")) == (True, None)
    assert by_address(p, ipaddress.IPv4Address("10.8.3.4")) == (None, None)
    assert by_address(parse_policy({"mode": "open"}), ipaddress.IPv4Address("192.168.1.1"))[0] is False
    assert by_address(parse_policy({"mode": "open"}), ipaddress.IPv4Address("93.184.216.34")) == (True, None)
    assert by_address(parse_policy({"mode": "offline"}), ipaddress.IPv4Address("93.184.216.34"))[0] is False
