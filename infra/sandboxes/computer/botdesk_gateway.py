"""The screen gateway: one TCP port (7900) per computer, published on the host's 127.0.0.1 only.

A client sends one line, its token, then speaks to what the token grants:
  * a view (or control) token: the raw byte stream of that display's x11vnc Unix socket. Tokens are
    files in /tmp/botdesk-gw/tokens/<sha256 of the token> ("display=N kind=view socket=PATH"): no
    token is ever a file name or a command's argument, which any process could read. Revoking a
    token removes its file; an open connection whose token is gone is dropped within a second.
  * the engine, which never sends its agent token (BOTDESK_AGENT_TOKEN): whatever took an old port
    of this gateway would get it. It sends "HELLO E" (32 hex digits); the gateway answers
    "PROOF G P" (its own 32 and P = HMAC-SHA256(token, "botdesk-gateway E G") in hex), and the
    engine "AGENT Q" (Q = HMAC-SHA256(token, "botdesk-engine E G")), answered OK or ERR. Then JSON
    requests, one per line, each answered by one JSON line (and, for screenshots, that many raw
    bytes):
      {"op": "look", "display": N[, "zlib": true]} -> {"ok": true, "len": L, "x": .., "y": ..,
        "title": ".."} + L bytes of XWD, read from the display's shared-memory framebuffer
        (Xvfb -fbdir), no process spawned, with the pointer and the active window's title
      {"op": "ping", "display": 0}            -> {"ok": true}
      {"op": "revoke", "display": N[, "token": T]} -> {"ok": true, "removed": K}: N's tokens (or T) gone now
      {"op": "extend", "display": 0, "token": T, "expires": MS} -> {"ok": true}: T now lasts
        until MS (Unix ms); it is refused, and its connections dropped, from then on
      {"op": "xdotool", "display": N, "runs": [[args], ...], "settle": {"still_ms": S, "cap_ms": C}
        [, "look": {"zlib": Z}][, "net": {"uid": U, "after": A}]}
        -> {"ok": true, "settled": "still"|"changing"|"unchanged"|"unwatched", "ms": M} or
        {"ok": false, "error": ".."}: after the runs, the framebuffer is watched until it changed
        and then stayed the same for S ms, or for at most C ms (S = 0: not watched); with "look",
        the answer also holds a look's fields and body, with "net" a net answer's fields: one
        request per action batch
      {"op": "net", "display": 0, "uid": U, "after": S} -> {"ok": true, "boot": B, "next": S2,
        "events": [{"seq", "at", "host", "port", "why"}, ...]}: the connections of uid U the
        network policy refused (botdesk_net.py) after S in this boot of the gateway (B)
      {"op": "browser", "display": N, "command": {...}} -> {"ok": true, "result": ..}
        the bot's own Chromium on display N (its DevTools port 9221+N on the computer's loopback
        only): navigate / snapshot / act, and for the person's Browser pane view (page and tabs),
        history (back or forward) and reload, over CDP. With no browser answering: {"ok": false,
        "code": "NO_BROWSER", ...}, and the engine starts it as the bot, then asks again (not for
        view: a closed browser is shown as closed).
It runs as botdesk-screen, never as a bot, and starts isolated (`python3 -I`: no user site), through
its launcher `botdesk-gateway`, which loads this module's bytecode compiled when the image was built.
As commands, run as the bot: `botdesk-gateway open-browser N PROFILE HOME` starts display N's
Chromium with /home/botdesk/.browser-profiles/PROFILE and HOME, and waits for DevTools; `botdesk-gateway close-browser N` closes
it gracefully (CDP Browser.close, then TERM, then KILL) and removes its profile's Singleton files.
The gateway answers "OK\\n" to a granted token and "ERR ...\\n" (then closes) otherwise.
The protocol is defined once on the engine's side (crates/botdesk-core/src/gateway.rs); both
sides replay the golden fixtures in protocol.json (`self_test` here).
"""
import sys

# Nothing here speaks TLS: asyncio and urllib then go without ssl, a seventh of the gateway's start.
sys.modules.setdefault("ssl", None)

import asyncio, base64, fcntl, hashlib, hmac, json, os, re, signal, socket, threading, time  # noqa: E402

import botdesk_net  # noqa: E402

TOKENS = "/tmp/botdesk-gw/tokens"
AGENT_TOKEN = os.environ.get("BOTDESK_AGENT_TOKEN", "")
TOKEN_RE = re.compile(r"^[0-9a-f]{32,128}$")


def key_of(token):
    """A token's name at rest (its file, its open connections): its SHA-256, in hex."""
    return hashlib.sha256(token.encode()).hexdigest()


def token_fields(key):
    try:
        with open(os.path.join(TOKENS, key)) as f:
            return dict(kv.split("=", 1) for kv in f.read().split())
    except (FileNotFoundError, ValueError):
        return None


def token_target(key):
    """The fields of the token named `key`, or None once it is revoked or past its `expires` (Unix
    ms; a token without one lasts until revoked). Expiry holds here, whichever process took the
    token and whether or not any process runs when it comes."""
    fields = token_fields(key)
    try:
        expires = int(fields.get("expires", "0")) if fields else 0
    except ValueError:
        return None
    if fields is None or expires and time.time() * 1000 >= expires:
        return None
    return fields


def extend(token, expires):
    """Sets a token's expiry (Unix ms): control renewed."""
    fields = token_target(key_of(token)) if TOKEN_RE.match(token) else None
    if fields is None:
        return False
    fields["expires"] = str(int(expires))
    path = os.path.join(TOKENS, key_of(token))
    with open(path + ".tmp", "w") as f:
        f.write(" ".join(f"{k}={v}" for k, v in fields.items()) + "\n")
    os.replace(path + ".tmp", path)
    return True


F_SETPIPE_SZ = 1031


def pump(src, dst):
    """Moves bytes from socket `src` to socket `dst` inside the kernel (splice through a pipe): a
    full screen of raw pixels crosses the gateway without being copied through Python."""
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    except OSError:
        pass
    try:
        while n := os.splice(src.fileno(), w, 1 << 20):
            while n:
                n -= os.splice(r, dst.fileno(), n)
    except OSError:
        pass
    finally:
        os.close(r)
        os.close(w)
        # One direction ended: end the other one too.
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


# Open screen connections by their token's key, so a revocation through the agent drops them at once.
LIVE = {}


def drop_live(key):
    for s in LIVE.pop(key, ()):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


def revoke(display, token=None):
    removed = 0
    key = key_of(token) if token is not None else None
    for name in os.listdir(TOKENS):
        if key is not None and name != key:
            continue
        target = token_fields(name)
        if target is not None and (token is not None or target.get("display") == str(display)):
            try:
                os.remove(os.path.join(TOKENS, name))
                removed += 1
            except FileNotFoundError:
                pass
            drop_live(name)
    return removed


