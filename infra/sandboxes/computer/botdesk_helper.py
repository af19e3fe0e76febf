"""Workspace helper inside a Botdesk computer, run as the bot a call is for, or as root for the
whole home (save, load, own) (through its launcher,
`botdesk-helper`, which loads this module's bytecode compiled when the image was built).

  botdesk-helper list REL            JSON array of one directory level
  botdesk-helper mkdir REL           create a directory and its parents
  botdesk-helper write REL EXEC      bytes from stdin, written atomically (EXEC: 0 or 1)
  botdesk-helper save                the whole home as a home stream on stdout (stdin: the options
                                     line and the previous version's manifest)
  botdesk-helper load                a home stream from stdin (after its mode line), applied only
                                     once it ended with its end record; a JSON summary on stdout
  botdesk-helper watch               a line on stdout whenever something in the home changes
                                     (inotify; links never followed; at most 5 lines a second)
  botdesk-helper kill EXEC_ID        kill every process of one exec (its whole group)
  botdesk-helper kill-env KEY=VALUE  stop every process of the groups tagged KEY=VALUE (TERM, then KILL)
  botdesk-helper own                 (as root) give the home its owners by path: JSON on stdin
                                     (see cmd_own)
  botdesk-helper fence-devtools N UID  (as root) display N's DevTools port refused to every bot
                                     but uid UID
  botdesk-helper net-policy          (as root) the network policies of this computer's bots: JSON
                                     on stdin (see cmd_net_policy)

Paths are relative to the home. A symlink is followed only while it stays inside the home; one that
points outside is never followed or listed. Errors: exit 3 and one JSON line on stderr.
A file is read by `botdesk-read REL MAX`, in Perl (same rules, same errors): it starts in about 2 ms.
"""
import errno, os, stat, sys, time

# json, shutil and signal take longer to import than a small command takes: the commands that use
# them import them themselves.

HOME = os.environ.get("BOTDESK_HELPER_HOME", "/home/botdesk")
MAX_HOPS = 40
LOAD_PREFIX = ".botdesk-load-"
# The home stream's limits (botdesk_core::home_stream; both held to home_stream.json by
# `limits_test` and the engine's golden test).
MAX_HEADER = 16 * 1024
MAX_PATH = 4096
# Longest path a save takes: the host's store puts its own folders before it, and a path there
# must stay under the host's PATH_MAX. A longer one is skipped and named.
MAX_SAVE_PATH = 3072
MAX_EXTENTS = 4096
MAX_FILE = 1 << 40
CHUNK = 1 << 20


class Fail(Exception):
    def __init__(self, code, message, **extra):
        super().__init__(message)
        self.code, self.message, self.extra = code, message, extra


def escapes(rel):
    return Fail("PATH_ESCAPES", f"{rel!r} escapes the computer workspace")


def parts_of(rel):
    if "\\" in rel or "\0" in rel:
        raise escapes(rel)
    parts = [p for p in rel.split("/") if p]
    if rel.startswith("/") or any(p in (".", "..") for p in parts):
        raise escapes(rel)
    return parts


def full(parts):
    return "/".join([HOME] + parts)


def symlink_dest(link_parts, target):
    """Where a link at link_parts pointing at target lands, as parts; None if outside the home."""
    if target.startswith("/"):
        if target != HOME and not target.startswith(HOME + "/"):
            return None
        out, rest = [], target[len(HOME):]
    else:
        out, rest = list(link_parts[:-1]), target
    for p in rest.split("/"):
        if p in ("", "."):
            continue
        if p == "..":
            if not out:
                return None
            out.pop()
        else:
            out.append(p)
    return out


def limits_test(path):
    """The home stream's limits here against its golden fixtures (home_stream.json); returns how
    many differ, printing each."""
    import json
    with open(path) as f:
        want = json.load(f)["limits"]
    ours = {"max_header": MAX_HEADER, "max_path": MAX_PATH, "max_extents": MAX_EXTENTS, "max_file": MAX_FILE}
    failures = [f"{k}: {ours.get(k)} here, {v} in the fixtures" for k, v in want.items() if ours.get(k) != v]
    failures += [f"{k}: not in the fixtures" for k in ours if k not in want]
    for failure in failures:
        print(failure, file=sys.stderr)
    return len(failures)


def walk_failures(walks):
    """The fixtures' walks (`resolve`, following the last link too), in their tree made in a
    temporary home: each path lands where written, or fails with the words written."""
    import tempfile
    global HOME
    failures, home = [], HOME
    with tempfile.TemporaryDirectory() as HOME:
        for e in walks["tree"]:
            at = full(e.get("dir", e.get("file", e.get("link"))).split("/"))
            if "dir" in e:
                os.mkdir(at)
            elif "file" in e:
                open(at, "w").close()
            else:
                os.symlink(e["target"], at)
        for case in walks["cases"]:
            try:
                got = "lands " + "/".join(resolve(case["path"]))
            except Fail as e:
                got = e.message
            want = f"lands {case['lands']}" if "lands" in case else case["error"]
            if want not in got:
                failures.append(f"walk {case['path']!r}: {got!r}, not {want!r}")
    HOME = home
    return failures


def self_test(path):
    """Replays the path rules' golden fixtures (paths.json, shared with the engine's WorkspacePath):
    each path splits or escapes as written, each link lands where written. Prints each failure;
    returns how many there were."""
    import json
    with open(path) as f:
        fixtures = json.load(f)
    failures = []
    for case in fixtures["paths"]:
        try:
            got = parts_of(case["input"])
        except Fail as e:
            got = "escapes" if e.code == "PATH_ESCAPES" else e.code
        want = "escapes" if case.get("escapes") else case["parts"]
        if got != want:
            failures.append(f"path {case['input']!r}: {got!r}, not {want!r}")
    for case in fixtures["links"]:
        lands = symlink_dest(parts_of(case["link"]), case["target"])
        got = None if lands is None else "/".join(lands)
        if got != case["lands"]:
            failures.append(f"link {case['link']!r} -> {case['target']!r}: lands {got!r}, not {case['lands']!r}")
    failures += walk_failures(fixtures["walks"])
    for failure in failures:
        print(failure, file=sys.stderr)
    return len(failures)


def resolve(rel, follow_last=True):
    parts, hops, i = parts_of(rel), 0, 0
    while i < len(parts):
        try:
            st = os.lstat(full(parts[: i + 1]))
        except FileNotFoundError:
            return parts
        if stat.S_ISLNK(st.st_mode) and (follow_last or i < len(parts) - 1):
            hops += 1
            dest = symlink_dest(parts[: i + 1], os.readlink(full(parts[: i + 1])))
            if dest is None:
                raise escapes(rel)
            if hops > MAX_HOPS:
                raise Fail("INVALID", f"{rel}: too many levels of symbolic links")
            parts, i = dest + parts[i + 1:], 0
            continue
        if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            raise Fail("INVALID", f"{'/'.join(parts[: i + 1])} is not a directory")
        i += 1
    return parts


