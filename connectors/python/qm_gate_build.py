"""The package's own build backend (PEP 517), standard library only: installing needs no network.

``pip install https://QUEUE_HOST/connectors/python/latest.tar.gz`` unpacks this source archive and calls
:func:`build_wheel`, which packs ``qm_gate/`` with the metadata below into a pure-Python wheel.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PACKAGE = "qm_gate"


def _project() -> dict[str, Any]:
    with open(HERE / "pyproject.toml", "rb") as fh:
        project: dict[str, Any] = tomllib.load(fh)["project"]
    return project


def _dist(project: dict[str, Any]) -> str:
    return str(project["name"]).replace("-", "_")


def _metadata(project: dict[str, Any]) -> str:
    lines = [
        "Metadata-Version: 2.1",
        f"Name: {project['name']}",
        f"Version: {project['version']}",
        f"Summary: {project['description']}",
        f"Requires-Python: {project['requires-python']}",
    ]
    for extra, requirements in sorted(project.get("optional-dependencies", {}).items()):
        lines.append(f"Provides-Extra: {extra}")
        lines.extend(f'Requires-Dist: {req}; extra == "{extra}"' for req in requirements)
    lines.append("Description-Content-Type: text/markdown")
    readme = (HERE / "README.md").read_text(encoding="utf-8") if (HERE / "README.md").is_file() else ""
    return "\n".join(lines) + "\n\n" + readme


def get_requires_for_build_wheel(config_settings: Any = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: Any = None) -> list[str]:
    return []


def _record_line(name: str, body: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(body)}"


def _dist_info(project: dict[str, Any]) -> dict[str, bytes]:
    return {
        "METADATA": _metadata(project).encode(),
        "WHEEL": b"Wheel-Version: 1.0\nGenerator: qm_gate_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Any = None) -> str:
    project = _project()
    info = f"{_dist(project)}-{project['version']}.dist-info"
    os.makedirs(os.path.join(metadata_directory, info), exist_ok=True)
    for name, body in _dist_info(project).items():
        Path(metadata_directory, info, name).write_bytes(body)
    return info


def build_wheel(wheel_directory: str, config_settings: Any = None, metadata_directory: str | None = None) -> str:
    project = _project()
    dist, version = _dist(project), project["version"]
    info = f"{dist}-{version}.dist-info"
    files = {
        path.relative_to(HERE).as_posix(): path.read_bytes()
        for path in sorted((HERE / PACKAGE).rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }
    files.update({f"{info}/{name}": body for name, body in _dist_info(project).items()})
    record = [_record_line(name, body) for name, body in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    filename = f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as zf:
        for name, body in files.items():
            zf.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), body)
    return filename


def build_sdist(sdist_directory: str, config_settings: Any = None) -> str:
    project = _project()
    top = f"{_dist(project)}-{project['version']}"
    filename = f"{top}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as tar:
        for path in sorted(HERE.rglob("*")):
            rel = path.relative_to(HERE)
            if path.is_file() and "__pycache__" not in rel.parts and not rel.name.startswith("."):
                tar.add(path, f"{top}/{rel.as_posix()}")
        if not (HERE / "PKG-INFO").is_file():
            body = _metadata(project).encode()
            info = tarfile.TarInfo(f"{top}/PKG-INFO")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    return filename