def detach(writer):
    """The connection's socket, taken from asyncio (a blocking duplicate) for the pumps."""
    sock = writer.get_extra_info("socket")
    own = socket.socket(fileno=os.dup(sock.fileno()))
    own.setblocking(True)
    return own


async def proxy(key, target, reader, writer):
    up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        up.connect(target["socket"])
    except OSError as e:
        up.close()
        writer.write(refused(f"screen unavailable: {e.strerror}"))
        return
    writer.write(GRANTED)
    await writer.drain()
    early = bytes(reader._buffer)  # a client never speaks first in RFB, but nothing is lost
    client = detach(writer)
    writer.transport.pause_reading()
    if early:
        up.sendall(early)
    live = LIVE.setdefault(key, set())
    live.update((client, up))
    threads = [threading.Thread(target=pump, args=pair, daemon=True) for pair in ((client, up), (up, client))]
    for t in threads:
        t.start()
    # Revocation by the teardown script (the token file removed) or expiry: dropped within a
    # second. A revocation through the agent drops the connection at once (`drop_live`).
    while any(t.is_alive() for t in threads):
        if token_target(key) is None:
            drop_live(key)
        await asyncio.sleep(0.25)
    live.discard(client)
    live.discard(up)
    client.close()
    up.close()


# ------------------------------------------------------------------------------------------------
# The bot's Chromium and a minimal CDP client (RFC 6455 text frames over asyncio streams)

HOME = "/home/botdesk"
PROFILES = os.path.join(HOME, ".browser-profiles")
PROFILE_RE = re.compile(r"^chromium-bot-[0-9a-f]{32}$")
BROWSER_LOGS = "/tmp/botdesk-browser-logs"


def cdp_port(display):
    return 9221 + display


def http_json(port, path, method="GET", timeout=2):
    import urllib.request  # only for the browser: not imported before the gateway listens
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


async def ahttp_json(*args, **kw):
    """http_json off the event loop (the gateway keeps serving screens meanwhile)."""
    return await asyncio.to_thread(http_json, *args, **kw)