def describe(parts, st):
    """(kind, size, executable) for a listing row, or None to leave the entry out."""
    if stat.S_ISLNK(st.st_mode):
        if symlink_dest(parts, os.readlink(full(parts))) is None:
            return None
        return ("symlink", 0, False)
    if stat.S_ISDIR(st.st_mode):
        return ("dir", 0, False)
    if stat.S_ISREG(st.st_mode):
        return ("file", st.st_size, bool(st.st_mode & 0o100))
    return None


def cmd_list(rel):
    import json
    parts = resolve(rel)
    path = full(parts)
    if not os.path.isdir(path):
        raise Fail("NOT_FOUND", f"{rel} does not exist in the computer workspace") if not os.path.lexists(path) \
            else Fail("INVALID", f"{rel} is not a directory")
    rows = []
    for name in sorted(os.listdir(path)):
        if not parts and own_staging(name):
            continue
        d = describe(parts + [name], os.lstat(os.path.join(path, name)))
        if d:
            rows.append({"name": name, "kind": d[0], "size": d[1], "executable": d[2]})
    sys.stdout.write(json.dumps(rows))


def cmd_mkdir(rel):
    parts = resolve(rel)
    cur = []
    for p in parts:
        cur.append(p)
        try:
            os.mkdir(full(cur))
        except FileExistsError:
            if not os.path.isdir(full(cur)):
                raise Fail("INVALID", f"{'/'.join(cur)} is not a directory")


def write_atomic(parts, data, executable):
    if not parts:
        raise Fail("INVALID", "cannot write to the workspace root")
    cmd_mkdir("/".join(parts[:-1]))
    dest = full(parts)
    if os.path.isdir(dest) and not os.path.islink(dest):
        raise Fail("INVALID", f"{'/'.join(parts)} is a directory")
    tmp = os.path.join(os.path.dirname(dest), f".botdesk-tmp-{os.getpid()}-{parts[-1]}"[:255])
    with open(tmp, "wb") as f:
        f.write(data)
        os.fchmod(f.fileno(), 0o755 if executable else 0o644)
    os.replace(tmp, dest)


def cmd_write(rel, executable):
    write_atomic(resolve(rel), sys.stdin.buffer.read(), executable == "1")


# ------------------------------------------------------------------------------------------------
# The home stream (crates/botdesk-core/src/home_stream.rs). Walks use directory descriptors only and
# never follow a symlink; a FIFO, socket or device is never opened.

def own_staging(name):
    return name.startswith(LOAD_PREFIX)


_encoder = None


def encode(obj):
    """Compact JSON; one encoder for every record (json.dumps with options builds one per call)."""
    global _encoder
    if _encoder is None:
        import json
        _encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
    return _encoder(obj)


def line_of(obj):
    return encode(obj).encode() + b"\n"


def is_utf8(s):
    try:
        s.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def shown_name(name):
    """A printable stand-in for a name that is not UTF-8, at most 255 bytes like a real name."""
    return os.fsencode(name).decode("utf-8", "replace").encode()[:255].decode("utf-8", "ignore")


def long_name(name):
    """A stand-in for a name whose path is too long to save: its first 48 bytes and an ellipsis."""
    return os.fsencode(name)[:48].decode("utf-8", "ignore") + "…"


