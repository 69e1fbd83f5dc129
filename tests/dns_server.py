"""A DNS server for tests, on the loopback: TXT records the test sets, NXDOMAIN for every other
name, over UDP, with dnspython's own wire format."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import dns.message
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset


class TxtRecords(asyncio.DatagramProtocol):
    def __init__(self, records: dict[str, str]) -> None:
        self.records = records  # name (no trailing dot) → TXT text
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        query = dns.message.from_wire(data)
        response = dns.message.make_response(query)
        question = query.question[0]
        name = question.name.to_text().rstrip(".").lower()
        if question.rdtype == dns.rdatatype.TXT and name in self.records:
            response.answer.append(dns.rrset.from_text(question.name, 60, dns.rdataclass.IN, dns.rdatatype.TXT,
                                                       f'"{self.records[name]}"'))
        else:
            response.set_rcode(dns.rcode.NXDOMAIN)
        assert self.transport is not None
        self.transport.sendto(response.to_wire(), addr)


@asynccontextmanager
async def dns_server(records: dict[str, str]) -> AsyncIterator[str]:
    """Serve `records`; yields the `host:port` to give PRESSROOM_DNS_NAMESERVERS."""
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_datagram_endpoint(lambda: TxtRecords(records), local_addr=("127.0.0.1", 0))
    try:
        yield f"127.0.0.1:{transport.get_extra_info('sockname')[1]}"
    finally:
        transport.close()
