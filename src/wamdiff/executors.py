"""Where the embarrassingly parallel work runs: a local process pool (the default) or Ray (`pip install wamdiff[ray]`).

Data generation (`driving.dataset`: one job per scene seed) and evaluation (`eval.run`: PDMS reference and scoring
chunks, closed-loop route shards) hand a pure, module-level job function and its jobs to `open_executor(config)`.
A job's result depends only on the job, never on the process that ran it, so every executor gives the same outputs
(tested byte for byte on a small split).

`ExecutorConfig(kind, workers, ray_address, retries)`:
- "process": `workers` forked processes; `workers=1` runs the jobs in this process, no pool. Pool workers ignore
  SIGINT: Ctrl-C reaches the whole process group and only the main process acts on it (it kills the workers and
  drops the queued jobs); a worker dying of KeyboardInterrupt would break the pool mid-write.
- "ray": Ray tasks. `ray_address` joins a running cluster ("auto", "ray://head:10001", "head:6379"); without it a
  local Ray is started here with `workers` CPUs, bound to 127.0.0.1, usage statistics off, and shut down afterwards
  (a Ray already initialised in this process is used as it is and left running). A task whose worker dies is run
  again up to `retries` times (Ray's own retry); past that the run stops with one line (`WorkerLost`) and what
  finished is kept, so a re-run completes the set. On any error or Ctrl-C the tasks in flight are cancelled.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice

from wamdiff.errors import UserError

EXECUTOR_KINDS = ("process", "ray")
# help texts go through rich markup: "\\[" keeps a literal bracket ("[ray]" alone would be read as a style tag and vanish)
EXECUTOR_HELP = "Where the parallel work runs: process (local process pool, the default) or ray (pip install 'wamdiff\\[ray]')."
RAY_ADDRESS_HELP = "With --executor ray: a running cluster's address (auto, ray://HEAD:10001, HEAD:6379); default: a local Ray."
LOCAL_RAY_OBJECT_STORE = 256 * 1024**2  # bytes: jobs and results here are small (scenes, rows, route results)


class WorkerLost(OSError):
    """A worker died (killed, out of memory, node lost) and its task could not be run again. An OSError: the CLI
    prints it as one line, exit 2; what finished before it is kept."""


@dataclass(frozen=True)
class ExecutorConfig:
    kind: str = "process"
    workers: int = 2  # process: pool size (1 = in this process); local Ray: its CPUs
    ray_address: str | None = None
    retries: int = 3  # Ray: runs again of a task whose worker died

    def __post_init__(self) -> None:
        if self.kind not in EXECUTOR_KINDS:
            raise UserError(f"--executor {self.kind!r}: use one of {', '.join(EXECUTOR_KINDS)}")
        if int(self.workers) < 1:
            raise UserError(f"--workers {self.workers}: must be at least 1")
        if self.ray_address and self.kind != "ray":
            raise UserError(f"--ray-address {self.ray_address!r} needs --executor ray")
        if int(self.retries) < 0:
            raise UserError(f"executor retries {self.retries}: must be >= 0")

    @property
    def inline(self) -> bool:
        """The jobs run in this process, one after the other (the process executor with one worker)."""
        return self.kind == "process" and self.workers == 1

    def describe(self) -> dict:
        return {"kind": self.kind, "workers": self.workers, "ray_address": self.ray_address}


class Executor:
    """Runs `fn(job)` for every job. `imap_unordered` yields results as they finish; `map` returns them in job order."""

    def imap_unordered(self, fn: Callable, jobs: Iterable, chunksize: int = 1) -> Iterator:
        raise NotImplementedError

    def as_completed(self, fn: Callable, jobs: Iterable) -> Iterator[tuple[int, object]]:
        """(job index, result) pairs as the jobs finish."""
        return self.imap_unordered(_Indexed(fn), list(enumerate(jobs)))

    def map(self, fn: Callable, jobs: Iterable) -> list:
        jobs = list(jobs)
        out = [None] * len(jobs)
        for i, result in self.as_completed(fn, jobs):
            out[i] = result
        return out


class _Indexed:
    """fn wrapped to carry each job's index through an unordered executor (picklable: a plain class)."""

    def __init__(self, fn: Callable):
        self.fn = fn

    def __call__(self, item):
        i, job = item
        return i, self.fn(job)


