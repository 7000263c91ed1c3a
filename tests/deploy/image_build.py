"""Building deploy/Containerfile here: podman + runc on a Debian minbase rootfs, cached under
.tools/image between runs.

- podman runs with a store of its own (.tools/image/podman) and a containers.conf that this
  machine needs (runc with cgroupfs, the file events logger, explicit ulimits): nothing is written to
  the system's container storage or configuration.
- The base: `debootstrap --variant=minbase` of the host's Debian suite (python3, python3-venv,
  tini) from the mirror apt already uses, kept as a tarball (base-<key>.tar, `image_base`) and
  imported per build.
- The build context holds only the project wheel (`pip wheel --no-deps` of the work tree's files);
  its dependencies, torch's CPU build included, are downloaded once on the host with the host's pip
  configuration into wheels-<key>/ and mounted read-only into the build, which gets a pip.conf as a
  build secret (no index, that folder): the build needs no network and keeps nothing of it.
- The built images (runtime and demo targets) are saved to images-<key>.tar, keyed by the
  Containerfile, the base, the dependencies and the sources, and loaded from there when nothing
  changed. Every image and container is removed from the store after the test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from .deploy_helpers import DEPLOY, REPO
from .image_base import TOOLS, BuildReport, _log, _run, _sha, base_tarball, debian_suite


TORCH_VERSION = "2.13.0"
IMAGE = "localhost/motor-it"
DEMO_IMAGE = "localhost/motor-it-demo"
BASE_IMAGE = "localhost/motor-it-base"
CONTAINER_PREFIX = "motor-it-"

CONTAINERS_CONF = """\
# podman on this machine (written by tests/deploy/image_build.py): crun cannot start containers with
# the hybrid cgroup layout here, runc can with cgroupfs; no journald, so events go to a file.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
pids_limit = 0
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


class PodmanError(RuntimeError):
    pass


