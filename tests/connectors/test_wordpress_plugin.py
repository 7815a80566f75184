"""The WordPress plugin in real WordPress (Debian's ``wordpress`` package on ``php -S``), in front of a
live Queue Manager, and of a stopped, a slow and a confused one.

One WordPress per module: a private copy of ``/usr/share/wordpress`` with its own ``wp-config.php``, a
throwaway MariaDB database, installed with ``wp_install()`` from ``php-cli``; the plugin is the
``/connectors/wordpress/latest.zip`` the live server serves, unzipped into ``wp-content/plugins`` and
activated from ``php-cli``. What is missing is installed with apt-get when running as root; with
``CI=true`` a WordPress that cannot be had fails the module, it is never skipped.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from harness import Server, create_room, metric, reserved_port, start_server, wait_until

# one worker takes this module (make test: --dist loadgroup): one WordPress install (about 8 s)
pytestmark = pytest.mark.xdist_group("wordpress")

WORDPRESS = Path("/usr/share/wordpress")
PACKAGES = ("wordpress", "php-cli", "php-mysql", "php-curl")
PUBLIC_KEY = "pk-" + secrets.token_urlsafe(24)
UA = "Mozilla/5.0 (wordpress-plugin-test)"
ADMIN_PASSWORD = secrets.token_urlsafe(18)
PLUGIN = "queue-manager/queue-manager.php"
MYSQL = ["mysql", "-uroot", "-h127.0.0.1", "--protocol=TCP"]


def _missing() -> list[str]:
    missing = []
    if shutil.which("php") is None:
        missing.append("php-cli")
    if not (WORDPRESS / "wp-settings.php").is_file():
        missing.append("wordpress")
    if shutil.which("php") is not None:
        probe = subprocess.run(
            ["php", "-r", 'echo extension_loaded("mysqli") && extension_loaded("curl") ? "ok" : "no";'],
            capture_output=True,
            text=True,
        )
        if probe.stdout != "ok":
            missing += ["php-mysql", "php-curl"]
    return missing


def _unavailable(why: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"WordPress cannot run here ({why}); CI=true never skips it")
    pytest.skip(f"WordPress cannot run here: {why}")


def ensure_wordpress() -> None:
    """Debian's wordpress, php-cli, php-mysql and php-curl; installed with apt-get when root and missing."""
    if not _missing():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        _unavailable(f"missing {', '.join(_missing())} and not root with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "--no-install-recommends", *PACKAGES]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200)
    if done.returncode != 0 or _missing():
        _unavailable(f"apt-get install {' '.join(PACKAGES)} failed: {done.stderr[-2000:]}")
    if shutil.which("mysql") is None:
        _unavailable("no mysql client")


def php_str(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass
class Site:
    root: Path
    port: int
    db: str
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def php(self, code: str, timeout: float = 60.0, before: str = "") -> str:
        """Runs ``code`` in php-cli with WordPress loaded (as if asked on this site's host); ``before`` runs
        before WordPress is loaded."""
        script = (
            "<?php\n" + before + f"$_SERVER['HTTP_HOST'] = '127.0.0.1:{self.port}';\n"
            "$_SERVER['REQUEST_URI'] = '/';\n"
            f"require {php_str(str(self.root / 'wp-load.php'))};\n" + code
        )
        done = subprocess.run(
            ["php", "-d", "display_errors=stderr"], input=script, capture_output=True, text=True, timeout=timeout
        )
        assert done.returncode == 0, f"php failed ({done.returncode}): {done.stderr}\n{done.stdout}"
        return done.stdout

    def configure(self, queue_url: str, room: str, key: str = PUBLIC_KEY) -> None:
        self.php(
            f"update_option('qm_queue_url', {php_str(queue_url)});"
            f"update_option('qm_room_id', {php_str(room)});"
            f"update_option('qm_public_api_key', {php_str(key)});"
        )

    def get(
        self, path: str, cookies: dict[str, str] | None = None, headers: dict[str, str] | None = None
    ) -> httpx.Response:
        """One page view by a browser with no cookie jar but ``cookies``; redirects are not followed."""
        sent = {"User-Agent": UA, **(headers or {})}
        if cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
        url = path if path.startswith("http") else self.url + path
        return httpx.get(url, headers=sent, follow_redirects=False, timeout=20.0)


ROUTER = """<?php
// php -S router: a file that exists is served as is (PHP files run), everything else is WordPress.
$path = urldecode(parse_url($_SERVER['REQUEST_URI'], PHP_URL_PATH));
$file = __DIR__ . $path;
if ($path !== '/' && (is_file($file) || (is_dir($file) && is_file(rtrim($file, '/') . '/index.php')))) {
    return false;
}
$_SERVER['SCRIPT_NAME'] = '/index.php';
require __DIR__ . '/index.php';
"""

THEME_CSS = "/*\nTheme Name: QM Test\nVersion: 1.0\n*/\n"
THEME_INDEX = (
    "<!doctype html><html><head><?php wp_head(); ?></head>"
    "<body><h1>QM test page</h1><?php wp_footer(); ?></body></html>\n"
)


def wp_config(db: str, url: str) -> str:
    salts = "".join(
        f"define('{name}', {php_str(secrets.token_hex(32))});\n"
        for name in (
            "AUTH_KEY SECURE_AUTH_KEY LOGGED_IN_KEY NONCE_KEY AUTH_SALT SECURE_AUTH_SALT LOGGED_IN_SALT NONCE_SALT"
        ).split()
    )
    return (
        "<?php\n"
        f"define('DB_NAME', '{db}');\n"
        "define('DB_USER', 'root');\ndefine('DB_PASSWORD', '');\ndefine('DB_HOST', '127.0.0.1:3306');\n"
        "define('DB_CHARSET', 'utf8mb4');\ndefine('DB_COLLATE', '');\n"
        f"{salts}"
        "$table_prefix = 'wp_';\n"
        f"define('WP_HOME', '{url}');\ndefine('WP_SITEURL', '{url}');\n"
        "define('WP_DEBUG', false);\n"
        "define('DISABLE_WP_CRON', true);\ndefine('AUTOMATIC_UPDATER_DISABLED', true);\n"
        "define('WP_HTTP_BLOCK_EXTERNAL', true);\n"  # this machine has no WordPress.org: fail fast, not in 3 s
        "define('FS_METHOD', 'direct');\n"
        "if (!defined('ABSPATH')) { define('ABSPATH', __DIR__ . '/'); }\n"
        "require_once ABSPATH . 'wp-settings.php';\n"
    )


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to php -S and its forked workers (one process group), SIGKILL after 5 s."""
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # a worker that outlived its parent
        return


def install_plugin(site: Site, zip_bytes: bytes) -> None:
    plugins = site.root / "wp-content" / "plugins"
    shutil.rmtree(plugins / "queue-manager", ignore_errors=True)
    with zipfile.ZipFile(io.BytesIO(zip_bytes)) as zf:
        assert {n.split("/", 1)[0] for n in zf.namelist()} == {"queue-manager"}
        zf.extractall(plugins)


@pytest.fixture(scope="module")
def queue() -> Iterator[Server]:
    srv = start_server({"PUBLIC_API_KEY": PUBLIC_KEY, "CHECK_LIMIT_PER_MIN": "10000"}, store="memory")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def site(queue: Server) -> Iterator[Site]:
    started = time.monotonic()
    ensure_wordpress()
    if subprocess.run([*MYSQL, "-e", "select 1"], capture_output=True).returncode != 0:
        _unavailable("MariaDB does not answer on 127.0.0.1:3306 as root")
    tmp = Path(tempfile.mkdtemp(prefix="qm-wordpress-"))
    db = f"qm_wp_{secrets.token_hex(6)}"
    subprocess.run([*MYSQL, "-e", f"CREATE DATABASE {db} CHARACTER SET utf8mb4"], check=True)
    s = Site(tmp / "site", reserved_port(), db)
    try:
        shutil.copytree(WORDPRESS, s.root, symlinks=False, ignore_dangling_symlinks=True)
        (s.root / "wp-config.php").write_text(wp_config(db, s.url))
        (s.root / "router.php").write_text(ROUTER)
        theme = s.root / "wp-content" / "themes" / "qm-test"
        theme.mkdir(parents=True, exist_ok=True)
        (theme / "style.css").write_text(THEME_CSS)
        (theme / "index.php").write_text(THEME_INDEX)
        # a "queue" that answers 200 with something that is no door check answer (see test_fail_open_*)
        (s.root / "not-a-queue" / "api").mkdir(parents=True)
        (s.root / "not-a-queue" / "api" / "check").write_text("<html>a page, not an answer</html>")
        mu = s.root / "wp-content" / "mu-plugins"
        mu.mkdir(parents=True, exist_ok=True)
        (mu / "no-mail.php").write_text("<?php\nadd_filter('pre_wp_mail', '__return_true');\n")  # no sendmail here
        s.php(
            "require_once ABSPATH . 'wp-admin/includes/upgrade.php';\n"
            f"wp_install('QM test', 'admin', 'admin@example.com', false, '', {php_str(ADMIN_PASSWORD)});\n"
            "switch_theme('qm-test');\n"
            "update_option('permalink_structure', '/%postname%/');\n"
            "flush_rewrite_rules(true);\n",
            before="define('WP_INSTALLING', true);\n",
        )
        latest = httpx.get(f"{queue.base_url}/connectors/wordpress/latest.zip", timeout=10.0)
        assert latest.status_code == 200, latest.text
        install_plugin(s, latest.content)
        out = s.php(
            "require_once ABSPATH . 'wp-admin/includes/plugin.php';\n"
            f"$r = activate_plugin('{PLUGIN}');\n"
            "echo is_wp_error($r) ? $r->get_error_message() : 'active';\n"
        )
        assert out.strip() == "active", out
        with open(tmp / "php-server.log", "wb") as log:  # the child keeps its own descriptor
            s.proc = subprocess.Popen(
                ["php", "-S", f"127.0.0.1:{s.port}", "-t", str(s.root), str(s.root / "router.php")],
                cwd=s.root,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                # workers: the plugin's check may ask this same server (test_fail_open_marks_an_answer_…)
                env={**os.environ, "PHP_CLI_SERVER_WORKERS": "4"},
                start_new_session=True,  # its own process group: the workers are stopped with it
            )

        def up() -> bool:
            with contextlib.suppress(httpx.HTTPError):
                return httpx.get(s.url + "/wp-login.php", timeout=2.0).status_code == 200
            return False

        wait_until(up, timeout=20.0, what="php -S serving WordPress")
        print(f"WordPress set up in {time.monotonic() - started:.1f} s")
        yield s
    finally:
        if s.proc is not None:
            stop_group(s.proc)
        subprocess.run([*MYSQL, "-e", f"DROP DATABASE IF EXISTS {db}"], check=False)
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def room(queue: Server, site: Site) -> str:
    """A room of its own per test (rate 0: nobody is let in until the test opens the outflow), the plugin on it."""
    with queue.admin() as a:
        rid = str(create_room(a, targetUrl=site.url + "/", ratePerMinute=0)["id"])
    site.configure(queue.base_url, rid)
    return rid


def waiting_room_of(response: httpx.Response, queue: Server, room: str) -> str:
    """The page a redirect to the waiting room comes back to (fails when it is not one)."""
    assert response.status_code == 302, (response.status_code, response.headers, response.text[:500])
    loc = urlsplit(response.headers["location"])
    assert f"{loc.scheme}://{loc.netloc}" == queue.base_url and loc.path == f"/w/{room}", response.headers["location"]
    assert "x-qm-failover" not in response.headers
    assert "no-store" in response.headers.get("cache-control", "") or "no-cache" in response.headers.get(
        "cache-control", ""
    )
    return parse_qs(loc.query)["qm_return"][0]


def test_a_visitor_waits_then_gets_the_page_and_the_queues_cookie(queue: Server, site: Site, room: str) -> None:
    r = site.get("/sample-page/")
    assert waiting_room_of(r, queue, room) == site.url + "/sample-page/"
    # the visitor joins on the queue (what the waiting page does), and waits: the outflow is closed
    with httpx.Client(base_url=queue.base_url, headers={"User-Agent": UA}, timeout=10.0) as browser:
        joined = browser.post("/api/join", json={"roomId": room, "returnUrl": site.url + "/sample-page/"})
        assert joined.status_code in (200, 201), joined.text
        token = joined.json()["token"]
        assert waiting_room_of(site.get(f"/sample-page/?qm_token={token}"), queue, room)
        with queue.admin() as a:
            assert a.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).status_code == 200

        def passed() -> dict[str, object] | None:
            body = browser.get("/api/status", params={"roomId": room, "token": token}).json()
            return body if body["state"] == "passed" else None

        st = wait_until(passed, timeout=15.0, what="the visitor's turn")
    back = str(st.get("redirectUrl") or f"{site.url}/sample-page/?qm_token={token}")
    assert back.startswith(site.url + "/sample-page/") and "qm_token=" in back
    r = site.get(back)
    assert r.status_code == 200, (r.status_code, r.headers, r.text[:300])
    assert "QM test page" in r.text
    assert "x-qm-failover" not in r.headers
    cookies = {line.split("=", 1)[0]: line for line in r.headers.get_list("set-cookie")}
    assert f"qm_{room}" in cookies and "httponly" in cookies[f"qm_{room}"].lower()
    assert f"qm_dk_{room}" in cookies, cookies  # the door key the check set, relayed
    jar = {name: line.split("=", 1)[1].split(";", 1)[0] for name, line in cookies.items()}
    # the next page view carries the site's cookies only, and passes
    r = site.get("/hello-world/", cookies=jar)
    assert r.status_code == 200 and "QM test page" in r.text, (r.status_code, r.headers)
    # another browser without them still waits
    waiting_room_of(site.get("/hello-world/", headers={"User-Agent": UA + " other"}), queue, room)


def _admitted_jar(queue: Server, site: Site, room: str) -> dict[str, str]:
    """A visitor who waited, came back with qm_token and got the page: the site's cookies they now hold."""
    with httpx.Client(base_url=queue.base_url, headers={"User-Agent": UA}, timeout=10.0) as browser:
        token = browser.post("/api/join", json={"roomId": room, "returnUrl": site.url + "/sample-page/"}).json()[
            "token"
        ]

        def passed() -> dict[str, object] | None:
            body = browser.get("/api/status", params={"roomId": room, "token": token}).json()
            return body if body["state"] == "passed" else None

        wait_until(passed, timeout=15.0, what="the visitor's turn")
    r = site.get(f"/sample-page/?qm_token={token}")
    assert r.status_code == 200 and "QM test page" in r.text, (r.status_code, r.headers)
    jar = {line.split("=", 1)[0]: line.split("=", 1)[1].split(";", 1)[0] for line in r.headers.get_list("set-cookie")}
    assert {f"qm_{room}", f"qm_dk_{room}"} <= set(jar), jar
    return jar


def _as_cookies(jar: dict[str, str]) -> str:
    """PHP that puts the visitor's cookies in $_COOKIE, before WordPress loads (as their request would)."""
    return "".join(f"$_COOKIE[{php_str(k)}] = {php_str(v)};\n" for k, v in jar.items())


def test_qm_revoke_session_and_the_order_received_hook_end_the_visitors_session(
    queue: Server, site: Site, room: str
) -> None:
    """qm_revoke_session() ends the current visitor's session at the queue (their next page is the waiting
    room's); the woocommerce_thankyou hook is registered and calls it. WooCommerce itself cannot be installed
    here (no network), so the hook is fired by hand, as WooCommerce fires it on the order-received page."""
    with queue.admin() as a:
        assert a.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 600}).status_code == 200
    first, second = _admitted_jar(queue, site, room), _admitted_jar(queue, site, room)
    with queue.admin() as a:  # no outflow from here: a visitor sent back stays in the line
        assert a.post(f"/api/admin/rooms/{room}/rate", json={"ratePerMinute": 0}).status_code == 200

    def revoked() -> int:
        with queue.admin() as a:
            return int(a.get(f"/api/admin/rooms/{room}").json()["room"]["sessionsRevoked"])

    out = site.php("var_export(qm_revoke_session());", before=_as_cookies(first))
    assert out == "true", out
    assert revoked() == 1
    waiting_room_of(site.get("/hello-world/", cookies=first), queue, room)
    assert site.php("var_export(qm_revoke_session());", before=_as_cookies(first)) == "false"  # already ended
    assert site.php("var_export(qm_revoke_session());") == "false"  # a visitor without cookies holds none
    assert revoked() == 1

    out = site.php(
        "var_export(has_action('woocommerce_thankyou', array('QM_Revoke', 'order_received')));"
        "echo '|';"
        "do_action('woocommerce_thankyou', 42);",
        before=_as_cookies(second),
    )
    assert out == "10|", out  # registered at priority 10
    assert revoked() == 2
    waiting_room_of(site.get("/hello-world/", cookies=second), queue, room)


