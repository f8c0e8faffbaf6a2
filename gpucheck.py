"""A smoke test of every CUDA path the scripts take, on any machine with an NVIDIA GPU (benchback).

    bash bench.sh gpucheck            # or: python gpucheck.py --log-dir runs/gpucheck

A few minutes: each of the six Gymnax scripts trains CartPole-v1 for a few iterations in a fresh
process, saves its model and plays greedy episodes (and the two torch scripts again with --torch-env,
the env written in torch), and this prints one line per check:

- the run is on the GPU (run.json names it) and writes memory/peak_device_mb, within the card;
- torch scripts: torch and JAX on the same GPU, DLPack handing arrays over without a copy
  (the two frameworks see the same memory address), JAX not preallocating the card's memory;
- torch scripts: device-to-host copies per iteration after the warm-up, counted by torch's
  profiler (CUPTI, which sees JAX's copies too): the one fetch of the iteration's statistics;
- ppo_torch_compile.py (mode reduce-overhead on CUDA): after the warm-up, CUDA graphs are
  replayed and none is recorded again (with --torch-env: the policy and env step's graph too);
- the float32 matmul precision each framework reports for --matmul-precision float32 and tf32,
  and the error it gives against float64: full float32 in both, and the same choice in both.

It exits 1 if any check fails (and at once where there is no GPU), so it serves as a smoke
test; with --out it also writes the checks, the device and the versions as JSON.
"""

import json
import os
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import tyro

from calibrate import script

ROOT = Path(__file__).resolve().parent
SCRIPTS = ("ppo_linen.py", "ppo_nnx.py", "ppo_nnx_cached.py", "ppo_equinox.py", "ppo_torch.py", "ppo_torch_compile.py",
           "ppo_torch.py --torch-env", "ppo_torch_compile.py --torch-env")  # a script and its flags
WARMUP, PROFILED = 4, 3  # iterations before the profiler starts (compiling, graph recording), and profiled
HOST_READS = 1  # device-to-host copies allowed per iteration: the stacked statistics' one fetch
PROBE_SECONDS = 300  # a fresh process's limit: torch.compile compiles cold in it
PRECISION_ERROR = 1e-4  # relative error of a float32 matmul: full float32 is ~1e-6, TF32 ~1e-3
PACKAGES = ("torch", "jax", "jaxlib", "jax-cuda12-plugin", "jax-cuda13-plugin", "flax", "optax", "equinox",
            "gymnax", "tyro", "gymnasium", "tensorboard", "numpy", "triton")


@dataclass
class Args:
    log_dir: str = "runs/gpucheck"
    """where the check runs write their run directories"""
    out: str | None = None
    """also write the checks, the device and the versions here (JSON)"""
    probe: str | None = None
    """(internal) run this script under the probes and print what they saw, as JSON"""


def probe_precision() -> dict:
    """The GPU as both frameworks see it, and the matmul precision each applies under each setting."""
    import jax
    import numpy as np
    import torch

    torch_script = script("ppo_torch.py")  # its set_matmul_precision sets both frameworks
    facts = {"torch_cuda": torch.cuda.is_available(), "jax_backend": jax.default_backend()}
    if not (facts["torch_cuda"] and facts["jax_backend"] == "gpu"):
        return facts
    a, b = np.random.default_rng(0).standard_normal((2, 2048, 2048), dtype=np.float32)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    error = lambda c: float(np.linalg.norm(np.asarray(c, np.float64) - exact) / np.linalg.norm(exact))
    # a convolution as the CNNs run one (NCHW, OIHW), against float64 on the CPU
    images, kernels = (np.random.default_rng(1).standard_normal(shape, dtype=np.float32)
                       for shape in ((64, 32, 20, 20), (64, 32, 3, 3)))
    conv2d = torch.nn.functional.conv2d
    conv_exact = conv2d(*(torch.tensor(x, dtype=torch.float64) for x in (images, kernels)))
    conv_error = lambda c: float(torch.linalg.norm(torch.from_numpy(np.asarray(c, np.float64)) - conv_exact)
                                 / torch.linalg.norm(conv_exact))
    for precision in ("float32", "tf32"):
        reported = torch_script.set_matmul_precision(precision)
        matmul = jax.jit(lambda x, y: x @ y)  # a new function: traced under the setting just made
        conv = jax.jit(lambda x, k: jax.lax.conv_general_dilated(x, k, (1, 1), "VALID"))  # NCHW, OIHW
        facts[precision] = {"reported": reported, "torch_error": error((torch.tensor(a).cuda() @ torch.tensor(b).cuda()).cpu()),
                            "jax_error": error(matmul(a, b)),
                            "torch_conv_error": conv_error(
                                conv2d(*(torch.tensor(x).cuda() for x in (images, kernels))).cpu()),
                            "jax_conv_error": conv_error(conv(images, kernels))}
    props = torch.cuda.get_device_properties(0)
    facts |= {"device": props.name, "memory_mb": props.total_memory / 2**20, "capability": f"{props.major}.{props.minor}",
              "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version(),
              "jax_device": jax.devices()[0].device_kind}
    return facts


