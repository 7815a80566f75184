"""qm-draw-v1 (engine/draw.py) and its stand-alone checker (scripts/verify_draw.py).

The draw is a pure function of the seed and the frozen pre-queue, so every test here is exact: the
known answer that docs/fairness.md prints, the round-robin rule, the uniformity of positions over
thousands of fixed seeds (a chi-square bound, deterministic because the seeds are), and the checker
catching each kind of tampering.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from queue_manager.engine import draw

ROOT = Path(__file__).resolve().parents[2]
VERIFY = ROOT / "scripts" / "verify_draw.py"

# the worked example of docs/fairness.md
SEED = bytes(range(32))
HANDLES = ["0a1f", "3c2e", "5b7d", "8e4a", "c0d9", "f6b2"]
GROUPS = [0, 1, 0, 2, 1, 0]
ORDER = ["8e4a", "5b7d", "c0d9", "f6b2", "3c2e", "0a1f"]
COMMITMENT = "630dcd2966c4336691125448bbb25b4ff412a49c732db2c8abc1b8581bd710dd"

# chi-square, 5 degrees of freedom (6 positions): the value exceeded with probability 0.001
CHI2_DF5_P001 = 20.515


def _verifier() -> Any:
    spec = importlib.util.spec_from_file_location("verify_draw", VERIFY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _doc(seed: bytes = SEED, handles: list[str] = HANDLES, groups: list[int] = GROUPS) -> dict[str, Any]:
    record = draw.DrawRecord(seed, 1_000, 2_000)
    record.drawn = draw.Drawn(list(handles), list(groups), draw.draw_order(seed, handles, groups), 2_000, 1)
    return draw.public_view("drop", record, scheduled=False, pre_count=0)


def test_the_documented_example() -> None:
    assert draw.commitment(SEED) == COMMITMENT
    assert draw.draw_order(SEED, HANDLES, GROUPS) == ORDER
    assert _verifier().recompute(SEED, HANDLES, GROUPS) == ORDER  # the checker is a second implementation


def test_freeze_sorts_the_handles_and_numbers_identities_by_first_appearance() -> None:
    handles, groups = draw.freeze([("f6b2", "a"), ("0a1f", "a"), ("8e4a", "c"), ("3c2e", "b"), ("5b7d", "a")])
    assert handles == ["0a1f", "3c2e", "5b7d", "8e4a", "f6b2"]
    assert groups == [0, 1, 0, 2, 0]
    assert draw.freeze([]) == ([], [])
    assert draw.draw_order(SEED, [], []) == []


def test_every_identitys_kth_entry_comes_before_any_k_plus_first() -> None:
    entries = [(f"{i:04x}", f"ip{i % 5 if i < 20 else 0}") for i in range(30)]  # ip0 holds 14, the rest 4
    handles, groups = draw.freeze(entries)
    group_of = dict(zip(handles, groups, strict=True))
    for n in range(50):
        order = draw.draw_order(hashlib.sha256(str(n).encode()).digest(), handles, groups)
        assert sorted(order) == handles
        seen: dict[int, int] = {}
        rounds = []
        for h in order:
            seen[group_of[h]] = seen.get(group_of[h], 0) + 1
            rounds.append(seen[group_of[h]])
        assert rounds == sorted(rounds)  # round 1 for all, then round 2 …


def _chi2(counts: list[int]) -> float:
    expected = sum(counts) / len(counts)
    return sum((c - expected) ** 2 / expected for c in counts)


def test_positions_are_uniform_over_4000_fixed_seeds() -> None:
    """4,000 draws of 6 handles of 6 identities: every handle lands in every place about equally often.
    The seeds are fixed (sha256 of the draw's number), so the statistic is the same on every run."""
    handles, groups = [f"h{i}" for i in range(6)], list(range(6))
    counts = {h: [0] * 6 for h in handles}
    for n in range(4000):
        order = draw.draw_order(hashlib.sha256(f"qm-test-{n}".encode()).digest(), handles, groups)
        for place, h in enumerate(order):
            counts[h][place] += 1
    for h in handles:
        assert _chi2(counts[h]) < CHI2_DF5_P001, (h, counts[h])
        assert sum(counts[h]) == 4000


def test_the_same_identitys_entries_and_each_round_are_uniform_too() -> None:
    """Three identities with two entries each: which entry goes first, and the order within a round,
    are uniform (6 places of the first round's 3 ... counted as the place within the round)."""
    handles, groups = ["a1", "a2", "b1", "b2", "c1", "c2"], [0, 0, 1, 1, 2, 2]
    first_round = {h: 0 for h in handles}
    place_in_round = {h: [0, 0, 0] for h in handles}
    for n in range(3000):
        order = draw.draw_order(hashlib.sha256(f"qm-pairs-{n}".encode()).digest(), handles, groups)
        for place, h in enumerate(order):
            if place < 3:
                first_round[h] += 1
            place_in_round[h][place % 3] += 1
    for a, b in (("a1", "a2"), ("b1", "b2"), ("c1", "c2")):
        assert _chi2([first_round[a], first_round[b]]) < 10.828  # df 1, p 0.001
    for h in handles:
        assert _chi2(place_in_round[h]) < 13.816  # df 2, p 0.001


def test_below_never_has_a_modulo_bias() -> None:
    """A word at or above the largest multiple of m below 2^32 is skipped, never folded."""
    stream = draw._Stream(SEED, b"")
    stream._words = iter([2**32 - 1, 2**32 - 2, 5])  # m = 3: 2^32 - 1 is the multiple's edge
    assert stream.below(3) == 2  # 2^32 - 2 = 3 * 1431655764 + 2 is kept; 2^32 - 1 skipped
    stream._words = iter([2**32 - 1, 7])
    assert stream.below(3) == 1


def test_a_record_travels_as_json() -> None:
    record = draw.DrawRecord(SEED, 5, None, [("ab" * 32, 4)])
    record.drawn = draw.Drawn(HANDLES, GROUPS, ORDER, 9, 17)
    again = draw.DrawRecord.from_doc(json.loads(json.dumps(record.to_doc())))
    assert again == record and again.commitment == COMMITMENT
    with pytest.raises(ValueError):
        draw.DrawRecord.from_doc({"seed": "00" * 31, "at": 1})


def test_the_route_body_hides_the_seed_until_the_draw() -> None:
    record = draw.DrawRecord(SEED, 1_000, 2_000, [("ab" * 32, 900)])
    before = draw.public_view("drop", record, scheduled=True, pre_count=3)
    assert before == {
        "roomId": "drop",
        "algorithm": "qm-draw-v1",
        "commitment": COMMITMENT,
        "committedAt": 1_000,
        "opensAt": 2_000,
        "previousCommitments": [{"commitment": "ab" * 32, "replacedAt": 900}],
        "state": "committed",
        "preCount": 3,
    }
    assert SEED.hex() not in json.dumps(before)
    empty = draw.public_view("drop", record, scheduled=False, pre_count=0)
    assert empty["state"] == "empty" and empty["seed"] == SEED.hex() and empty["order"] == []
    drawn = _doc()
    assert drawn["state"] == "drawn" and drawn["seed"] == SEED.hex() and drawn["order"] == ORDER
    assert (drawn["handles"], drawn["groups"], drawn["firstTicket"], drawn["drawnAt"]) == (HANDLES, GROUPS, 1, 2_000)


# ------------------------------------------------------------------------------ the checker


def _run(doc: dict[str, Any], tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "draw.json"
    path.write_text(json.dumps(doc))
    return subprocess.run(
        [sys.executable, str(VERIFY), "--file", str(path), *extra], capture_output=True, text=True, timeout=60
    )


def test_the_checker_accepts_a_true_draw(tmp_path: Path) -> None:
    done = _run(_doc(), tmp_path, "--handle", "c0d9")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "OK: room 'drop': sha256(seed) is the commitment " + COMMITMENT in done.stdout
    assert "handle c0d9 was drawn at place 3 of 6, ticket 3" in done.stdout
    assert "MISMATCH" not in done.stdout


def test_the_checker_counts_in_the_singular_too(tmp_path: Path) -> None:
    one = _run(_doc(handles=["0a1f"], groups=[0]), tmp_path)
    assert one.returncode == 0, one.stdout + one.stderr
    assert "OK: the order of 1 handle (1 identity) is qm-draw-v1 of the seed" in one.stdout
    many = _run(_doc(), tmp_path)
    assert "OK: the order of 6 handles (3 identities) is qm-draw-v1 of the seed" in many.stdout


def _flip_seed(doc: dict[str, Any]) -> None:
    seed = bytearray(bytes.fromhex(doc["seed"]))
    seed[7] ^= 0x01
    doc["seed"] = seed.hex()


def _change_handle(doc: dict[str, Any]) -> None:
    doc["handles"][2] = "5b7e"
    doc["order"] = ["5b7e" if h == "5b7d" else h for h in doc["order"]]


def _swap_two(doc: dict[str, Any]) -> None:
    doc["order"][1], doc["order"][4] = doc["order"][4], doc["order"][1]


def _regroup(doc: dict[str, Any]) -> None:
    doc["groups"] = [0, 1, 2, 3, 4, 5]


def _drop_one(doc: dict[str, Any]) -> None:
    doc["order"].pop()


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        (_flip_seed, "commitment mismatch: sha256(seed) = "),
        (_change_handle, "order mismatch: "),
        (_swap_two, "order mismatch: 2 of 6 places differ; the first is place 2"),
        (_regroup, "order mismatch: "),
        (_drop_one, "the order is not the handles drawn: 5 entries for 6 handles; missing"),
    ],
)
def test_the_checker_names_what_was_changed(tmp_path: Path, tamper: Any, says: str) -> None:
    doc = copy.deepcopy(_doc())
    tamper(doc)
    done = _run(doc, tmp_path)
    assert done.returncode == 1
    assert says in done.stdout, done.stdout