def nameable(rel, most=MAX_PATH):
    """Whether a record can carry this path: at most `most` bytes, and short enough escaped that
    any record naming it fits a header line."""
    size = len(rel.encode())
    # Escaping makes a byte at most 6 long: only a long path needs the exact measure.
    return size <= most and (size * 6 + 2 <= MAX_HEADER // 2 or len(line_of(rel)) <= MAX_HEADER // 2)


def extents(fd, size):
    """The file's data extents in order, found one at a time (holes left out); from where the
    file system cannot say, the rest of the file."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
            end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        except OSError as e:
            if e.errno != errno.ENXIO:
                yield [pos, size - pos]
            return
        if end > start:
            yield [start, end - start]
        pos = max(end, pos + 1)


def batches(items, per):
    """(batch, more): `items` in lists of at most `per`, each said to have more after it or not.
    An empty `items` is one empty batch."""
    from itertools import islice
    batch = list(islice(items, per))
    while True:
        following = list(islice(items, per))
        yield batch, bool(following)
        if not following:
            return
        batch = following


def send_bytes(out, fd, off, length):
    """Exactly `length` bytes from `off`: a file that got shorter meanwhile is padded with zeros."""
    done = 0
    while done < length:
        chunk = os.pread(fd, min(CHUNK, length - done), off + done)
        if not chunk:
            chunk = bytes(min(CHUNK, length - done))
        out.write(chunk)
        done += len(chunk)


class Saver:
    def __init__(self, out, manifest, skip_under, skip_names):
        self.out, self.manifest, self.skip_under, self.skip_names = out, manifest, skip_under, skip_names
        self.entries = 0
        # Files with more than one name, by (device, inode): the first name sent. The others go as
        # `hardlink` records, so a hard link never becomes a copy on the host.
        self.names = {}

    def emit(self, rec):
        self.out.write(line_of(rec))
        self.entries += 1

    def skip(self, rel, why):
        self.emit({"t": "skipped", "p": rel, "why": why})

    def walk(self, dfd, parts):
        with os.scandir(dfd) as it:
            names = sorted(e.name for e in it)
        plain = {n for n in names if n.isascii() or is_utf8(n)}
        prefix = "".join(c + "/" for c in parts)
        # Caches and lock files of browser profiles stay behind (at any depth below skip_under).
        skipping = parts and parts[0] == self.skip_under
        for name in names:
            if not parts and own_staging(name) or skipping and name in self.skip_names:
                continue
            if name in plain and not nameable(prefix + name, MAX_SAVE_PATH):
                # Named by a stand-in, once (a few long names may begin alike).
                shown = long_name(name)
                if shown not in plain and nameable(prefix + shown):
                    plain.add(shown)
                    self.skip(prefix + shown, f"path longer than {MAX_SAVE_PATH} bytes")
                continue
            if name in plain:
                self.entry(dfd, name, parts, prefix + name)
                continue
            # Named by a stand-in, once: two such names (or a real one) may look alike.
            shown = shown_name(name)
            if shown not in plain and nameable(prefix + shown):
                plain.add(shown)
                self.skip(prefix + shown, "name is not UTF-8")

    def entry(self, dfd, name, parts, rel):
        try:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        except FileNotFoundError:
            return
        except OSError as e:
            return self.skip(rel, f"unreadable: {e.strerror}")
        mode = st.st_mode
        if stat.S_ISREG(mode):
            first = self.names.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
            if first is not None:
                return self.emit({"t": "hardlink", "p": rel, "to": first, "mode": mode & 0o1777})
            if self.manifest.get(rel) == (st.st_size, st.st_mtime_ns, mode & 0o1777):
                # Unchanged since the previous version: nothing to open. (The most common record,
                # written without building a dict: a path string encodes as line_of would.)
                self.out.write(b'{"t":"same","p":' + encode(rel).encode() + b"}\n")
                self.entries += 1
                if st.st_nlink > 1:
                    self.names[(st.st_dev, st.st_ino)] = rel
                return
            self.file(dfd, name, rel)
        elif stat.S_ISDIR(mode):
            self.folder(dfd, name, parts + [name])
        elif stat.S_ISLNK(mode):
            self.link(dfd, name, rel, st)
        else:
            self.skip(rel, "fifo" if stat.S_ISFIFO(st.st_mode) else "socket" if stat.S_ISSOCK(st.st_mode) else "device")

    def link(self, dfd, name, rel, st):
        try:
            target = os.readlink(name, dir_fd=dfd)
        except FileNotFoundError:
            return
        except OSError as e:
            return self.skip(rel, "changed while saved" if e.errno == errno.EINVAL else f"unreadable: {e.strerror}")
        rec = {"t": "link", "p": rel, "target": target, "mtime": st.st_mtime_ns}
        if not is_utf8(target):
            self.skip(rel, "link target is not UTF-8")
        elif len(line_of(rec)) > MAX_HEADER:
            self.skip(rel, "link target is too long to save")
        else:
            self.emit(rec)

    def folder(self, dfd, name, parts):
        rel = "/".join(parts)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
        except FileNotFoundError:
            return
        except OSError as e:
            changed = e.errno in (errno.ELOOP, errno.ENOTDIR)
            return self.skip(rel, "changed while saved" if changed else f"unreadable: {e.strerror}")
        try:
            st = os.fstat(fd)
            self.emit({"t": "dir", "p": rel, "mode": st.st_mode & 0o1777, "mtime": st.st_mtime_ns})
            self.walk(fd, parts)
        finally:
            os.close(fd)

    def file(self, dfd, name, rel):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dfd)
        except FileNotFoundError:
            return
        except OSError as e:
            changed = e.errno in (errno.ELOOP, errno.ENXIO)
            return self.skip(rel, "changed while saved" if changed else f"unreadable: {e.strerror}")
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # swapped for a FIFO, folder or device meanwhile
                return self.skip(rel, "changed while saved")
            self.send_file(fd, rel, st)
        finally:
            os.close(fd)

    def send_file(self, fd, rel, st):
        mode = st.st_mode & 0o1777
        if st.st_nlink > 1:
            self.names[(st.st_dev, st.st_ino)] = rel
        if self.manifest.get(rel) == (st.st_size, st.st_mtime_ns, mode):
            return self.emit({"t": "same", "p": rel})
        if st.st_size > MAX_FILE:
            self.names.pop((st.st_dev, st.st_ino), None)
            return self.skip(rel, f"larger than {MAX_FILE >> 40} TiB")
        rec = {"t": "file", "p": rel, "mode": mode, "mtime": st.st_mtime_ns, "size": st.st_size, "data": [], "more": True}
        # The extents must fit the header line as well (a few hundred of them with long offsets);
        # more go in `extents` records, so no hole is ever sent as zeros.
        room = MAX_HEADER - len(line_of(rec))
        per = min(max(room // (2 * len(str(st.st_size)) + 4), 1), MAX_EXTENTS)
        first = True
        for data, more in batches(extents(fd, st.st_size), per):
            if first:
                rec["data"] = data
                if not more:
                    del rec["more"]
                self.emit(rec)
                first = False
            else:
                # Not an entry of its own.
                self.out.write(line_of({"t": "extents", "p": rel, "data": data, "more": True} if more else {"t": "extents", "p": rel, "data": data}))
            for off, length in data:
                send_bytes(self.out, fd, off, length)


class Manifest:
    """The previous version's regular files, read from stdin as the walk goes: the index lines
    (`f SIZE MTIME MODE "PATH"`) come in walk order, the order in which `get` is asked, so
    nothing of it is held."""

    def __init__(self, lines):
        import json
        self.lines, self.loads = lines, json.loads
        self.key = self.entry = None
        self.advance()

    def advance(self):
        for line in self.lines:
            if not line.startswith(b"f "):
                continue  # the index's first line, and its folders
            try:
                _, size, mtime, mode, path = line.split(b" ", 4)
                path = self.loads(path)
                self.key, self.entry = path.split("/"), (int(size), int(mtime), int(mode))
                return
            except ValueError:
                raise Fail("INVALID", "the manifest is not readable")
        self.key = self.entry = None

    def get(self, rel):
        """(size, mtime, mode) of `rel` in the previous version, or None. Asked in walk order."""
        key = rel.split("/")
        while self.key is not None and self.key < key:
            self.advance()
        return self.entry if self.key == key else None

    def drain(self):
        for _ in self.lines:
            pass


def save_input():
    """The options line, and the previous version's manifest as it comes."""
    import json
    try:
        opts = json.loads(sys.stdin.buffer.readline())
        return opts["skip_under"], set(opts["skip_names"]), Manifest(sys.stdin.buffer)
    except (ValueError, KeyError, TypeError):
        raise Fail("INVALID", "the save options are not readable")


def cmd_save():
    skip_under, skip_names, manifest = save_input()
    # One write per 64 KiB rather than per 8 KiB.
    out = open(sys.stdout.fileno(), "wb", buffering=64 * 1024, closefd=False)
    saver = Saver(out, manifest, skip_under, skip_names)
    root = os.open(HOME, os.O_RDONLY | os.O_DIRECTORY)
    try:
        saver.walk(root, [])
    finally:
        os.close(root)
    saver.out.write(line_of({"t": "end", "entries": saver.entries}))
    saver.out.flush()
    # The rest of the manifest (files gone since) is read, so the host's sending ends.
    manifest.drain()


def stream_parts(rel):
    """The components of a stream path, checked as home_stream::check_path does."""
    if not isinstance(rel, str) or not is_utf8(rel) or len(rel.encode()) > MAX_PATH or "\0" in rel:
        raise Fail("INVALID", f"{rel!r} is not a plain relative path")
    parts = rel.split("/")
    if any(c in ("", ".", "..") or len(c.encode()) > 255 for c in parts):
        raise Fail("INVALID", f"{rel!r} is not a plain relative path")
    return parts


def read_line(inp):
    import json
    line = inp.readline(MAX_HEADER)
    if not line:
        raise Fail("INVALID", "the home stream ended early; nothing was changed")
    if not line.endswith(b"\n"):
        raise Fail("INVALID", "a home stream header is too long or cut short; nothing was changed")
    try:
        r = json.loads(line)
    except ValueError:
        raise Fail("INVALID", "a home stream header is not JSON")
    if not isinstance(r, dict):
        raise Fail("INVALID", "a home stream header is not a JSON object")
    return r


def is_int(v, lo, hi):
    return type(v) is int and lo <= v <= hi


def check_record(r, rel):
    """A dir, file or link record whose fields can be acted on (home_stream::parse_header)."""
    t = r.get("t")
    if t == "hardlink":
        to = r.get("to")
        if not (isinstance(to, str) and is_utf8(to)):
            raise Fail("INVALID", f"{rel}: a malformed hardlink record")
        return
    if t not in ("dir", "file", "link"):
        raise Fail("INVALID", f"{rel}: a {t!r} record cannot be loaded")
    ok = is_int(r.get("mtime"), -(1 << 63), (1 << 63) - 1)
    if t == "link":
        target = r.get("target")
        ok = ok and isinstance(target, str) and target != "" and is_utf8(target) and "\0" not in target \
            and len(target.encode()) <= MAX_PATH
    else:
        ok = ok and is_int(r.get("mode"), 0, 0o1777)
    if t == "file":
        size, data = r.get("size"), r.get("data")
        ok = ok and is_int(size, 0, MAX_FILE) and isinstance(data, list) and len(data) <= MAX_EXTENTS
        end = 0
        for e in data if ok else []:
            if not (isinstance(e, list) and len(e) == 2 and is_int(e[0], end, size) and is_int(e[1], 0, size - e[0])):
                ok = False
                break
            end = e[0] + e[1]
    if not ok:
        raise Fail("INVALID", f"{rel}: a malformed {t} record")


# One buffer for every file a load writes (no new bytes object per chunk).
LOAD_BUFFER = memoryview(bytearray(CHUNK))


def check_extents(rel, data, end, size):
    """The end of the last of `data`, each extent after `end` and inside `size`."""
    if not (isinstance(data, list) and len(data) <= MAX_EXTENTS):
        raise Fail("INVALID", f"{rel}: malformed extents")
    for e in data:
        if not (isinstance(e, list) and len(e) == 2 and is_int(e[0], end, size) and is_int(e[1], 0, size - e[0])):
            raise Fail("INVALID", f"{rel}: extents out of order or past its size")
        end = e[0] + e[1]
    return end


def write_file(inp, dest, r):
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        data, more, end = r["data"], r.get("more") is True, check_extents(r["p"], r["data"], 0, r["size"])
        while True:
            for pos, length in data:
                while length:
                    n = inp.readinto(LOAD_BUFFER[: min(CHUNK, length)])
                    if not n:
                        raise Fail("INVALID", "the home stream ended inside a file; nothing was changed")
                    done = 0
                    while done < n:
                        done += os.pwrite(fd, LOAD_BUFFER[done:n], pos + done)
                    pos += n
                    length -= n
            if not more:
                break
            # The rest of the file's extents, each record after the one before.
            nxt = read_line(inp)
            if nxt.get("t") != "extents" or nxt.get("p") != r["p"]:
                raise Fail("INVALID", f"{r['p']}: the rest of the file did not follow it")
            data, more = nxt.get("data"), nxt.get("more") is True
            end = check_extents(r["p"], data, end, r["size"])
        os.ftruncate(fd, r["size"])  # what no extent covers stays a hole
        os.fchmod(fd, r["mode"])
        os.utime(fd, ns=(r["mtime"], r["mtime"]))
    finally:
        os.close(fd)


def set_dir(path, mode, mtime):
    os.chmod(path, mode)
    os.utime(path, ns=(mtime, mtime))


def stage(inp, tree, summary):
    """Writes the records up to `end` into tree. Returns the folders {rel: (mode, mtime)} and the
    records as (kind, rel) in stream order."""
    dirs, seen, order, files = {"": None}, set(), [], set()
    while True:
        r = read_line(inp)
        if r.get("t") == "end":
            if not is_int(r.get("entries"), len(order), len(order)):
                raise Fail("INVALID", "the home stream's end record does not count its entries")
            break
        rel = r.get("p")
        check_record(r, rel)
        parts = stream_parts(rel)
        if "/".join(parts[:-1]) not in dirs or rel in seen:
            raise Fail("INVALID", f"{rel} does not follow its folder, or comes twice")
        seen.add(rel)
        dest, t = os.path.join(tree, rel), r["t"]
        if t == "dir":
            os.mkdir(dest, 0o700)
            dirs[rel] = (r["mode"], r["mtime"])
            summary["dirs"] += 1
        elif t == "hardlink":
            # Another name of a file this stream staged before.
            if "/".join(stream_parts(r["to"])) not in files:
                raise Fail("INVALID", f"{rel} is a hard link to {r['to']}, no file of this stream before it")
            os.link(os.path.join(tree, r["to"]), dest)
            files.add(rel)
            summary["files"] += 1
            t = "file"
        elif t == "link":
            os.symlink(r["target"], dest)
            os.utime(dest, ns=(r["mtime"], r["mtime"]), follow_symlinks=False)
            summary["links"] += 1
        else:
            write_file(inp, dest, r)
            files.add(rel)
            summary["files"] += 1
            summary["bytes"] += r["size"]
        order.append((t, rel))
    if inp.read(1):
        raise Fail("INVALID", "the home stream goes on after its end record; nothing was changed")
    del dirs[""]
    # Folder modes and times last, deepest first: a read-only folder could not be filled.
    for rel in sorted(dirs, key=lambda d: -d.count("/")):
        set_dir(os.path.join(tree, rel), *dirs[rel])
    return dirs, order


def rmtree_force(path):
    """Removes a tree, its read-only folders too. It walks by descriptor and never follows a
    link, so a process that still works inside the tree cannot turn a removal elsewhere."""
    parent, name = os.path.split(path)
    pfd = os.open(parent, DIR_FLAGS)
    try:
        remove_at(pfd, name)
    finally:
        os.close(pfd)


def remove_at(dfd, name):
    # One descriptor open per level, as cmd_own's walk holds.
    try:
        fd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
    except FileNotFoundError:
        return
    except OSError as e:
        if e.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        os.unlink(name, dir_fd=dfd)
        return
    try:
        os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | 0o700)
        with os.scandir(fd) as it:
            names = [e.name for e in it]
        for n in names:
            remove_at(fd, n)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dfd)


DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


def open_child(dfd, name, rel):
    """The folder `name` of the folder dfd, opened without following a link."""
    try:
        return os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Fail("PATH_ESCAPES", f"{rel} is a symbolic link; nothing is placed through it")
        if e.errno == errno.ENOTDIR:
            raise Fail("INVALID", f"{rel} is not a folder")
        raise


def real_dir(parts):
    """A descriptor of HOME/parts, opened component by component without following a link
    (missing folders are made). Loads place entries by descriptor from here down, so a bot that
    swaps one of its folders for a link while root loads into it redirects nothing."""
    fd = os.open(HOME, DIR_FLAGS)
    try:
        for i, name in enumerate(parts):
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            nxt = open_child(fd, name, "/".join(parts[: i + 1]))
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        os.close(fd)
        raise


def lstat_at(dfd, name):
    try:
        return os.stat(name, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        return None


class Opened:
    """Folders given write permission for a moment, so entries can be placed into the computer's
    read-only folders; each gets its mode back at the end, by descriptor."""

    def __init__(self):
        self.fds = {}

    def open_up(self, dfd):
        st = os.fstat(dfd)
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o300 != 0o300 and (st.st_dev, st.st_ino) not in self.fds:
            self.fds[(st.st_dev, st.st_ino)] = (os.dup(dfd), mode)
            os.fchmod(dfd, mode | 0o300)

    def close(self):
        for fd, mode in self.fds.values():
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        self.fds = {}


def place(src, dfd, name, folder):
    """Moves a staged entry (src, in the staging folder no bot can reach) to name in the folder
    dfd. A folder that changes parents needs write permission on itself (its '..' changes), so a
    read-only one is opened for the move; `folder` is its (mode, mtime), set again once it is
    there, through a descriptor taken before the move."""
    if folder is None:
        os.rename(src, name, dst_dir_fd=dfd)
        return
    fd = os.open(src, DIR_FLAGS | os.O_NOFOLLOW)
    try:
        os.fchmod(fd, folder[0] | 0o700)
        os.rename(src, name, dst_dir_fd=dfd)
        os.fchmod(fd, folder[0])
        os.utime(fd, ns=(folder[1], folder[1]))
    finally:
        os.close(fd)


def set_aside(dfd, name, old):
    """Moves the entry `name` of dfd to the path old (in the staging folder), whatever it is; a
    link is moved, never followed."""
    st = lstat_at(dfd, name)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        try:
            fd = os.open(name, DIR_FLAGS | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError:
            fd = None  # swapped since: it is moved as it is now
        if fd is not None:
            try:
                os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | 0o700)
            finally:
                os.close(fd)
    os.rename(name, old, src_dir_fd=dfd)


def restore(staging, tree, dirs, order):
    # The computer is starting: no process of a bot runs.
    hfd = os.open(HOME, DIR_FLAGS)
    try:
        for name in os.listdir(hfd):
            if name != os.path.basename(staging):
                remove_at(hfd, name)
        for t, rel in order:
            if "/" not in rel:
                place(os.path.join(tree, rel), hfd, rel, dirs.get(rel))
    finally:
        os.close(hfd)


def replace(staging, tree, parts):
    dfd = real_dir(parts[:-1])
    try:
        set_aside(dfd, parts[-1], os.path.join(staging, "old"))
        os.chmod(tree, 0o755)
        os.rename(tree, parts[-1], dst_dir_fd=dfd)
    finally:
        os.close(dfd)


def put(staging, tree, dirs, names, dfd):
    """Each name in the folder dfd becomes the staged top-level entry of that name, whatever it
    was, or nothing when none was staged; the old one goes with the staging folder, a link
    moved, never followed."""
    old = os.path.join(staging, "old")
    os.mkdir(old, 0o700)
    opened = Opened()
    try:
        for name in names:
            opened.open_up(dfd)
            set_aside(dfd, name, os.path.join(old, name))
            staged = os.path.join(tree, name)
            if os.path.lexists(staged):
                place(staged, dfd, name, dirs.get(name))
    finally:
        opened.close()


def merge(tree, dirs, order, pfd, summary):
    """Places the staged entries into the folder pfd: what is missing comes in, a file or link
    replaces an older one, anything newer or of another kind stays and is named. Each entry's
    folder is opened from pfd down by descriptor, never through a link, so nothing a bot changes
    meanwhile can redirect a placement."""
    settled = set()  # staged folders moved in whole, or kept out: nothing inside is looked at again
    opened = Opened()
    try:
        for t, rel in order:
            parts = rel.split("/")
            if any("/".join(parts[:i]) in settled for i in range(1, len(parts))):
                continue
            src, dfd = os.path.join(tree, rel), pfd
            try:
                for i, name in enumerate(parts[:-1]):
                    nxt = open_child(dfd, name, "/".join(parts[: i + 1]))
                    if dfd != pfd:
                        os.close(dfd)
                    dfd = nxt
                dst = lstat_at(dfd, parts[-1])
                if dst is None:
                    opened.open_up(dfd)
                    place(src, dfd, parts[-1], dirs.get(rel))
                    settled.add(rel)
                    continue
                if t == "dir" and stat.S_ISDIR(dst.st_mode):
                    os.chmod(src, 0o700)  # its entries are moved out of it one by one
                    continue
                if t != "dir" and not stat.S_ISDIR(dst.st_mode):
                    sst = os.lstat(src)
                    if stat.S_ISREG(dst.st_mode) and stat.S_ISREG(sst.st_mode) \
                            and (dst.st_size, dst.st_mtime_ns) == (sst.st_size, sst.st_mtime_ns):
                        continue
                    if dst.st_mtime_ns < sst.st_mtime_ns:
                        opened.open_up(dfd)
                        os.rename(src, parts[-1], dst_dir_fd=dfd)
                        continue
                summary["kept_newer"].append(rel)
                settled.add(rel)
            finally:
                if dfd != pfd:
                    os.close(dfd)
    finally:
        opened.close()


def cmd_load():
    import json
    inp = sys.stdin.buffer
    how = read_line(inp)
    kind, into = how.get("mode"), how.get("into")
    if kind == "restore":
        into = ""
    if kind not in ("restore", "merge", "replace", "put") or not isinstance(into, str):
        raise Fail("INVALID", "unknown load mode, or one without the path it goes into")
    if kind == "replace" and not into:
        raise Fail("INVALID", "a replace needs the path it replaces")
    names = how.get("names", [])
    if kind == "put" and (not isinstance(names, list) or not all(isinstance(n, str) and len(stream_parts(n)) == 1 for n in names)):
        raise Fail("INVALID", "a put names plain entries of the folder it puts into")
    target = stream_parts(into) if into else []
    staging = full([f"{LOAD_PREFIX}{os.getpid()}"])
    if os.path.lexists(staging):  # left by a killed load that had this pid
        rmtree_force(staging)
    os.mkdir(staging, 0o700)
    tree = os.path.join(staging, "tree")
    summary = {"files": 0, "dirs": 0, "links": 0, "bytes": 0, "kept_newer": []}
    try:
        os.mkdir(tree, 0o700)
        dirs, order = stage(inp, tree, summary)
        # Nothing outside the staging folder has changed up to here.
        if not target and any("/" not in rel and own_staging(rel) for _, rel in order):
            raise Fail("INVALID", "the home stream names the helper's own staging folders")
        if kind == "restore":
            restore(staging, tree, dirs, order)
        elif kind in ("merge", "put"):
            if kind == "put" and any(rel.split("/")[0] not in names for _, rel in order):
                raise Fail("INVALID", "the home stream holds an entry the put does not name")
            dfd = real_dir(target)
            try:
                if kind == "merge":
                    merge(tree, dirs, order, dfd, summary)
                else:
                    put(staging, tree, dirs, names, dfd)
            finally:
                os.close(dfd)
        else:
            replace(staging, tree, target)
    finally:
        try:
            rmtree_force(staging)
        except OSError:
            pass
    sys.stdout.write(json.dumps(summary))


# ------------------------------------------------------------------------------------------------
# Watching the home for the Files pane: inotify on every folder (never through a link), skipping
# the computer's own churn, a line on stdout at most every 0.2 s while things change.

WATCH_NOISE = {".browser-profiles", ".cache", ".config", ".local", ".pki"}
MAX_WATCHES = 8192


def cmd_watch():
    import ctypes, select, struct
    libc = ctypes.CDLL(None, use_errno=True)
    IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO = 0x2, 0x4, 0x8, 0x40, 0x80
    IN_CREATE, IN_DELETE, IN_DELETE_SELF, IN_ISDIR = 0x100, 0x200, 0x400, 0x40000000
    IN_ONLYDIR, IN_DONT_FOLLOW = 0x01000000, 0x02000000
    mask = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW
    fd = libc.inotify_init1(os.O_CLOEXEC)
    if fd < 0:
        raise Fail("INVALID", "inotify is not available")
    watched = {}

    def add(path):
        for dirpath, dirnames, _ in os.walk(path):
            if len(watched) >= MAX_WATCHES:
                return
            rel = os.path.relpath(dirpath, HOME)
            if rel.split("/")[0] in WATCH_NOISE or os.path.basename(dirpath).startswith(LOAD_PREFIX):
                dirnames[:] = []
                continue
            wd = libc.inotify_add_watch(fd, os.fsencode(dirpath), mask)
            if wd >= 0:
                watched[wd] = dirpath
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]

    add(HOME)
    out = sys.stdout
    pending, last = False, 0.0
    while True:
        timeout = 0.2 if pending else None
        ready, _, _ = select.select([fd], [], [], timeout)
        if ready:
            data = os.read(fd, 65536)
            i = 0
            while i + 16 <= len(data):
                wd, ev, _, length = struct.unpack_from("iIII", data, i)
                name = data[i + 16:i + 16 + length].rstrip(b"\0")
                i += 16 + length
                parent = watched.get(wd)
                if parent is None:
                    continue
                if ev & IN_DELETE_SELF:
                    watched.pop(wd, None)
                # A folder made, moved in, or given to this bot (a load places as root, then
                # gives it: only then may the watch enter it).
                if ev & IN_ISDIR and ev & (IN_CREATE | IN_MOVED_TO | IN_ATTRIB) and name:
                    add(os.path.join(parent, os.fsdecode(name)))
                if parent == HOME and os.fsdecode(name) in WATCH_NOISE:
                    continue
                pending = True
        if pending and time.time() - last >= 0.2:
            out.write("changed\n")
            out.flush()
            pending, last = False, time.time()


