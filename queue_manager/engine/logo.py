"""A room's logo: a PNG checked chunk by chunk, or an SVG parsed and rebuilt from an allow-list.

Whatever passes is what is stored and served; anything else is refused with ``bad_logo`` (what was
wrong, in words). An SVG is never passed through: only the elements and attributes listed below are
written back, so what a browser later parses is text this module wrote. Script, ``foreignObject``,
event handlers, animation, embedded images and every reference that leaves the document (``href`` or
``url(...)`` to anything but ``#id``) are refused rather than dropped, so an operator knows the file
was not what it claimed. Editors' own namespaces (Inkscape, Illustrator), comments and metadata are
dropped silently.
"""

from __future__ import annotations

import re
import struct
import zlib
from html import escape
from typing import Any
from xml.etree.ElementTree import Element

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import ParseError, fromstring

from queue_manager.engine.errors import EngineError

LOGO_MAX_BYTES = 64 * 1024
PNG_MAX_SIDE = 2048
SVG_MAX_ELEMENTS = 4000
PNG_TYPE = "image/png"
SVG_TYPE = "image/svg+xml"
LOGO_TYPES = (PNG_TYPE, SVG_TYPE)

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"
XML_NS = "http://www.w3.org/XML/1998/namespace"

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# the chunks a still image needs to look right; text, EXIF and animation chunks are left out
PNG_KEPT_CHUNKS = frozenset(
    {b"IHDR", b"PLTE", b"IDAT", b"IEND", b"tRNS", b"gAMA", b"cHRM", b"sRGB", b"iCCP", b"sBIT", b"pHYs", b"bKGD"}
)

SVG_ELEMENTS = frozenset(
    {
        "svg",
        "g",
        "defs",
        "symbol",
        "use",
        "title",
        "desc",
        "path",
        "rect",
        "circle",
        "ellipse",
        "line",
        "polyline",
        "polygon",
        "text",
        "tspan",
        "linearGradient",
        "radialGradient",
        "stop",
        "clipPath",
        "mask",
        "pattern",
        "style",
    }
)
# refused outright (named in the refusal): what can run code, load something, or change a reference later
SVG_REFUSED_ELEMENTS = frozenset(
    {
        "script",
        "foreignObject",
        "image",
        "iframe",
        "embed",
        "object",
        "a",
        "animate",
        "animateMotion",
        "animateTransform",
        "set",
        "discard",
        "feImage",
        "handler",
        "listener",
    }
)
SVG_SILENT_ELEMENTS = frozenset({"metadata"})
SVG_ATTRIBUTES = frozenset(
    {
        "id",
        "class",
        "style",
        "viewBox",
        "width",
        "height",
        "x",
        "y",
        "x1",
        "y1",
        "x2",
        "y2",
        "cx",
        "cy",
        "r",
        "rx",
        "ry",
        "fx",
        "fy",
        "d",
        "points",
        "transform",
        "preserveAspectRatio",
        "version",
        "href",
        "fill",
        "fill-opacity",
        "fill-rule",
        "stroke",
        "stroke-width",
        "stroke-opacity",
        "stroke-linecap",
        "stroke-linejoin",
        "stroke-miterlimit",
        "stroke-dasharray",
        "stroke-dashoffset",
        "opacity",
        "color",
        "clip-path",
        "clip-rule",
        "mask",
        "display",
        "visibility",
        "offset",
        "stop-color",
        "stop-opacity",
        "gradientUnits",
        "gradientTransform",
        "spreadMethod",
        "patternUnits",
        "patternContentUnits",
        "patternTransform",
        "clipPathUnits",
        "maskUnits",
        "maskContentUnits",
        "font-family",
        "font-size",
        "font-weight",
        "font-style",
        "text-anchor",
        "dominant-baseline",
        "letter-spacing",
        "dx",
        "dy",
        "role",
        "aria-label",
        "aria-hidden",
        "focusable",
        "xml:space",
    }
)
_URL = re.compile(r"url\s*\(\s*(['\"]?)(.*?)\1\s*\)", re.I | re.S)
# what can load something without url() (image-set("…"), src("…")), or hide it (escapes, comments' tricks)
_CSS_BANNED = re.compile(r"@import|expression\s*\(|image-set\s*\(|\bsrc\s*\(|\\|javascript:|</", re.I)


def bad_logo(message: str) -> EngineError:
    return EngineError(400, "bad_logo", message, field="brand.logo")


def sanitise(content_type: str, data: bytes) -> bytes:
    """The logo as it will be stored and served, or ``bad_logo``."""
    if not data:
        raise bad_logo("The logo is empty.")
    if len(data) > LOGO_MAX_BYTES:
        raise bad_logo(f"The logo is {len(data)} bytes; the most a logo may be is {LOGO_MAX_BYTES} bytes.")
    if content_type == PNG_TYPE:
        return _png(data)
    if content_type == SVG_TYPE:
        return _svg(data)
    raise bad_logo(f"A logo is a PNG (image/png) or an SVG (image/svg+xml), not {content_type[:60]!r}.")


# ------------------------------------------------------------------------------------------- PNG


