#!/usr/bin/env python3
"""holder.py - a small service manager standing in for systemd's socket
activation (tests/deploy_live/run.sh): it binds the listening socket once,
passes it to each responder it starts as descriptor 3 with LISTEN_FDS=1,
LISTEN_PID=<the responder's pid> and LISTEN_FDNAMES=charge, and gives it a
NOTIFY_SOCKET of its own (the sd_notify datagram protocol).

  holder.py --unix PATH|--tcp PORT --state DIR [--fd0] -- CMD [ARGS...]

--tcp PORT binds 127.0.0.1:PORT instead of a unix socket (Apache's
mod_proxy_fcgi restarts without a failed request only on TCP:
docs/deploying.md).

--fd0 (or HOLDER_FD0=1 in the environment) passes the socket as descriptor 0 instead (the FastCGI convention,
for a responder without socket activation: today's main, to show what
this suite catches); such a responder sends no READY=1, so it counts as
ready 500 ms after its start.

SIGUSR2 restarts the responder as systemd's socket activation lets a
deploy do it: a new responder is started on the same socket, and once it
sent READY=1 the old one gets SIGTERM (it finishes what it accepted, hands
its kept connections back and exits). SIGHUP is passed to the current
responder (a reload: RELOADING=1, then READY=1). SIGTERM/SIGINT stop the
responders and the holder. What happens is appended to DIR/events, one
line each:
  ready PID MS          PID sent READY=1, MS after it was started
  restart N OLD NEW MS  restart N: NEW ready MS after it started, OLD TERMed
  reloading PID / reloaded PID MS
  exit PID STATUS       a responder ended
  error TEXT
Standard library only; the holder never exits while a responder runs.
"""

import os
import select
import signal
import socket
import subprocess
import sys
import time

READY_TIMEOUT_S = 15.0
FD0_READY_S = 0.5  # --fd0: a responder that cannot notify is ready then


