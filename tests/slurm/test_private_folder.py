"""Issue 25 item 3: `make test` from a clone in a private folder (mode 0700: a `mktemp -d` folder,
or /root). munged runs as the user `munge` and PostgreSQL as `postgres`; neither can enter such a
folder, so their state lives outside the clone (docs/slurm.md, "Where munge's and PostgreSQL's
state live"). In the 24.11 root, /root is the root's own 0700 /root, whatever the host's is.

Each case starts a cluster of its own in a fresh 0700 folder, on ports no other cluster or test
uses (`make`'s clusters: PORT_BASE 6817 and 6917, each spanning +0..+43; PostgreSQL 55432), runs
a real job (or query) through it, tears it down and checks that nothing is left: processes, files
outside the folder (in /run, /var/lib/postgresql, and in the 24.11 root), mounts. The 24.11 cases
reuse the root `make slurm-up` built (SLURM_ROOT) and must leave its shared mounts as they were:
the `make` cluster may be running in it."""

from __future__ import annotations

import contextlib
import glob
import os
import re
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from slurm_harness import REPO, load_env_sh

T = TypeVar("T")
SCRIPTS = REPO / "scripts"
SLURM_ROOT = Path(os.environ.get("SLURM_ROOT") or REPO / ".slurm-roots" / "trixie")
PG_PORT = 55499  # socket only (no TCP): the port only names the socket
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "BOOT_FAIL", "DEADLINE"}


def _env(**extra: str) -> dict[str, str]:
    """This process's environment without another cluster's settings (the live fixtures put
    a cluster's env.sh into os.environ), plus `extra`."""
    drop = ("SLURM", "PROVISIONER_", "PG_", "PORT_BASE")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)} | extra


