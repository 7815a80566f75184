"""A DNS server for the tests: UDP on a free loopback port, in a thread of the test process, answering
PTR, A and AAAA from tables the test fills (never the internet). Every question is counted, so a test
can tell a cached verdict (no new question) from a fresh look-up.

Built on dnspython's message codec (the server's own dependency): ``DnsServer().start()``, then
``ptr["203.0.113.5"] = "crawl-1.googlebot.com"``, ``a["crawl-1.googlebot.com"] = ["203.0.113.5"]``; a name
it does not know answers NXDOMAIN.
"""

from __future__ import annotations

import socket
import threading
from collections import Counter

import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.reversename
import dns.rrset


class DnsServer:
    def __init__(self) -> None:
        self.ptr: dict[str, str] = {}  # address -> host name
        self.a: dict[str, list[str]] = {}  # host name -> addresses (A and AAAA both from here)
        self.asked: Counter[tuple[str, str]] = Counter()  # (name, type) -> questions
        self.silent: set[str] = set()  # names never answered (a look-up that times out)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, name="test-dns", daemon=True)
        self._stop = threading.Event()

    @property
    def address(self) -> str:
        """What DNS_RESOLVER takes."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> DnsServer:
        self._sock.settimeout(0.2)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def crawler(self, ip: str, host: str, *, forward: list[str] | None = None) -> None:
        """``ip``'s PTR is ``host``, and ``host`` resolves to ``forward`` (default: ``ip`` itself)."""
        self.ptr[ip] = host
        self.a[host] = [ip] if forward is None else forward

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                data, peer = self._sock.recvfrom(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                query = dns.message.from_wire(data)
            except Exception:
                continue
            answer = self._answer(query)
            if answer is not None:
                self._sock.sendto(answer.to_wire(), peer)

    def _answer(self, query: dns.message.Message) -> dns.message.Message | None:
        reply = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text().rstrip(".").lower()
        kind = dns.rdatatype.to_text(question.rdtype)
        self.asked[(name, kind)] += 1
        if name in self.silent:
            return None
        records: list[str] = []
        if kind == "PTR":
            try:
                ip = dns.reversename.to_address(question.name)
            except Exception:
                ip = ""
            if ip in self.ptr:
                records = [self.ptr[ip].rstrip(".") + "."]
        elif kind in ("A", "AAAA"):
            want = 4 if kind == "A" else 6
            records = [ip for ip in self.a.get(name, []) if (":" in ip) == (want == 6)]
            if name in self.a and not records:
                return reply  # the name exists, no record of this type: NOERROR, empty
        if not records:
            known = name in self.a or (kind == "PTR" and records)
            if not known:
                reply.set_rcode(dns.rcode.NXDOMAIN)
            return reply
        reply.answer.append(dns.rrset.from_text_list(question.name, 60, dns.rdataclass.IN, question.rdtype, records))
        return reply
