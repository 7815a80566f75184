"""What skips the gate: a request for a static file, which no queue check holds up.

A request skips the gate only when all four hold (the Operations Guide, "What skips the gate"):

1. the method is GET or HEAD;
2. the path ends in a static-media extension (scripts, styles, source maps, images, fonts, audio and
   video — never .json, .txt or .xml);
3. the path as the app will receive it is a plain one: no ``;``, no percent-escape, no backslash, no
   ``.``/``..`` segment;
4. ``Sec-Fetch-Dest``, when sent, is not a browsing context (document, iframe, frame, object, embed).

An inline host's gate (``inline/gate.py``) and a proxy's forward-auth check (``/api/gate``) both ask it.
"""

from __future__ import annotations

STATIC_EXTENSIONS = frozenset(
    {
        # scripts, styles, source maps
        "js", "mjs", "cjs", "css", "map",
        # images
        "png", "jpg", "jpeg", "gif", "webp", "avif", "svg", "ico", "bmp", "apng", "tif", "tiff", "jxl",
        # fonts
        "woff", "woff2", "ttf", "otf", "eot",
        # audio and video
        "mp3", "mp4", "m4a", "m4v", "aac", "flac", "oga", "ogg", "ogv", "opus", "wav", "weba", "webm", "mov",
    }
)  # fmt: skip
BROWSING_DESTS = frozenset({b"document", b"iframe", b"frame", b"object", b"embed"})


def plain_path(raw_path: bytes) -> bool:
    """No ``;``, no ``%``, no backslash, no dot segment: the app routes exactly what we looked at."""
    if b";" in raw_path or b"%" in raw_path or b"\\" in raw_path or not raw_path.startswith(b"/"):
        return False
    if b"/." not in raw_path:  # the common case: no segment starts with a dot
        return True
    closed = raw_path + b"/"  # a dot segment is "/./" or "/../" once the path ends in a slash
    return b"/./" not in closed and b"/../" not in closed


def static_extension(raw_path: bytes) -> bool:
    last = raw_path.rsplit(b"/", 1)[-1]
    stem, dot, ext = last.rpartition(b".")
    if not dot or not stem:
        return False
    try:
        return ext.decode("ascii").lower() in STATIC_EXTENSIONS
    except UnicodeDecodeError:
        return False


def skips_gate(method: str, raw_path: bytes, sec_fetch_dest: bytes | None) -> bool:
    return (
        method in ("GET", "HEAD")
        and static_extension(raw_path)
        and plain_path(raw_path)
        and (sec_fetch_dest is None or sec_fetch_dest.lower() not in BROWSING_DESTS)
    )
