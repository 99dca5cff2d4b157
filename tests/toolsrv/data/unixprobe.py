# Test probe of unixsock.test.cpp: one way of reaching a Unix (or IP) socket, run as a tool.
# Prints `ok` or the errno name per attempt; `race` and `flood` print counts.
import errno
import os
import socket
import sys
import threading


def attempt(fn):
    try:
        fn()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))


def stream(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b"x")
    s.close()


def dgram_connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.connect(path)
    s.send(b"c")


def dgram_sendto(path):
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendto(b"t", path)


def dgram_sendmsg(path):
    socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM).sendmsg([b"m", b"m"], [], 0, path)


def abstract(name):
    socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect("\0" + name)


def tcp(port):
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
    s.sendall(b"x")
    s.close()


def udp(port):
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"u", ("127.0.0.1", int(port)))


def grandchild(path):
    # A child forks a grandchild; the grandchild connects (the filter is inherited).
    if os.fork() == 0:
        if os.fork() == 0:
            print(attempt(lambda: stream(path)), flush=True)
            os._exit(0)
        os.wait()
        os._exit(0)
    os.wait()


def race(allowed, forbidden, link, rounds):
    # One thread swaps `link` between the two sockets while this one connects through it: every
    # connection that succeeds must have reached the allowed socket.
    stop = False

    def swap():
        i = 0
        while not stop:
            tmp = link + ".tmp"
            os.symlink(allowed if i % 2 else forbidden, tmp)
            os.replace(tmp, link)
            i += 1

    t = threading.Thread(target=swap)
    t.start()
    counts = {}
    for _ in range(int(rounds)):  # at most; until both outcomes were seen 20 times
        r = attempt(lambda: stream(link))
        counts[r] = counts.get(r, 0) + 1
        if counts.get("ok", 0) >= 20 and counts.get("EACCES", 0) >= 20:
            break
    stop = True
    t.join()
    print(" ".join("%s=%d" % kv for kv in sorted(counts.items())))


def rewrite(forbidden, port, rounds):
    # A second thread flips, during the connect, both the address (an allowed TCP one, then a
    # forbidden pathname) and the descriptor (the TCP socket, then a Unix one): whatever toolsrv
    # checked must be what gets connected.
    import ctypes
    import struct
    libc = ctypes.CDLL(None, use_errno=True)
    inet = struct.pack("=HH4s8x", socket.AF_INET, socket.htons(int(port)), socket.inet_aton("127.0.0.1"))
    unix = struct.pack("=H", socket.AF_UNIX) + forbidden.encode() + b"\0"
    buf = ctypes.create_string_buffer(len(unix) + 1)
    socks = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), socket.socket(socket.AF_INET, socket.SOCK_STREAM)]
    fd = os.dup(socks[1].fileno())
    stop = False

    def flip():
        i = 0
        while not stop:
            try:
                if i % 2:
                    ctypes.memmove(buf, unix, len(unix))
                    os.dup2(socks[0].fileno(), fd)
                else:
                    ctypes.memmove(buf, inet, len(inet))
                    os.dup2(socks[1].fileno(), fd)
            except OSError:
                pass
            i += 1

    t = threading.Thread(target=flip)
    t.start()
    counts = {}
    for _ in range(int(rounds)):
        r = libc.connect(fd, buf, len(buf))
        e = ctypes.get_errno()
        key = "ok" if r == 0 else errno.errorcode.get(e, str(e))
        counts[key] = counts.get(key, 0) + 1
        if r == 0:  # fresh sockets for the next round
            socks[:] = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), socket.socket(socket.AF_INET, socket.SOCK_STREAM)]
    stop = True
    t.join()
    print(" ".join("%s=%d" % kv for kv in sorted(counts.items())))


def flood(path, rounds):
    counts = {}
    for _ in range(int(rounds)):
        r = attempt(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(path))
        counts[r] = counts.get(r, 0) + 1
    print(" ".join("%s=%d" % kv for kv in sorted(counts.items())))


modes = {"stream": stream, "dgram_connect": dgram_connect, "dgram_sendto": dgram_sendto,
         "dgram_sendmsg": dgram_sendmsg, "abstract": abstract, "tcp": tcp, "udp": udp}
mode, args = sys.argv[1], sys.argv[2:]
if mode in modes:
    print(attempt(lambda: modes[mode](*args)))
else:
    {"grandchild": grandchild, "race": race, "rewrite": rewrite, "flood": flood}[mode](*args)
