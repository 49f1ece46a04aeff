"""The shared runner: every run of a claim in dependency order, `jobs` at a time, finished ones skipped, one
progress bar per arm; then the claim's measurements and its report.

Layout under <out>/<claim>/: per budget a folder (budget-1x/, budget-2x/; smoke/ or full/) with <run key>/result.json
per run (its config, the worker's result and wall time) and that budget's results.json; the claim's results.json,
report.md and the figures. A run whose result.json holds the same config is done and is not
run again; one made with another config is an error naming what differs (use another --out, or delete it).
A run that fails is reported with its error; the runs that need it are skipped, the others go on.
"""

from __future__ import annotations

import concurrent.futures as futures
import multiprocessing
import os
import queue as queues
import time
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Callable

from tqdm.auto import tqdm

from seqssm.errors import ReproduceError
from seqssm.study.fitting import finished_record, restart_note, write_record

from . import work
from .claim import Claim, Run
from .report import Part, Timing, write_index, write_report

POLL_S = 0.5

_progress_queue = None  # a worker process's queue back to the main process (set by _init_worker)


def _init_worker(progress_queue) -> None:
    global _progress_queue
    _progress_queue = progress_queue
    work.quiet_worker()


def _run_in_worker(run: Run, run_dir: str) -> dict:
    def progress(done: int) -> None:
        _progress_queue.put((run.key, done))

    return _execute(run, Path(run_dir), progress)


def _execute(run: Run, run_dir: Path, progress: Callable[[int], None]) -> dict:
    """Run `run` in `run_dir` -> its result record (also written to run_dir/result.json)."""
    start = time.perf_counter()
    result = work.WORKERS[run.kind](run_dir, run.config, progress)
    record = {"key": run.key, "arm": run.arm, "seed": run.seed, "kind": run.kind, "config": run.config,
              "wall_s": round(time.perf_counter() - start, 2), "result": result}
    write_record(run_dir, record)
    return record


class Progress:
    """One bar per arm, counting its runs' units (steps); runs report their absolute progress."""

    def __init__(self, runs: list[Run], done: set[str], enabled: bool = True):
        self.arm_of = {r.key: r.arm for r in runs}
        self.units = {r.key: r.units for r in runs}
        self.seen = {r.key: (r.units if r.key in done else 0) for r in runs}
        arms = list(dict.fromkeys(r.arm for r in runs))
        width = max(len(a) for a in arms) if arms else 0
        self.bars = {arm: tqdm(total=sum(r.units for r in runs if r.arm == arm), desc=arm.ljust(width), position=i,
                               initial=sum(self.seen[r.key] for r in runs if r.arm == arm), unit="step",
                               unit_scale=True, disable=not enabled, leave=True, dynamic_ncols=True)
                     for i, arm in enumerate(arms)}

    def update(self, key: str, done: int) -> None:
        """Run `key` has done `done` of its units."""
        done = min(done, self.units[key])
        delta, self.seen[key] = done - self.seen[key], max(done, self.seen[key])
        if delta > 0:
            self.bars[self.arm_of[key]].update(delta)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def execute(runs: list[Run], folder: Path, jobs: int, log: Callable[[str], None], bars: bool = True
            ) -> tuple[dict[str, dict], dict[str, str], int]:
    """Run what is not finished among `runs` (dependencies first, `jobs` at a time) -> (records by key, errors
    by key of the runs that failed or whose dependencies did, how many runs had finished before this call)."""
    keys = {r.key for r in runs}
    missing = sorted({n for r in runs for n in r.needs} - keys)
    if len(keys) != len(runs) or missing:
        raise ReproduceError(f"claim runs are inconsistent: duplicate keys or unknown dependencies {missing}")
    records = {r.key: rec for r in runs if (rec := finished_record(folder / r.key, r.config, ReproduceError))}
    reused = len(records)
    if reused:
        log(f"[reproduce] {reused} of {len(runs)} runs finished before: skipped")
    pending = [r for r in runs if r.key not in records]
    for run in pending:
        if note := restart_note(folder / run.key):
            log(f"[reproduce] {run.key}:{note}")
    errors: dict[str, str] = {}
    progress = Progress(runs, set(records), enabled=bars)
    try:
        if jobs == 1:
            _execute_inline(pending, folder, records, errors, progress, log)
        else:
            _execute_pool(pending, folder, records, errors, progress, log, jobs)
    finally:
        progress.close()
    return records, errors, reused


def _ready(pending: list[Run], records: dict, errors: dict[str, str]) -> tuple[list[Run], list[Run]]:
    """(runs whose dependencies are all finished, runs with a failed dependency)."""
    ready = [r for r in pending if all(n in records for n in r.needs)]
    blocked = [r for r in pending if any(n in errors for n in r.needs)]
    return ready, blocked