def test_admin_login_rest_and_static_files_are_never_gated(queue: Server, site: Site, room: str) -> None:
    login = site.get("/wp-login.php")
    assert login.status_code == 200 and "user_login" in login.text
    admin = site.get("/wp-admin/")
    assert admin.status_code == 302 and "/wp-login.php" in admin.headers["location"]
    rest = site.get("/wp-json/")
    assert rest.status_code == 200 and rest.json()["name"] == "QM test"
    assert site.get("/wp-json/wp/v2/posts").status_code == 200
    assert site.get("/?rest_route=/").status_code == 200
    assert site.get("/wp-includes/js/jquery/jquery.min.js").status_code == 200
    assert site.get("/feed/").status_code == 200
    assert site.get("/robots.txt").status_code == 200
    for r in (login, admin, rest):
        assert "x-qm-failover" not in r.headers
    # and the pages still are: the room is there
    waiting_room_of(site.get("/"), queue, room)


def test_signed_in_editors_are_not_gated_and_the_settings_page_verifies_the_key(
    queue: Server, site: Site, room: str
) -> None:
    with httpx.Client(base_url=site.url, headers={"User-Agent": UA}, timeout=20.0) as admin:
        admin.cookies.set("wordpress_test_cookie", "WP Cookie check")
        r = admin.post(
            "/wp-login.php",
            data={"log": "admin", "pwd": ADMIN_PASSWORD, "testcookie": "1", "redirect_to": site.url + "/wp-admin/"},
        )
        assert r.status_code == 302 and "/wp-admin/" in r.headers["location"], (r.status_code, r.text[:300])
        page = admin.get("/sample-page/")  # the site's own editor is not sent to the line
        assert page.status_code == 200 and "QM test page" in page.text
        assert "x-qm-failover" not in page.headers
        settings = admin.get("/wp-admin/options-general.php?page=queue-manager")
        assert settings.status_code == 200
        for name in ("qm_queue_url", "qm_room_id", "qm_public_api_key"):
            assert f'name="{name}"' in settings.text
        assert queue.base_url in settings.text and PUBLIC_KEY not in settings.text  # the key is never shown back
        nonce = settings.text.split('name="_wpnonce" value="', 2)[2].split('"', 1)[0]  # the Verify form's
        r = admin.post("/wp-admin/admin-post.php", data={"action": "qm_verify", "_wpnonce": nonce})
        assert r.status_code == 302, (r.status_code, r.text[:300])
        shown = admin.get("/wp-admin/options-general.php?page=queue-manager")
        assert "The queue accepts the key" in shown.text, shown.text[-3000:]
    # the same page for a visitor without the sign-in is gated
    waiting_room_of(site.get("/sample-page/"), queue, room)