@contextmanager
def open_executor(config: ExecutorConfig, initializer: Callable | None = None, initargs: tuple = ()) -> Iterator[Executor]:
    """The executor of `config`, open for the block. `initializer(*initargs)` runs once in each worker process
    before its first job (in this process for the inline executor)."""
    if config.inline:
        if initializer is not None:
            initializer(*initargs)
        yield _InlineExecutor()
    elif config.kind == "process":
        with _PoolExecutor.open(config, initializer, initargs) as ex:
            yield ex
    else:
        with _RayExecutor.open(config, initializer, initargs) as ex:
            yield ex


@contextmanager
def parallel_executor(config: ExecutorConfig | None) -> Iterator[Executor | None]:
    """The open executor of `config`, or None where the work runs inline here (no config, or one process)."""
    if config is None or config.inline:
        yield None
    else:
        with open_executor(config) as ex:
            yield ex


class _InlineExecutor(Executor):
    def imap_unordered(self, fn, jobs, chunksize=1):
        return map(fn, jobs)


# -- process pool -------------------------------------------------------------------------------------------------
def _pool_worker_init(initializer, initargs) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # see the module docstring: the main process handles Ctrl-C
    os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
    # torch's thread pool does not survive fork: in a forked worker a torch op on a *new* thread aborts ("Invalid
    # thread pool!") once the parent has run ops on more than one thread. transformers loads weights on a thread
    # pool unless told not to; this keeps a worker's model loading on its main thread.
    os.environ.setdefault("HF_DEACTIVATE_ASYNC_LOAD", "1")
    if "torch" in sys.modules:  # GNU OpenMP is not fork-safe: after the parent ran ops on 2+ threads, the first
        sys.modules["torch"].set_num_threads(1)  # parallel op of a worker waits for threads it does not have (seen)
    if initializer is not None:
        initializer(*initargs)


class _PoolExecutor(Executor):
    """`concurrent.futures.ProcessPoolExecutor` with at most `4 x workers` jobs in flight. Not `multiprocessing.Pool`:
    its `terminate()` drains the task pipe under the queue's read lock, which an idle worker holds while it waits for
    a task, so Ctrl-C could hang for ever (seen on a 20000-scene `data generate`)."""

    def __init__(self, pool, workers: int):
        self.pool = pool
        self.in_flight = 4 * workers

    @classmethod
    @contextmanager
    def open(cls, config: ExecutorConfig, initializer, initargs):
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        ctx = mp.get_context("fork" if os.name == "posix" else "spawn")
        pool = ProcessPoolExecutor(config.workers, mp_context=ctx, initializer=_pool_worker_init,
                                   initargs=(initializer, initargs))
        finished = False
        try:
            yield cls(pool, config.workers)
            finished = True
        finally:
            if finished:
                pool.shutdown(wait=True)
            else:  # Ctrl-C or an error: stop the workers now instead of letting them finish the queue
                for proc in list(getattr(pool, "_processes", {}).values()):
                    proc.kill()
                pool.shutdown(wait=False, cancel_futures=True)

    def imap_unordered(self, fn, jobs, chunksize=1):
        from concurrent.futures import FIRST_COMPLETED, wait

        it = iter(jobs)
        pending = {self.pool.submit(fn, job) for job in islice(it, self.in_flight)}
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            pending |= {self.pool.submit(fn, job) for job in islice(it, len(done))}
            for future in done:
                yield future.result()