class Podman:
    """The podman CLI on the private store and configuration under .tools/image/podman."""

    def __init__(self, root: Path = TOOLS / "podman") -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.conf = root / "containers.conf"
        self.conf.write_text(CONTAINERS_CONF)
        self.env = {**os.environ, "CONTAINERS_CONF": str(self.conf)}
        self.base = ["podman", "--root", str(root / "storage"), "--runroot", str(root / "run"),
                     "--tmpdir", str(root / "tmp")]

    def argv(self, *args: str) -> list[str]:
        return [*self.base, *args]

    def __call__(self, *args: str, timeout_sec: float = 120.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(self.argv(*args), capture_output=True, text=True, timeout=timeout_sec, env=self.env,
                              check=False)
        if check and proc.returncode != 0:
            raise PodmanError(f"podman {' '.join(args[:3])} ... exited {proc.returncode}: {proc.stderr[-2000:]}")
        return proc

    def unusable(self) -> str | None:
        """Why podman cannot run a container here, or None."""
        if shutil.which("podman") is None:
            return "podman is not installed (Debian's podman and runc; `make image-test` installs them)"
        if shutil.which("runc") is None:
            return "runc is not installed (Debian's runc)"
        try:
            proc = self("info", "--format", "{{.Host.OCIRuntime.Name}}", timeout_sec=60, check=False)
        except subprocess.TimeoutExpired:
            return "`podman info` did not answer within 60 s"
        if proc.returncode != 0:
            return f"`podman info` failed: {proc.stderr.strip()[-500:]}"
        return None

    # -- clean-up, by name ----------------------------------------------------------------------
    def containers(self) -> list[str]:
        out = self("ps", "-a", "--format", "{{.Names}}").stdout.split()
        return [n for n in out if n.startswith(CONTAINER_PREFIX)]

    def images(self) -> list[str]:
        out = self("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
        return [n for n in out if n.split(":")[0] in (IMAGE, DEMO_IMAGE, BASE_IMAGE)]

    def remove_containers(self) -> None:
        for name in self.containers():
            self("rm", "-f", "-t", "5", name, timeout_sec=60, check=False)

    def remove_all(self) -> None:
        """Every container and image this test made (by name), then the dangling layers its builds
        left in this private store."""
        self.remove_containers()
        names = self.images()
        if names:
            self("rmi", "-f", *names, timeout_sec=120, check=False)
        self("image", "prune", "-f", timeout_sec=120, check=False)

    def leftovers(self) -> dict[str, list[str]]:
        return {"containers": self("ps", "-a", "--format", "{{.Names}}").stdout.split(),
                "images": self("images", "-a", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}").stdout.splitlines()}


# -- inputs ---------------------------------------------------------------------------------------

def source_files() -> list[Path]:
    """The work tree's files that go into the wheel (tracked, and new ones git does not ignore)."""
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z", "--", "pyproject.toml", "README.md",
                          "motor", "nodemanager", "gen"], cwd=REPO, capture_output=True, check=True, timeout=60).stdout
    return sorted(p for p in (REPO / f for f in out.decode().split("\0") if f) if p.is_file())


def build_wheel(context: Path, log: Path) -> Path:
    """`pip wheel --no-deps` of a clean copy of the work tree's files (no stale build/ leftovers)."""
    src = TOOLS / "tmp-src"
    shutil.rmtree(src, ignore_errors=True)
    for path in source_files():
        dest = src / path.relative_to(REPO)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    _run([str(REPO / ".venv/bin/pip"), "wheel", "-q", "--no-deps", "-w", str(context), str(src)], log,
         "pip wheel", timeout_sec=300)
    shutil.rmtree(src, ignore_errors=True)
    return next(context.glob("motor_ft-*.whl"))


def wheelhouse(wheel: Path, log: Path, report: BuildReport) -> Path:
    """The project's dependencies with its k8s and sim extras, and torch's CPU build, for the
    image's Python (the host's: same Debian release), downloaded once with the host's pip config."""
    key = _sha((REPO / "pyproject.toml").read_bytes(), TORCH_VERSION.encode(), debian_suite().encode())
    folder = TOOLS / f"wheels-{key}"
    if (folder / ".complete").is_file():
        report.cache["wheels"] = "hit"
        return folder
    report.cache["wheels"] = "miss"
    for old in TOOLS.glob("wheels-*"):
        shutil.rmtree(old, ignore_errors=True)
    start = time.monotonic()
    _run([str(REPO / ".venv/bin/pip"), "download", "-q", "-d", str(folder), f"{wheel}[k8s,sim]",
          f"torch=={TORCH_VERSION}+cpu"], log, "pip download", timeout_sec=900)
    for stale in folder.glob("motor_ft-*.whl"):
        stale.unlink()
    (folder / ".complete").write_text("")
    report.timed("download_wheels", start)
    return folder


def _image_size(podman: Podman, ref: str) -> int:
    return int(json.loads(podman("image", "inspect", ref).stdout)[0]["Size"])


def image_key(base: Path) -> str:
    """What the images are made of: the Containerfile, the base, torch and every source file."""
    return _sha((DEPLOY / "Containerfile").read_bytes(), base.name.encode(), TORCH_VERSION.encode(),
                *(str(p.relative_to(REPO)).encode() + b"\0" + p.read_bytes() for p in source_files()))


def ensure_images(podman: Podman, log: Path, report: BuildReport) -> tuple[str, str]:
    """The runtime and demo images in the store, loaded from the cache or built (then cached)."""
    TOOLS.mkdir(parents=True, exist_ok=True)
    start_all = time.monotonic()
    base = base_tarball(log, report)
    context = TOOLS / "context"
    shutil.rmtree(context, ignore_errors=True)
    context.mkdir()
    key = image_key(base)
    runtime, demo = f"{IMAGE}:{key}", f"{DEMO_IMAGE}:{key}"
    report.images = {"runtime": runtime, "demo": demo}
    archive = TOOLS / f"images-{key}.tar"
    if all(podman("image", "exists", ref, check=False).returncode == 0 for ref in (runtime, demo)):
        report.cache["images"] = "store"  # built by `make image-build` beside the other tests
    elif archive.is_file():
        report.cache["images"] = "hit"
        start = time.monotonic()
        podman("load", "-q", "-i", str(archive), timeout_sec=600)
        report.timed("load_images", start)
    else:
        report.cache["images"] = "miss"
        start = time.monotonic()
        wheel = build_wheel(context, log)
        report.timed("build_wheel", start)
        wheels = wheelhouse(wheel, log, report)
        start = time.monotonic()
        base_ref = f"{BASE_IMAGE}:{base.stem.rsplit('-', 1)[-1]}"
        podman("import", "--change", 'CMD ["/bin/sh"]', str(base), base_ref, timeout_sec=300)
        report.timed("import_base", start)
        pip_conf = TOOLS / "pip.build.conf"
        pip_conf.write_text("[global]\nno-index = true\nfind-links = /wheels\n")
        for target, ref in (("runtime", runtime), ("demo", demo)):
            start = time.monotonic()
            proc = podman("build", "--network", "host", "--format", "docker", "--layers", "-f",
                          str(DEPLOY / "Containerfile"), "--target", target, "--build-arg", f"BASE_IMAGE={base_ref}",
                          "--build-arg", f"TORCH_VERSION={TORCH_VERSION}",
                          "--secret", f"id=pip.conf,src={pip_conf}", "-v", f"{wheels}:/wheels:ro",
                          "-t", ref, str(context), timeout_sec=1200, check=False)
            _log(log, f"podman build --target {target}", proc)
            if proc.returncode != 0:
                raise PodmanError(f"podman build --target {target} failed, see {log}: {proc.stderr[-2000:]}")
            report.timed(f"build_{target}", start)
        podman("rmi", base_ref, timeout_sec=120)
        start = time.monotonic()
        for old in TOOLS.glob("images-*.tar"):
            old.unlink()
        partial = archive.with_suffix(".partial")
        podman("save", "-q", "-m", "--format", "docker-archive", "-o", str(partial), runtime, demo, timeout_sec=600)
        os.replace(partial, archive)
        report.timed("save_images", start)
    shutil.rmtree(context, ignore_errors=True)
    report.sizes_bytes = {"runtime": _image_size(podman, runtime), "demo": _image_size(podman, demo),
                          "base_rootfs_tar": base.stat().st_size}
    report.timed("images_ready", start_all)
    return runtime, demo


def main() -> int:
    """`python -m tests.deploy.image_build`: the images of this work tree into the private store
    (and the cache), so that `make image-test` finds them built; what it did on one line."""
    podman = Podman()
    reason = podman.unusable()
    if reason is not None:
        print(f"image-build: skipped, podman cannot run containers here: {reason}")
        return 0
    log = TOOLS / "image-build.log"
    log.unlink(missing_ok=True)
    report = BuildReport()
    ensure_images(podman, log, report)
    print(f"image-build: cache {report.cache} times {report.timings_sec} images {report.images}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
