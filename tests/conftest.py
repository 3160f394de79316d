"""Shared test set-up: a seeded generator, hypothesis settings, and the GPU skip."""

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from im2win import cuda

settings.register_profile("default", max_examples=60, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")


def pytest_collection_modifyitems(config, items):
    if cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs CuPy and a visible CUDA GPU; none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng():
    return np.random.default_rng(20261129)
