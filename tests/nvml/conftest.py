"""Fixtures for the NVML agent tests: a manual clock and fake GPUs at the one NVML seam."""

from __future__ import annotations

import pytest
from nvml_cases import T0, two_a100_nvml

from provisioner.agent.nvml_fake import FakeNvml
from provisioner.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


@pytest.fixture
def two_a100() -> FakeNvml:
    return two_a100_nvml()
