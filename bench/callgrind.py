"""Instructions per call, counted under ``valgrind --tool=callgrind``: a number that repeats exactly.

A script runs itself twice under callgrind, once making N calls and once 2N (both at once, each on
its own core), and the difference of the two totals ÷ N is what one call costs, start-up excluded.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

Command = tuple[list[str], dict[str, str]]


def instructions_per_call(command_for: Callable[[int], Command], n: int) -> float:
    """``command_for(count)``: the argv that makes ``count`` calls, and the environment it adds."""
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for count in (n, 2 * n):
            out = Path(tmp) / f"cg.{count}"
            argv, env = command_for(count)
            full_env = {**os.environ, "PYTHONHASHSEED": "0", **env}
            cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv]
            log = open(Path(tmp) / f"log.{count}", "w+b")
            proc = subprocess.Popen(cmd, env=full_env, stdout=subprocess.DEVNULL, stderr=log)
            runs.append((out, proc, log))
        totals = []
        for out, proc, log in runs:
            if proc.wait() != 0:
                log.seek(0)
                raise SystemExit(f"bench: a callgrind run failed:\n{log.read().decode()[-2000:]}")
            log.close()
            found = re.search(rb"^(?:totals|summary):\s+(\d+)", out.read_bytes(), re.M)
            assert found, "callgrind wrote no totals"
            totals.append(int(found.group(1)))
    return (totals[1] - totals[0]) / n