def test_settings_are_sanitized(site: Site) -> None:
    site.configure("", "", "")
    out = site.php(
        "echo json_encode(array(\n"
        "  QM_Settings::sanitize_url(' https://Queue.Example.com/base/?x=1#y '),\n"
        "  QM_Settings::sanitize_url('javascript:alert(1)'),\n"
        "  QM_Settings::sanitize_room('shop-1_a'),\n"
        "  QM_Settings::sanitize_room('shop one'),\n"
        "  QM_Settings::sanitize_key('pk-abc'),\n"
        "  QM_Settings::sanitize_key('pk abc'),\n"
        "));\n",
        before="",
    )
    url, bad_url, room, bad_room, key, bad_key = json.loads(out)
    assert url == "https://queue.example.com/base"
    assert bad_url == bad_room == bad_key == ""  # refused: the stored value (none here) is kept
    assert room == "shop-1_a" and key == "pk-abc"


def test_warns_once_when_the_room_does_not_send_visitors_back_here(queue: Server, site: Site) -> None:
    """The first mistake of a new install: a room whose targetUrl is another site. The waiting room then sends
    every admitted visitor there, not back to this site; the plugin asks the queue about this site's origin
    (GET /api/verify?roomId=&origin=) and says so once, in the PHP error log and on its settings page."""
    with queue.admin() as a:
        stray = str(create_room(a, targetUrl="https://shop.example/", ratePerMinute=0)["id"])
    site.configure(queue.base_url, stray)
    log = site.root.parent / "php-server.log"
    what = f"the queue does not send visitors back to {site.url}"
    for path in ("/", "/sample-page/", "/"):
        waiting_room_of(site.get(path), queue, stray)
    text = wait_until(lambda: what in log.read_text(errors="replace") and log.read_text(errors="replace"), 5.0)
    assert text.count(what) == 1, text[-3000:]  # once, not once per page view
    line = next(x for x in text.splitlines() if what in x)
    assert f"[qm] {stray}:" in line and "lands on https://shop.example/" in line and "returnOrigins" in line, line
    kept = json.loads(site.php("echo json_encode(get_option('qm_return_check'));"))
    assert what in kept["message"], kept
    # a room that does send visitors back here: asked again (another room), and nothing to say
    with queue.admin() as a:
        good = str(create_room(a, targetUrl=site.url + "/", ratePerMinute=0)["id"])
    site.configure(queue.base_url, good)
    waiting_room_of(site.get("/"), queue, good)
    kept = json.loads(site.php("echo json_encode(get_option('qm_return_check'));"))
    assert kept["message"] == "" and kept["id"] != "", kept
    assert log.read_text(errors="replace").count(what) == 1


