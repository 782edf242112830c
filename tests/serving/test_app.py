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


def test_a_gpu_replica_takes_the_vulkan_gpu_of_its_ray_gpu_id(monkeypatch):
    from types import SimpleNamespace

    from serving import deployment
    devices = [SimpleNamespace(index=0, type="CPU"), SimpleNamespace(index=1, type="discrete GPU"),
               SimpleNamespace(index=2, type="discrete GPU")]
    monkeypatch.setattr(deployment.runtime_min, "list_devices", lambda: devices)
    monkeypatch.setattr(deployment.ray, "is_initialized", lambda: True)
    monkeypatch.setattr(deployment.ray, "get_gpu_ids", lambda: ["1"])
    assert deployment.replica_device() == 2  # Ray's GPU 1 is the loader's second GPU, past the CPU device
    monkeypatch.setattr(deployment.ray, "get_gpu_ids", lambda: [])
    assert deployment.replica_device() is None  # a CPU replica: runtime_min's own pick