def probe_script(what: str, log_dir: str) -> dict:
    """Runs a script's own main (with its flags) on CartPole-v1, profiling its last iterations (torch scripts)."""
    name, *flags = what.split()
    module = script(name)  # a torch script sets XLA_PYTHON_CLIENT_PREALLOCATE before it imports jax
    import jax

    torch_script = hasattr(module, "torch_device")
    facts = {"jax_backend": jax.default_backend()}
    if torch_script:
        import torch

        graphs, phase = Counter(), ["warmup"]
        for method in ("capture_begin", "replay"):  # what torch.compile's CUDA-graph trees call
            original = getattr(torch.cuda.CUDAGraph, method)
            def counted(self, *args, _original=original, _method=method, **kwargs):
                graphs[phase[0], _method] += 1
                return _original(self, *args, **kwargs)
            setattr(torch.cuda.CUDAGraph, method, counted)
        profiler = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
        log_iteration, train = module.RunLog.iteration, module.train

        def iteration(self, i, times, stats):
            line = log_iteration(self, i, times, stats)
            if i + 1 == WARMUP:  # from here on, every iteration is a steady one
                phase[0] = "profiled"
                profiler.start()
            return line

        def profiled_train(*args, **kwargs):
            result = train(*args, **kwargs)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            profiler.stop()
            phase[0] = "after"
            return result

        module.RunLog.iteration, module.train = iteration, profiled_train
    sys.argv = [name, *flags, "--env-id", "CartPole-v1", "--num-iterations", str(WARMUP + PROFILED), "--log-dir",
                log_dir, "--eval-episodes", "2", "--save-model"]
    module.main()
    variant = module.variant_name(tyro.cli(module.RunArgs, args=flags))
    run_dir = max(Path(log_dir).glob(f"CartPole-v1__{variant}__*"), key=os.path.getmtime)
    facts |= {"run_dir": str(run_dir), "device": json.loads((run_dir / "run.json").read_text())["device"],
              "complete": (run_dir / "summary.json").exists(), "peak_device_mb": module.peak_device_mb()}
    if torch_script:
        events = Counter(event.name for event in profiler.events())
        facts |= {"profiled_events": sum(events.values()),
                  "device_to_host": sum(n for k, n in events.items() if k.startswith("Memcpy DtoH")) / PROFILED,
                  "host_to_device": sum(n for k, n in events.items() if k.startswith("Memcpy HtoD")) / PROFILED,
                  "synchronize": sum(n for k, n in events.items() if k.endswith("Synchronize")) / PROFILED,
                  "graphs": {f"{p} {m}": n for (p, m), n in graphs.items()}}
        if torch.cuda.is_available():
            x = jax.numpy.arange(8.0)
            t = torch.arange(8.0, device=module.torch_device())
            free, total = torch.cuda.mem_get_info()
            facts |= {"torch_device": str(module.torch_device()), "torch_index": torch.cuda.current_device(),
                      "jax_id": jax.devices()[0].id,
                      "dlpack_to_torch": torch.from_dlpack(x).data_ptr() == x.unsafe_buffer_pointer(),
                      "dlpack_to_jax": jax.numpy.from_dlpack(t).unsafe_buffer_pointer() == t.data_ptr(),
                      "used_mb": (total - free) / 2**20, "total_mb": total / 2**20}
    return facts