def test_unconfigured_plugin_does_nothing(site: Site, queue: Server) -> None:
    site.configure("", "", "")
    r = site.get("/sample-page/")
    assert r.status_code == 200 and "QM test page" in r.text
    assert "x-qm-failover" not in r.headers


def test_fail_open_when_the_queue_is_stopped(site: Site, room: str) -> None:
    gone = start_server({"PUBLIC_API_KEY": PUBLIC_KEY}, store="memory")
    with gone.admin() as a:
        create_room(a, room, targetUrl=site.url + "/", ratePerMinute=0)
    site.configure(gone.base_url, room)
    assert site.get("/sample-page/").status_code == 302  # up: the queue answers
    gone.stop()
    r = site.get("/sample-page/")
    assert r.status_code == 200 and "QM test page" in r.text
    assert r.headers["x-qm-failover"] == "unreachable"


def test_fail_open_marks_a_refused_key_and_an_unknown_room(queue: Server, site: Site, room: str) -> None:
    site.configure(queue.base_url, room, key="pk-wrong")
    r = site.get("/sample-page/")
    assert r.status_code == 200 and r.headers["x-qm-failover"] == "http-401"
    site.configure(queue.base_url, "no-such-room")
    r = site.get("/sample-page/")
    assert r.status_code == 200 and r.headers["x-qm-failover"] == "http-404"


