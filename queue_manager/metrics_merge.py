"""Several Prometheus text expositions merged into one (the scrape of a server run with WORKERS>1).

Each part is one worker's own exposition, every series already labelled with that worker's
``instance``. :func:`merge` keeps each metric family once — its ``# HELP`` and ``# TYPE`` from the
first part that has it, in the order the families are first seen — followed by the samples of every
part, in the order the parts are given. The merged text is written with prometheus_client's own
writer, so a single part comes back byte for byte.

A family whose type disagrees with the one seen first is left out of the later part (the first
part's type stands), and a sample whose name and labels were already given by an earlier part is
left out too: a scrape never carries the same series twice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["merge", "parse"]


def parse(text: bytes) -> list[Metric]:
    """The families of one exposition. Raises ValueError when ``text`` is not the text format."""
    try:
        return list(text_string_to_metric_families(text.decode("utf-8")))
    except (UnicodeDecodeError, ValueError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"not a Prometheus text exposition: {exc}") from exc


class _Families:
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)


def merge(parts: Sequence[Iterable[Metric]], extra: Iterable[Metric] = ()) -> bytes:
    """One exposition holding every part's families, then ``extra`` (families of the merge itself)."""
    merged: dict[str, Metric] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for part in [*parts, extra]:
        for family in part:
            target = merged.get(family.name)
            if target is None:
                target = merged[family.name] = Metric(family.name, family.documentation, family.type, family.unit)
            elif target.type != family.type:
                continue
            for sample in family.samples:
                key = (sample.name, tuple(sorted(sample.labels.items())))
                if key in seen:
                    continue
                seen.add(key)
                target.samples.append(sample)
    return generate_latest(_Families(list(merged.values())))
