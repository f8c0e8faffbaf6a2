"""Reading runs: every run directory below a folder or inside an archive, with TensorBoard's
own event reader (no down-sampling); partial, corrupt and empty runs skipped with the reason."""

import io
import json
import tarfile
import tempfile
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .profiles import PACKED, TRACE, measure, packed_trace

EXPERIMENTS = ("exp1", "exp2", "exp3", "cpuenv", "envscale", "agents", "expensive", "tuning",  # bench.sh's folders
               "craftax-learning",  # and the longer Craftax runs' (docs/results.md says how they ran)
               "continuous", "continuous-learning",  # bench.sh's continuous presets
               "pixels", "pixels-learning",  # and its pixel ones
               "gpu",  # and its GPU study
               "headline",  # Experiment 1 again, small and medium on four envs, each repeat shuffled (issue 33)
               "torchenv", "cpucompile",  # PyTorch on its own terms: the env in torch, compiled CPU-env runs (issue 49)
               "dqn", "dqn-learning",  # DQN (issue 52): time per env step, and learning at CleanRL's defaults
               "offpolicy",  # TD3 and SAC (issue 53): time per env step and learning, in the same runs
               "offpolicy-learning",  # and their CPU-env twins learning MuJoCo's HalfCheetah, beside CleanRL's
               "offpolicy-cleanrl",  # and the twins' time beside CleanRL's own scripts, in the same sessions
               "gpuscale",  # the GPU's own regime (issue 55): CartPole-v1 at 32-4,096 envs, and its CPU side
               "hosts",  # one setup per regime of the decision table, on each host type the work lands on (issue 90)
               "tunesweep")  # a tuning sweep (issue 54): tune.py's trials one by one, or as one process's agents
CLEANRL_RUNS = "cleanrl-runs"  # a folder of runs by CleanRL's own scripts beside ours: its event files, as it wrote them
LEFT_OUT = "left-out.json"  # in an archive: the runs `analyze.py archive` did not pack, and why


@dataclass
class Run:
    path: Path
    variant: str
    env_id: str
    model: str
    seed: int
    synced: bool
    summary: dict
    info: dict
    experiment: str = ""
    scalars: dict = field(default_factory=dict)  # tag -> (steps, values, wall times)
    calibration: dict | None = None  # its session's calibrate.py measurements, where bench.sh made them
    cleanrl: bool = False  # a run of CleanRL's own script (CLEANRL_RUNS): no summary; its SPS events as iterations
    profile: dict | None = None  # a run with --profile: its traced iteration (profiles.measure), not a timing

    @property
    def num_iterations(self) -> int:
        args = self.info["args"]  # DQN's iterations are log-frequency env steps each
        return args["num_iterations"] if "num_iterations" in args else args["total_timesteps"] // args["log_frequency"]

    def series(self, tag):
        return self.scalars.get(tag, (np.array([]), np.array([]), np.array([])))


def fast_checksums():
    """TensorBoard without TensorFlow checks each record's CRC32C in pure Python, half the time it takes to read an
    event file; google-crc32c's C code computes the same checksum (tests/test_analyze.py compares them)."""
    import google_crc32c
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow

    pywrap_tensorflow.crc32c = google_crc32c.value  # masked_crc32c, which the reader calls, calls it


