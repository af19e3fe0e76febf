"""The tests' web site, served by `cargo xtask test` (and `bench`) on port 8080 of every address of
a network namespace of its own (a private one, 10.232.K.2, and one outside every private range,
198.51.100.2): what a bot's network policy lets through or refuses, reached from inside a
computer as from the internet. Pages:
  /          a page titled "Test site" saying "hello from the test site"
  /stream    an answer that never ends: a line every 200 ms (a connection kept open)
  /big       1 MiB (the bench's page load)
Runs until killed; logs nothing.
"""
import http.server, sys, time

HELLO = b"""<!doctype html><html><head><title>Test site</title></head>
<body><h1>hello from the test site</h1></body></html>"""
BIG = b"x" * (1 << 20)


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
        body = BIG if self.path == "/big" else HELLO
        self.send_response(200)
        self.send_header("content-type", "text/plain" if self.path == "/big" else "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1]) if len(sys.argv) > 1 else 8080), Site).serve_forever()
