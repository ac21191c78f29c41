"""Session-wide fixtures. One Ray instance per test session (started lazily by `ray_cluster`); one
throw-away PostgreSQL server per session (started lazily by `pg_server`, see tests/pg.py).

Database fixtures, for tests that should hold on both backends:
    db_url             a fresh, empty database per test, parametrised [sqlite] / [postgresql]
    migrated_db_url    the same, already at the head revision (a copy of a migrated template: fast)
The [postgresql] cases skip when no server can be started, unless LOOPLAB_REQUIRE_POSTGRES=1 (CI).
A fixture of a wider scope makes its databases with tests.pg.Databases (e.g. tests/db/test_sql.py).

Test tiers (markers registered in pyproject.toml): a test is marked by what it needs, `ray`, `browser`,
`multinode`, `demo`, `slow`, `gpu`; `make check` deselects all but `gpu` (which skips without CUDA),
`make test` and CI run everything. A test that asks for one of the fixtures of `NEEDS_BY_FIXTURE` is
marked by `pytest_collection_modifyitems`, so a new Ray or browser test lands in its tier by itself;
a test that needs Ray through a subprocess (a `looplab run` driver, the demo) is marked in its module.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator

import pytest

from tests.pg import BACKENDS, Databases


def pytest_configure(config):
    # No test may reach a hub: datasets/tokenizers/transformers stay offline.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# fixture -> the marker of what a test using it needs (`browser` below; `dashboard_server` in tests/dashboard/conftest.py)
NEEDS_BY_FIXTURE = {"ray_cluster": "ray", "browser": "browser", "dashboard_server": "browser"}


# What must not be had twice at once (see `xdist_group`).
ONE_AT_A_TIME = ("ray", "browser", "multinode", "demo")
# Session fixtures costly enough that the tests using them share one worker, so each is built once per
# run, not once per worker: the trained tiny model (tests/workers/conftest.py).
SHARED_BUILDS = ("trained_fixed4",)
# A module that sets this tests what a page draws, not SQL: its [postgresql] cases run in the full suite
# only (the frames' SQL they read is tested on both backends in the fast tier, tests/dashboard/test_frames.py).
POSTGRES_IN_FULL_SUITE_ONLY = "POSTGRES_IN_FULL_SUITE_ONLY"


def full_suite_only(item) -> bool:
    """A [postgresql] case of a module that draws pages (POSTGRES_IN_FULL_SUITE_ONLY): marked slow."""
    module = getattr(item, "module", None)
    return item.nodeid.endswith("[postgresql]") and bool(getattr(module, POSTGRES_IN_FULL_SUITE_ONLY, False))


def xdist_group(item) -> str | None:
    """The pytest-xdist group of a test; `make check` and `make test` run `-n N --dist loadgroup`, which
    runs a group's tests on one worker, in order. Every test that needs Ray, a browser, several nodes or
    a demo is in one group, so the session holds one Ray instance and one browser and no two clusters
    compete for the cores. A test that uses a fixture of module scope (a trained model, spawned DDP
    ranks, a fixture database) goes with its module, so that fixture is built once, not once per worker.
    Any other test goes to whichever worker is free."""
    if any(item.get_closest_marker(m) is not None for m in ONE_AT_A_TIME):
        return "one-at-a-time"
    shared = [f for f in SHARED_BUILDS if f in getattr(item, "fixturenames", ())]
    if shared:
        return shared[0]
    defs = getattr(item, "_fixtureinfo", None)
    scopes = {d.scope for ds in (defs.name2fixturedefs.values() if defs else ()) for d in ds}
    return item.nodeid.split("::", 1)[0] if scopes & {"module", "package", "class"} else None


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the xdist_group marks set here
def pytest_collection_modifyitems(config, items):
    for item in items:
        if full_suite_only(item):
            item.add_marker(pytest.mark.slow)
        for fixture, marker in NEEDS_BY_FIXTURE.items():
            if fixture in item.fixturenames and item.get_closest_marker(marker) is None:
                item.add_marker(marker)
        group = xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    # the `gpu` marker, not the keyword: every test under tests/gpu/ has "gpu" among its keywords
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return  # spare the torch import
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except Exception:  # pragma: no cover
        has_cuda = False
    skip_gpu = pytest.mark.skip(reason="needs CUDA")
    for item in gpu_items if not has_cuda else []:
        item.add_marker(skip_gpu)


@pytest.fixture(scope="session", autouse=True)
def _torch_threads_share():
    """Under pytest-xdist the workers share the cores: each worker's torch gets its share of them, from
    the session's start (a module fixture that builds a model runs before `one_torch_thread` narrows
    it). Two 2-thread OpenMP pools on 2 cores made one model's orthogonal init take 15 s, not 0.3 s."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers > 1:
        import torch

        torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
    yield


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
        address="local",  # the session's own, never a cluster another Ray left named in /tmp/ray
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


