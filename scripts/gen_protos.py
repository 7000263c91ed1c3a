"""Regenerate the committed Python code under gen/ from protos/.

Usage: python scripts/gen_protos.py [--out DIR]

protoc emits `from motor.v1 import common_pb2`, which would resolve to Motor's own `motor` package;
the imports are rewritten to `gen.motor.v1` so the generated code is a normal package. The output is
deterministic for a pinned grpcio-tools (see pyproject's `gen` extra), which is what lets the test
suite fail when regeneration would change gen/.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "protos"
PACKAGE_DIR = Path("motor") / "v1"
_IMPORT_RE = re.compile(r"^from motor\.v1 import ", re.MULTILINE)
_INIT_DOC = '"""Generated from protos/ by scripts/gen_protos.py; do not edit."""\n'


def generate(out_root: Path) -> list[Path]:
    """Writes gen/ (with __init__.py files) under out_root; returns the files written."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT / PACKAGE_DIR}")
    with tempfile.TemporaryDirectory() as tmp:
        grpc_include = Path(protoc.__file__).parent / "_proto"
        args = [
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"-I{grpc_include}",
            f"--python_out={tmp}",
            f"--pyi_out={tmp}",
            f"--grpc_python_out={tmp}",
            *protos,
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        target = out_root / "gen"
        written: list[Path] = []
        for path in sorted((Path(tmp) / PACKAGE_DIR).iterdir()):
            text = _IMPORT_RE.sub("from gen.motor.v1 import ", path.read_text())
            dest = target / PACKAGE_DIR / path.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(text)
            written.append(dest)
    for pkg in (target, target / "motor", target / PACKAGE_DIR):
        init = pkg / "__init__.py"
        init.write_text(_INIT_DOC)
        written.append(init)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO, help="directory that receives gen/ (default: repo root)")
    args = parser.parse_args()
    gen_dir = args.out / "gen"
    if gen_dir.exists():
        # Stale files of a removed .proto must not survive a regeneration.
        shutil.rmtree(gen_dir)
    files = generate(args.out)
    print(f"wrote {len(files)} files under {gen_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
