"""A room's brand: the name, logo, two colours, a short message per language and a help link its
visitor pages show, validated here (the same rules for the admin API, a restore and a journal replay).

``brand`` is one object on the room and a change merges: each key sent replaces that key, a key left
out keeps its value, ``null`` clears it, and ``"brand": null`` clears them all. The logo arrives
through its own route (POST …/logo) as ``{"type", "data"}``; a read returns it as ``{"type",
"sha256", "bytes"}``, and sending that back unchanged keeps the stored logo.

Colours come as a pair. The page's text colour is not chosen by the operator: it is black or white,
whichever reads better on the background (at least 4.58:1 on any colour). The accent is used for
links and the button's background, so it must read at 4.5:1 (WCAG AA, body text) on the background
and on the cards drawn over it; below that the change is refused with ``low_contrast``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from queue_manager.engine import logo as logos
from queue_manager.engine.errors import EngineError, bad_field
from queue_manager.engine.languages import LANGUAGES

BRAND_KEYS = ("displayName", "logo", "background", "accent", "message", "helpUrl")
DISPLAY_NAME_MAX = 80
MESSAGE_MAX = 280
HELP_URL_MAX = 500
AA_RATIO = 4.5
BLACK, WHITE = "#000000", "#ffffff"
# the waiting page's card colour in its light and dark palettes (web/waiting/waiting.css --card)
CARD = {"light": "#ffffff", "dark": "#161b23"}
_COLOUR = re.compile(r"^#[0-9a-fA-F]{6}$")
# bidirectional overrides and isolates: they can make a message read as something else
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


@dataclass(frozen=True, slots=True)
class Logo:
    type: str
    data: bytes
    sha256: str

    @classmethod
    def of(cls, content_type: str, data: bytes) -> Logo:
        clean = logos.sanitise(content_type, data)
        return cls(content_type, clean, hashlib.sha256(clean).hexdigest())

    @property
    def ext(self) -> str:
        return "png" if self.type == logos.PNG_TYPE else "svg"

    @property
    def file_name(self) -> str:
        """Its name under /w/<room>/: the content hash makes it cacheable for a year."""
        return f"logo-{self.sha256[:16]}.{self.ext}"

    def data_uri(self) -> str:
        return f"data:{self.type};base64,{base64.b64encode(self.data).decode()}"

    def to_public(self, *, with_data: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type, "sha256": self.sha256, "bytes": len(self.data)}
        if with_data:
            out["data"] = base64.b64encode(self.data).decode()
        return out


@dataclass(frozen=True, slots=True)
class Brand:
    display_name: str | None = None
    logo: Logo | None = None
    background: str | None = None
    accent: str | None = None
    message: tuple[tuple[str, str], ...] = ()
    help_url: str | None = None

    def to_public(self, *, with_data: bool = True) -> dict[str, Any]:
        return {
            "displayName": self.display_name,
            "logo": None if self.logo is None else self.logo.to_public(with_data=with_data),
            "background": self.background,
            "accent": self.accent,
            "message": dict(self.message),
            "helpUrl": self.help_url,
        }

    @property
    def fingerprint(self) -> str:
        """Changes whenever anything a page shows changes (the page cache and the stylesheet's name use it)."""
        body = orjson.dumps(self.to_public(with_data=False), option=orjson.OPT_SORT_KEYS)
        return hashlib.sha256(body).hexdigest()[:16]

    def message_for(self, lang: str) -> str | None:
        """The message in ``lang``, else the English one, else none."""
        table = dict(self.message)
        return table.get(lang) or table.get("en")

    @property
    def palette(self) -> dict[str, str] | None:
        """The page's colours: background, text, accent, accent text, the scheme and its card colour."""
        if self.background is None or self.accent is None:
            return None
        text = best_text(self.background)
        scheme = "light" if text == BLACK else "dark"
        return {
            "scheme": scheme,
            "background": self.background,
            "text": text,
            "card": CARD[scheme],
            "accent": self.accent,
            "accentText": best_text(self.accent),
        }


def same_logo(before: Brand | None, after: Brand | None) -> bool:
    """Both brands hold a logo and it is the same file (by its SHA-256)."""
    a = None if before is None else before.logo
    b = None if after is None else after.logo
    return a is not None and b is not None and a.sha256 == b.sha256


def resolve_logo(config: Mapping[str, Any], held: Logo | None) -> tuple[dict[str, Any], bool]:
    """A journaled config whose logo is a reference (type, sha256, bytes: no ``data``) made whole from
    the logo the room already holds. Returns the config and whether a reference matched nothing: then
    the config comes back without a logo (a journal read from a cut it should not start at)."""
    brand = config.get("brand")
    logo = brand.get("logo") if isinstance(brand, Mapping) else None
    if not isinstance(brand, Mapping) or not isinstance(logo, Mapping) or "data" in logo:
        return dict(config), False
    if held is not None and logo.get("sha256") == held.sha256:
        return {**config, "brand": {**brand, "logo": held.to_public()}}, False
    return {**config, "brand": {**brand, "logo": None}}, True


# ------------------------------------------------------------------------------------- contrast


def luminance(colour: str) -> float:
    """WCAG 2.x relative luminance of ``#rrggbb``."""

    def channel(hex2: str) -> float:
        c = int(hex2, 16) / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(colour[i : i + 2]) for i in (1, 3, 5))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def contrast(a: str, b: str) -> float:
    """WCAG 2.x contrast ratio of two colours, from 1 to 21."""
    la, lb = sorted((luminance(a), luminance(b)), reverse=True)
    return (la + 0.05) / (lb + 0.05)


