"""tests/conftest.py's shared fixtures: a folder built once per session for every worker, and the
check that no test changed it."""

import json
import multiprocessing

import pytest

from conftest import built_once, read_only


class Factory:
    """tmp_path_factory as a pytest-xdist worker sees it: its basetemp one below the session's."""

    def __init__(self, session, worker):
        self.base = session / f"popen-{worker}"
        self.base.mkdir(parents=True, exist_ok=True)

    def getbasetemp(self):
        return self.base


def build_counting(folder):
    (folder / "made.txt").write_text("made\n")
    with open(folder.parent / "builds.txt", "a") as f:
        f.write("1\n")
    return {"first": str(folder)}


def worker(session, name, queue):
    import os

    os.environ["PYTEST_XDIST_WORKER"] = name
    folder, made = built_once(Factory(session, name), "x", build_counting)
    queue.put((str(folder), made, (folder / "made.txt").read_text()))


def test_built_once_builds_one_folder_for_every_worker(tmp_path):
    queue = multiprocessing.get_context("fork").Queue()
    workers = [multiprocessing.get_context("fork").Process(target=worker, args=(tmp_path, f"gw{i}", queue))
               for i in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
    seen = [queue.get(timeout=5) for _ in workers]
    assert all(w.exitcode == 0 for w in workers)
    assert {s[0] for s in seen} == {str(tmp_path / "shared-x")}  # one folder, in the session's
    assert all(s[1] == {"first": str(tmp_path / "shared-x")} and s[2] == "made\n" for s in seen)
    assert (tmp_path / "builds.txt").read_text() == "1\n"  # built by one of them
    assert json.loads((tmp_path / "shared-x.json").read_text()) == {"first": str(tmp_path / "shared-x")}


def test_a_failed_build_is_done_again_by_the_next_worker(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")

    def fails(folder):
        (folder / "half.txt").write_text("half\n")
        raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError, match="the build failed"):
        built_once(Factory(tmp_path, "gw0"), "x", fails)
    assert not (tmp_path / "shared-x.json").exists()
    folder, made = built_once(Factory(tmp_path, "gw1"), "x", build_counting)
    assert sorted(p.name for p in folder.iterdir()) == ["made.txt"] and made == {"first": str(folder)}


def test_without_workers_the_folder_is_in_the_sessions_own_temp(tmp_path, monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)

    class Alone:
        def getbasetemp(self):
            return tmp_path

    folder, _ = built_once(Alone(), "x", build_counting)
    assert folder == tmp_path / "shared-x"


def test_read_only_names_a_changed_file_and_lets_a_lock_file_be(tmp_path):
    (tmp_path / "a.txt").write_text("a\n")
    with read_only(tmp_path):
        (tmp_path / ".lock").write_text("a writer, for a moment\n")
    with pytest.raises(AssertionError, match=r"a test changed the shared fixture .*a\.txt"):
        with read_only(tmp_path):
            (tmp_path / "a.txt").write_text("b\n")
    with pytest.raises(AssertionError, match=r"b\.txt"):
        with read_only(tmp_path):
            (tmp_path / "b.txt").write_text("new\n")