class Holder:
    def __init__(self, addr, state, cmd, fd0=False):
        self.state, self.cmd, self.fd0 = state, cmd, fd0
        self.events = open(os.path.join(state, "events"), "a", buffering=1)
        self.flags = set()
        self.children = {}  # pid -> Popen
        self.current = None
        self.restarts = 0
        self.gen = 0
        self.notify = {}  # pid -> notify socket
        self.lsock = self.bind(addr)

    def log(self, line):
        self.events.write(line + "\n")

    @staticmethod
    def bind(addr):
        """addr: a unix socket's path (--unix), or a port on 127.0.0.1 (--tcp)"""
        if isinstance(addr, int):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", addr))
            s.listen(1024)
            return s
        path = addr
        if os.path.exists(path):
            os.unlink(path)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        os.chmod(path, 0o770)
        s.listen(1024)
        return s

    def start(self):
        """Starts a responder on the socket; returns (Popen, notify socket)."""
        self.gen += 1
        npath = os.path.join(self.state, "notify-%d.sock" % self.gen)
        if os.path.exists(npath):
            os.unlink(npath)
        ns = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        ns.bind(npath)
        env = dict(os.environ, LISTEN_FDS="1", LISTEN_FDNAMES="charge", NOTIFY_SOCKET=npath)
        lfd = self.lsock.fileno()

        def child():
            # descriptor 3 is the socket, whatever number it had here
            os.dup2(lfd, 3)
            os.set_inheritable(3, True)
            if self.fd0:
                os.dup2(lfd, 0)

        # LISTEN_PID must be the responder's own pid: the shell's $$, which
        # exec keeps
        if self.fd0:
            env = dict(os.environ)
            shim = []
        else:
            shim = ["/bin/sh", "-c", 'LISTEN_PID=$$ exec "$@"', "sh"]
        p = subprocess.Popen(shim + self.cmd, env=env, pass_fds=tuple({lfd, 3}),
                             preexec_fn=child, stdin=subprocess.DEVNULL)
        self.children[p.pid] = p
        self.notify[p.pid] = ns
        return p, ns

    def wait_state(self, p, ns, want, timeout):
        """Reads notify datagrams of p until one has the line want; the ms
        it took, or None (p exited, or timeout)."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            r, _, _ = select.select([ns], [], [], 0.05)
            if r:
                msg = ns.recv(4096).decode("utf-8", "replace")
                if want in msg.split("\n"):
                    return int((time.monotonic() - t0) * 1000)
            if p.poll() is not None:
                return None
            self.reap()
        return None

    def reap(self):
        for pid, p in list(self.children.items()):
            rc = p.poll()
            if rc is not None:
                self.log("exit %d %d" % (pid, rc))
                del self.children[pid]
                ns = self.notify.pop(pid, None)
                if ns is not None:
                    name = ns.getsockname()
                    ns.close()
                    try:
                        os.unlink(name)
                    except OSError:
                        pass
                if self.current is not None and self.current.pid == pid:
                    self.current = None

    def launch(self):
        t0 = time.monotonic()
        p, ns = self.start()
        if self.fd0:
            time.sleep(FD0_READY_S)
            ms = None if p.poll() is not None else 0
        else:
            ms = self.wait_state(p, ns, "READY=1", READY_TIMEOUT_S)
        if ms is None:
            self.log("error responder %d did not send READY=1" % p.pid)
            if p.poll() is None:
                p.terminate()
            return None
        self.log("ready %d %d" % (p.pid, int((time.monotonic() - t0) * 1000)))
        return p

    def restart(self):
        old = self.current
        t0 = time.monotonic()
        new = self.launch()
        if new is None:
            return
        self.current = new
        self.restarts += 1
        if old is not None and old.poll() is None:
            old.send_signal(signal.SIGTERM)
        self.log("restart %d %d %d %d" % (self.restarts, old.pid if old else 0, new.pid,
                                          int((time.monotonic() - t0) * 1000)))

    def reload(self):
        p = self.current
        if p is None:
            return
        ns = self.notify[p.pid]
        t0 = time.monotonic()
        p.send_signal(signal.SIGHUP)
        if self.wait_state(p, ns, "RELOADING=1", 5.0) is None:
            self.log("error responder %d did not send RELOADING=1" % p.pid)
            return
        self.log("reloading %d" % p.pid)
        if self.wait_state(p, ns, "READY=1", 5.0) is None:
            self.log("error responder %d did not send READY=1 after reloading" % p.pid)
            return
        self.log("reloaded %d %d" % (p.pid, int((time.monotonic() - t0) * 1000)))

    def run(self):
        for sig, flag in ((signal.SIGUSR2, "restart"), (signal.SIGHUP, "reload"),
                          (signal.SIGTERM, "stop"), (signal.SIGINT, "stop")):
            signal.signal(sig, lambda s, f, flag=flag: self.flags.add(flag))
        self.current = self.launch()
        if self.current is None:
            return 1
        while True:
            if "stop" in self.flags:
                break
            if "restart" in self.flags:
                self.flags.discard("restart")
                self.restart()
            if "reload" in self.flags:
                self.flags.discard("reload")
                self.reload()
            # drain stray notify messages of the old responders
            socks = list(self.notify.values())
            try:
                r, _, _ = select.select(socks, [], [], 0.05)
            except InterruptedError:
                r = []
            for ns in r:
                ns.recv(4096)
            self.reap()
            if not self.children:
                self.log("error every responder exited")
                return 1
        for p in self.children.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.05)
        for p in self.children.values():
            p.kill()
        self.reap()
        return 0


def main():
    args = sys.argv[1:]
    addr = state = None
    fd0 = os.environ.get("HOLDER_FD0") == "1"
    while args and args[0] != "--":
        if args[0] == "--fd0":
            fd0 = True
            args = args[1:]
            continue
        if args[0] == "--unix":
            addr = args[1]
        elif args[0] == "--tcp":
            addr = int(args[1])
        elif args[0] == "--state":
            state = args[1]
        else:
            sys.exit("usage: holder.py --unix PATH|--tcp PORT --state DIR -- CMD [ARGS...]")
        args = args[2:]
    if not addr or not state or len(args) < 2:
        sys.exit("usage: holder.py --unix PATH|--tcp PORT --state DIR -- CMD [ARGS...]")
    os.makedirs(state, exist_ok=True)
    sys.exit(Holder(addr, state, args[1:], fd0).run())


if __name__ == "__main__":
    main()
