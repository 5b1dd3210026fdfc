#!/usr/bin/env python3
"""examples/httpd_check.py — checks examples/httpd.cpp over real sockets.

usage: python3 examples/httpd_check.py [build/examples/httpd]

Starts the server on 127.0.0.1:0 with --header-timeout-ms 1000 --idle-timeout-ms 1500,
waits for its "listening on" line, then checks: the exact bytes of GET / (the Go raw
peer's response), keep-alive, pipelining (answers in order, stop after Connection: close),
404/HEAD/405, HTTP/1.0 close and keep-alive, 400/431/501/505 with Connection: close then
EOF, 413 while the client is still sending its body (the lingering close lets it read the
answer), a 100 KB body, Expect: 100-continue, a slow-loris client cut off by the header
deadline, the idle deadline, and requests split across sends. Prints one line per check;
exits 1 if any fails. Timing windows are wide (0.9-1.6 s for a 1 s deadline) but a loaded
machine can still miss them.
Not in `make test`: it needs the example built and free ports; the parser's own unit tests
are tests/examples/http_parser_test.cpp.
"""
import atexit
import socket
import subprocess
import sys
import time

binary = sys.argv[1] if len(sys.argv) > 1 else "build/examples/httpd"
server = subprocess.Popen([binary, "127.0.0.1:0", "--header-timeout-ms", "1000",
                           "--idle-timeout-ms", "1500"], stdout=subprocess.PIPE, text=True)
atexit.register(server.kill)  # also when a check raises
line = server.stdout.readline()
if not line.startswith("listening on "):
    sys.exit("httpd did not start: %r" % line)
port = int(line.rsplit(":", 1)[1])
HELLO = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\r\nhello world\n"
fails = 0


def conn():
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(5)
    return s


def read_until_close(s):
    data = b""
    t0 = time.time()
    while True:
        try:
            b = s.recv(65536)
        except ConnectionResetError:
            return data, "reset", time.time() - t0
        except socket.timeout:
            return data, "timeout", time.time() - t0
        if not b:
            return data, "eof", time.time() - t0
        data += b


def read_n(s, n):
    data = b""
    while len(data) < n:
        b = s.recv(n - len(data))
        if not b:
            break
        data += b
    return data


def check(name, cond, detail=""):
    global fails
    print(("ok   " if cond else "FAIL ") + name + ("" if cond else "  " + repr(detail)[:300]))
    if not cond:
        fails += 1


# 1 simple GET, exact bytes, keep-alive (second request on the same conn)
s = conn()
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
r = read_n(s, len(HELLO))
check("GET / exact bytes", r == HELLO, r)
s.sendall(b"GET /?q=1 HTTP/1.1\r\nHost: x\r\n\r\n")
r = read_n(s, len(HELLO))
check("keep-alive second request", r == HELLO, r)
s.close()

# 2 pipelining: 3 requests in one send -> 3 responses (one write: arrive together)
s = conn()
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" * 3)
r = read_n(s, 3 * len(HELLO))
check("pipelined x3", r == HELLO * 3, r)
# pipelined with a close at the end: responses then EOF
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
          b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
r, how, _ = read_until_close(s)
want = HELLO + b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\nConnection: close\r\n\r\nhello world\n"
check("pipelined, close after the 2nd, third ignored", r == want and how == "eof", (r, how))
s.close()