def read_scalars(run_dir: Path) -> dict:
    """Every scalar of every event file in run_dir, merged, with TensorBoard's own reader."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    fast_checksums()
    acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0, ea.SCALARS: 0})
    acc.Reload()
    points = defaultdict(list)
    for tag in acc.Tags()["scalars"]:
        points[tag] += [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]
    for tag in acc.Tags()["tensors"]:
        for e in acc.Tensors(tag):
            value = tensor_util.make_ndarray(e.tensor_proto)
            if value.dtype.kind in "biuf":  # not a text summary (CleanRL's hyperparameters)
                points[tag].append((e.step, float(value), e.wall_time))
    return {tag: tuple(np.array(col) for col in zip(*sorted(pts))) for tag, pts in points.items()}


def load_run(run_dir: Path) -> Run:
    """One run, or ValueError saying why it cannot be used."""
    try:
        info = json.loads((run_dir / "run.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"corrupt run.json ({e})")
    if not (run_dir / "summary.json").exists():
        raise ValueError("partial: no summary.json (interrupted or still running)")
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        args = info["args"]
        run = Run(run_dir, info["variant"], args["env_id"], args["model"], int(args["seed"]),
                  bool(args.get("sync_timing", False)), summary, info)  # what ran: run.json, written at the start
        run.experiment = experiment_of(run)
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"corrupt summary.json or run.json ({type(e).__name__}: {e})")
    if run.info["args"].get("track"):  # the tracker's cost is in the run's times
        raise ValueError("tracked by --track: not a timing")
    if not any(run_dir.glob("*tfevents*")):
        raise ValueError("empty: no event file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run.scalars = read_scalars(run_dir)
    except Exception as e:  # the reader raises many kinds on a damaged file
        raise ValueError(f"corrupt event file ({type(e).__name__}: {e})")
    if "time/iteration" not in run.scalars:
        raise ValueError("empty: the event files hold no time/iteration scalars")
    if run.info["args"].get("profile"):  # read while its files are here (an archive is unpacked for a while)
        try:
            run.profile = measure(run_dir)
        except (OSError, ValueError, KeyError, TypeError, EOFError) as e:
            raise ValueError(f"traced by --profile, but its trace or python.prof cannot be read "
                             f"({type(e).__name__}: {e})")
    return run


def python_value(text: str):
    """A value as Python printed it into a table: a number or a bool as such, anything else as text."""
    try:
        return json.loads({"True": "true", "False": "false"}.get(text, text))
    except json.JSONDecodeError:
        return text


def load_cleanrl(run_dir: Path) -> Run:
    """A run of CleanRL's own script as it wrote it, named {env_id}__{exp_name}__{seed}__{time}: its variant
    cleanrl_<exp_name>, its arguments from the hyperparameters table it logs, its scalars; no summary. In a folder
    named after a bench.sh session (bench.sh --cleanrl: CLEANRL_RUNS/<session>/), it ran in that session, and the
    seconds between two of its charts/SPS events (every 100 env steps once it trains) are its iterations."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    fast_checksums()
    try:
        env_id, exp_name, seed, _ = run_dir.name.split("__")
        acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0})
        acc.Reload()
        table = tensor_util.make_ndarray(acc.Tensors("hyperparameters/text_summary")[0].tensor_proto).item().decode()
        args = dict(line[1:-1].split("|", 1) for line in table.splitlines()[2:])  # |param|value| rows
        args = {key: python_value(value) for key, value in args.items()}
        session = run_dir.parent.name if run_dir.parent.name != CLEANRL_RUNS else None
        run = Run(run_dir, f"cleanrl_{exp_name}", env_id, "cleanrl", int(seed), False, {},
                  {"args": args, "session": session}, cleanrl=True)
        run.experiment = experiment_of(run)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run.scalars = read_scalars(run_dir)
        steps, _, wall = run.series("charts/SPS")
        if len(steps) > 1:  # an event's wall time is when the script logged it
            run.scalars["time/iteration"] = (steps[1:], np.diff(wall), wall[1:])
            args["log_frequency"] = int(steps[1] - steps[0])
    except Exception as e:  # a name or an event file not as CleanRL writes them
        raise ValueError(f"not a CleanRL run ({type(e).__name__}: {e})")
    return run


def experiment_of(run: Run) -> str:
    """The bench.sh folder a run ran in; for a run from elsewhere, a guess from its settings."""
    named = [part for part in run.path.parts if part in EXPERIMENTS]
    if named:
        return named[-1]
    if "num_agents" in run.info["args"]:
        return "agents"
    if run.env_id.startswith("Craftax"):
        return "expensive"
    if run.info["args"].get("num_envs", 32) != 32:
        return "envscale"
    if run.variant.startswith(("torch_gymnasium", "linen_gymnasium")):
        return "cpuenv"
    if not run.synced:
        return "exp1"
    return "exp3" if run.env_id == "Acrobot-v1" and run.model != "small" else "exp2"


def find_runs(roots: list[str]) -> tuple[list[Run], list[tuple[Path, str]]]:
    """The complete runs below each folder or inside each archive, and the skipped ones with why."""
    runs, skipped = [], []
    for root in roots:
        if not Path(root).exists():
            skipped.append((Path(root), "does not exist"))
        elif Path(root).is_file() and tarfile.is_tarfile(root):
            with tempfile.TemporaryDirectory() as tmp:  # every run is read whole before it goes
                with tarfile.open(root) as tar:
                    tar.extractall(tmp, filter="data")
                found, bad = runs_below(Path(tmp))
                if (Path(tmp) / LEFT_OUT).exists():  # skipped when it was packed: still skipped
                    bad += [(Path(tmp) / path, f"left out of the archive: {why}")
                            for path, why in json.loads((Path(tmp) / LEFT_OUT).read_text())]
            # named inside the archive, so the report is the same wherever it was unpacked
            inside = lambda path: Path(root) / path.relative_to(tmp)
            for run in found:
                run.path = inside(run.path)
            runs += found
            skipped += [(inside(path), why) for path, why in bad]
        else:
            found, bad = runs_below(Path(root))
            runs += found
            skipped += bad
    return runs, skipped


