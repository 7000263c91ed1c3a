"""A small text record in a directory, replaced whole through a renamed temporary file, so a
reader (or a process restarted after a crash) never finds half of one."""

from __future__ import annotations

import os
from pathlib import Path


class TextFile:
    def __init__(self, directory: Path | str, name: str) -> None:
        self.path = Path(directory) / name

    @property
    def where(self) -> str:
        return str(self.path)

    def read(self) -> str | None:
        try:
            return self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None

    def write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.path)

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


class MemoryTextFile:
    """The same record kept in memory (`where` names it in messages): for a process whose record
    must outlive one component but not the machine, as a simulated pod's emptyDir."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.text: str | None = None

    def read(self) -> str | None:
        return self.text

    def write(self, text: str) -> None:
        self.text = text

    def remove(self) -> None:
        self.text = None
