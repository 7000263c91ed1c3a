"""The image's base, on its own: a `debootstrap --variant=minbase` rootfs of the host's Debian suite
from the mirror apt already uses, kept as a tarball under .tools/image (base-<key>.tar). Standard
library only, so `make test` builds it while the Python environments install (`python3
tests/deploy/image_base.py`), and the image build later finds it cached.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / ".tools" / "image"
BASE_PACKAGES = ("python3", "python3-venv", "tini")
# What a minbase rootfs need not carry into the image.
ROOTFS_EXCLUDES = ("./var/cache/apt/archives/*.deb", "./var/cache/apt/*.bin", "./var/lib/apt/lists/*",
                   "./usr/share/doc/*", "./usr/share/man/*", "./usr/share/locale/*", "./dev/*", "./proc/*",
                   "./sys/*", "./run/*", "./tmp/*")


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


@dataclass
class BuildReport:
    """What the run cost and made (written to the run's image-test.json)."""

    timings_sec: dict[str, float] = field(default_factory=dict)
    cache: dict[str, str] = field(default_factory=dict)
    sizes_bytes: dict[str, int] = field(default_factory=dict)
    images: dict[str, str] = field(default_factory=dict)

    def timed(self, name: str, start: float) -> None:
        self.timings_sec[name] = round(time.monotonic() - start, 2)


def _log(log: Path, title: str, proc: subprocess.CompletedProcess[str]) -> None:
    with log.open("a") as f:
        f.write(f"==== {title} (exit {proc.returncode})\n{proc.stdout}\n{proc.stderr}\n")


def _run(argv: list[str], log: Path, title: str, timeout_sec: float, **kwargs) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_sec, check=False, **kwargs)
    _log(log, title, proc)
    if proc.returncode != 0:
        raise RuntimeError(f"{title} failed (exit {proc.returncode}), see {log}: {proc.stderr[-1500:]}")


def debian_mirror() -> str:
    """The first Debian mirror apt uses (deb822 .sources or one-line lists), never a fixed host."""
    candidates: list[Path] = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
    candidates += [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*.list"))]
    for path in candidates:
        if not path.is_file():
            continue
        text = path.read_text()
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(re.findall(r"^([A-Za-z-]+):\s*(.+)$", stanza, re.M))
                suites = fields.get("Suites", "").split()
                if "deb" in fields.get("Types", "").split() and suites and not suites[0].endswith("-security"):
                    return fields["URIs"].split()[0]
        else:
            for line in text.splitlines():
                parts = line.split()
                if parts[:1] == ["deb"]:
                    parts = [p for p in parts[1:] if not p.startswith("[")]
                    if len(parts) >= 2 and not parts[1].endswith("-security"):
                        return parts[0]
    raise RuntimeError("no Debian mirror found in /etc/apt/sources.list*")


def debian_suite() -> str:
    fields = dict(re.findall(r'^([A-Z_]+)="?([^"\n]*)"?$', Path("/etc/os-release").read_text(), re.M))
    return fields["VERSION_CODENAME"]


def base_tarball(log: Path, report: BuildReport) -> Path:
    suite = debian_suite()
    key = _sha(suite.encode(), ",".join(BASE_PACKAGES).encode(), ",".join(ROOTFS_EXCLUDES).encode())
    tarball = TOOLS / f"base-{suite}-{key}.tar"
    if tarball.is_file():
        report.cache["base"] = "hit"
        return tarball
    report.cache["base"] = "miss"
    for old in TOOLS.glob("base-*.tar"):
        old.unlink()
    start = time.monotonic()
    rootfs = TOOLS / "tmp-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", suite, str(rootfs),
          debian_mirror()], log, "debootstrap", timeout_sec=900)
    partial = tarball.with_suffix(".partial")
    _run(["tar", "-C", str(rootfs), *[f"--exclude={e}" for e in ROOTFS_EXCLUDES], "-cf", str(partial), "."], log,
         "tar rootfs", timeout_sec=300)
    os.replace(partial, tarball)
    shutil.rmtree(rootfs, ignore_errors=True)
    report.timed("debootstrap_rootfs", start)
    return tarball


def main() -> int:
    """Builds the base tarball unless it is cached; what it did on one line."""
    TOOLS.mkdir(parents=True, exist_ok=True)
    report = BuildReport()
    tarball = base_tarball(TOOLS / "image-base.log", report)
    print(f"image-base: cache {report.cache} times {report.timings_sec} -> {tarball}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