def tagged(needle):
    """Pids (other than this one) of the group tagged `needle` (KEY=VALUE): every process below a
    keeper that shows the tag (botdesk-keep, root, a child subreaper: nothing it runs can leave
    it, see that file), and every process whose environment holds the tag. Root's processes and
    zombies are left out: they cannot be signalled, or are already gone."""
    me, parents, keepers, out = os.getpid(), {}, [], set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        pid = int(pid)
        if pid == me:
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                state, ppid = f.read().rsplit(b")", 1)[1].split()[:2]
            if state == b"Z":
                continue
            parents[pid] = int(ppid)
            if os.stat(f"/proc/{pid}").st_uid == 0:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    words = f.read().replace(b"\0", b" ").split()
                if words[:1] == [b"botdesk-keep"] and needle in words[1:]:
                    keepers.append(pid)
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    out.add(pid)
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError):
            continue
    children = {}
    for pid, ppid in parents.items():
        children.setdefault(ppid, []).append(pid)
    below, seen = [c for k in keepers for c in children.get(k, [])], set(keepers)
    while below:
        pid = below.pop()
        if pid not in seen:
            seen.add(pid)
            out.add(pid)
            below.extend(children.get(pid, []))
    out.discard(me)
    return sorted(p for p in out if p in parents and not is_root(p))