def _png(data: bytes) -> bytes:
    if not data.startswith(PNG_SIGNATURE):
        raise bad_logo("The file does not start with the PNG signature: it is not a PNG.")
    pos, out, first = len(PNG_SIGNATURE), [PNG_SIGNATURE], True
    while True:
        if pos + 8 > len(data):
            raise bad_logo("The PNG ends before its IEND chunk.")
        length, kind = struct.unpack(">I4s", data[pos : pos + 8])
        end = pos + 12 + length
        if end > len(data):
            raise bad_logo("A PNG chunk runs past the end of the file.")
        body = data[pos + 8 : pos + 8 + length]
        (crc,) = struct.unpack(">I", data[pos + 8 + length : end])
        if zlib.crc32(kind + body) != crc:
            raise bad_logo(f"The PNG's {kind.decode('latin-1')!r} chunk fails its checksum.")
        if first:
            if kind != b"IHDR" or length != 13:
                raise bad_logo("A PNG starts with its IHDR chunk; this one does not.")
            width, height = struct.unpack(">II", body[:8])
            if not (0 < width <= PNG_MAX_SIDE and 0 < height <= PNG_MAX_SIDE):
                raise bad_logo(f"The PNG is {width}×{height}; a logo is at most {PNG_MAX_SIDE} pixels on each side.")
            first = False
        if kind in PNG_KEPT_CHUNKS:
            out.append(data[pos:end])
        pos = end
        if kind == b"IEND":
            return b"".join(out)


# ------------------------------------------------------------------------------------------- SVG


def _svg(data: bytes) -> bytes:
    try:
        root = fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    except DefusedXmlException:
        raise bad_logo("The SVG declares a DTD or entities; a logo may not.") from None
    except (ParseError, ValueError, SyntaxError) as err:
        raise bad_logo(f"The SVG is not well-formed XML ({str(err)[:120]}).") from None
    if root.tag != f"{{{SVG_NS}}}svg":
        raise bad_logo('An SVG logo\'s root element is <svg xmlns="http://www.w3.org/2000/svg">.')
    count = sum(1 for _ in root.iter())
    if count > SVG_MAX_ELEMENTS:
        raise bad_logo(f"The SVG has {count} elements; a logo has at most {SVG_MAX_ELEMENTS}.")
    parts: list[str] = []
    _write(root, parts, top=True)
    return "".join(parts).encode()


def _local(tag: Any) -> tuple[str | None, str]:
    """(namespace, local name) of an element tag or attribute name; comments and PIs have no str tag."""
    if not isinstance(tag, str):
        return None, ""
    if tag.startswith("{"):
        ns, _, name = tag[1:].partition("}")
        return ns, name
    return None, tag


def _check_refs(where: str, value: str) -> None:
    for match in _URL.finditer(value):
        if not match.group(2).strip().startswith("#"):
            raise bad_logo(f"{where} refers outside the logo (url({match.group(2)[:60]})); only url(#id) may be used.")


def _check_css(where: str, value: str) -> None:
    if _CSS_BANNED.search(value):
        raise bad_logo(
            f"{where} holds CSS a logo may not use (@import, expression(), image-set(), src(), escapes or javascript:)."
        )
    _check_refs(where, value)


def _write(el: Element, out: list[str], *, top: bool = False) -> None:
    ns, name = _local(el.tag)
    if ns != SVG_NS:
        return  # a comment, a processing instruction or an editor's own element: dropped
    if name in SVG_REFUSED_ELEMENTS:
        raise bad_logo(f"The SVG has a <{name}> element; a logo may not.")
    if name in SVG_SILENT_ELEMENTS:
        return
    if name not in SVG_ELEMENTS:
        raise bad_logo(f"The SVG has a <{name}> element, which a logo may not use.")
    attrs: list[str] = [f'xmlns="{SVG_NS}"'] if top else []
    for key, value in el.attrib.items():
        ans, aname = _local(key)
        if aname.lower().startswith("on"):
            raise bad_logo(f"The SVG's <{name}> has an event handler ({aname}); a logo may not.")
        if aname == "href" and ans in (XLINK_NS, None):
            if not value.strip().startswith("#"):
                raise bad_logo(f"The SVG's <{name}> links to {value[:60]!r}; a logo may only refer to #ids inside it.")
            attrs.append(f'href="{escape(value.strip())}"')
            continue
        if ans == XML_NS and aname == "space":
            aname = "xml:space"
        elif ans is not None:
            continue  # an editor's attribute (inkscape:, sodipodi:, …)
        if aname not in SVG_ATTRIBUTES:
            continue
        if aname == "style":
            _check_css(f"The SVG's <{name}> style", value)
        else:
            _check_refs(f"The SVG's <{name}> {aname}", value)
        attrs.append(f'{aname}="{escape(value)}"')
    out.append("<" + " ".join([name, *attrs]) + ">")
    if name == "style":
        text = "".join(el.itertext())
        _check_css("The SVG's <style>", text)
        out.append(escape(text, quote=False))
    else:
        if el.text and name in ("text", "tspan", "title", "desc"):
            out.append(escape(el.text, quote=False))
        for child in el:
            _write(child, out)
            if child.tail and name in ("text", "tspan"):
                out.append(escape(child.tail, quote=False))
    out.append(f"</{name}>")