def _prepare_dir(folder: Path, run: Run) -> Path:
    run_dir = folder / run.key
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def _fail(run: Run, error: str, errors: dict[str, str], log: Callable[[str], None]) -> None:
    errors[run.key] = error
    log(f"[reproduce] {run.key} failed: {error.strip().splitlines()[-1] if error.strip() else error}")


def _execute_inline(pending, folder, records, errors, progress, log) -> None:
    while pending:
        ready, blocked = _ready(pending, records, errors)
        for run in blocked:
            _fail(run, f"skipped: a run it needs failed ({', '.join(run.needs)})", errors, log)
        if not ready and not blocked:
            raise ReproduceError(f"runs wait on each other: {[r.key for r in pending]}")
        pending = [r for r in pending if r not in ready and r not in blocked]
        for run in ready:
            try:
                records[run.key] = _execute(run, _prepare_dir(folder, run), lambda d, k=run.key: progress.update(k, d))
                progress.update(run.key, run.units)
            except Exception:  # noqa: BLE001 - a failed run is reported; the others go on
                _fail(run, traceback.format_exc(), errors, log)


def _execute_pool(pending, folder, records, errors, progress, log, jobs) -> None:
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no inherited torch threads or locks
    progress_queue = context.Queue()
    running: dict[futures.Future, Run] = {}
    with futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker,
                                     initargs=(progress_queue,)) as pool:
        while pending or running:
            ready, blocked = _ready(pending, records, errors)
            for run in blocked:
                _fail(run, f"skipped: a run it needs failed ({', '.join(run.needs)})", errors, log)
            pending = [r for r in pending if r not in blocked]
            for run in ready[:max(0, jobs - len(running))]:
                running[pool.submit(_run_in_worker, run, str(_prepare_dir(folder, run)))] = run
                pending.remove(run)
            if not running:
                if pending:
                    raise ReproduceError(f"runs wait on each other: {[r.key for r in pending]}")
                break
            finished_now, _ = futures.wait(running, timeout=POLL_S, return_when=futures.FIRST_COMPLETED)
            _drain(progress_queue, progress)
            for future in finished_now:
                run = running.pop(future)
                try:
                    records[run.key] = future.result()
                    progress.update(run.key, run.units)
                except Exception as e:  # noqa: BLE001 - a failed run is reported; the others go on
                    _fail(run, "".join(traceback.format_exception(e)), errors, log)
        _drain(progress_queue, progress)


def _drain(progress_queue, progress: Progress) -> None:
    while True:
        try:
            key, done = progress_queue.get_nowait()
        except queues.Empty:
            return
        progress.update(key, done)


def run_claim(claim: Claim, log: Callable[[str], None] = print, bars: bool = True) -> dict:
    """Prepare, run (skipping finished runs) at each of the claim's run budgets and report, with the declared check
    read from the same runs -> its summary (also <out>/<claim>/results.json)."""
    claim.root.mkdir(parents=True, exist_ok=True)
    log(f"[reproduce] {claim.name}: {claim.title}")
    notes = claim.prepare()
    parts = []
    for factor, folder in claim.budgets():
        at = claim.at_budget(factor, folder)
        folder.mkdir(parents=True, exist_ok=True)
        # seed by seed, the arms in turn: the runs side by side are of different arms, so that their step times
        # (the speed ratios) are taken under the same load
        runs = sorted(at.runs(), key=lambda r: r.seed)
        start, load_start = time.perf_counter(), os.getloadavg()
        records, errors, reused = execute(runs, folder, claim.settings.jobs, log, bars)
        timing = Timing(time.perf_counter() - start, load_start, os.getloadavg(), reused, len(runs))
        parts.append(Part(at, runs, records, errors, timing.or_earlier(folder, records)))
    check = claim.declaration.check
    if check is not None and len(parts) == 1:
        parts.append(replace(parts[0], at=check))  # the same runs, read earlier in their curves
    summary = write_report(claim, parts, notes)
    log(f"[reproduce] {claim.name}: {summary['qualified']} -> {claim.root / 'report.md'}")
    return summary


def run_all(claims: list[Claim], log: Callable[[str], None] = print, bars: bool = True) -> list[dict]:
    """Every claim in turn, then <out>/report.md: a verdict table and each claim's report -> the summaries."""
    summaries = [run_claim(claim, log, bars) for claim in claims]
    if claims:
        path = write_index(claims, summaries)
        log(f"[reproduce] all: {path}")
    return summaries
