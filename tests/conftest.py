"""Shared fixtures: where the shared reference folder is, and a live API server on loopback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from refplatform.cluster import Cluster, ClusterSpec
from refplatform.warden import warden
from tests.bytecode import compile_packages
from tests.leaks import Census, collect_garbage

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = REPO_ROOT.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with the reason when it is absent (a user's machine)."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared reference folder ships beside the repo in CI only")
    return path


def pytest_sessionstart(session: pytest.Session) -> None:
    """Every process the suite starts reads the packages' bytecode instead of compiling them (tests/bytecode.py).
    The suite's process starts its warden now (refplatform.warden: what the suite starts dies with it, however it
    ends), so that no test is blamed for the one process that lives as long as the suite by design."""
    compile_packages()
    warden()


_LEFT_OPEN: list[tuple[str, str]] = []
"""(module, what the collector closed) for each socket or file found open at the end of a module."""


@pytest.hookimpl(hookwrapper=True, trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Once a module's last test and its module fixtures are done, collect the cyclic garbage (tests/leaks.py):
    whatever it had left open is listed at the end of the run under its module, instead of failing a test of
    another module that the collector ran during (issue 44)."""
    yield
    if nextitem is None or nextitem.path != item.path:
        module = item.nodeid.split("::", 1)[0]
        _LEFT_OPEN.extend((module, found) for found in collect_garbage())


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _LEFT_OPEN:
        terminalreporter.section("left open, found by the collector at the end of their module (tests/leaks.py)")
        for module, found in _LEFT_OPEN:
            terminalreporter.line(f"{module}: {found}")


@pytest.fixture(autouse=True)
def _nothing_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test that leaves a thread or a child process of its own running (tests/leaks.py): the next
    test must not inherit it.  Taken after the module's and session's fixtures are set up, so only what the
    test and its function-scoped fixtures started counts; a test in a module that shares a wider fixture of the
    suite's (a module's cluster whose agents run the pods the tests create, a pool that starts the module's runs
    ahead) is not checked: what starts during it may be that fixture's, which stops it at its own end."""
    if _shares_a_wider_fixture(request):
        yield
        return
    census = Census()
    yield
    left = census.leftovers()
    if left:
        pytest.fail(f"the test left running: {left.describe()}", pytrace=False)


_SHARING: dict[str, bool] = {}
"""Per module: whether any of its tests uses a wider fixture of the suite's."""


def _shares_a_wider_fixture(request: pytest.FixtureRequest) -> bool:
    """Whether the test's module has a test that uses a wider fixture of the suite's: such a fixture may work in
    the background during every test of the module (the defect zoo's pool starts its runs two at a time while
    the module's other tests run)."""
    module = request.node.nodeid.split("::", 1)[0]
    if module not in _SHARING:
        _SHARING[module] = any(_uses_a_wider_fixture(item) for item in request.session.items
                               if item.nodeid.split("::", 1)[0] == module)
    return _SHARING[module]


def _uses_a_wider_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return True  # cannot tell what the test shares: do not blame it
    for name, defs in info.name2fixturedefs.items():
        fixture = defs[-1]
        if fixture.scope != "function" and fixture.baseid and name != "_session_state_dir":
            return True
    return False


@pytest.fixture(scope="session", autouse=True)
def _session_state_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Runs the suite starts journal their faults under its temporary folder, never in the user's
    ~/.local/state (docs/SAFETY.md); module-scoped fixtures' runs share this one."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FIREDRILL_STATE_DIR", str(tmp_path_factory.mktemp("state")))
        yield


@pytest.fixture(autouse=True)
def _state_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test's runs journal in a folder of the test's own: a fault journal another test left open never
    refuses this test's run."""
    monkeypatch.setenv("FIREDRILL_STATE_DIR", str(tmp_path_factory.mktemp("state")))


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Path:
    return tmp_path / "cluster"


@pytest.fixture
def apiserver(cluster_dir: Path) -> Iterator[Cluster]:
    """An API server process (no agents) with a fresh data directory and a short bookmark interval."""
    cluster = Cluster(ClusterSpec(cluster_dir, nodes=0, bookmark_interval=0.5))
    cluster.start_server()
    try:
        yield cluster
    finally:
        cluster.stop()
