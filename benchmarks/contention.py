"""Speed beside other CPU-bound processes, PyTorch's thread defaults against catcap's (issue 41).

Every job is timed alone and beside 1 and 2 CPU-bound competitor processes (each a Python
busy loop, one core's worth) that this script starts before a phase and stops after it, with
each thread policy, in one run:

    demo_train  --demo-steps steps of `catcap demo`'s training: its config (the tiny Transformer,
                batch 50), its Trainer's train_step, on batches of a small shapes world
    greedy      paper-size greedy decoding (benchmarks/decode.py: the Transformer preset, random
                weights, vocab 10,000, 50 images x 50 regions, 16 steps)
    beam        the same with beam search, beam 5
    xe_step     one paper-size XE training step (50 captions), as decode.py's
    extract     `catcap extract` (efficientnet-lite0, torch backend, its default 2 reading workers)
                of the first --photos Flickr8k photos into a fresh .h5

Policies: ``torch`` (CATCAP_THREADS=torch: PyTorch's and OpenMP's defaults) and ``catcap``
(CATCAP_THREADS=catcap: catcap.threads.configure_threads, as every `catcap` command applies
it); ``--variant NAME:VAR=VALUE[,VAR=VALUE]`` adds a policy of PyTorch's defaults plus those
environment variables (e.g. ``spin1000:GOMP_SPINCOUNT=1000``), to compare candidates. Each
policy runs in its own Python process (a *runner*), started with its environment, which applies
the policy before it imports torch (OpenMP reads its settings when torch loads it), builds every
job once, then times the jobs it is asked for. Runners take turns: one job at a time runs, and
the policy that goes first rotates with every repeat, so drifting load touches every policy alike.
Every runner also keeps freed memory for reuse (catcap.malloc), as the commands do.

Repeats: ``--repeats`` alone (the alone comparison needs them: paired per repeat, median of the
ratios), ``--contended-repeats`` beside competitors; a (job, policy, competitors) cell stops
repeating once its runs took ``--cell-seconds`` (PyTorch's defaults can run 10-20x slower
beside a busy process; the table gives each cell's run count).

Usage:
    python benchmarks/contention.py --report benchmarks/results/contention.md   # the full run (~10 min on 2 quiet cores)
    python benchmarks/contention.py --quick                                      # a smoke test (~1-2 min quiet)
    python benchmarks/contention.py --jobs greedy demo_train --competitors 0 1 --variant spin1000:GOMP_SPINCOUNT=1000

Prints one JSON line per cell: {"job", "policy", "competitors", "median_s", "runs", "cpu_s" (CPU
seconds of the runner's process per run: its threads, not its reading workers), "sleeps" (how
often the runner's threads went to sleep per run: an OpenMP thread that stops waiting actively
adds one), "x_alone" (the median over this policy's alone median), "x_torch_alone"}, and one per
job and policy with the paired alone ratio to PyTorch's defaults. ``--report FILE`` also writes a Markdown report: the
command, the machine, the processes that used CPU before and after, and the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from contention_jobs import JOBS, ROOT, build_jobs, make_world, src_pythonpath

POLICIES = {"torch": {"CATCAP_THREADS": "torch"}, "catcap": {"CATCAP_THREADS": "catcap"}}
# a competitor: one core's worth of pure Python work, until its parent (this script) is gone
BUSY_LOOP = "import os\nparent = os.getppid()\nwhile os.getppid() == parent:\n    for _ in range(1000000): pass"


# ---------------------------------------------------------------------------------------------
# runner: one policy's process; applies the policy before torch loads, builds the jobs, times them


def runner(args) -> None:
    """Serve ``stdin`` lines (a job name each) with one JSON line per timed run on the protocol
    stream; everything else the jobs print goes to stderr."""
    protocol = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from catcap.malloc import keep_freed_memory
    from catcap.threads import configure_threads, paced_threads

    policy = configure_threads()  # CATCAP_THREADS from the parent: "torch" changes nothing
    keep_freed_memory()
    import torch  # only now, as in a command: the policy's hook is registered when torch loads

    jobs = build_jobs(args)
    info = {"ready": True, "threads": torch.get_num_threads(), "policy_env": policy.env,
            "paced": policy.paced, "cpus": policy.cpus}
    protocol.write(json.dumps(info) + "\n")
    protocol.flush()
    for line in sys.stdin:
        job = line.strip()
        if not job:
            continue
        changes = (paced_threads() or (0, 0, 0))[2]
        sleeps, wall, cpu = voluntary_switches(), time.perf_counter(), time.process_time()
        jobs[job]()
        result = {"job": job, "seconds": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
                  "sleeps": voluntary_switches() - sleeps, "threads_after": torch.get_num_threads(),
                  "pace_changes": (paced_threads() or (0, 0, 0))[2] - changes}
        protocol.write(json.dumps(result) + "\n")
        protocol.flush()


def voluntary_switches() -> int:
    """How often this process's threads went to sleep so far (their voluntary context switches,
    from /proc): an idle OpenMP thread that sleeps instead of spinning adds one per wait."""
    total = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:  # a thread that just ended
            continue
        total += next((int(line.split()[1]) for line in text.splitlines() if line.startswith("voluntary_ctxt_switches")), 0)
    return total


# ---------------------------------------------------------------------------------------------
# parent: competitors, runners, the schedule and the report


class Runner:
    """A runner process for one policy (its environment set before Python starts)."""

    def __init__(self, name: str, env: dict, args):
        cmd = [sys.executable, __file__, "--runner", "--work", args.work, "--jobs", *args.jobs,
               "--demo-steps", str(args.demo_steps), "--photos", str(args.photos)]
        if args.images_per_batch:
            cmd += ["--images-per-batch", str(args.images_per_batch)]
        full_env = {k: v for k, v in os.environ.items() if k not in ("CATCAP_THREADS",)}
        full_env.update(env)
        full_env["PYTHONPATH"] = src_pythonpath()
        self.name, self.env = name, env
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=full_env)
        self.info = None

    def ready(self) -> dict:
        if self.info is None:
            line = self.proc.stdout.readline()
            if not line:
                raise SystemExit(f"the {self.name} runner exited before it was ready (exit {self.proc.wait()}); "
                                 "its error is above")
            self.info = json.loads(line)
        return self.info

    def time(self, job: str) -> dict:
        self.proc.stdin.write(job + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} runner exited during {job} (exit {self.proc.wait()}); its error is above")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_competitors(count: int, nice: int = 0) -> list[subprocess.Popen]:
    procs = [subprocess.Popen([sys.executable, "-S", "-c", BUSY_LOOP], preexec_fn=(lambda: os.nice(nice)) if nice else None)
             for _ in range(count)]
    time.sleep(1.0 if count else 0)  # let them start spinning
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()


def parse_variant(text: str) -> tuple[str, dict]:
    """``NAME:VAR=VALUE[,VAR=VALUE]`` -> (NAME, PyTorch's defaults + those variables)."""
    name, sep, assignments = text.partition(":")
    pairs = [a.partition("=") for a in assignments.split(",") if a]
    if not sep or not name or not pairs or any(not k or not eq for k, eq, _ in pairs):
        raise argparse.ArgumentTypeError(f"expected NAME:VAR=VALUE[,VAR=VALUE], e.g. spin1000:GOMP_SPINCOUNT=1000, "
                                         f"found {text!r}")
    return name, {"CATCAP_THREADS": "torch", **{k: v for k, _, v in pairs}}


def measure(runners: list[Runner], args, log) -> dict:
    """times[(job, policy, competitors)] = list of run dicts."""
    times: dict = {}
    for count in args.competitors:
        repeats = args.repeats if count == 0 else args.contended_repeats
        competitors = start_competitors(count, args.competitor_nice)
        try:
            for r in range(repeats):
                for job in args.jobs:
                    order = runners[r % len(runners):] + runners[:r % len(runners)]
                    for runner in order:
                        cell = times.setdefault((job, runner.name, count), [])
                        if count and cell and sum(c["seconds"] for c in cell) >= args.cell_seconds:
                            continue  # this cell has had its time; its runs so far stand
                        cell.append(runner.time(job))
                        log(f"competitors {count} repeat {r + 1}/{repeats} {job:<10} {runner.name:<8} "
                            f"{cell[-1]['seconds']:8.3f} s (cpu {cell[-1]['cpu_s']:.3f} s, {cell[-1]['sleeps']} sleeps, "
                            f"{cell[-1]['threads_after']} threads after, {cell[-1]['pace_changes']} count changes)")
        finally:
            stop(competitors)
    return times


def summarise(times: dict, args, policies: list[str]) -> list[dict]:
    rows = []
    for job in args.jobs:
        alone = {p: statistics.median(c["seconds"] for c in times[(job, p, 0)]) for p in policies if (job, p, 0) in times}
        for p in policies:
            if (job, p, 0) in times and p != "torch" and "torch" in alone:
                pairs = zip(times[(job, p, 0)], times[(job, "torch", 0)])
                rows.append({"job": job, "policy": p, "alone_ratio_to_torch":
                             round(statistics.median(a["seconds"] / b["seconds"] for a, b in pairs), 3)})
            for count in args.competitors:
                cell = times.get((job, p, count))
                if not cell:
                    continue
                median = statistics.median(c["seconds"] for c in cell)
                row = {"job": job, "policy": p, "competitors": count, "median_s": round(median, 4), "runs": len(cell),
                       "cpu_s": round(statistics.median(c["cpu_s"] for c in cell), 4),
                       "sleeps": int(statistics.median(c["sleeps"] for c in cell)),
                       "x_alone": round(median / alone[p], 2) if p in alone else None,
                       "x_torch_alone": round(median / alone["torch"], 2) if "torch" in alone else None}
                rows.append(row)
    return rows


def describe_machine() -> str:
    from catcap.machine import cpu_model
    from catcap.threads import available_cpus, cgroup_cpu_limit, niced_time_is_free

    cpu = cpu_model()
    quota = cgroup_cpu_limit()
    return (f"{platform.machine()} {cpu}, {os.cpu_count()} CPUs ({available_cpus()} available to this process; "
            f"cgroup CPU quota: {'none' if quota is None else f'{quota:g} CPUs'}), Linux {platform.release()}, "
            f"Python {platform.python_version()}, niced processes' CPU time counts as free: {niced_time_is_free()} "
            f"(catcap.threads.niced_time_is_free: automatic session groups off)")


def cpu_users(exclude: set[int]) -> list[str]:
    """The processes (not ours) that used CPU in the last 2 seconds, busiest first."""
    def sample() -> dict[int, tuple[int, str]]:
        out = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) in exclude:
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            out[int(entry)] = (int(fields[11]) + int(fields[12]), cmd or stat.split("(", 1)[1].split(")", 1)[0])
        return out

    first = sample()
    time.sleep(2)
    second = sample()
    ticks = os.sysconf("SC_CLK_TCK")
    used = sorted(((second[p][0] - first[p][0]) / ticks / 2, p, second[p][1]) for p in second if p in first)
    return [f"{share:.0%} of a core: pid {pid} `{cmd[:140]}`" for share, pid, cmd in reversed(used) if share >= 0.02]


