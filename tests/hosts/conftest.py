"""Test hosts: burst instances booted as hosts of their own (provisioner.testing.hosts).

The Debian roots are built by `make test-host-roots` (scripts/test-host-root.sh), which
`make test` runs first; `make test` also sets REQUIRE_TEST_HOSTS=1, so a missing root or tool
fails these tests there instead of skipping them. Elsewhere they skip, naming what is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioner.testing import hosts

REPO = Path(__file__).resolve().parents[2]
ROOTS = {
    suite: Path(
        os.environ.get(f"TEST_HOST_ROOT_{suite.upper()}", f"{REPO}/.slurm-roots/host-{suite}")
    )
    for suite in ("bookworm", "trixie")
}


def _missing(suite: str) -> str:
    why = hosts.available()
    if why:
        return why
    if not (ROOTS[suite] / ".provisioner-root").exists():
        return f"no test-host root at {ROOTS[suite]} (make test-host-roots)"
    return ""


def host_root(suite: str) -> Path:
    """The root for `suite`, or a skip (a failure under REQUIRE_TEST_HOSTS=1) naming why not."""
    why = _missing(suite)
    if why:
        if os.environ.get("REQUIRE_TEST_HOSTS") == "1":
            pytest.fail(f"REQUIRE_TEST_HOSTS=1 but {why}")
        pytest.skip(why)
    return ROOTS[suite]


SUITES = ("bookworm", "trixie")  # Debian 12 (Slurm 22.05, Python 3.11), 13 (24.11, 3.13)


@pytest.fixture(params=SUITES)
def suite(request: pytest.FixtureRequest) -> str:
    """Each test host test runs on both roots: the Slurm versions burst VMs may run."""
    return str(request.param)


@pytest.fixture(scope="session")
def test_network() -> Iterator[str]:
    """The tests' /24, up for the session; every host, namespace and link removed after."""
    if hosts.available():
        host_root("bookworm")  # skips or fails with the reason
    hosts.clean_leftovers()  # a killed earlier run
    hosts.network_up()
    yield hosts.HOST_ADDRESS
    left = hosts.clean_leftovers()
    hosts.network_down()
    assert not [x for x in left if not x.startswith("link gbtbr0")], left
