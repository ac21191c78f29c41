"""Session-wide fixtures. One Ray instance per test session (started lazily by `ray_cluster`)."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config):
    # No test may reach a hub: datasets/tokenizers/transformers stay offline.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_collection_modifyitems(config, items):
    if not any("gpu" in item.keywords for item in items):
        return  # spare the torch import
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if "gpu" in item.keywords and not has_cuda:
            item.add_marker(skip_gpu)


@pytest.fixture
def one_torch_thread():
    """Torch on one intra-op thread during the test, restored after: the test machine's few cores are
    shared, and oversubscribed threads make a tiny model's ops many times slower without changing any
    result a test asserts on. The model and workers tests use it for every test (their conftest)."""
    import torch

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


@pytest.fixture(scope="session")
def looplab_cache(tmp_path_factory):
    """One data/tokenizer cache for the whole session, so shards are built once."""
    path = tmp_path_factory.mktemp("looplab_cache")
    old = os.environ.get("LOOPLAB_CACHE")
    os.environ["LOOPLAB_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("LOOPLAB_CACHE", None)
    else:
        os.environ["LOOPLAB_CACHE"] = old


@pytest.fixture(scope="session")
def ray_cluster(looplab_cache):
    """A local Ray instance for the whole session: 2 CPUs and 2 *logical* GPUs (placement tests)."""
    import ray

    ray.init(
        num_cpus=2,
        num_gpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={
            "env_vars": {
                "LOOPLAB_CACHE": str(looplab_cache),
                "HF_HUB_OFFLINE": "1",
                "HF_DATASETS_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false",
            }
        },
    )
    yield ray
    ray.shutdown()