# ---------------------------------------------------------------- databases on both backends


@pytest.fixture(scope="session")
def pg_server():
    """The session's PostgreSQL server (tests/pg.py), or None when none can be started here.

    In CI (.ci/run sets LOOPLAB_REQUIRE_POSTGRES=1) a server that cannot be started fails the tests that
    need it instead of skipping them."""
    from tests.pg import PgUnavailable, start_server

    try:
        server = start_server()
    except PgUnavailable as e:
        if os.environ.get("LOOPLAB_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"LOOPLAB_REQUIRE_POSTGRES=1 but no PostgreSQL server: {e}")
        yield None
        return
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=BACKENDS)
def db_backend(request) -> str:
    """The backend, "sqlite" or "postgresql": a test asking for a database runs once on each."""
    if request.param == "postgresql" and request.getfixturevalue("pg_server") is None:
        pytest.skip("no PostgreSQL server here (apt-get install -y postgresql)")
    return request.param


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory) -> Callable[[], str]:
    """The path of a SQLite file migrated to head, made on first use."""
    made: list = []

    def path():
        if not made:
            from alembic import command

            from looplab.orchestrator.db import alembic_config

            file = tmp_path_factory.mktemp("sqlite_template") / "looplab.db"
            # Alembic on its own connection, closed after: the file alone is the whole database
            command.upgrade(alembic_config(f"sqlite:///{file}"), "head")
            made.append(file)
        return made[0]

    return path


@pytest.fixture
def _databases(db_backend, tmp_path, request, _sqlite_template) -> Iterator[Databases]:
    server = request.getfixturevalue("pg_server") if db_backend == "postgresql" else None
    dbs = Databases(db_backend, tmp_path, server, _sqlite_template)
    yield dbs
    dbs.close()


@pytest.fixture
def db_url(_databases) -> str:
    """A fresh, empty database for this test: a SQLite file under tmp_path, or a new PostgreSQL database
    (dropped after the test, stray connections terminated). Parametrised: ids [sqlite] and [postgresql]."""
    return _databases.new()


@pytest.fixture
def migrated_db_url(_databases) -> str:
    """A fresh database already at the head revision (copied from a template migrated once per session)."""
    return _databases.new(migrated=True)


@pytest.fixture(scope="session")
def browser():
    """The session's headless Chromium (a Playwright `Browser`), shared by every browser test: one sync
    Playwright per process (a second one started while the first runs is refused)."""
    from tests.dashboard.browser import chromium, require_chromium

    require_chromium()
    with chromium() as browser:
        yield browser


@pytest.fixture(autouse=True)
def _keep_main_module():
    """Every test leaves `__main__` as it found it. Streamlit's AppTest runs a page as `__main__` and
    leaves it there; a process spawned later in the session (the parallel tokenizer's pool, DDP ranks)
    first re-runs its parent's `__main__`, which then is that page: the pool's workers never came up
    and the preparation waited forever."""
    main = sys.modules.get("__main__")
    yield
    if main is not None and sys.modules.get("__main__") is not main:
        sys.modules["__main__"] = main