# 3 404, HEAD, 405
s = conn()
s.sendall(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\nHEAD / HTTP/1.1\r\nHost: x\r\n\r\nPOST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
r, how, _ = read_until_close(s)
check("404 + HEAD + 405", r.startswith(b"HTTP/1.1 404 Not Found\r\n") and b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 12\r\n\r\nHTTP/1.1 405" in r and r.endswith(b"405 method not allowed\n") and how == "eof", (r, how))
s.close()

# 4 HTTP/1.0: closes by default; keep-alive when asked
s = conn()
s.sendall(b"GET / HTTP/1.0\r\n\r\n")
r, how, _ = read_until_close(s)
check("HTTP/1.0 closes", b"Connection: close" in r and r.endswith(b"hello world\n") and how == "eof", (r, how))
s = conn()
s.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
r = s.recv(4096)
check("HTTP/1.0 keep-alive", b"Connection: keep-alive\r\n" in r and r.endswith(b"hello world\n"), r)
s.sendall(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
r = s.recv(4096)
check("HTTP/1.0 keep-alive 2nd", r.endswith(b"hello world\n"), r)
s.close()

# 5 errors: 400, 431, 413, 501, 505, each with Connection: close and then EOF
for name, req, status in [
    ("400 bad colon", b"GET / HTTP/1.1\r\nHost : x\r\n\r\n", b"400"),
    ("400 no host", b"GET / HTTP/1.1\r\n\r\n", b"400"),
    ("400 bad request line", b"GET / HTTP/1.1 extra\r\n", b"400"),
    ("431 head", b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9000 + b"\r\n\r\n", b"431"),
    ("501 chunked", b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", b"501"),
    ("505", b"GET / HTTP/2.0\r\n\r\n", b"505"),
]:
    s = conn()
    s.sendall(req)
    r, how, _ = read_until_close(s)
    check(name, r.startswith(b"HTTP/1.1 " + status) and b"Connection: close\r\n" in r and how == "eof", (r, how))
    s.close()

# 413: head announces 2 MiB, client keeps sending the body; it must still read the 413
s = conn()
s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n")
try:
    s.sendall(b"z" * 300000)
except OSError as e:
    print("  (send failed as expected?)", e)
r, how, _ = read_until_close(s)
check("413 body too large", r.startswith(b"HTTP/1.1 413 Content Too Large\r\n") and b"Connection: close" in r, (r[:200], how))
s.close()

# 6 a POST body within bounds keeps the connection
s = conn()
body = b"x" * 100000
s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body + b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
r = read_n(s, 2 * len(HELLO) + 100)
check("100 KB POST then GET", r.count(b"HTTP/1.1 ") == 2 and r.endswith(HELLO), r[:300])
s.close()

# 7 Expect: 100-continue
s = conn()
s.sendall(b"PUT / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
r = s.recv(4096)
check("100 Continue", r == b"HTTP/1.1 100 Continue\r\n\r\n", r)
s.sendall(b"hello")
r = s.recv(4096)
check("then the answer", r.startswith(b"HTTP/1.1 405"), r)
s.close()

# 8 slow loris: one byte every 100 ms, header timeout 1000 ms -> cut off ~1 s after start
s = conn()
req = b"GET / HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100 + b"\r\n\r\n"
t0 = time.time()
cut = None
for b in req:
    try:
        s.sendall(bytes([b]))
    except OSError:
        cut = time.time() - t0
        break
    time.sleep(0.1)
    s.setblocking(False)
    try:
        d = s.recv(1)
        if d == b"":
            cut = time.time() - t0
            break
    except BlockingIOError:
        pass
    except OSError:
        cut = time.time() - t0
        break
    finally:
        s.setblocking(True)
print("  slow loris cut at", cut); check("slow loris cut off near 1 s", cut is not None and 0.9 <= cut <= 1.6, cut)
s.close()

# 9 idle timeout 1500 ms after a request; header timeout 1000 ms on a fresh conn
s = conn()
s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
read_n(s, len(HELLO))
t0 = time.time()
r, how, dt = read_until_close(s)
print("  idle", how, dt); check("idle timeout ~1.5 s", how == "eof" and r == b"" and 1.4 <= dt <= 2.1, (how, dt))
s = conn()
r, how, dt = read_until_close(s)
print("  fresh", how, dt); check("fresh conn, no request: header timeout ~1 s", how == "eof" and 0.9 <= dt <= 1.6, (how, dt))

# 10 a request split in two sends
s = conn()
s.sendall(b"GET / HTTP/1.1\r\nHo")
time.sleep(0.2)
s.sendall(b"st: x\r\n\r\nGET / HTT")
time.sleep(0.2)
s.sendall(b"P/1.1\r\nHost: x\r\n\r\n")
r = read_n(s, 2 * len(HELLO))
check("split sends", r == HELLO * 2, r)
s.close()

print("failures:", fails)
sys.exit(1 if fails else 0)