def runs_below(root: Path) -> tuple[list[Run], list[tuple[Path, str]]]:
    runs, skipped = [], []
    calibrations = sessions_below(root)
    for run_json in sorted(root.rglob("run.json")):
        run_dir = run_json.parent
        if "warmup" in run_dir.parts:
            continue
        try:
            run = load_run(run_dir)
            run.calibration = calibrations.get(run.info.get("session"))
            runs.append(run)
        except ValueError as e:
            skipped.append((run_dir, str(e)))
    for run_dir in sorted({events.parent for events in root.rglob(f"{CLEANRL_RUNS}/**/*tfevents*")}):
        try:
            runs.append(load_cleanrl(run_dir))
        except ValueError as e:
            skipped.append((run_dir, str(e)))
    return runs, skipped


def calibration_files(root: Path) -> list[Path]:
    """What bench.sh's calibrate.py wrote at the start of each session: <out>/sessions/<session>.json."""
    return sorted(root.rglob("sessions/*.json"))


def sessions_below(root: Path) -> dict[str, dict]:
    """{session: its calibration}; two calibrations of one session (calibrate.py run again with
    its BENCHBACK_SESSION, say with --gemm-options) add up, the later one's layers added."""
    found = {}
    for path in calibration_files(root):
        try:
            data = json.loads(path.read_text())
            earlier = found.get(data["session"], {})
            found[data["session"]] = {**earlier, **data,
                                      "layer_seconds": {**earlier.get("layer_seconds", {}), **data["layer_seconds"]}}
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            continue  # a calibration that failed leaves its session's runs without one, nothing worse
    return found


def pack(roots: list[str], archive: str) -> tuple[int, list[tuple[Path, str]]]:
    """Packs what the report reads of every complete run (run.json, summary.json, the event
    files; not console logs), the sessions' calibrations, and each tune.py sweep's summary.json
    (by which bench.sh --resume, run on the unpacked archive, skips the sweeps that ended) into one
    .tar.xz, with the list of the runs it left out (partial, corrupt), which the report counts as
    skipped, and those an unpacked archive among the roots had left out: (runs packed, runs left
    out with why)."""
    count, left_out = 0, []
    with tarfile.open(archive, "w:xz", preset=9) as tar:
        for root in map(Path, roots):
            inside = lambda f: str(root.resolve().name / f.relative_to(root))
            runs, skipped = runs_below(root)
            left_out += [(Path(inside(path)), why) for path, why in skipped]
            listed = root.resolve().parent / LEFT_OUT  # an unpacked archive's, beside the folders it packed
            if listed.exists():  # packed again (a study that grows): what it left out of this folder stays listed
                left_out += [(Path(path), why) for path, why in json.loads(listed.read_text())
                             if Path(path).parts[0] == root.resolve().name]
            for run in runs:
                for f in sorted([run.path / "run.json", run.path / "summary.json", *run.path.glob("*tfevents*"),
                                 *([run.path / p for p in PACKED] if run.profile else [])]):
                    if not f.exists():  # a CleanRL run: its event files only; a profile's cut trace: below
                        continue
                    tar.add(f, arcname=inside(f))
                if run.profile:  # its trace cut to the iteration the table reads
                    add_bytes(tar, inside(run.path / TRACE), packed_trace(run.path))
            swept = {run.path.parents[2] / "summary.json" for run in runs if run.path.parts[-3:-2] == ("trials",)}
            for f in [*calibration_files(root), *sorted(f for f in swept if f.exists())]:
                tar.add(f, arcname=inside(f))
            count += len(runs)
        add_bytes(tar, LEFT_OUT, json.dumps([[str(path), why] for path, why in left_out], indent=1).encode())
    return count, left_out


def add_bytes(tar, arcname: str, data: bytes):
    entry = tarfile.TarInfo(arcname)
    entry.size = len(data)
    tar.addfile(entry, io.BytesIO(data))
