"""The settings that list several values, comma-separated: IP addresses and CIDR ranges, host names,
secrets."""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from queue_manager.config.declare.base import Declaration
from queue_manager.config.outcomes import ConfigRefusal

if TYPE_CHECKING:
    from queue_manager.config.declare.reader import Reader

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def _bad_entry(name: str, entry: str) -> str:
    hint = " (two entries missing their comma?)" if any(ch.isspace() for ch in entry) else ""
    return f'{name} entry "{entry}" is not an IP address or a CIDR range{hint}.'


def _parse_network(entry: str) -> IPNetwork:
    if "%" in entry or any(ch.isspace() for ch in entry):
        raise ValueError(entry)
    return ipaddress.ip_network(entry, strict=False)


def _has_host_bits(entry: str) -> bool:
    try:
        ipaddress.ip_network(entry, strict=True)
    except ValueError:
        return True
    return False


@dataclass(frozen=True, kw_only=True)
class Networks(Declaration[tuple[IPNetwork, ...]]):
    """Comma-separated addresses or CIDR ranges, IPv4 and IPv6; a single address becomes a /32 or
    /128. A malformed entry refuses start (``refuse``) or is dropped with a warning."""

    refuse: bool

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> tuple[IPNetwork, ...]:
        name = self.env
        value = r.raw(name)
        if value is None:
            return ()
        result: list[IPNetwork] = []
        dropped: list[str] = []
        widened: list[tuple[str, IPNetwork]] = []
        for entry in (part.strip() for part in value.split(",")):
            if not entry:
                continue
            try:
                network = _parse_network(entry)
            except ValueError:
                if self.refuse:
                    raise ConfigRefusal(
                        name,
                        f"{_bad_entry(name, entry)} Fix that entry (entries are separated by commas, e.g. "
                        f"{name}=173.245.48.0/20,2400:cb00::/32) or unset {name}.",
                    ) from None
                dropped.append(entry)
                continue
            if "/" in entry and _has_host_bits(entry):
                widened.append((entry, network))
            result.append(network)
        found = tuple(result)
        effective = ",".join(str(n) for n in found) or None
        for entry in dropped:
            r.warn(name, effective, f"{_bad_entry(name, entry)} It is ignored; fix it to have it apply.")
        for entry, network in widened:
            r.warn(
                name,
                effective,
                f'{name} entry "{entry}" has host bits set; it is read as the range {network}. '
                f"Write {network} to say so, or a single address without a prefix length.",
            )
        if not found and not dropped:
            r.warn(name, None, f'{name}="{value}" lists no address; it is treated as unset.')
        return found

    def unset(self, earlier: Mapping[str, Any]) -> tuple[IPNetwork, ...]:
        return ()

    @property
    def refuses(self) -> bool:
        return self.refuse


@dataclass(frozen=True, kw_only=True)
class HostNames(Declaration[tuple[str, ...]]):
    """Comma-separated host names, lower-cased, without repeats; an entry with a path or a space
    warns and is dropped."""

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> tuple[str, ...]:
        name = self.env
        value = r.raw(name)
        if value is None:
            return ()
        hosts: list[str] = []
        dropped: list[str] = []
        for entry in (part.strip().lower() for part in value.split(",")):
            if not entry:
                continue
            if "/" in entry or any(ch.isspace() for ch in entry):
                dropped.append(entry)
            elif entry not in hosts:
                hosts.append(entry)
        effective = ",".join(hosts) or None
        for entry in dropped:
            r.warn(
                name,
                effective,
                f'{name} entry "{entry}" is not a host name (write qm.example.com, without a scheme or '
                "path); it is ignored.",
            )
        return tuple(hosts)

    def unset(self, earlier: Mapping[str, Any]) -> tuple[str, ...]:
        return ()


@dataclass(frozen=True, kw_only=True)
class SecretList(Declaration[tuple[str, ...]]):
    """Comma-separated secrets (whitespace trimmed, empty entries skipped). An entry shorter than
    ``min_length`` refuses start, naming only its position."""

    min_length: int
    #: What follows '<VAR> entry i of n is shorter than N characters: '.
    too_short: str
    #: What follows '<VAR> is set but holds no value (only commas or spaces), so '.
    empty: str

    def read(self, r: Reader, earlier: Mapping[str, Any]) -> tuple[str, ...]:
        name = self.env
        value = r.raw(name)
        if value is None:
            return ()
        entries = [e for e in (part.strip() for part in value.split(",")) if e]
        for index, entry in enumerate(entries, start=1):
            if len(entry) < self.min_length:
                # Never print the value, nor anything derived from it beyond its position.
                raise ConfigRefusal(
                    name,
                    f"{name} entry {index} of {len(entries)} is shorter than {self.min_length} characters: "
                    f"{self.too_short}",
                )
        if not entries:
            r.warn(name, None, f"{name} is set but holds no value (only commas or spaces), so {self.empty}")
        return tuple(entries)

    def unset(self, earlier: Mapping[str, Any]) -> tuple[str, ...]:
        return ()

    @property
    def refuses(self) -> bool:
        return True
