"""The generated code matches the protos, the protos pass buf lint, and gen/ imports from a wheel."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BUF = REPO / ".tools" / "node_modules" / ".bin" / "buf"


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_regeneration_leaves_gen_unchanged(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_protos.py"), "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    fresh, committed = _tree(tmp_path / "gen"), _tree(REPO / "gen")
    assert sorted(fresh) == sorted(committed), "gen/ files differ from a regeneration: run `make gen`"
    changed = [name for name in fresh if fresh[name] != committed[name]]
    assert not changed, f"regeneration changes {changed}: run `make gen` and commit gen/"


def test_buf_lint_passes() -> None:
    assert BUF.exists(), f"{BUF} missing: `make deps` installs buf from npm"
    result = subprocess.run([str(BUF), "lint"], cwd=REPO / "protos", capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_lint_catches_a_bad_proto(tmp_path: Path) -> None:
    # Proves the lint test above can fail: the same config refuses an unprefixed enum.
    shutil.copytree(REPO / "protos", tmp_path / "protos")
    (tmp_path / "protos" / "motor" / "v1" / "bad.proto").write_text(
        'syntax = "proto3";\npackage motor.v1;\nenum Bad { NOPE = 0; }\n'
    )
    result = subprocess.run([str(BUF), "lint"], cwd=tmp_path / "protos", capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "NOPE" in result.stdout


def test_generated_package_imports_from_an_installed_wheel(tmp_path: Path) -> None:
    wheel_dir, target = tmp_path / "wheel", tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheel_dir), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheels = list(wheel_dir.glob("motor_ft-*.whl"))
    assert len(wheels) == 1, wheels
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheels[0])],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert (target / "gen" / "motor" / "v1" / "node_manager_pb2.pyi").exists()
    probe = (
        "import gen.motor.v1.node_manager_pb2 as m, gen.motor.v1.controller_pb2_grpc as g;"
        "print(m.__file__); print(m.ApplyRequest(removed_dp_ranks=[1, 0]).removed_dp_ranks)"
    )
    # The wheel's copy must win over the editable install: PYTHONPATH precedes site-packages.
    result = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith(str(target))
    assert result.stdout.splitlines()[1] == "[1, 0]"


def test_gen_imports_from_the_repository_root() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import gen.motor.v1.node_manager_pb2 as m; print(m.DESCRIPTOR.package)"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.strip() == "motor.v1", result.stderr


def _v1_baseline() -> str:
    """The commit that first published motor.v1: every later contract must stay wire-compatible."""
    result = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "protos/motor/v1/common.proto"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    commits = result.stdout.split()
    assert result.returncode == 0 and commits, f"no git history for protos/motor/v1: {result.stderr}"
    return commits[-1]


def _buf_breaking(protos_dir: Path) -> subprocess.CompletedProcess[str]:
    against = f"{REPO / '.git'}#ref={_v1_baseline()},subdir=protos"
    return subprocess.run([str(BUF), "breaking", "--against", against], cwd=protos_dir,
                          capture_output=True, text=True, timeout=120)


def test_buf_breaking_against_the_published_v1() -> None:
    result = _buf_breaking(REPO / "protos")
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_breaking_catches_a_removed_field(tmp_path: Path) -> None:
    shutil.copytree(REPO / "protos", tmp_path / "protos")
    common = tmp_path / "protos" / "motor" / "v1" / "common.proto"
    text = common.read_text()
    common.write_text(text.replace("  bool headless = 6;\n", ""))
    assert text != common.read_text()
    result = _buf_breaking(tmp_path / "protos")
    assert result.returncode != 0 and "headless" in result.stdout, result.stdout + result.stderr