# -- Ray --------------------------------------------------------------------------------------------------------
def import_ray(local: bool):
    """Ray, imported with this project's settings (a UserError naming the extra when it is not installed).

    `local`: a Ray started here binds to 127.0.0.1 (Ray's single-machine mode) instead of the machine's address.
    These environment settings are read when Ray is imported, so they are set first."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # no usage report leaves the machine
    if local:
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    try:
        import ray
    except ImportError:
        raise UserError("--executor ray needs Ray: pip install 'wamdiff[ray]' (or pip install ray)") from None
    return ray


def init_ray(config: ExecutorConfig):
    """Start (local) or join (`ray_address`) Ray for `config`; returns (ray, started_here)."""
    import logging

    ray = import_ray(local=not config.ray_address)
    if ray.is_initialized():
        return ray, False
    common = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    try:
        if config.ray_address:
            ray.init(address=config.ray_address, **common)
        else:
            ray.init(num_cpus=config.workers, object_store_memory=LOCAL_RAY_OBJECT_STORE, **common)
    except ConnectionError as err:
        raise UserError(f"--ray-address {config.ray_address}: cannot connect to a Ray cluster ({err})") from None
    return ray, True


_INITIALIZED: set = set()  # initializers already run in this (Ray worker) process


def _ray_job(initializer, initargs, fn, job):
    if initializer is not None:
        key = (initializer.__module__, initializer.__qualname__, repr(initargs))
        if key not in _INITIALIZED:
            initializer(*initargs)
            _INITIALIZED.add(key)
    return fn(job)


class _RayExecutor(Executor):
    def __init__(self, ray, config: ExecutorConfig, initializer, initargs):
        self.ray, self.config = ray, config
        self.initializer, self.initargs = initializer, initargs
        self.task = ray.remote(_ray_job).options(max_retries=config.retries, num_cpus=1)
        cpus = int(ray.cluster_resources().get("CPU", config.workers)) if config.ray_address else config.workers
        self.max_in_flight = 2 * max(1, cpus)  # enough to keep every CPU busy, few to cancel on Ctrl-C
        self.in_flight: dict = {}

    @classmethod
    @contextmanager
    def open(cls, config: ExecutorConfig, initializer, initargs):
        ray, started = init_ray(config)
        ex = cls(ray, config, initializer, initargs)
        try:
            yield ex
        finally:
            ex.cancel()
            if started:
                ray.shutdown()

    def cancel(self) -> None:
        for ref in self.in_flight:
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 - already finished or its worker gone: nothing left to stop
                pass
        self.in_flight.clear()

    def imap_unordered(self, fn, jobs, chunksize=1):
        from ray.exceptions import RayTaskError, WorkerCrashedError

        todo = iter(jobs)
        init = (self.initializer, self.initargs)

        def top_up() -> None:
            for job in islice(todo, self.max_in_flight - len(self.in_flight)):
                self.in_flight[self.task.remote(*init, fn, job)] = job

        top_up()
        while self.in_flight:
            done, _ = self.ray.wait(list(self.in_flight), num_returns=1)
            for ref in done:
                job = self.in_flight.pop(ref)
                try:
                    result = self.ray.get(ref)
                except RayTaskError as err:  # the job itself raised: its own exception, as the pool raises it
                    cause = getattr(err, "cause", None)
                    raise (cause if isinstance(cause, BaseException) else err) from None
                except (WorkerCrashedError, self.ray.exceptions.RayError) as err:
                    raise WorkerLost(f"a Ray worker died running {_short(job)} and its {self.config.retries} retries "
                                     f"failed too ({type(err).__name__}); what finished is kept: re-run the same "
                                     "command to complete the set") from err
                yield result
            top_up()


def _short(job, width: int = 80) -> str:
    text = repr(job)
    return text if len(text) <= width else text[: width - 3] + "..."


__all__ = ["EXECUTOR_HELP", "EXECUTOR_KINDS", "Executor", "ExecutorConfig", "RAY_ADDRESS_HELP", "WorkerLost",
           "import_ray", "init_ray", "open_executor", "parallel_executor"]
