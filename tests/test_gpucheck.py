"""gpucheck.py (bash bench.sh gpucheck), the smoke test of the CUDA paths: without a GPU it fails at once
and says so; its probe still attaches to a script's own main (so a change to the scripts that would blind
it fails here, on a CPU); and each check fails on the fault it is there to catch."""

import json
import subprocess
import sys

import pytest
from helpers import ROOT, TINY_ARGS, bench

sys.path.insert(0, str(ROOT))
import gpucheck  # noqa: E402

# what the probes saw on the H200 (results/gpu/gpucheck.txt; the convolution's on the H100,
# results/gpu/h100-precision.json), the facts every check passes on
TORCH_FACTS = {"device": "NVIDIA H200", "complete": True, "peak_device_mb": 95.7, "total_mb": 143156.0,
               "torch_device": "cuda", "torch_index": 0, "jax_id": 0, "dlpack_to_torch": True, "dlpack_to_jax": True,
               "used_mb": 959.0, "device_to_host": 1.0, "host_to_device": 0.0, "synchronize": 1.7,
               "graphs": {"warmup capture_begin": 5, "profiled replay": 1251}}
PRECISION = {"float32": {"reported": {"torch": "highest", "jax": "float32"}, "torch_error": 8e-7, "jax_error": 8e-7,
                         "torch_conv_error": 3e-7, "jax_conv_error": 3e-7},
             "tf32": {"reported": {"torch": "high", "jax": "tensorfloat32"}, "torch_error": 3e-4, "jax_error": 3e-4,
                      "torch_conv_error": 3e-4, "jax_conv_error": 3e-4}}


# the probes' runs at the tiny batch (the probe sets the iterations): what they check does not need the default one
SMALL = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in TINY_ARGS.items() if k != "num_iterations")


def failed(facts, name="ppo_torch_compile.py") -> list[str]:
    return [check for passed, check, _ in gpucheck.checks_of(name, facts) if not passed]


def test_without_a_gpu_it_fails_and_says_why(tmp_path):
    proc = bench("gpucheck", "--out", tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "FAIL  a GPU both frameworks use: torch.cuda.is_available() False, JAX backend cpu" in proc.stdout


def test_the_probe_attaches_to_a_scripts_main(tmp_path):
    """On a CPU the probe runs ppo_torch.py's own main, profiles the iterations after the warm-up and finds
    its run directory; the CUDA facts are absent, so every GPU check would fail here."""
    proc = subprocess.run([sys.executable, "gpucheck.py", "--probe", f"ppo_torch.py {SMALL}", "--log-dir",
                           str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads(proc.stdout.splitlines()[-1].removeprefix("GPUCHECK "))
    assert facts["device"] == "cpu" and facts["complete"] and facts["profiled_events"] > 0
    assert facts["device_to_host"] == 0 and facts["graphs"] == {}
    assert json.loads((tmp_path / facts["run_dir"].split("/")[-1] / "run.json").read_text())["args"]["num_iterations"] \
        == gpucheck.WARMUP + gpucheck.PROFILED
    assert failed(facts) == ["runs on the GPU", "peak_device_mb"]


def test_the_probe_runs_a_script_with_its_flags(tmp_path):
    """The torch env's probe: the script's main with --torch-env, its run found by its variant's name, and no
    copy to the host in its profiled iterations (on a CPU, none to count; on a GPU, the fetch alone)."""
    proc = subprocess.run([sys.executable, "gpucheck.py", "--probe", f"ppo_torch.py --torch-env {SMALL}", "--log-dir",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    facts = json.loads(proc.stdout.splitlines()[-1].removeprefix("GPUCHECK "))
    assert "__torch-torchenv__" in facts["run_dir"] and facts["complete"] and facts["device_to_host"] == 0


def test_every_check_passes_on_what_the_gpu_showed():
    assert failed(TORCH_FACTS) == []
    assert [check for passed, check, _ in gpucheck.precision_checks(PRECISION) if not passed] == []


@pytest.mark.parametrize("fault, fails", [
    ({"device_to_host": 256.0}, "host reads per iteration"),  # a .item() per env step
    ({"graphs": {"warmup capture_begin": 5, "profiled replay": 1251, "profiled capture_begin": 3}},
     "CUDA graphs replayed, none recorded after the warm-up"),  # re-recording every iteration
    ({"graphs": {"warmup capture_begin": 0}}, "CUDA graphs replayed, none recorded after the warm-up"),  # none
    ({"used_mb": 0.75 * 143156}, "JAX does not preallocate"),  # XLA_PYTHON_CLIENT_PREALLOCATE left on
    ({"dlpack_to_jax": False}, "torch and JAX on one GPU, DLPack without a copy"),
    ({"jax_id": 1}, "torch and JAX on one GPU, DLPack without a copy"),
    ({"device": "cpu"}, "runs on the GPU"),
    ({"complete": False}, "runs on the GPU"),
    ({"peak_device_mb": None}, "peak_device_mb"),
    ({"peak_device_mb": 2e6}, "peak_device_mb"),  # more than the card holds: a unit error
])
def test_each_check_fails_on_its_fault(fault, fails):
    assert failed({**TORCH_FACTS, **fault}) == [fails]


@pytest.mark.parametrize("where, error, fails", [
    ("float32", {"jax_error": 3e-4}, "--matmul-precision float32: full float32"),  # JAX's TF32 default left on
    ("tf32", {"torch_error": 8e-7}, "--matmul-precision tf32: the same in both"),  # only JAX took TF32
    ("float32", {"torch_conv_error": 3e-4}, "--matmul-precision float32, convolution: full float32"),  # cuDNN's TF32
    ("tf32", {"jax_conv_error": 3e-7}, "--matmul-precision tf32, convolution: the same in both"),
])
def test_the_precision_checks_fail_when_the_frameworks_differ(where, error, fails):
    facts = {**PRECISION, where: {**PRECISION[where], **error}}
    assert [check for passed, check, _ in gpucheck.precision_checks(facts) if not passed] == [fails]


def test_the_counts_are_per_profiled_iteration(tmp_path, monkeypatch):
    """The profiled window holds exactly the PROFILED steady iterations that the counts are divided by: with a
    fake profile that sees one device-to-host copy per rollout run while it records, the probe reports 1 per
    iteration (a window opened one iteration late, or closed early, would report less)."""
    import torch
    from helpers import load

    recording, seen = [False], []

    class FakeProfile:
        def __init__(self, *args, **kwargs):
            pass

        def start(self):
            recording[0] = True

        def stop(self):
            recording[0] = False

        def events(self):
            return [type("Event", (), {"name": "Memcpy DtoH (Device -> Pageable)"}) for _ in seen]

    module = load("ppo_torch.py", fresh=True)  # the probe rewires its RunLog and train: a private copy
    rollout = module.rollout

    def counted_rollout(*args, **kwargs):
        if recording[0]:
            seen.append(1)
        return rollout(*args, **kwargs)

    monkeypatch.setattr(torch.profiler, "profile", FakeProfile)
    monkeypatch.setattr(module, "rollout", counted_rollout)
    monkeypatch.setattr(gpucheck, "script", lambda name: module)
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    for method in ("capture_begin", "replay"):  # the probe wraps them: put the originals back after
        monkeypatch.setattr(torch.cuda.CUDAGraph, method, getattr(torch.cuda.CUDAGraph, method))
    facts = gpucheck.probe_script("ppo_torch.py --num-envs 4 --num-steps 16", str(tmp_path))
    assert len(seen) == gpucheck.PROFILED and facts["device_to_host"] == 1.0, (len(seen), facts["device_to_host"])
