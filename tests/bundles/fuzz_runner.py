"""Run fuzz-accepted bundles on the device, in a child process (so a driver crash or hang is caught
and reported, not fatal to pytest). Used by test_fuzz.py; not a test module.

    python fuzz_runner.py JOBS.json

JOBS.json: {"jobs": [{"id": 7, "path": "7.vkb", "identical": true, "reference": "base0.vkb"}, ...]}
(each job's outputs are compared with those of the base bundle it is a mutation of).
Prints one JSON line per job, after a {"start": id} line, so the parent can name the job in flight:
  {"id", "status": "ran" | "refused" | "invalid" | "error", "identical": bool | null, "messages": [...],
   "detail"}; "invalid": the loader refused the bundle (BundleError), `detail` its message.
"""
import faulthandler
import json
import sys
from pathlib import Path

import numpy as np


import runtime_min  # noqa: E402
from bundles import BundleError  # noqa: E402
from runtime_min import VkcRuntimeError, load  # noqa: E402

X = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)


def feeds_for(model):
    """The reference input where the declared input still fits it, else seeded data of the declared shape."""
    out = {}
    for spec in model.inputs:
        if spec.dtype == np.float32 and int(np.prod(spec.shape)) == X.size:
            out[spec.name] = X.reshape(spec.shape)
        else:
            rng = np.random.default_rng(1)
            out[spec.name] = (rng.standard_normal(spec.shape) if spec.dtype.kind == "f"
                              else rng.integers(0, 2, spec.shape)).astype(spec.dtype)
    return out


def run(path):
    with load(path, validation=True) as model:
        return list(model.run(feeds_for(model)).values())


def main():
    faulthandler.enable()  # a driver crash prints where it happened
    spec = json.loads(Path(sys.argv[1]).read_text())
    references = {}
    for path in sorted({job["reference"] for job in spec["jobs"]}):
        runtime_min.clear_validation_messages()
        references[path] = run(path)
        assert runtime_min.validation_messages() == [], runtime_min.validation_messages()
    for job in spec["jobs"]:
        reference = references[job["reference"]]
        print(json.dumps({"start": job["id"]}), flush=True)
        runtime_min.clear_validation_messages()
        result = {"id": job["id"], "identical": None, "detail": ""}
        try:
            outputs = run(job["path"])
            result["status"] = "ran"
            result["identical"] = len(outputs) == len(reference) and all(
                a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
                for a, b in zip(outputs, reference))
        except BundleError as e:
            result["status"], result["detail"] = "invalid", str(e)[:400]
        except VkcRuntimeError as e:
            # The device check: a valid bundle asking for more than this device has (before any
            # pipeline exists). Anything else from the runtime is an error.
            refused = "run this bundle" in str(e) and " lacks: " in str(e)
            result["status"] = "refused" if refused else "error"
            result["detail"] = str(e)[:400]
        except Exception as e:  # noqa: BLE001 - reported to the parent, which fails the test
            result["status"], result["detail"] = "error", f"{type(e).__name__}: {e}"[:400]
        result["messages"] = runtime_min.validation_messages()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