def is_root(pid):
    try:
        return os.stat(f"/proc/{pid}").st_uid == 0
    except FileNotFoundError:
        return True


def signal_all(needle, sig):
    for pid in tagged(needle):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def cmd_kill(exec_id):
    """Kills one exec's whole tree at once (a timeout or cancel)."""
    import signal
    needle = f"BOTDESK_EXEC_ID={exec_id}".encode()
    for _ in range(100):
        if not tagged(needle):
            return
        signal_all(needle, signal.SIGKILL)
        time.sleep(0.01)


def cmd_kill_env(entry):
    """Stops every process tagged with `entry` (KEY=VALUE): TERM, up to 2 s, then KILL."""
    import signal
    needle = entry.encode()
    signal_all(needle, signal.SIGTERM)
    for _ in range(40):
        if not tagged(needle):
            return
        time.sleep(0.05)
    for _ in range(100):
        signal_all(needle, signal.SIGKILL)
        time.sleep(0.01)
        if not tagged(needle):
            return
    raise Fail("INVALID", f"processes tagged {entry} survived SIGKILL")



def cmd_own():
    """Gives the home its owners by path, as root (SandboxProvider::set_owners). Stdin: JSON
    {"team": bool, "all": bool, "bots": [{"folder": REL, "profile": REL, "uid": N}],
    "shared_gid": G, "private": P}. On a Team computer each bot's folder and browser profile are
    its uid's (group G, mode 0700 at the top; the whole folder when its top had another owner),
    `shared/` is P's and group G's (setgid, 2770; its entries join G when it had another group),
    `bots/` and `.browser-profiles/` are P's (0755): folders missing are made. With "all" (after a
    load, which writes as root) every entry root owns goes to its owner by its place. Links are
    never followed (walks by descriptor; lchown). A bot's folder that is not a folder (a link the
    bot made, say) is named on stderr and left: it breaks only that bot's work."""
    import json
    spec = json.loads(sys.stdin.buffer.read(1 << 20))
    team, private, gid = bool(spec["team"]), int(spec["private"]), int(spec["shared_gid"])
    tops = {}
    for b in spec["bots"] if team else []:
        for rel in (b["folder"], b["profile"]):
            if len(parts_of(rel)) != 2:
                raise Fail("INVALID", f"not a bot's folder or profile: {rel!r}")
            tops["/".join(parts_of(rel))] = int(b["uid"])

    def owner_of(rel):
        for top, uid in tops.items():
            if rel == top or rel.startswith(top + "/"):
                return uid, gid
        if team and (rel == "shared" or rel.startswith("shared/")):
            return private, gid
        return private, private

    def walk(fd):
        """(rel of each folder below fd, its fd, its entries that are not folders), by descriptor."""
        for path, _dirs, names, dfd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            yield ("" if path == "." else path[2:]), dfd, names

    if team:
        # Only a member of the bots' group may set `shared/`'s setgid bit (root holds no FSETID).
        os.setgroups([gid])
    home = os.open(HOME, os.O_RDONLY | os.O_DIRECTORY)
    if spec["all"]:
        for rel, dfd, names in walk(home):
            if os.fstat(dfd).st_uid == 0:
                os.fchown(dfd, *owner_of(rel))
            for name in names:
                try:
                    if os.stat(name, dir_fd=dfd, follow_symlinks=False).st_uid == 0:
                        os.chown(name, *owner_of(f"{rel}/{name}" if rel else name), dir_fd=dfd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # gone meanwhile
    if not team:
        return

    def folder(rel, uid, g, mode):
        """Opens folder `rel` (made when missing) without following a link; None if it is not one."""
        *parents, last = rel.split("/")
        dfd = home
        try:
            for part in parents:
                dfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
            try:
                os.mkdir(last, 0o700, dir_fd=dfd)
                os.chown(last, uid, g, dir_fd=dfd, follow_symlinks=False)
            except FileExistsError:
                pass
            fd = os.open(last, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dfd)
        except OSError as e:
            if e.errno not in (errno.ELOOP, errno.ENOTDIR, errno.ENOENT):
                raise
            sys.stderr.write(f"botdesk: {rel} is not a folder (a link or a file): left as it is\n")
            return None
        st = os.fstat(fd)
        return fd, st

    for rel in ("bots", ".browser-profiles"):
        got = folder(rel, private, private, 0o755)
        if got:
            os.fchown(got[0], private, private)
            os.fchmod(got[0], 0o755)
    got = folder("shared", private, gid, 0o2770)
    if got:
        fd, st = got
        if st.st_gid != gid:
            # Made before bots had uids of their own: its entries join the bots' group, which
            # gets what their owner had.
            for _rel, dfd, names in walk(fd):
                os.fchown(dfd, -1, gid)
                os.fchmod(dfd, stat.S_IMODE(os.fstat(dfd).st_mode) | 0o2070)
                for name in names:
                    try:
                        os.chown(name, -1, gid, dir_fd=dfd, follow_symlinks=False)
                        # Through a descriptor that is the entry itself, never a link's target.
                        efd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dfd)
                    except OSError:
                        continue  # a link, a socket, or gone
                    try:
                        m = stat.S_IMODE(os.fstat(efd).st_mode)
                        os.fchmod(efd, m | ((m & 0o700) >> 3))
                    finally:
                        os.close(efd)
        os.fchown(fd, private, gid)
        os.fchmod(fd, 0o2770)
    name_users(spec["bots"], gid)
    for rel, uid in tops.items():
        got = folder(rel, uid, gid, 0o700)
        if not got:
            continue
        fd, st = got
        if st.st_uid != uid:
            # Another owner at its top (made before bots had uids, or it came from another
            # computer): the whole folder becomes the bot's.
            for _rel, dfd, names in walk(fd):
                os.fchown(dfd, uid, gid)
                for name in names:
                    try:
                        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                        # A file with other links may be another bot's too (made when bots
                        # shared a uid): it keeps its owner.
                        if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                            continue
                        os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
                    except FileNotFoundError:
                        continue
        os.fchown(fd, uid, gid)
        os.fchmod(fd, 0o700)