class Cdp:
    def __init__(self, reader, writer):
        self.r, self.w, self.next_id = reader, writer, 0

    @classmethod
    async def connect(cls, ws_url):
        rest = ws_url.split("://", 1)[1]
        hostport, path = rest.split("/", 1)
        host, port = hostport.split(":")
        r, w = await asyncio.open_connection(host, int(port), limit=2 ** 24)
        key = base64.b64encode(os.urandom(16)).decode()
        w.write(f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        await w.drain()
        status = await r.readline()
        if b" 101 " not in status:
            raise RuntimeError(f"DevTools refused the connection: {status!r}")
        while (await r.readline()) not in (b"\r\n", b""):
            pass
        return cls(r, w)

    def _send(self, text):
        payload, mask = text.encode(), os.urandom(4)
        n = len(payload)
        head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + n.to_bytes(2, "big") if n < 65536
                                else bytes([0x80 | 127]) + n.to_bytes(8, "big"))
        self.w.write(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    async def _recv(self):
        data = b""
        while True:
            h = await self.r.readexactly(2)
            n = h[1] & 0x7F
            if n == 126:
                n = int.from_bytes(await self.r.readexactly(2), "big")
            elif n == 127:
                n = int.from_bytes(await self.r.readexactly(8), "big")
            data += await self.r.readexactly(n)
            if h[0] & 0x80:
                return data.decode(errors="replace")

    async def call(self, method, params=None, timeout=30):
        self.next_id += 1
        my = self.next_id
        self._send(json.dumps({"id": my, "method": method, "params": params or {}}))
        await self.w.drain()

        async def wait():
            while True:
                msg = json.loads(await self._recv())
                if msg.get("id") == my:
                    if "error" in msg:
                        raise RuntimeError(f"{method}: {msg['error'].get('message')}")
                    return msg.get("result", {})
        return await asyncio.wait_for(wait(), timeout)

    def close(self):
        self.w.close()


class CdpLink:
    """A DevTools connection that others share: a reader hands each answer to its caller and each
    event to `on_event` (in a task of its own, so a handler may call back)."""

    def __init__(self, cdp, on_event):
        self.cdp, self.on_event, self.waiting, self.tasks = cdp, on_event, {}, set()
        self.reader = asyncio.create_task(self._read())

    async def _read(self):
        try:
            while True:
                msg = json.loads(await self.cdp._recv())
                if "id" in msg:
                    fut = self.waiting.pop(msg["id"], None)
                    if fut is not None and not fut.done():
                        fut.set_result(msg)
                else:
                    task = asyncio.create_task(self.on_event(msg))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
        except (OSError, asyncio.IncompleteReadError, ValueError):
            pass
        finally:
            for fut in self.waiting.values():
                if not fut.done():
                    fut.set_exception(ConnectionError("the browser's DevTools closed"))
            self.cdp.close()

    def alive(self):
        return not self.reader.done()

    async def call(self, method, params=None, session=None, timeout=10):
        self.cdp.next_id += 1
        my = self.cdp.next_id
        fut = asyncio.get_running_loop().create_future()
        self.waiting[my] = fut
        msg = {"id": my, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        self.cdp._send(json.dumps(msg))
        await self.cdp.w.drain()
        r = await asyncio.wait_for(fut, timeout)
        if "error" in r:
            raise RuntimeError(f"{method}: {r['error'].get('message')}")
        return r.get("result", {})

    def close(self):
        self.reader.cancel()


def host_of(url):
    from urllib.parse import urlsplit
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def under(host, domain):
    return domain == "*" or host == domain or host.endswith("." + domain)


class Guard:
    """Display N's browser, watched during a run for what its bot must ask the person first (the
    engine's `guard` request says what): a download, a form sent to a listed domain, a page on a
    new domain (each a document request, held paused in the browser), a file chooser. Each waits
    in `pending` until the engine answers (`approve`); lifting the guard refuses what still waits.
    The gateway holds the DevTools connection, out of the bot's reach."""

    def __init__(self, display):
        self.display, self.policy, self.link = display, None, None
        self.pending, self.next, self.sessions, self.seen = {}, 0, {}, set()
        self.lock = asyncio.Lock()

    def always(self, kind, host):
        return any(k == kind and under(host, h) for k, _, h in (e.partition(" ") for e in self.policy.get("always", [])))

    async def set(self, policy):
        """Sets what to watch for (None: nothing) and arms the watch if the browser is up."""
        if policy is None:
            return await self.lift()
        self.policy = policy
        await self.arm()

    async def arm(self):
        """Watches the browser if it answers and is not watched yet (also after it restarted)."""
        async with self.lock:
            if self.policy is None or (self.link is not None and self.link.alive()):
                return
            try:
                version = await ahttp_json(cdp_port(self.display), "/json/version", timeout=0.5)
            except OSError:
                return  # no browser yet: armed by the request that finds it up
            self.sessions = {}
            self.link = CdpLink(await Cdp.connect(version["webSocketDebuggerUrl"]), self.event)
            # Every page, those open and each new one (held until it is watched).
            await self.link.call("Target.setAutoAttach", {"autoAttach": True, "waitForDebuggerOnStart": True, "flatten": True})
            # The pages open now were announced before that answer: they are watched before the
            # request that armed the watch goes on.
            if self.link.tasks:
                await asyncio.wait(set(self.link.tasks), timeout=5)

    async def lift(self):
        async with self.lock:
            for pid in list(self.pending):
                await self.answer(pid, False)
            self.policy, self.seen = None, set()
            if self.link is not None:
                self.link.close()
                self.link = None

    async def event(self, msg):
        method, p, session = msg.get("method"), msg.get("params", {}), msg.get("sessionId")
        try:
            if method == "Target.attachedToTarget":
                await self.watch_page(p)
            elif method == "Target.detachedFromTarget":
                self.sessions.pop(p.get("sessionId"), None)
                for pid in [k for k, v in self.pending.items() if v["session"] == p.get("sessionId")]:
                    del self.pending[pid]
            elif method == "Fetch.requestPaused":
                await self.paused(session, p)
            elif method == "Page.fileChooserOpened" and self.policy:
                info = await self.link.call("Target.getTargetInfo", {"targetId": self.sessions.get(session)})
                url = info["targetInfo"]["url"]
                self.hold("upload", url, session, None, False)
            elif method == "Page.frameNavigated" and self.policy and self.policy.get("uploads") and not p["frame"].get("parentId"):
                # A site allowed always opens its file choosers without asking.
                asking = not self.always("upload", host_of(p["frame"]["url"]))
                await self.link.call("Page.setInterceptFileChooserDialog", {"enabled": asking}, session)
        except (RuntimeError, ConnectionError, asyncio.TimeoutError, KeyError):
            pass  # a page that closed meanwhile

    async def watch_page(self, p):
        s, info = p["sessionId"], p["targetInfo"]
        try:
            if info["type"] == "page" and self.policy:
                self.sessions[s] = info["targetId"]
                patterns = [{"urlPattern": "*", "resourceType": "Document", "requestStage": "Request"}]
                if self.policy.get("downloads"):
                    patterns.append({"urlPattern": "*", "resourceType": "Document", "requestStage": "Response"})
                await self.link.call("Fetch.enable", {"patterns": patterns}, s)
                if self.policy.get("uploads"):
                    await self.link.call("Page.enable", {}, s)
                    asking = not self.always("upload", host_of(info.get("url", "")))
                    await self.link.call("Page.setInterceptFileChooserDialog", {"enabled": asking}, s)
        finally:
            if p.get("waitingForDebugger"):
                await self.link.call("Runtime.runIfWaitingForDebugger", {}, s)

    def hold(self, kind, url, session, request, at_response):
        self.next += 1
        self.pending[self.next] = {"id": self.next, "kind": kind, "url": url[:2000], "host": host_of(url),
                                   "session": session, "request": request, "response": at_response}

    async def paused(self, session, p):
        req, rid = p["request"], p["requestId"]
        url, host = req["url"], host_of(req["url"])
        at_response = "responseStatusCode" in p or "responseErrorReason" in p
        kind = None
        if self.policy is None:
            pass
        elif at_response:
            disposition = next((h["value"] for h in p.get("responseHeaders", []) if h["name"].lower() == "content-disposition"), "")
            if self.policy.get("downloads") and disposition.strip().lower().startswith("attachment") and not self.always("download", host):
                kind = "download"
        elif req.get("method") == "POST" and any(under(host, d) for d in self.policy.get("forms", [])) and not self.always("form", host):
            kind = "form"
        elif (self.policy.get("new_domains") and p.get("frameId") == self.sessions.get(session) and url.startswith(("http:", "https:"))
              and host not in self.seen and not self.always("page", host)):
            kind = "page"
        if kind is None:
            return await self.go_on(session, rid, at_response)
        self.hold(kind, url, session, rid, at_response)

    async def go_on(self, session, rid, at_response):
        if at_response:
            try:
                return await self.link.call("Fetch.continueResponse", {"requestId": rid}, session)
            except RuntimeError:
                pass
        await self.link.call("Fetch.continueRequest", {"requestId": rid}, session)

    async def answer(self, pid, allow):
        """Lets what waits go on, or refuses it; False when nothing waits by that number."""
        p = self.pending.pop(pid, None)
        if p is None:
            return False
        try:
            if p["kind"] == "upload":
                # The chooser was held: allowed, the page's next one opens (the bot clicks again).
                if allow:
                    await self.link.call("Page.setInterceptFileChooserDialog", {"enabled": False}, p["session"])
            elif allow:
                if p["kind"] == "page":
                    self.seen.add(p["host"])
                await self.go_on(p["session"], p["request"], p["response"])
            else:
                await self.link.call("Fetch.failRequest", {"requestId": p["request"], "errorReason": "BlockedByClient"}, p["session"])
        except (RuntimeError, ConnectionError, asyncio.TimeoutError):
            pass  # its page closed meanwhile
        return True

    def waiting(self):
        return [{k: v[k] for k in ("id", "kind", "url", "host")} for v in sorted(self.pending.values(), key=lambda v: v["id"])]


GUARDS = {}


async def guarded(display):
    """Arms display N's watch when a run set one and the browser is up (the requests that touch
    the browser call this, so a browser started or restarted meanwhile is watched before use)."""
    g = GUARDS.get(display)
    if g is not None and g.policy is not None:
        await g.arm()


def fix_exit_type(profile_dir):
    """Mark the last session as exited cleanly, so no "restore pages?" bubble appears."""
    prefs = os.path.join(profile_dir, "Default", "Preferences")
    try:
        with open(prefs) as f:
            p = json.load(f)
        p.setdefault("profile", {})["exit_type"] = "Normal"
        p["profile"]["exited_cleanly"] = True
        with open(prefs + ".tmp", "w") as f:
            json.dump(p, f)
        os.replace(prefs + ".tmp", prefs)
    except (FileNotFoundError, ValueError):
        pass


class NoBrowser(Exception):
    """Display N has no browser answering: the engine starts one, as the bot, with `open-browser`."""


async def browser_port(display):
    port = cdp_port(display)
    try:
        await ahttp_json(port, "/json/version", timeout=0.5)
        return port
    except OSError:
        raise NoBrowser(f"no browser is running on :{display}") from None


async def open_browser(display, profile, home):
    """As the bot: starts its Chromium on display N with its profile (if none answers yet) and its
    home (its folder on a Team computer: downloads land there), and waits until DevTools answers.
    The screen gateway never starts a bot's process itself."""
    if not PROFILE_RE.match(profile):
        raise RuntimeError("bad profile name")
    if home != HOME and not re.match(r"^/home/botdesk/bots/[A-Za-z0-9_-]{1,64}$", home):
        raise RuntimeError("bad home")
    try:
        return await browser_port(display)
    except NoBrowser:
        pass
    port = cdp_port(display)
    profile_dir = os.path.join(PROFILES, profile)
    os.makedirs(profile_dir, exist_ok=True)
    for name in ("SingletonLock", "SingletonSocket", "SingletonCookie"):
        try:
            os.unlink(os.path.join(profile_dir, name))
        except FileNotFoundError:
            pass
    fix_exit_type(profile_dir)
    env = dict(os.environ, DISPLAY=f":{display}", BOTDESK_DISPLAY=str(display), HOME=home)
    env.pop("BOTDESK_AGENT_TOKEN", None)
    log = browser_log(display)
    await asyncio.create_subprocess_exec(
        "chromium", f"--user-data-dir={profile_dir}", "--remote-debugging-address=127.0.0.1", f"--remote-debugging-port={port}",
        "--no-sandbox", "--test-type", "--disable-gpu", "--disable-software-rasterizer", "--no-first-run", "--no-default-browser-check", "--disable-session-crashed-bubble",
        "--hide-crash-restore-bubble", "--noerrdialogs", "--disable-features=Translate,MediaRouter", "--password-store=basic",
        "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
        "--window-position=0,0", "--window-size=1280,770", *block_page_flag(), "about:blank",
        env=env, stdout=log, stderr=log, stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            return await browser_port(display)
        except NoBrowser:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"Chromium on :{display} did not open its DevTools port within 20 s")


def block_page_flag():
    """Chromium accepts the certificate of the page that says why a connection was refused
    (botdesk_net.py): its public key's hash, which the gateway writes as it starts."""
    deadline = time.monotonic() + 5
    while True:
        try:
            with open("/tmp/botdesk-net/spki") as f:
                return [f"--ignore-certificate-errors-spki-list={f.read().strip()}"]
        except FileNotFoundError:
            if time.monotonic() > deadline:
                return []
            time.sleep(0.05)


def browser_log(display):
    """This uid's log of display N's Chromium (one folder per uid: Team bots are users of their
    own). Another bot may have put something at its place first: then nothing is logged."""
    logs = f"{BROWSER_LOGS}-{os.getuid()}"
    try:
        os.mkdir(logs, 0o700)
    except FileExistsError:
        pass
    try:
        fd = os.open(logs, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            if os.fstat(fd).st_uid != os.getuid():
                raise PermissionError("not this uid's folder")
            return os.fdopen(os.open(f"chromium-{display}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600, dir_fd=fd), "ab")
        finally:
            os.close(fd)
    except OSError:
        return open(os.devnull, "ab")


async def page(port):
    targets = [t for t in await ahttp_json(port, "/json/list") if t.get("type") == "page"]
    if not targets:
        targets = [await ahttp_json(port, "/json/new?about:blank", method="PUT")]
    return await Cdp.connect(targets[0]["webSocketDebuggerUrl"])


SNAPSHOT_JS = r"""
(() => {
  for (const e of document.querySelectorAll('[data-botdesk-ref]')) e.removeAttribute('data-botdesk-ref');
  const sel = 'a[href],button,input:not([type=hidden]),select,textarea,[role=button],[role=link],[role=checkbox],[role=tab],[role=menuitem],[contenteditable=true],[onclick]';
  const visible = e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none'; };
  const roles = {A: 'link', BUTTON: 'button', SELECT: 'combobox', TEXTAREA: 'textbox'};
  const inputRoles = {checkbox: 'checkbox', radio: 'radio', submit: 'button', button: 'button', reset: 'button', range: 'slider'};
  const out = [];
  for (const e of document.querySelectorAll(sel)) {
    if (out.length >= 80) break;
    if (!visible(e)) continue;
    const ref = 'e' + (out.length + 1);
    e.setAttribute('data-botdesk-ref', ref);
    const role = e.getAttribute('role') || roles[e.tagName] || (e.tagName === 'INPUT' ? (inputRoles[e.type] || 'textbox') : e.tagName.toLowerCase());
    const label = e.labels && e.labels.length ? e.labels[0].innerText : '';
    const name = (e.getAttribute('aria-label') || label || (e.tagName === 'INPUT' ? '' : e.innerText) || e.placeholder || e.title || e.name || '').trim().replace(/\s+/g, ' ').slice(0, 80);
    let value = ('value' in e && e.tagName !== 'BUTTON' && e.tagName !== 'A') ? String(e.value) : null;
    if (e.type === 'checkbox' || e.type === 'radio') value = e.checked ? 'checked' : 'unchecked';
    if (e.type === 'password' && value) value = '********';
    out.push({ref, role, name, value});
  }
  const text = document.body ? document.body.innerText.replace(/\n{3,}/g, '\n\n').slice(0, 6000) : '';
  return JSON.stringify({url: location.href, title: document.title, text, elements: out});
})()
"""


# A saved login, filled only when the page is on its site: the check and the fill are one step in
# the page, so no navigation comes between them. Says what it filled, never with what.
FILL_LOGIN_JS = r"""
((origin, user, password, code) => {
  if (location.origin !== origin) return {origin: location.origin, filled: []};
  const usable = e => { const r = e.getBoundingClientRect(); const s = getComputedStyle(e);
    return r.width > 0 && r.height > 0 && s.visibility !== 'hidden' && s.display !== 'none' && !e.disabled && !e.readOnly; };
  const inputs = [...document.querySelectorAll('input')].filter(usable);
  const says = e => [e.name, e.id, e.autocomplete, e.getAttribute('aria-label'), e.placeholder].join(' ');
  const set = (e, v) => {
    Object.getOwnPropertyDescriptor(HTMLInputElement.prototype, 'value').set.call(e, v);
    e.dispatchEvent(new Event('input', {bubbles: true}));
    e.dispatchEvent(new Event('change', {bubbles: true}));
  };
  const texty = e => ['text', 'email', 'tel'].includes(e.type);
  const pw = inputs.find(e => e.type === 'password');
  const codeField = inputs.find(e => e.autocomplete === 'one-time-code' || (texty(e) && /\b(otp|totp|2fa|mfa|one.?time|verification|auth.?code|code)\b/i.test(says(e))));
  let userField = inputs.find(e => e !== codeField && /\b(username|email)\b/.test(e.autocomplete || ''));
  if (!userField && pw) {
    const before = inputs.filter(e => texty(e) && e !== codeField && (e.compareDocumentPosition(pw) & Node.DOCUMENT_POSITION_FOLLOWING));
    userField = before[before.length - 1];
  }
  if (!userField) userField = inputs.find(e => texty(e) && e !== codeField && /user|login|email/i.test(says(e)));
  const filled = [];
  if (userField) { set(userField, user); filled.push('user name'); }
  if (pw) { set(pw, password); filled.push('password'); }
  if (codeField && code) { set(codeField, code); filled.push('one-time code'); }
  return {origin, filled, code_wanted: !!codeField && !code};
})
"""


async def evaluate(cdp, expression):
    r = await cdp.call("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
    if "exceptionDetails" in r:
        raise RuntimeError(r["exceptionDetails"].get("exception", {}).get("description", "script error"))
    return r.get("result", {}).get("value")


async def wait_loaded(cdp, timeout=15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await evaluate(cdp, "document.readyState") == "complete":
                return
        except RuntimeError:
            pass
        await asyncio.sleep(0.1)
    raise RuntimeError("the page did not finish loading within 15 s")


async def browser_command(display, command):
    """A command for display N's browser. While a run's watch holds something new there for the
    person's answer (a form, a download), the page may not answer DevTools until it is answered:
    the command then ends with a page that says so, and the engine asks the person."""
    g = GUARDS.get(display)
    work = asyncio.ensure_future(page_command(display, command))
    if g is None or g.policy is None:
        return await work
    before = set(g.pending)
    while not work.done():
        await asyncio.wait({work}, timeout=0.1)
        held = [p for k, p in g.pending.items() if k not in before]
        if held and not work.done():
            work.cancel()
            try:
                await work
            except BaseException:
                pass
            p = held[0]
            page = {"url": p["url"], "title": "", "elements": [],
                    "text": f"(The browser holds this {p['kind']} until the person answers: {p['url']})"}
            return {"page": page, "tabs": []} if command.get("kind") == "view" else page
    return work.result()


async def page_command(display, command):
    port = await browser_port(display)
    await guarded(display)
    cdp = await page(port)
    try:
        kind = command.get("kind")
        if kind == "ready":
            return {"port": port}
        if kind == "navigate":
            r = await cdp.call("Page.navigate", {"url": command["url"]})
            if r.get("errorText"):
                raise RuntimeError(f"navigation failed: {r['errorText']}")
            await wait_loaded(cdp)
            await cdp.call("Page.bringToFront")
            return json.loads(await evaluate(cdp, SNAPSHOT_JS))
        if kind == "snapshot":
            return json.loads(await evaluate(cdp, SNAPSHOT_JS))
        if kind == "view":
            # What the person's Browser pane shows: the page (as the bot's snapshot) and the tabs.
            pages = [t for t in await ahttp_json(port, "/json/list") if t.get("type") == "page"][:50]
            tabs = [{"title": str(t.get("title", ""))[:300], "url": str(t.get("url", ""))[:2000], "current": i == 0} for i, t in enumerate(pages)]
            return {"page": json.loads(await evaluate(cdp, SNAPSHOT_JS)), "tabs": tabs}
        if kind == "history":
            history = await cdp.call("Page.getNavigationHistory")
            at = history["currentIndex"] + (1 if command["step"] > 0 else -1)
            if not 0 <= at < len(history["entries"]):
                raise RuntimeError("there is no page to go " + ("forward" if command["step"] > 0 else "back") + " to")
            entry = history["entries"][at]
            await cdp.call("Page.navigateToHistoryEntry", {"entryId": entry["id"]})
            deadline = time.monotonic() + 15
            while await evaluate(cdp, "location.href") != entry["url"] and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await wait_loaded(cdp)
            return json.loads(await evaluate(cdp, SNAPSHOT_JS))
        if kind == "reload":
            await cdp.call("Page.reload")
            await asyncio.sleep(0.3)
            await wait_loaded(cdp)
            return json.loads(await evaluate(cdp, SNAPSHOT_JS))
        if kind == "fill_login":
            args = ", ".join(json.dumps(command.get(k)) for k in ("origin", "user", "password", "code"))
            return await evaluate(cdp, f"{FILL_LOGIN_JS}({args})")
        if kind == "act":
            for i, a in enumerate(command["actions"]):
                ref = json.dumps(f'[data-botdesk-ref="{a["ref"]}"]')
                found = await evaluate(cdp, f"(() => {{ const e = document.querySelector({ref}); if (!e) return null; "
                                             f"e.scrollIntoView({{block: 'center', inline: 'center'}}); const r = e.getBoundingClientRect(); "
                                             f"return [r.left + r.width / 2, r.top + r.height / 2]; }})()")
                if found is None:
                    raise RuntimeError(f"action {i}: no element {a['ref']} on the page; take a new snapshot")
                x, y = found
                if a["action"] == "click":
                    for t in ("mouseMoved", "mousePressed", "mouseReleased"):
                        await cdp.call("Input.dispatchMouseEvent", {"type": t, "x": x, "y": y, "button": "left", "clickCount": 1})
                elif a["action"] in ("fill", "type"):
                    if a["action"] == "fill":
                        await evaluate(cdp, f"(() => {{ const e = document.querySelector({ref}); e.focus(); "
                                            f"if ('value' in e) {{ e.value = ''; e.dispatchEvent(new Event('input', {{bubbles: true}})); }} }})()")
                    else:
                        await evaluate(cdp, f"document.querySelector({ref}).focus()")
                    await cdp.call("Input.insertText", {"text": a.get("text", "")})
                    await evaluate(cdp, f"document.querySelector({ref}).dispatchEvent(new Event('change', {{bubbles: true}}))")
                else:
                    raise RuntimeError(f"action {i}: unknown action {a['action']!r}")
            await asyncio.sleep(0.2)
            await wait_loaded(cdp)
            return json.loads(await evaluate(cdp, SNAPSHOT_JS))
        raise RuntimeError(f"unknown browser command {kind!r}")
    finally:
        cdp.close()


def chromium_pids(display):
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        if f"BOTDESK_DISPLAY={display}".encode() in env and comm.startswith("chrom"):
            out.append(int(pid))
    return out


async def close_browser(display):
    """CDP Browser.close, then TERM, then KILL; then remove the profile's Singleton files."""
    pids = chromium_pids(display)
    if not pids:
        return
    profile_dir = None
    try:
        with open(f"/proc/{pids[0]}/cmdline", "rb") as f:
            for arg in f.read().split(b"\0"):
                if arg.startswith(b"--user-data-dir="):
                    profile_dir = arg.split(b"=", 1)[1].decode()
    except OSError:
        pass
    try:
        version = await ahttp_json(cdp_port(display), "/json/version", timeout=1)
        cdp = await Cdp.connect(version["webSocketDebuggerUrl"])
        try:
            await cdp.call("Browser.close", timeout=3)
        except Exception:
            pass
        cdp.close()
    except OSError:
        pass
    for sig, wait in ((None, 5), (signal.SIGTERM, 3), (signal.SIGKILL, 2)):
        if sig:
            for pid in chromium_pids(display):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + wait
        while chromium_pids(display) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not chromium_pids(display):
            break
    if profile_dir:
        for name in ("SingletonLock", "SingletonSocket", "SingletonCookie"):
            try:
                os.unlink(os.path.join(profile_dir, name))
            except FileNotFoundError:
                pass


async def spare_keycodes(display):
    """Keycodes with no keysyms: where characters missing from the keymap can be put."""
    _, out, _ = await run(["xmodmap", "-pke"], display)
    spare = []
    for line in out.decode(errors="replace").splitlines():
        parts = line.split("=", 1)
        if len(parts) == 2 and not parts[1].strip():
            try:
                spare.append(int(parts[0].split()[1]))
            except (IndexError, ValueError):
                pass
    return spare


async def type_text(args, display):
    """xdotool's own remapping of characters missing from the keymap races the application
    (characters get lost), so map them to spare keycodes first, type, then unmap. `args` is an
    xdotool chain ending in `type ... -- TEXT`."""
    head, text = args[:-1], args[-1]
    missing = sorted({c for c in text if not (" " <= c <= "~") and c not in "\n\t"})
    spare = (await spare_keycodes(display)) if missing else []
    if missing and not spare:
        return await run(["xdotool"] + args, display)
    # Pieces of the text with at most len(spare) distinct missing characters each.
    pieces, cur, seen = [], "", set()
    for ch in text:
        if ch in missing and ch not in seen and len(seen) >= len(spare):
            pieces.append((cur, seen))
            cur, seen = "", set()
        if ch in missing:
            seen.add(ch)
        cur += ch
    pieces.append((cur, seen))
    type_opts = head[head.index("type"):]  # "type --delay N --"
    for i, (piece, chars) in enumerate(pieces):
        mapping = list(zip(spare, sorted(chars)))
        if mapping:
            await run(["xmodmap"] + sum((["-e", f"keycode {k} = U{ord(c):04X} U{ord(c):04X}"] for k, c in mapping), []), display)
            await asyncio.sleep(0.05)  # let clients see the new keymap
        try:
            code, out, err = await run(["xdotool"] + (head if i == 0 else type_opts) + [piece], display)
        finally:
            if mapping:
                await asyncio.sleep(0.05)
                await run(["xmodmap"] + sum((["-e", f"keycode {k} ="] for k, _ in mapping), []), display)
        if code != 0:
            return code, out, err
    return 0, b"", b""


async def run(args, display, stdin=None):
    env = dict(os.environ, DISPLAY=f":{display}")
    env.pop("BOTDESK_AGENT_TOKEN", None)
    p = await asyncio.create_subprocess_exec(*args, env=env, stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                                             stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await p.communicate(stdin)
    return p.returncode, out, err


FB_DIR = "/dev/shm/botdesk-fb"
XDISPLAYS = {}  # display number -> open Xlib connection, for cursor and title (no process per call)


def framebuffer(display):
    with open_framebuffer(display) as f:
        return f.read()


def open_framebuffer(display):
    try:
        return open(f"{FB_DIR}/{display}/Xvfb_screen0", "rb")
    except FileNotFoundError:
        raise RuntimeError(f"display :{display} is not running")


def screen_digest(display):
    return hashlib.blake2b(framebuffer(display), digest_size=16).digest()


async def watch_screen(display, before, still_ms, cap_ms):
    """Polls the framebuffer (every 25 ms) until it differs from `before` and then stays the same
    for `still_ms`, or `cap_ms` passed. Returns (what it saw, ms since the batch ended)."""
    start = time.monotonic()
    last, changed_at = before, None
    while True:
        now = await asyncio.to_thread(screen_digest, display)
        ms = int((time.monotonic() - start) * 1000)
        if now != last:
            last, changed_at = now, ms
        if changed_at is not None and ms - changed_at >= still_ms:
            return "still", ms
        if ms >= cap_ms:
            return ("changing" if changed_at is not None else "unchanged"), ms
        await asyncio.sleep(0.025)


async def look(display, compress):
    """The display's framebuffer (zlib-compressed at the fast level when asked: only computers
    across a network ask) with the pointer and the active window's title: what the answer
    says ([`look_fields`]) and its body, bytes or the framebuffer's file ([`send_body`])."""
    x, y, title = pointer_and_title(display)
    if compress:
        import zlib

        out = await asyncio.to_thread(zlib.compress, framebuffer(display), 1)
        return (len(out), x, y, title, True), out
    f = open_framebuffer(display)
    return (os.fstat(f.fileno()).st_size, x, y, title, False), f


async def send_body(writer, body):
    """A look's body after its answer line: bytes as they are, a framebuffer file by the kernel
    (sendfile: 4 MB never copied through Python). A file that came up short leaves no way to
    keep the answer's length: the connection is dropped, and the engine opens another."""
    if isinstance(body, bytes):
        writer.write(body)
        return
    with body:
        size = os.fstat(body.fileno()).st_size
        sent = await asyncio.get_running_loop().sendfile(writer.transport, body, 0, size)
        if sent != size:
            writer.transport.abort()
            raise ConnectionResetError("the framebuffer changed size while it was sent")


def look_fields(length=None, x=None, y=None, title=None, zlib=False):
    """A look's fields in an answer (none when there was no look)."""
    if length is None:
        return {}
    return {"len": length, "x": x, "y": y, "title": title, **({"zlib": True} if zlib else {})}


def pointer_and_title(display):
    from Xlib import X, display as xdisplay, error as xerror
    for attempt in (0, 1):
        d = XDISPLAYS.get(display)
        try:
            if d is None:
                d = XDISPLAYS[display] = xdisplay.Display(f":{display}")
            root = d.screen().root
            p = root.query_pointer()
            title = None
            active = root.get_full_property(d.intern_atom("_NET_ACTIVE_WINDOW"), X.AnyPropertyType)
            if active and active.value[0]:
                w = d.create_resource_object("window", active.value[0])
                name = w.get_full_property(d.intern_atom("_NET_WM_NAME"), d.intern_atom("UTF8_STRING"))
                if name:
                    title = name.value.decode("utf-8", "replace") if isinstance(name.value, bytes) else str(name.value)
                else:
                    title = w.get_wm_name()
                    title = title.decode("latin-1") if isinstance(title, bytes) else title
            return p.root_x, p.root_y, title
        except xerror.BadWindow:
            return p.root_x, p.root_y, None  # the active window closed under us
        except Exception:  # a display that restarted since: reconnect once
            old = XDISPLAYS.pop(display, None)
            if old is not None:
                try:
                    old.close()
                except Exception:
                    pass
            if attempt:
                raise RuntimeError(f"display :{display} is not answering")


# The protocol's words (the golden fixtures in protocol.json hold both sides to them).
# The longest stillness an input batch may ask to watch for, and the longest watch.
SETTLE_BOUNDS = {"max_still_ms": 5000, "max_cap_ms": 5000}
GRANTED = b"OK\n"


def refused(why):
    return f"ERR {why}\n".encode()


def _int(v):
    return isinstance(v, int) and not isinstance(v, bool)


XDO_NUM = re.compile(r"[0-9]{1,6}")
XDO_SECONDS = re.compile(r"[0-9]{1,6}(\.[0-9]{1,3})?")
XDO_BUTTON = re.compile(r"[1-9]")
XDO_KEYS = re.compile(r"[^\s-]\S{0,299}|-")  # a key or combo, never an option
# What each command the engine sends takes (the engine's `xdotool_runs`), in order; `click` may
# start with `--repeat N --delay N`, and `type --delay 8 -- TEXT` ends a run.
XDO_ARGS = {
    "mousemove": ["--sync", XDO_NUM, XDO_NUM],
    "click": [XDO_BUTTON],
    "mousedown": [XDO_BUTTON],
    "mouseup": [XDO_BUTTON],
    "key": ["--clearmodifiers", XDO_KEYS],
    "keydown": [XDO_KEYS],
    "keyup": [XDO_KEYS],
    "sleep": [XDO_SECONDS],
}


def xdotool_allowed(args):
    """Whether a run holds only the commands the engine sends, with their arguments: nothing else
    of xdotool (`exec`, `behave`, window and desktop commands) runs as the services' user."""
    i = 0
    while i < len(args):
        cmd = args[i]
        if cmd == "type":
            return args[i + 1:i + 4] == ["--delay", "8", "--"] and len(args) == i + 5
        expected = XDO_ARGS.get(cmd)
        if expected is None:
            return False
        i += 1
        if cmd == "click" and args[i:i + 1] == ["--repeat"]:
            expected = ["--repeat", XDO_NUM, "--delay", XDO_NUM] + expected
        for want in expected:
            if i >= len(args):
                return False
            ok = args[i] == want if isinstance(want, str) else want.fullmatch(args[i]) is not None
            if not ok:
                return False
            i += 1
    return True


def _runs(v):
    return isinstance(v, list) and all(isinstance(r, list) and all(isinstance(a, str) for a in r) for r in v)


def _settle(v):
    return isinstance(v, dict) and set(v) <= {"still_ms", "cap_ms"} and all(_int(x) for x in v.values())


def _look(v):
    return isinstance(v, dict) and set(v) <= {"zlib"} and all(isinstance(x, bool) for x in v.values())


def _net(v):
    return isinstance(v, dict) and set(v) == {"uid", "after"} and all(_int(x) for x in v.values())


# Each agent request's fields besides `op` and `display`: (required, optional), each with its check.
REQUEST_FIELDS = {
    "ping": ({}, {}),
    "revoke": ({}, {"token": lambda v: isinstance(v, str)}),
    "extend": ({"token": lambda v: isinstance(v, str), "expires": _int}, {}),
    "look": ({}, {"zlib": lambda v: isinstance(v, bool)}),
    "browser": ({"command": lambda v: isinstance(v, dict)}, {}),
    "xdotool": ({"runs": _runs}, {"settle": _settle, "look": _look, "net": _net}),
    "net": ({"uid": _int, "after": _int}, {}),
    "guard": ({"policy": lambda v: v is None or isinstance(v, dict)}, {}),
    "approve": ({"id": _int, "allow": lambda v: isinstance(v, bool)}, {}),
}


def parse_request(line):
    """One agent request line, checked: a JSON object with a known op, a display number, the op's
    fields of the right types and no other."""
    req = json.loads(line)
    if not isinstance(req, dict):
        raise ValueError("a request is a JSON object")
    op = req.get("op")
    if op not in REQUEST_FIELDS:
        raise ValueError(f"unknown op {op!r}")
    display = req.get("display")
    if not _int(display) or display < 0:
        raise ValueError(f"{op} needs a display number")
    required, optional = REQUEST_FIELDS[op]
    for field, check in required.items():
        if field not in req:
            raise ValueError(f"{op} needs {field}")
    for field, value in req.items():
        if field in ("op", "display"):
            continue
        check = required.get(field) or optional.get(field)
        if check is None:
            raise ValueError(f"{op} takes no {field}")
        if not check(value):
            raise ValueError(f"{op}: {field} is not what it should be")
    return req


def answer(ok=True, **fields):
    return json.dumps({"ok": ok, **fields}).encode() + b"\n"


# How each answer is made (by name, for the fixtures' replay).
ANSWERS = {
    "ok": lambda: answer(),
    "revoked": lambda removed: answer(removed=removed),
    "extended": lambda done: answer(done, error=None if done else "unknown, revoked or expired token"),
    "look": lambda *seen: answer(**look_fields(*seen)),
    "browser": lambda result: answer(result=result),
    "guard": lambda pending: answer(pending=pending),
    "approved": lambda done: answer(done=done),
    # An input batch's answer, with the look after it and the network refusals when asked.
    "settled": lambda settled, ms, look=None, net=None: answer(settled=settled, ms=ms, **look_fields(*(look or ())), **(net or {})),
    "no_browser": lambda error: answer(False, error=error, code="NO_BROWSER"),
    "failed": lambda error: answer(False, error=error),
    "net": lambda refused: answer(**refused),
}


async def agent(reader, writer):
    writer.write(GRANTED)
    await writer.drain()
    while line := await reader.readline():
        try:
            req = parse_request(line)
            display, op = req["display"], req["op"]
            if op == "ping":
                writer.write(ANSWERS["ok"]())
            elif op == "revoke":
                # Remove display N's tokens (or one token) and drop their open connections now.
                # The transports themselves are stopped by `botdesk-display` afterwards.
                writer.write(ANSWERS["revoked"](revoke(display, req.get("token"))))
            elif op == "extend":
                writer.write(ANSWERS["extended"](extend(str(req["token"]), req["expires"])))
            elif op == "look":
                seen, out = await look(display, bool(req.get("zlib")))
                writer.write(ANSWERS["look"](*seen))
                await send_body(writer, out)
            elif op == "browser":
                writer.write(ANSWERS["browser"](await browser_command(display, req["command"])))
            elif op == "guard":
                g = GUARDS.setdefault(display, Guard(display))
                await g.set(req["policy"])
                writer.write(ANSWERS["guard"](g.waiting()))
            elif op == "approve":
                g = GUARDS.get(display)
                writer.write(ANSWERS["approved"](g is not None and await g.answer(req["id"], req["allow"])))
            elif op == "net":
                writer.write(ANSWERS["net"](botdesk_net.events(req["uid"], req["after"])))
            elif op == "xdotool":
                await guarded(display)
                settle = req.get("settle") or {}
                still_ms = max(0, min(int(settle.get("still_ms", 0)), SETTLE_BOUNDS["max_still_ms"]))
                cap_ms = max(0, min(int(settle.get("cap_ms", 0)), SETTLE_BOUNDS["max_cap_ms"]))
                before = await asyncio.to_thread(screen_digest, display) if still_ms else None
                runs = [[str(a) for a in args] for args in req["runs"]]
                refused_run = next((args for args in runs if not xdotool_allowed(args)), None)
                if refused_run is not None:
                    raise RuntimeError(f"xdotool {refused_run[0] if refused_run else ''}: not a command Botdesk sends")
                # `mousemove --sync` waits for the pointer to move, so one to where it already is
                # waits out xdotool's own timeout (15 s). The engine drops repeated moves within a
                # batch; the batch's first may be to where the last batch left the pointer.
                if runs and runs[0][:2] == ["mousemove", "--sync"] and len(runs[0]) >= 4:
                    x, y, _ = await asyncio.to_thread(pointer_and_title, display)
                    if [str(x), str(y)] == runs[0][2:4]:
                        runs[0] = ["mousemove"] + runs[0][2:]
                for args in runs:
                    if args[-5:-3] == ["type", "--delay"]:
                        code, _, err = await type_text(args, display)
                    else:
                        code, _, err = await run(["xdotool"] + args, display)
                    if code != 0:
                        raise RuntimeError(f"xdotool {args[0] if args else ''} failed: {err.decode(errors='replace').strip()}")
                settled, ms = await watch_screen(display, before, still_ms, cap_ms) if still_ms else ("unwatched", 0)
                # What the engine reads after every batch comes in the same answer: no second
                # round trip for the look or the refusals.
                shot, out = (None, b"")
                if "look" in req:
                    try:
                        shot, out = await look(display, bool(req["look"].get("zlib")))
                    except Exception:  # the batch happened: it is answered so, and the engine looks again
                        shot, out = (None, b"")
                net = botdesk_net.events(req["net"]["uid"], req["net"]["after"]) if "net" in req else None
                writer.write(ANSWERS["settled"](settled, ms, shot, net))
                await send_body(writer, out)
        except NoBrowser as e:
            writer.write(ANSWERS["no_browser"](str(e)))
        except Exception as e:  # one bad request never kills the agent
            writer.write(ANSWERS["failed"](str(e)))
        await writer.drain()


def self_test(path):
    """Replays the golden fixtures (protocol.json): each request line parses to itself, each
    answer and greeting is made as written. Prints each failure; returns how many there were."""
    with open(path) as f:
        fixtures = json.load(f)
    failures = []
    if fixtures["settle"] != SETTLE_BOUNDS:
        failures.append(f"settle bounds: {SETTLE_BOUNDS} here, {fixtures['settle']} in the fixtures")
    for case in fixtures["requests"]:
        try:
            got = parse_request(json.dumps(case["line"]).encode())
            if got != case["line"]:
                failures.append(f"request {case['name']}: parsed as {got!r}")
        except Exception as e:
            failures.append(f"request {case['name']}: refused ({e})")
    for case in fixtures["answers"]:
        name, *args = case["make"]
        line = ANSWERS[name](*args)
        if not line.endswith(b"\n") or line.count(b"\n") != 1 or json.loads(line) != case["line"]:
            failures.append(f"answer {case['name']}: made {line!r}")
    for case in fixtures["greetings"]:
        line = GRANTED if case["granted"] else refused(case["why"])
        if line != case["line"].encode():
            failures.append(f"greeting {case['name']}: made {line!r}")
    for case in fixtures["proofs"]:
        if proof(case["token"], case["message"]) != case["proof"]:
            failures.append(f"proof {case['name']}: made {proof(case['token'], case['message'])}")
    try:
        botdesk_net.self_test()
    except AssertionError as e:
        failures.append(f"botdesk_net: {e}")
    for failure in failures:
        print(failure, file=sys.stderr)
    return len(failures)


def proof(token, message):
    """HMAC-SHA256 of `message` keyed by `token`, in hex (the engine's `gateway::proof`)."""
    return hmac.new(token.encode(), message.encode(), hashlib.sha256).hexdigest()


NONCE_RE = re.compile(r"^[0-9a-f]{32}$")


async def engine_proved(theirs, reader, writer):
    """The agent handshake after "HELLO E": this gateway proves it knows the agent token, then the
    engine must. True when it did (the caller answers OK), else refused."""
    if not AGENT_TOKEN or not NONCE_RE.match(theirs):
        writer.write(refused("not an engine's hello"))
        return False
    ours = os.urandom(16).hex()
    writer.write(f"PROOF {ours} {proof(AGENT_TOKEN, f'botdesk-gateway {theirs} {ours}')}\n".encode())
    await writer.drain()
    line = (await asyncio.wait_for(reader.readline(), 5)).decode(errors="replace").strip()
    shown = line[6:] if line.startswith("AGENT ") else ""
    if not hmac.compare_digest(shown, proof(AGENT_TOKEN, f"botdesk-engine {theirs} {ours}")):
        writer.write(refused("not the engine"))
        return False
    return True  # `agent` says OK


async def handle(reader, writer):
    try:
        line = await asyncio.wait_for(reader.readline(), 5)
        token = line.decode(errors="replace").strip()
        if token.startswith("HELLO "):
            if await engine_proved(token[6:], reader, writer):
                await agent(reader, writer)
            return
        key = key_of(token) if TOKEN_RE.match(token) else None
        target = token_target(key) if key else None
        if target is None:
            writer.write(refused("unknown or revoked token"))
            return
        await proxy(key, target, reader, writer)
    except (asyncio.TimeoutError, ConnectionError):
        pass
    finally:
        try:
            await writer.drain()
            writer.close()
        except Exception:
            pass


async def main(listening, policing):
    """Serves `listening`, the port the launcher took before importing this module, and the bots'
    connections on `policing` (botdesk_net.py)."""
    os.makedirs(TOKENS, exist_ok=True)
    server = await asyncio.start_server(handle, sock=listening)
    await botdesk_net.start(policing)
    async with server:
        await server.serve_forever()


def cli(argv, listening, policing=None):
    if len(argv) == 3 and argv[1] == "close-browser":
        asyncio.run(close_browser(int(argv[2])))
    elif len(argv) == 5 and argv[1] == "open-browser":
        asyncio.run(open_browser(int(argv[2]), argv[3], argv[4]))
    else:
        asyncio.run(main(listening, policing))
    return 0
