"""store/mlflow/client.py: the one way the room reaches a tracking store: a server that does not
answer is one line within seconds (its password masked), an experiment made once with its kind and
runs-table view, MLflow's own printed links held back."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from mmlu_track.store.mlflow import views
from mmlu_track.store.mlflow.client import (
    MlflowUnavailable,
    check_reachable,
    client_and_experiment,
    experiments_of,
    quiet,
)

from ...serve import free_port


def test_a_server_that_does_not_answer_is_one_line_within_seconds() -> None:
    check_reachable(None)  # MLflow's default, a file: nothing to ask
    check_reachable("sqlite:///mlflow.db")
    port = free_port()
    dead = f"http://alice:pw-5e@127.0.0.1:{port}"
    began = time.monotonic()
    with pytest.raises(MlflowUnavailable) as down:
        check_reachable(dead, timeout=2)
    assert time.monotonic() - began < 10
    assert str(down.value).startswith(f"MLflow server http://alice:***@127.0.0.1:{port} is unreachable: ")
    assert "pw-5e" not in str(down.value)
    assert experiments_of(dead, ["a" * 32]) == {}  # a link is a convenience, never a wait


def test_an_experiment_is_made_once_with_its_kind_and_view(mlflow_server: str) -> None:
    name = f"client-{uuid.uuid4().hex[:8]}"
    client, exp_id = client_and_experiment(mlflow_server, name, "comparisons")
    again, same = client_and_experiment(mlflow_server, name, "comparisons")
    assert same == exp_id
    tags = again.get_experiment(exp_id).tags
    assert tags[views.EXPERIMENT_KIND_TAG] == views.EXPERIMENT_KIND
    assert views.VIEW_TAG in tags
    run = client.create_run(exp_id)
    assert experiments_of(mlflow_server, [run.info.run_id, "f" * 32]) == {run.info.run_id: exp_id}


def test_mlflows_printed_links_are_held_back_and_the_rest_masked(capsys: pytest.CaptureFixture[str]) -> None:
    with quiet():
        print("🏃 View run happy-cat at: http://u:pw-1@h:5000/#/experiments/1/runs/2")
        print("🧪 View experiment at: http://u:pw-1@h:5000/#/experiments/1")
        print("logged to postgresql://u:pw-1@h/db")
    assert capsys.readouterr().out == "logged to postgresql://u:***@h/db\n"


def test_the_first_use_lock_serialises_and_leaves_no_file(tmp_path: Path) -> None:
    """The lock that serialises MLflow's first use of a SQLite store is removed as it is released
    (a 0-byte mlflow.db.lock stayed beside every store, issue 86), and still excludes: a waiter that
    took the lock of a removed file takes it again on the new one."""
    import threading

    from mmlu_track.store.mlflow.client import _first_use_lock

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    inside, overlaps = [0], []

    def work() -> None:
        for _ in range(20):
            with _first_use_lock(uri):
                inside[0] += 1
                overlaps.append(inside[0])
                time.sleep(0.001)
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(overlaps) == 80
    assert max(overlaps) == 1  # never two holders at once
    assert list(tmp_path.iterdir()) == []