def cmd_fence_devtools(display, uid):
    """Display N's Chromium DevTools port (9221+N, on loopback) is refused to every uid but root's,
    the screen services' (990: the gateway speaks CDP) and the display's bot's (UID): `prohibit`
    rules at priority 50, which start.sh put before the local table. The port's earlier rules go
    first (a slot changes hands)."""
    import re, subprocess
    n, me = int(display), int(uid)
    if not 1 <= n <= 1000 or me < 1000:
        raise Fail("INVALID", "fence-devtools N UID: a display and a bot's uid")
    port = 9221 + n
    with open("/proc/self/uid_map") as f:
        # The highest uid this namespace maps (all 32 bits, or 65536 of them under userns-remap,
        # where a rule naming an unmapped uid is refused): inside + count - 1.
        top = min(max(int(a) + int(c) - 1 for a, _, c in (line.split() for line in f)), 4294967294)

    def ip(*args):
        r = subprocess.run(["ip", "rule", *args], capture_output=True, text=True)
        if r.returncode != 0:
            raise Fail("INVALID", f"ip rule {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    # A bot may neither connect to the port (dport) nor answer on it (sport: a listener another
    # bot put there first gets no reply out, so nothing can pose as this display's browser).
    # The new rules go in before the old ones go (never a moment without).
    ranges = [f"{lo}-{hi}" for lo, hi in ((1, 989), (991, me - 1), (me + 1, top)) if lo <= hi]
    wanted = {(r, way) for r in ranges for way in ("dport", "sport")}
    old = set()
    for line in ip("show", "priority", "50").splitlines():
        m = re.search(r"uidrange (\d+-\d+) .*(dport|sport) (\d+) prohibit", line)
        if m and int(m.group(3)) == port:
            old.add((m.group(1), m.group(2)))
    for r, way in sorted(wanted - old):
        ip("add", "priority", "50", "uidrange", r, "ipproto", "6", way, str(port), "prohibit")
    for r, way in sorted(old - wanted):
        ip("del", "priority", "50", "uidrange", r, "ipproto", "6", way, str(port), "prohibit")


POLICIES = "/tmp/botdesk-policy"
MAX_ALLOW = 256


def check_policy(p):
    """One bot's policy, as botdesk_core::NetPolicy writes it: {"mode": open|offline} or
    {"mode": "allow", "allow": [domain or IPv4 address or a.b.c.d/n, ...]}."""
    import ipaddress, re
    if not isinstance(p, dict) or p.get("mode") not in ("open", "offline", "allow") or set(p) - {"mode", "allow"}:
        raise Fail("INVALID", f"not a network policy: {str(p)[:200]}")
    allow = p.get("allow", [])
    if p["mode"] != "allow" and allow or not isinstance(allow, list) or len(allow) > MAX_ALLOW:
        raise Fail("INVALID", f"not a network policy's list: {str(allow)[:200]}")
    for entry in allow:
        if not isinstance(entry, str):
            raise Fail("INVALID", f"not a domain or address: {entry!r}")
        try:
            ipaddress.IPv4Network(entry, strict=False)
        except ValueError:
            if not re.fullmatch(r"(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*", entry):
                raise Fail("INVALID", f"not a domain or address: {entry[:200]!r}")
    return {"mode": p["mode"], **({"allow": allow} if p["mode"] == "allow" else {})}


def cmd_net_policy():
    """Sets the network policies of the computer's bots from stdin: {"bots": [{"uid": U,
    "policy": {...}}, ...]} (every bot of the computer; one not named is `open`). Each policy
    goes to /tmp/botdesk-policy/<uid>.json, where the screen gateway's botdesk_net.py reads it
    within half a second (TCP), and the chain BOTDESK_NET is written anew at once, in one
    iptables-restore (everything else a bot sends: an `offline` bot reaches no name server, and
    one not `open` sends nothing but TCP, which the gateway decides)."""
    import json, subprocess
    try:
        req = json.loads(sys.stdin.read(1 << 20))
        bots = req["bots"]
        if not isinstance(bots, list) or len(bots) > 10_000:
            raise ValueError("bots")
        wanted = {}
        for b in bots:
            uid = b["uid"]
            if not isinstance(uid, int) or isinstance(uid, bool) or uid < 1000:
                raise ValueError(f"uid {uid!r}")
            wanted[uid] = check_policy(b["policy"])
    except (ValueError, KeyError, TypeError) as e:
        raise Fail("INVALID", f"net-policy: {e}")
    rules = [":BOTDESK_NET - [0:0]"]
    for uid, p in sorted(wanted.items()):
        if p["mode"] == "offline":
            rules.append(f"-A BOTDESK_NET -m owner --uid-owner {uid} -d 127.0.0.11/32 -j REJECT")
    rules.append("-A BOTDESK_NET -d 127.0.0.0/8 -j RETURN")
    for uid, p in sorted(wanted.items()):
        if p["mode"] != "open":
            rules.append(f"-A BOTDESK_NET -m owner --uid-owner {uid} -m addrtype ! --dst-type LOCAL -j REJECT")
    # The files first (the gateway then refuses new TCP), then the rules (everything else).
    for uid, p in wanted.items():
        tmp = os.path.join(POLICIES, f".{uid}.tmp")
        with open(tmp, "w") as f:
            json.dump(p, f)
        os.chmod(tmp, 0o644)
        os.replace(tmp, os.path.join(POLICIES, f"{uid}.json"))
    for name in os.listdir(POLICIES):
        if name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) not in wanted:
            os.unlink(os.path.join(POLICIES, name))
    r = subprocess.run(["iptables-restore", "--noflush"], input="*filter\n" + "\n".join(rules) + "\nCOMMIT\n", capture_output=True, text=True)
    if r.returncode != 0:
        raise Fail("IO", f"iptables-restore: {r.stderr.strip()[:500]}")