def markdown(rows: list[dict], args, policies: list[str], runners: list[Runner], before: list[str], after: list[str],
             load: tuple[str, str], started: float, seconds: float) -> str:
    cells = {(r["job"], r["policy"], r["competitors"]): r for r in rows if "competitors" in r}
    alone_ratio = {(r["job"], r["policy"]): r["alone_ratio_to_torch"] for r in rows if "alone_ratio_to_torch" in r}
    head = ["job"] + [f"{p} alone" for p in policies] + [f"{p} +{c}" for c in args.competitors if c for p in policies]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for job in args.jobs:
        row = [job]
        for p in policies:
            cell = cells.get((job, p, 0))
            text = f"{cell['median_s']:.3f} s" if cell else "-"
            if cell and (job, p) in alone_ratio:
                text += f" ({alone_ratio[(job, p)]:.3f}x torch)"
            row.append(text)
        for c in args.competitors:
            for p in policies:
                cell = cells.get((job, p, c)) if c else None
                if c:
                    row.append(f"{cell['median_s']:.3f} s, **{cell['x_alone']:.2f}x**" +
                               (f" ({cell['runs']} run{'s' if cell['runs'] != 1 else ''})" if cell["runs"] < args.contended_repeats else "")
                               if cell else "-")
        lines.append("| " + " | ".join(row) + " |")
    settings = "\n".join(f"- `{r.name}`: environment {r.env}; in the runner: {r.ready()['threads']} intra-op threads, "
                         f"set by catcap.threads: {r.ready()['policy_env'] or 'nothing'}, thread count paced: "
                         f"{r.ready()['paced']}" for r in runners)
    return f"""## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))} ({seconds / 60:.1f} min)

Command: `{' '.join(['python', 'benchmarks/contention.py', *sys.argv[1:]])}`

Machine: {describe_machine()}. Load average (1, 5, 15 min) before: {load[0]}; after: {load[1]}.

Processes using CPU (other than this benchmark's) before the run:
{chr(10).join('- ' + b for b in before) or '- none'}

and after it:
{chr(10).join('- ' + a for a in after) or '- none'}

Policies:
{settings}

Median seconds per run; `+N`: beside N busy-loop processes, with **x alone** = over the same
policy's time alone (a fair share of 2 cores beside one busy process is 2x). `(Nx torch)`: the
median over repeats of catcap's time over PyTorch's defaults in the same repeat. Runs: {args.repeats}
per cell alone, {args.contended_repeats} beside competitors unless a cell's runs used up
{args.cell_seconds:g} s (then the count is given).

{chr(10).join(lines)}
"""


