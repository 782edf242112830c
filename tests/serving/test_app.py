"""serving/app.py without a running Ray: what replicas inherit."""
from serving import app


def test_replicas_get_the_runtime_and_loader_variables(monkeypatch):
    monkeypatch.setenv("VKC_VALIDATION", "1")
    monkeypatch.setenv("VK_LOADER_DEBUG", "error")
    monkeypatch.setenv("UNRELATED", "x")
    monkeypatch.delenv("LP_NUM_THREADS", raising=False)
    env = app.replica_env(cpus_per_replica=1)
    assert env["VKC_VALIDATION"] == "1" and env["VK_LOADER_DEBUG"] == "error" and "UNRELATED" not in env
    assert env["LP_NUM_THREADS"] == "1"  # lavapipe: one core per replica
    assert env["PYTHONPATH"].split(":")[0] == str(app.ROOT)
    monkeypatch.setenv("LP_NUM_THREADS", "4")
    assert app.replica_env(cpus_per_replica=1)["LP_NUM_THREADS"] == "4"  # a setting of the user's stays
    monkeypatch.delenv("LP_NUM_THREADS")
    assert "LP_NUM_THREADS" not in app.replica_env(None)  # a GPU replica: no cap
