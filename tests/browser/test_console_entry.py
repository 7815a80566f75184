"""The console's Entry section in a real browser: the entry mode saved from the editor, a new signing key shown
once (and it signs tokens the room accepts), codes generated and downloaded as CSV, a CSV uploaded."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from axe import describe, violations
from browsing import sign_in
from harness import Server, create_room, join, unique_id
from invites import claims, sign
from playwright.sync_api import expect


def test_an_operator_sets_the_entry_makes_a_key_and_codes(browser: Any, qm: Server, artifacts: Path) -> None:
    room = unique_id("entry")
    with qm.admin() as admin:
        lanes = [{"id": "public", "priority": 10}, {"id": "press", "priority": 50}, {"id": "vip", "priority": 90}]
        create_room(admin, room, ratePerMinute=0, name="Members", lanes=lanes)
    ctx = browser.new_context(bypass_csp=True, viewport={"width": 1360, "height": 1000}, accept_downloads=True)
    page = ctx.new_page()
    sign_in(page, qm)
    card = page.locator(f'article.card[data-room="{room}"]')
    card.get_by_role("button", name="Edit").click()
    editor = page.locator("#dlg-editor[open]")
    editor.wait_for(timeout=5_000)
    # who may join: saved like any other field
    editor.locator("#ed-entry").select_option("code")
    editor.get_by_role("button", name="Save changes").click()
    editor.wait_for(state="detached", timeout=5_000)
    with qm.admin() as admin:
        assert admin.get(f"/api/admin/rooms/{room}").json()["room"]["entry"] == "code"

    card.get_by_role("button", name="Edit").click()
    editor.wait_for(timeout=5_000)
    assert editor.locator("#ed-entry").input_value() == "code"
    # a new signing key, after a confirmation: shown once, with its kid
    editor.get_by_role("button", name="New signing key").click()
    page.locator("#dlg-confirm[open]").get_by_role("button", name="Make a new key").click()
    key_box = editor.locator("#ed-entry-key-value")
    expect(key_box).to_be_visible(timeout=5_000)
    key, kid = key_box.input_value(), editor.locator("#ed-entry-kid").inner_text()
    assert len(key) >= 43 and kid
    with qm.client() as v:  # the key shown signs tokens the room accepts
        assert join(v, room, token=sign(key, kid, claims(room))).status_code == 200

    # codes: generated, shown once, downloaded as CSV
    editor.locator("#ed-codes-count").fill("5")
    editor.locator("#ed-codes-lane").fill("press")
    editor.get_by_role("button", name="Generate codes").click()
    listed = editor.locator("#ed-codes-list")
    expect(listed).to_be_visible(timeout=5_000)
    codes = listed.input_value().split("\n")
    assert len(codes) == 5 and all(len(c) == 11 for c in codes)
    with page.expect_download() as got:
        editor.get_by_role("button", name="Download CSV").click()
    rows = list(csv.DictReader(io.StringIO(Path(got.value.path()).read_text())))
    assert [r["code"] for r in rows] == codes and {r["lane"] for r in rows} == {"press"}
    expect(editor.locator("#ed-codes-counts")).to_contain_text("5 issued", timeout=5_000)
    editor.locator("#ed-entry-set").screenshot(path=str(artifacts / "console-entry-key-and-codes.png"))
    found = violations(page)
    assert not found, describe(found)

    # a CSV of the site's own codes, uploaded
    upload = artifacts / "entry-upload.csv"
    upload.write_text("code,lane,uses\nGOLD-0001,vip,3\nGOLD-0002,vip,\nx,,\n")
    editor.locator("#ed-codes-file").set_input_files(str(upload))
    editor.get_by_role("button", name="Upload CSV").click()
    expect(editor.locator("#ed-codes-out")).to_contain_text("2 codes stored", timeout=5_000)
    expect(editor.locator("#ed-codes-out")).to_contain_text("line 4")
    expect(editor.locator("#ed-codes-counts")).to_contain_text("7 issued", timeout=5_000)
    editor.locator("#ed-entry-set").screenshot(path=str(artifacts / "console-entry-upload.png"))
    with qm.client() as v:
        assert join(v, room, code="gold-0001").status_code == 200
    ctx.close()