def _run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _ok(argv: list[str], env: dict[str, str], timeout: float = 60) -> str:
    proc = _run(argv, env, timeout)
    assert proc.returncode == 0, (
        f"{' '.join(argv)}: rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    )
    return proc.stdout


def _wait(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Poll with a deadline (no fixed sleeps)."""
    deadline = time.monotonic() + timeout
    while True:
        got = probe()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(0.2)


@pytest.fixture
def private_folder(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh 0700 folder under `request.param` (None: tempfile's default, /tmp)."""
    folder = Path(tempfile.mkdtemp(prefix="gbp-private-", dir=getattr(request, "param", None)))
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    yield folder
    if not any(str(folder) in m for m in _mounts()):  # never delete through a mount
        shutil.rmtree(folder, ignore_errors=True)


def _mounts() -> list[str]:
    with open("/proc/mounts") as f:
        return [line.split()[1].replace("\\040", " ") for line in f]


def _outside(dirs: list[Path]) -> dict[str, set[str]]:
    """What the folders outside the clone hold (one level)."""
    return {str(d): set(os.listdir(d)) if d.is_dir() else set() for d in dirs}


def _procs(needles: list[str]) -> list[str]:
    """Live processes whose command line or working directory names one of `needles`."""
    found = []
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(p / "cwd") if cmd else ""
        except OSError:  # gone, or a zombie
            continue
        if any(n in cmd or cwd.startswith(n) for n in needles):
            found.append(f"{p.name}: {cmd.strip()}")
    return found


def _leftovers(needles: list[str], outside_before: dict[str, set[str]], folder: Path) -> list[str]:
    left: list[str] = []
    try:  # daemons stopped; PID 1 may reap them a little later
        _wait("the cluster's processes to go", lambda: not _procs(needles), 15)
    except pytest.fail.Exception:
        left += [f"process {p}" for p in _procs(needles)]
    for d, names in _outside([Path(d) for d in outside_before]).items():
        left += [f"file {d}/{n}" for n in sorted(names - outside_before[d])]
    left += [f"mount {m}" for m in _mounts() if str(folder) in m]
    return left


CASES = [  # series, parent of the private folder, PORT_BASE
    pytest.param("22.05", None, 7117, id="22.05-mkdtemp"),
    pytest.param("24.11", "/root", 7217, id="24.11-root"),  # 0700 on the host and in the root
    pytest.param("24.11", None, 7317, id="24.11-mkdtemp"),
]


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("series", "private_folder", "port_base"), CASES, indirect=["private_folder"]
)
def test_slurm_cluster_in_private_folder(series: str, private_folder: Path, port_base: int):
    folder = private_folder
    sdir = folder / ".slurm"
    env = _env(SLURM_SERIES=series, PORT_BASE=str(port_base))
    watched = [Path("/run"), Path("/var/lib/postgresql")]
    root_mounts_before: list[str] = []
    if series == "24.11":
        env["SLURM_ROOT"] = str(SLURM_ROOT)
        watched += [SLURM_ROOT / "run", SLURM_ROOT / "root", SLURM_ROOT / "tmp"]
        root_mounts_before = sorted(m for m in _mounts() if m.startswith(f"{SLURM_ROOT}/"))
    outside_before = _outside(watched)
    needles = [str(folder)]
    up = down = None
    try:
        up = _ok(["bash", str(SCRIPTS / "slurm-up.sh"), str(sdir)], env, timeout=240)
        assert "READY" in up, up
        if series == "24.11":  # the case reproduces the root's own private /root
            assert stat.S_IMODE((SLURM_ROOT / "root").stat().st_mode) == 0o700
        conf = (sdir / "etc" / "slurm.conf").read_text()
        sock = re.search(r"^AuthInfo=socket=(\S+)", conf, re.M)
        assert sock, "no AuthInfo=socket= in slurm.conf"
        needles.append(os.path.dirname(sock.group(1)))

        again = _ok(["bash", str(SCRIPTS / "slurm-up.sh"), str(sdir)], env, timeout=120)
        assert "changed=0" in again and "started" not in again, again  # a no-op

        cenv = env | load_env_sh(sdir / "env.sh")
        if cenv.get("SLURM_BIN_DIR"):  # 24.11: the wrappers that chroot into the root
            cenv["PATH"] = f"{cenv['SLURM_BIN_DIR']}:{cenv['PATH']}"
        out = sdir / "jobs" / "%j.out"
        wrap = "echo ran on $SLURMD_NODENAME gpus=$CUDA_VISIBLE_DEVICES"
        argv = ["sbatch", "--parsable", "-p", "onprem", "--gres=gpu:a100:1", "-o", str(out)]
        job_id = _ok([*argv, "--wrap", wrap], cenv).strip().split(";")[0]

        def finished() -> str | None:
            proc = _run(["scontrol", "-o", "show", "job", job_id], cenv, 20)
            m = re.search(r"\bJobState=(\S+)", proc.stdout)
            return m.group(1) if m and m.group(1) in TERMINAL else None

        assert _wait(f"job {job_id} to finish", finished, 60) == "COMPLETED"
        text = (sdir / "jobs" / f"{job_id}.out").read_text()
        assert re.search(r"ran on onprem-\d gpus=0\b", text), text
    finally:
        down = _run(["bash", str(SCRIPTS / "slurm-down.sh"), str(sdir), "--purge"], env, 120)
        left = _leftovers(needles, outside_before, folder)
        if series == "24.11":
            root_mounts = sorted(m for m in _mounts() if m.startswith(f"{SLURM_ROOT}/"))
            if root_mounts != root_mounts_before:
                left.append(f"mounts below {SLURM_ROOT}: {root_mounts_before} -> {root_mounts}")
            for d in (f"{SLURM_ROOT}{sdir}", f"{SLURM_ROOT}{folder}"):  # empty ones only
                if os.path.isdir(d) and d not in _mounts():
                    with contextlib.suppress(OSError):
                        os.rmdir(d)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not left, "left behind:\n" + "\n".join(left) + f"\nslurm-down:\n{down.stdout}"


@pytest.mark.postgres
def test_postgresql_in_private_folder(private_folder: Path):
    from sqlalchemy import create_engine, text

    if os.geteuid() != 0:
        pytest.skip("as root only: for another user postgres runs as that user, in DIR")
    if (
        not glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")
        and os.environ.get("REQUIRE_POSTGRES") != "1"
    ):
        pytest.skip("needs PostgreSQL's server (make pg-up installs it)")
    pdir = private_folder / ".pg"
    env = _env(PG_PORT=str(PG_PORT))
    outside_before = _outside([Path("/run"), Path("/var/lib/postgresql")])
    needles = [str(private_folder)]
    down = None
    try:
        url = _ok(["bash", str(SCRIPTS / "pg-up.sh"), str(pdir)], env, 120).strip().splitlines()[-1]
        engine = create_engine(url)
        try:
            with engine.connect() as c:
                data_dir = c.execute(text("show data_directory")).scalar_one()
                assert c.execute(text("select 40 + 2")).scalar_one() == 42
        finally:
            engine.dispose()
        needles.append(str(data_dir))
        again = _ok(["bash", str(SCRIPTS / "pg-up.sh"), str(pdir)], env, 60).strip()
        assert again.splitlines()[-1] == url  # a no-op on the running cluster
    finally:
        down = _run(["bash", str(SCRIPTS / "pg-down.sh"), str(pdir)], env, 120)
        left = _leftovers(needles, outside_before, private_folder)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not left, "left behind:\n" + "\n".join(left)