def _exit_on_signal(signum, _frame) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", nargs="+", default=list(JOBS), choices=JOBS)
    parser.add_argument("--competitors", type=int, nargs="+",
                        help="numbers of busy-loop processes beside the jobs (default 0 1 2, with --quick 0 1; "
                             "0 must come first)")
    parser.add_argument("--competitor-nice", type=int, default=0, metavar="N",
                        help="run the busy-loop processes at nice N (default 0: the jobs' own priority)")
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    parser.add_argument("--variant", action="append", type=parse_variant, default=[], metavar="NAME:VAR=VALUE,...",
                        help="one more policy: PyTorch's defaults plus these environment variables")
    parser.add_argument("--repeats", type=int, default=7, help="runs per job and policy alone (default 7)")
    parser.add_argument("--contended-repeats", type=int, default=3, help="runs per cell beside competitors (default 3)")
    parser.add_argument("--cell-seconds", type=float, default=30.0,
                        help="beside competitors, a cell stops repeating once its runs took this long (default 30)")
    parser.add_argument("--demo-steps", type=int, default=40, help="training steps of the demo per run (default 40)")
    parser.add_argument("--photos", type=int, default=64, help="photos per extraction run (default 64)")
    parser.add_argument("--images-per-batch", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true",
                        help="a smoke test: tiny jobs (4 images, 3 demo steps, 4 photos), 1 run each, 0 and 1 competitor")
    parser.add_argument("--report", metavar="FILE.md", help="append the Markdown report to this file")
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--runner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))  # this tree's catcap, as the runners get it
    signal.signal(signal.SIGTERM, _exit_on_signal)  # a kill runs the clean-up below (competitors, runners, files)
    if args.runner:
        runner(args)
        return
    if args.quick:
        args.repeats, args.contended_repeats, args.demo_steps, args.photos, args.images_per_batch = 1, 1, 3, 4, 4
    args.competitors = args.competitors or ([0, 1] if args.quick else [0, 1, 2])
    if args.competitors[0] != 0:
        parser.error("--competitors must start with 0: every ratio is to the time alone")
    policies = list(args.policies) + [name for name, _ in args.variant]
    envs = {**{p: POLICIES[p] for p in args.policies}, **dict(args.variant)}
    started, t0 = time.time(), time.perf_counter()
    load_before = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    with tempfile.TemporaryDirectory(prefix="catcap-contention-") as work:
        args.work = work
        before = cpu_users({os.getpid()})
        if "demo_train" in args.jobs:
            make_world(Path(work), num_train=40 if args.quick else 120)
        runners = [Runner(name, envs[name], args) for name in policies]
        try:
            for r in runners:
                r.ready()
                print(json.dumps({"policy": r.name, **r.info}), flush=True)
            log = (lambda m: print(m, file=sys.stderr, flush=True))
            times = measure(runners, args, log)
        finally:
            for r in runners:
                r.close()
        after = cpu_users({os.getpid()})
    load_after = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    rows = summarise(times, args, policies)
    for row in rows:
        print(json.dumps(row), flush=True)
    report = markdown(rows, args, policies, runners, before, after, (load_before, load_after), started,
                      time.perf_counter() - t0)
    print(report)
    if args.report:
        path = Path(args.report)
        with path.open("a", encoding="utf-8") as f:
            f.write(("\n" if path.exists() and path.stat().st_size else "") + report)


if __name__ == "__main__":
    main()