GECOS = "Botdesk bot"


def name_users(bots, gid):
    """Names each Team bot's uid (its id) and the bots' group in /etc/passwd and /etc/group, so
    `whoami`, `ls -l` and a shell's prompt show them: entries of bots no longer here go. Written
    whole, then renamed into place."""
    def rewrite(path, keep, add):
        with open(path) as f:
            lines = [line for line in f.read().splitlines() if keep(line)]
        with open(path + ".botdesk", "w") as f:
            f.write("\n".join(lines + add) + "\n")
        os.chmod(path + ".botdesk", 0o644)
        os.replace(path + ".botdesk", path)

    users = []
    for b in bots:
        name = b["folder"].split("/")[-1]
        if not name.isalnum() or len(name) > 32:
            raise Fail("INVALID", f"not a bot's id: {name!r}")
        users.append(f"{name}:x:{int(b['uid'])}:{gid}:{GECOS}:{HOME}/{b['folder']}:/bin/bash")
    rewrite("/etc/passwd", lambda line: line.split(":")[4:5] != [GECOS], users)
    rewrite("/etc/group", lambda line: not line.startswith("botdesk-bots:"), [f"botdesk-bots:x:{gid}:"])

def error_line(**fields):
    import json
    return json.dumps(fields) + "\n"


def main(argv):
    # A home may nest folders as deep as a 4 KiB path allows (about 2,000 levels); the walks recurse.
    sys.setrecursionlimit(10_000)
    cmds = {
        "list": (cmd_list, 1), "mkdir": (cmd_mkdir, 1),
        "write": (cmd_write, 2), "kill": (cmd_kill, 1),
        "kill-env": (cmd_kill_env, 1), "save": (cmd_save, 0), "load": (cmd_load, 0), "watch": (cmd_watch, 0),
        "own": (cmd_own, 0), "fence-devtools": (cmd_fence_devtools, 2),
        "net-policy": (cmd_net_policy, 0),
    }
    if len(argv) < 2 or argv[1] not in cmds or len(argv) - 2 != cmds[argv[1]][1]:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        cmds[argv[1]][0](*argv[2:])
        return 0
    except Fail as e:
        sys.stderr.write(error_line(code=e.code, message=e.message, **e.extra))
        return 3
    except OSError as e:
        sys.stderr.write(error_line(code="IO", message=f"{e.strerror}: {e.filename}"))
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