def test_an_access_rule_block_is_answered_403_never_a_fail_open(queue: Server, site: Site, room: str) -> None:
    """A block access rule: the check answers 403 access_blocked; the plugin refuses the page itself."""
    rules = [{"id": "closed", "action": "block", "match": {"pathPrefix": "/sample-page/"}}]
    with queue.admin() as a:
        assert a.post("/api/admin/rooms", json={"id": room, "accessRules": rules}).status_code == 200
    r = site.get("/sample-page/")
    assert r.status_code == 403 and "Access not allowed" in r.text, (r.status_code, r.headers, r.text[:300])
    assert "x-qm-failover" not in r.headers and "QM test page" not in r.text
    waiting_room_of(site.get("/hello-world/"), queue, room)  # a page no rule matches still waits


def test_fail_open_marks_an_answer_that_is_no_answer(site: Site, room: str) -> None:
    site.configure(site.url + "/not-a-queue", room)
    r = site.get("/sample-page/")
    assert r.status_code == 200 and r.headers["x-qm-failover"] == "invalid-response"


def test_fail_open_after_two_seconds_of_silence(site: Site, room: str) -> None:
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel does), never answers
    try:
        site.configure(f"http://127.0.0.1:{silent.getsockname()[1]}", room)
        began = time.monotonic()
        r = site.get("/sample-page/")
        took = time.monotonic() - began
    finally:
        silent.close()
    assert r.status_code == 200 and r.headers["x-qm-failover"] == "timeout"
    assert 1.5 <= took < 6.0, took