def test_the_checker_refuses_a_draw_not_yet_made_and_an_unsorted_list(tmp_path: Path) -> None:
    before = draw.public_view("drop", draw.DrawRecord(SEED, 1, 2), scheduled=True, pre_count=0)
    done = _run(before, tmp_path)
    assert done.returncode == 1 and "nothing to check yet" in done.stdout and SEED.hex() not in done.stdout
    doc = _doc()
    doc["handles"] = list(reversed(doc["handles"]))
    done = _run(doc, tmp_path)
    assert done.returncode == 1 and "handles are not sorted and unique" in done.stdout


def test_the_javascript_checker_in_the_guide_agrees(tmp_path: Path) -> None:
    """The WebCrypto snippet of docs/fairness.md, run by node on a true draw and on tampered copies."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    guide = (ROOT / "docs" / "fairness.md").read_text(encoding="utf-8")
    snippets = re.findall(r"```js\n(.*?)```", guide, re.S)
    assert len(snippets) == 1
    script = tmp_path / "check.mjs"
    script.write_text(
        snippets[0]
        + "\nconst docs = JSON.parse(process.argv[2]);\n"
        + "for (const d of docs) console.log(await verifyDraw(d));\n"
    )
    many = _doc(
        hashlib.sha256(b"a bigger draw").digest(),
        [f"{i:04x}" for i in range(40)],
        draw.freeze((f"{i:04x}", f"ip{i % 7}") for i in range(40))[1],
    )
    swapped, seed_changed = _doc(), _doc()
    _swap_two(swapped)
    _flip_seed(seed_changed)
    done = subprocess.run(
        [node, str(script), json.dumps([_doc(), many, swapped, seed_changed])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "OK",
        "OK",
        "the order is not qm-draw-v1 of the seed",
        "sha256(seed) is not the commitment",
    ]


def test_the_checker_names_replaced_commitments_in_the_singular_and_the_plural(tmp_path: Path) -> None:
    replaced = {"commitment": "ab" * 32, "replacedAt": 900}
    one = _run({**_doc(), "previousCommitments": [replaced]}, tmp_path)
    assert one.returncode == 0, one.stdout + one.stderr
    assert "note: 1 earlier commitment was replaced by a reschedule before its draw" in one.stdout
    two = _run({**_doc(), "previousCommitments": [replaced, replaced]}, tmp_path)
    assert "note: 2 earlier commitments were replaced by a reschedule before their draw" in two.stdout
