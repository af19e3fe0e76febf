"""The tests' web site, served by `cargo xtask test` (and `bench`) on port 8080 of every address of
a network namespace of its own (a private one, 10.232.K.2, and one outside every private range,
198.51.100.2): what a bot's network policy lets through or refuses, reached from inside a
computer as from the internet. Pages:
  /          a page titled "Test site" saying "hello from the test site"
  /stream    an answer that never ends: a line every 200 ms (a connection kept open)
  /big       1 MiB (the bench's page load)
  /login?check=SHA256   a login form (user name, password, one-time code); its POST shows
             "welcome NAME" and the code given when the password's SHA-256 is CHECK
  /shop      a form whose POST to /buy says "bought ITEM"
  /files     a link to /download, a file sent as an attachment (report.csv)
  /upload    a form with a file chooser
Runs until killed; logs nothing.
"""
import hashlib, html, http.server, sys, time, urllib.parse

HELLO = b"""<!doctype html><html><head><title>Test site</title></head>
<body><h1>hello from the test site</h1></body></html>"""
BIG = b"x" * (1 << 20)


def page(title, body):
    return f"<!doctype html><html><head><title>{title}</title></head><body>{body}</body></html>".encode()


def login_form(check):
    return page("Log in", f"""<h1>Log in</h1><form method="post" action="/login">
<input type="hidden" name="check" value="{html.escape(check)}">
<label>User <input name="username" autocomplete="username"></label>
<label>Password <input type="password" name="password" autocomplete="current-password"></label>
<label>Code <input name="code" autocomplete="one-time-code"></label>
<button type="submit">Log in</button></form>""")


SHOP = page("Shop", """<h1>Shop</h1><form method="post" action="/buy">
<label>Item <input name="item" value="teapot"></label><button type="submit">Buy</button></form>""")
FILES = page("Files", '<h1>Files</h1><a href="/download">report.csv</a>')
UPLOAD = page("Upload", """<h1>Upload</h1><form method="post" action="/upload" enctype="multipart/form-data">
<label>Report <input type="file" name="report"></label><button type="submit">Send</button></form>""")


class Site(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        if self.path == "/stream":
            self.send_response(200)
            self.send_header("content-type", "text/plain")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                while True:
                    line = b"tick %.3f\n" % time.time()
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                    time.sleep(0.2)
            except OSError:
                return
        path, _, query = self.path.partition("?")
        if path == "/login":
            return self.send(login_form(urllib.parse.parse_qs(query).get("check", [""])[0]))
        if path == "/shop":
            return self.send(SHOP)
        if path == "/files":
            return self.send(FILES)
        if path == "/upload":
            return self.send(UPLOAD)
        if path == "/download":
            return self.send(b"a,b\n1,2\n", "text/csv", [("content-disposition", 'attachment; filename="report.csv"')])
        if path == "/big":
            return self.send(BIG, "text/plain")
        self.send(HELLO)

    def do_POST(self):
        n = int(self.headers.get("content-length") or 0)
        form = {k: v[0] for k, v in urllib.parse.parse_qs(self.rfile.read(min(n, 65536)).decode(errors="replace")).items()}
        if self.path == "/login":
            ok = hashlib.sha256(form.get("password", "").encode()).hexdigest() == form.get("check")
            said = f"welcome {html.escape(form.get('username', ''))}, code {html.escape(form.get('code', ''))}" if ok else "wrong password"
            return self.send(page("Logged in" if ok else "Log in", f"<h1>{said}</h1>"))
        if self.path == "/buy":
            return self.send(page("Bought", f"<h1>bought {html.escape(form.get('item', ''))}</h1>"))
        self.send(page("Not found", "<h1>not found</h1>"), status=404)

    def send(self, body, kind="text/html", headers=(), status=200):
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1]) if len(sys.argv) > 1 else 8080), Site).serve_forever()