def test_429_sends_the_visitor_to_the_waiting_room_unmarked(site: Site) -> None:
    shedding = start_server({"PUBLIC_API_KEY": PUBLIC_KEY, "CHECK_LIMIT_PER_MIN": "1"}, store="memory")
    try:
        with shedding.admin() as a:
            rid = str(create_room(a, targetUrl=site.url + "/", ratePerMinute=0)["id"])
        site.configure(shedding.base_url, rid)
        waiting_room_of(site.get("/sample-page/"), shedding, rid)  # the one check of the minute
        before = metric(shedding, "qm_rate_limited_checks_all_total") or 0.0
        assert waiting_room_of(site.get("/sample-page/"), shedding, rid) == site.url + "/sample-page/"
        assert (metric(shedding, "qm_rate_limited_checks_all_total") or 0.0) == before + 1  # it was a 429
    finally:
        shedding.stop()


def _update_check(site: Site, *, wordpress_org_answers: bool) -> dict[str, object]:
    fake_org = (
        "add_filter('pre_http_request', function ($pre, $args, $url) {\n"
        "  if (false === strpos($url, 'api.wordpress.org/plugins/update-check')) { return $pre; }\n"
        "  return array('headers' => array(), 'body' => json_encode(array('plugins' => array(), "
        "'translations' => array(), 'no_update' => array())), 'response' => array('code' => 200, 'message' => 'OK'),"
        " 'cookies' => array(), 'filename' => null);\n"
        "}, 10, 3);\n"
        if wordpress_org_answers
        else ""
    )
    out = site.php(
        fake_org + "delete_site_transient('update_plugins');\ndelete_site_transient('qm_update_feed');\n"
        "wp_update_plugins();\n"
        "$t = get_site_transient('update_plugins');\n"
        f"echo json_encode(array('response' => $t->response['{PLUGIN}'] ?? null, "
        f"'no_update' => $t->no_update['{PLUGIN}'] ?? null, 'checked' => $t->checked['{PLUGIN}'] ?? null));\n"
    )
    result: dict[str, object] = json.loads(out)
    return result