def best_text(background: str) -> str:
    return BLACK if contrast(BLACK, background) >= contrast(WHITE, background) else WHITE


# ---------------------------------------------------------------------------------- validation


def _bad(key: str, message: str, code: str = "invalid_brand") -> EngineError:
    return bad_field(f"brand.{key}", message, code)


def _plain_text(key: str, value: Any, limit: int) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _bad(key, f"brand.{key} must be non-empty text, or null.")
    if len(value) > limit:
        raise _bad(key, f"brand.{key} is {len(value)} characters; at most {limit}.", "brand_text_too_long")
    for ch in value:
        if unicodedata.category(ch) == "Cc" or ch in _BIDI:
            raise _bad(
                key,
                f"brand.{key} holds the control character U+{ord(ch):04X}; it must be plain text on one line.",
                "brand_control_char",
            )
    return value.strip()


def _colour(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _COLOUR.match(value):
        raise _bad(key, f"brand.{key} must be a colour written #rrggbb, or null.", "invalid_color")
    return value.lower()


def _help_url(value: Any) -> str | None:
    if value is None:
        return None
    ok = isinstance(value, str) and len(value) <= HELP_URL_MAX and value.isprintable() and " " not in value
    if ok:
        try:
            parts = urlsplit(value)
            ok = parts.scheme == "https" and bool(parts.hostname) and parts.username is None and "@" not in parts.netloc
        except ValueError:
            ok = False
    if not ok:
        raise _bad(
            "helpUrl",
            f"brand.helpUrl must be an https:// URL (at most {HELP_URL_MAX} characters, no credentials), or null.",
            "invalid_help_url",
        )
    return str(value)


def _message(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise _bad("message", f"brand.message must be an object keyed by language ({', '.join(LANGUAGES)}).")
    unknown = sorted(k for k in value if k not in LANGUAGES)
    if unknown:
        raise _bad("message", f"brand.message has no language {unknown[0]!r}; the page speaks {', '.join(LANGUAGES)}.")
    return tuple(
        (lang, _plain_text(f"message.{lang}", value[lang], MESSAGE_MAX))
        for lang in LANGUAGES
        if value.get(lang) is not None
    )


def _logo(value: Any, current: Logo | None) -> Logo | None:
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") not in logos.LOGO_TYPES:
        raise logos.bad_logo(
            'brand.logo is {"type": "image/png"|"image/svg+xml", …} or null; upload it with POST …/logo.'
        )
    data = value.get("data")
    if data is None:
        if current is not None and value.get("sha256") == current.sha256:
            return current  # a read sent back: the stored logo stays
        raise logos.bad_logo("brand.logo names a logo this room does not have; upload it with POST …/logo.")
    if not isinstance(data, str) or len(data) > logos.LOGO_MAX_BYTES * 2:
        raise logos.bad_logo(f"brand.logo.data must be base64, at most {logos.LOGO_MAX_BYTES} bytes decoded.")
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise logos.bad_logo("brand.logo.data is not base64.") from None
    return Logo.of(value["type"], raw)


def apply_brand(current: Brand | None, value: Any) -> Brand | None:
    """The brand after a change merged into ``current`` (see the module doc); None when nothing is set."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_field("brand", "brand must be an object or null.", "invalid_brand")
    unknown = sorted(set(value) - set(BRAND_KEYS))
    if unknown:
        raise bad_field(
            "brand", f"Unknown brand field(s): {', '.join(unknown)}; it takes {', '.join(BRAND_KEYS)}.", "invalid_brand"
        )
    base = current or Brand()
    fields: dict[str, Any] = {
        "display_name": base.display_name,
        "logo": base.logo,
        "background": base.background,
        "accent": base.accent,
        "message": base.message,
        "help_url": base.help_url,
    }
    if "displayName" in value:
        v = value["displayName"]
        fields["display_name"] = None if v is None else _plain_text("displayName", v, DISPLAY_NAME_MAX)
    if "logo" in value:
        fields["logo"] = _logo(value["logo"], base.logo)
    if "background" in value:
        fields["background"] = _colour("background", value["background"])
    if "accent" in value:
        fields["accent"] = _colour("accent", value["accent"])
    if "message" in value:
        fields["message"] = _message(value["message"])
    if "helpUrl" in value:
        fields["help_url"] = _help_url(value["helpUrl"])
    brand = Brand(**fields)
    _check_colours(brand)
    return None if brand == Brand() else brand


def _check_colours(brand: Brand) -> None:
    if (brand.background is None) != (brand.accent is None):
        missing = "accent" if brand.accent is None else "background"
        raise _bad(missing, "brand.background and brand.accent are set together (or both null).", "invalid_color")
    palette = brand.palette
    if palette is None:
        return
    for over, name in ((palette["background"], "background"), (palette["card"], f"the {palette['scheme']} card")):
        ratio = contrast(palette["accent"], over)
        if ratio < AA_RATIO:
            # shown rounded down: 4.4996 reads 4.49, never a "4.50:1" refused for being under 4.5
            ratio = math.floor(ratio * 100) / 100
            raise EngineError(
                400,
                "low_contrast",
                f"The accent {palette['accent']} on {name} {over} has a contrast ratio of {ratio:.2f}:1; links and "
                f"buttons need at least {AA_RATIO}:1 (WCAG AA). Pick a darker or lighter accent.",
                field="brand.accent",
                ratio=ratio,
                pair=[palette["accent"], over],
            )