def run_probe(what: str, log_dir: str) -> tuple[dict | None, float, str]:
    """One probe in a fresh process, as bench.sh runs each script: (facts, seconds, its output's tail)."""
    start = time.time()
    try:
        done = subprocess.run([sys.executable, __file__, "--probe", what, "--log-dir", log_dir], cwd=ROOT,
                              capture_output=True, text=True, timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired as e:
        seen = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else e.stdout or ""
        return None, time.time() - start, f"no result in {PROBE_SECONDS} s: {seen[-1500:]}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("GPUCHECK ")]
    facts = json.loads(lines[-1].removeprefix("GPUCHECK ")) if done.returncode == 0 and lines else None
    return facts, time.time() - start, (done.stdout + done.stderr)[-2000:]


def checks_of(name: str, facts: dict) -> list[tuple[bool, str, str]]:
    """(passed, check, what was seen) for one script's probe."""
    peak, out = facts["peak_device_mb"], []
    out.append((facts["device"] != "cpu" and facts["complete"], "runs on the GPU",
                f"run.json device {facts['device']!r}, summary.json {'written' if facts['complete'] else 'missing'}"))
    if "torch_device" not in facts:
        out.append((peak is not None and peak > 0, "peak_device_mb", f"{peak}"))
        return out
    out.append((peak is not None and 0 < peak < facts["total_mb"], "peak_device_mb", f"{peak} of {facts['total_mb']:.0f} MB"))
    same = facts["torch_index"] == facts["jax_id"] and facts["dlpack_to_torch"] and facts["dlpack_to_jax"]
    out.append((same, "torch and JAX on one GPU, DLPack without a copy",
                f"torch {facts['torch_device']} (index {facts['torch_index']}), JAX device {facts['jax_id']}, "
                f"same address JAX->torch {facts['dlpack_to_torch']}, torch->JAX {facts['dlpack_to_jax']}"))
    out.append((facts["used_mb"] < facts["total_mb"] / 2, "JAX does not preallocate",
                f"{facts['used_mb']:.0f} of {facts['total_mb']:.0f} MB in use after training"))
    out.append((facts["device_to_host"] <= HOST_READS, "host reads per iteration",
                f"{facts['device_to_host']:g} device-to-host copies (at most {HOST_READS}), "
                f"{facts['host_to_device']:g} host-to-device, {facts['synchronize']:g} synchronize calls"))
    if name.split()[0] == "ppo_torch_compile.py":
        graphs = facts["graphs"]
        out.append((graphs.get("profiled replay", 0) > 0 and not graphs.get("profiled capture_begin", 0),
                    "CUDA graphs replayed, none recorded after the warm-up",
                    f"warm-up: {graphs.get('warmup capture_begin', 0)} recorded; steady iterations: "
                    f"{graphs.get('profiled replay', 0) / PROFILED:g} replays and "
                    f"{graphs.get('profiled capture_begin', 0)} recordings per iteration"))
    return out


def precision_checks(facts: dict) -> list[tuple[bool, str, str]]:
    """Each setting, for a matmul and for a convolution: full float32 in both frameworks, or TF32 in both."""
    out, full, tf32 = [], facts["float32"], facts["tf32"]
    for op, key in (("", "error"), (", convolution", "conv_error")):
        seen = lambda f: (f"torch {f['reported']['torch']} (error {f['torch_' + key]:.1e}), "
                          f"JAX {f['reported']['jax']} (error {f['jax_' + key]:.1e})")
        out += [(max(full["torch_" + key], full["jax_" + key]) < PRECISION_ERROR,
                 f"--matmul-precision float32{op}: full float32", seen(full)),
                ((tf32["torch_" + key] > PRECISION_ERROR) == (tf32["jax_" + key] > PRECISION_ERROR),
                 f"--matmul-precision tf32{op}: the same in both", seen(tf32))]
    return out


def say(passed: bool, what: str):
    print(f"{'PASS' if passed else 'FAIL'}  {what}")


def main() -> int:
    args = tyro.cli(Args)
    if args.probe:  # inside the fresh process
        facts = probe_precision() if args.probe == "precision" else probe_script(args.probe, args.log_dir)
        print("GPUCHECK " + json.dumps(facts))
        return 0
    results, record = [], {"versions": {p: v for p in PACKAGES if (v := installed(p))}, "seconds": {}}
    facts, _, tail = run_probe("precision", args.log_dir)
    if facts is None or not (facts["torch_cuda"] and facts["jax_backend"] == "gpu"):
        seen = f"torch.cuda.is_available() {facts['torch_cuda']}, JAX backend {facts['jax_backend']}" if facts else tail
        say(False, f"a GPU both frameworks use: {seen}")
        return 1
    record |= {"device": {k: facts[k] for k in ("device", "memory_mb", "capability", "cuda", "cudnn", "jax_device")}}
    print(f"GPU: {facts['device']} ({facts['memory_mb']:.0f} MB, compute capability {facts['capability']}), "
          f"CUDA {facts['cuda']}, cuDNN {facts['cudnn']}; " + ", ".join(f"{k} {v}" for k, v in record["versions"].items()))
    for passed, check, seen in precision_checks(facts):
        results.append(("precision", passed, check, seen))
        say(passed, f"{check}: {seen}")
    for name in SCRIPTS:
        facts, record["seconds"][name], tail = run_probe(name, args.log_dir)
        checks = checks_of(name, facts) if facts else [(False, "runs on the GPU", "the run failed:\n" + tail)]
        results += [(name, *check) for check in checks]
        for passed, check, seen in checks:
            say(passed, f"{name}: {check}: {seen}  [{record['seconds'][name]:.0f} s]")
    failed = [r for r in results if not r[1]]
    print(f"{len(results) - len(failed)} of {len(results)} checks passed")
    if args.out:
        record["checks"] = [dict(zip(("where", "passed", "check", "seen"), r)) for r in results]
        Path(args.out).write_text(json.dumps(record, indent=2))
    return 1 if failed else 0


def installed(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