def test_wordpress_update_check_finds_the_servers_newer_plugin_and_installs_it(
    queue: Server, site: Site, room: str
) -> None:
    feed = httpx.get(f"{queue.base_url}/connectors/wordpress/update.json", timeout=10.0).json()
    assert feed["version"] == "1.4.0"
    main = site.root / "wp-content" / "plugins" / "queue-manager" / "queue-manager.php"
    main.write_text(main.read_text().replace("Version:           1.4.0", "Version:           1.3.0"))
    try:
        for org in (False, True):  # WordPress.org unreachable (this machine), and answering
            found = _update_check(site, wordpress_org_answers=org)
            offer = found["response"]
            assert isinstance(offer, dict), found
            assert offer["new_version"] == "1.4.0" and offer["slug"] == "queue-manager", offer
            assert offer["package"] == feed["package"] == f"{queue.base_url}/connectors/wordpress/wordpress-1.4.0.zip"
            assert offer["requires_php"] == feed["requires_php"] and offer["tested"] == feed["tested"]
        # "View details"
        info = json.loads(
            site.php(
                "require_once ABSPATH . 'wp-admin/includes/plugin-install.php';\n"
                "$i = plugins_api('plugin_information', array('slug' => 'queue-manager'));\n"
                "echo json_encode(is_wp_error($i) ? $i->get_error_message() : $i);\n"
            )
        )
        assert info["version"] == "1.4.0" and "changelog" in info["sections"], info
        # a zip whose SHA-256 is not the feed's is refused
        refused = site.php(
            f"$r = QM_Updater::fetch_verified({php_str(feed['package'])}, str_repeat('0', 64));\n"
            "echo is_wp_error($r) ? $r->get_error_code() : 'accepted';\n"
        )
        assert refused.strip() == "qm_sha256_mismatch"
        # WordPress's own upgrader installs the package (through the plugin's SHA-256 check), the way the
        # Plugins screen's "update now" does (bulk_upgrade: the plugin stays active)
        out = site.php(
            "require_once ABSPATH . 'wp-admin/includes/file.php';\n"
            "require_once ABSPATH . 'wp-admin/includes/misc.php';\n"
            "require_once ABSPATH . 'wp-admin/includes/class-wp-upgrader.php';\n"
            "require_once ABSPATH . 'wp-admin/includes/plugin.php';\n"
            "wp_update_plugins();\n"
            "$u = new Plugin_Upgrader(new Automatic_Upgrader_Skin());\n"
            f"$r = $u->bulk_upgrade(array('{PLUGIN}'))['{PLUGIN}'] ?? null;\n"
            "echo json_encode(array('result' => is_wp_error($r) ? $r->get_error_message() : !empty($r), "
            "'messages' => $u->skin->get_upgrade_messages()));\n",
            timeout=120.0,
        )
        assert json.loads(out)["result"] is True, out
        assert "Version:           1.4.0" in main.read_text()
        body = httpx.get(feed["package"], timeout=10.0).content
        assert hashlib.sha256(body).hexdigest() == feed["sha256"]
        assert (
            site.root / "wp-content" / "plugins" / "queue-manager" / "includes" / "class-gate.php"
        ).read_bytes() == (zipfile.ZipFile(io.BytesIO(body)).read("queue-manager/includes/class-gate.php"))
        active = site.php(
            f"require_once ABSPATH . 'wp-admin/includes/plugin.php'; echo is_plugin_active('{PLUGIN}') ? 'yes' : 'no';"
        )
        assert active.strip() == "yes"
        # up to date now: the same feed lands in no_update
        found = _update_check(site, wordpress_org_answers=False)
        assert found["response"] is None and isinstance(found["no_update"], dict), found
    finally:
        main.write_text(main.read_text().replace("Version:           1.3.0", "Version:           1.4.0"))


def test_uninstall_removes_the_options(queue: Server, site: Site, room: str) -> None:
    out = site.php(
        "require_once ABSPATH . 'wp-admin/includes/plugin.php';\n"
        f"uninstall_plugin('{PLUGIN}');\n"
        "echo json_encode(array(get_option('qm_queue_url', null), get_option('qm_room_id', null), "
        "get_option('qm_public_api_key', null), get_option('qm_return_check', null)));\n"
    )
    assert json.loads(out) == [None, None, None, None]
    r = site.get("/sample-page/")  # and an unconfigured plugin does nothing
    assert r.status_code == 200 and "x-qm-failover" not in r.headers
