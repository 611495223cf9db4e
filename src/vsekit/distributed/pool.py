"""A Ray actor pool that runs shards: one worker object per actor (its model loaded once), each shard
retried on another attempt when it fails, results yielded as shards finish.

Ray is imported lazily: :func:`require_ray` is the one clear error when it is not installed.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from vsekit.errors import VsekitError

__all__ = ["RayOptions", "ShardPool", "ray_session", "require_ray"]

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'vsekit[distributed]'"

K = TypeVar("K", bound=Hashable)  # a shard's key


def require_ray() -> Any:
    """The ``ray`` module, or a VsekitError saying how to install it."""
    try:
        import ray
    except ImportError as exc:
        raise VsekitError(
            f"--distributed ray needs Ray, which is not installed ({exc}); {INSTALL_HINT}"
        ) from None
    return ray


@dataclass(frozen=True)
class RayOptions:
    """How a sharded run uses Ray.

    ``address``: an existing cluster (``auto`` or ``HOST:6379``, as ``ray.init(address=...)`` takes it,
    the command running on one of its nodes); None starts a local one (or joins ``$RAY_ADDRESS`` when set).
    ``workers``: actors (None: as many as the cluster's CPUs allow at ``threads`` each). ``threads``: CPUs
    per actor and its torch threads. ``max_retries``: extra attempts per failed shard. ``shard_size``:
    images per extraction shard (rounded to whole batches).
    """

    address: str | None = None
    workers: int | None = None
    threads: int = 1
    max_retries: int = 2
    shard_size: int = 256

    def __post_init__(self) -> None:
        if self.workers is not None and self.workers < 1:
            raise VsekitError(f"Ray workers must be >= 1, got {self.workers}")
        if self.threads < 1 or self.max_retries < 0 or self.shard_size < 1:
            raise VsekitError(
                f"bad Ray options: threads {self.threads} (>= 1), max_retries {self.max_retries} (>= 0), "
                f"shard_size {self.shard_size} (>= 1)"
            )


@contextlib.contextmanager
def ray_session(options: RayOptions) -> Iterator[Any]:
    """Ray, initialised for the duration: an already initialised Ray (a test's cluster, a notebook's) is
    used and left running; otherwise ``ray.init`` joins ``options.address`` or starts a local cluster
    sized for the workers, and it is shut down on the way out."""
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    address = options.address or os.environ.get("RAY_ADDRESS") or "local"
    if address == "local":  # a new cluster of our own, even if `ray start` runs one on this machine
        kwargs["num_cpus"] = (options.workers or os.cpu_count() or 1) * options.threads
    try:
        ray.init(address=address, **kwargs)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise VsekitError(f"cannot start or join the Ray cluster ({address}): {exc}") from None
    try:
        yield ray
    finally:
        ray.shutdown()


class _Worker:
    """The actor: builds its worker once (``factory()``, e.g. loading a model), then runs shards."""

    def __init__(self, factory: Callable[[], Any], threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.worker = factory()

    def attr(self, name: str) -> Any:
        return getattr(self.worker, name, None)

    def ready(self) -> bool:
        return True

    def run(self, payload: Any) -> Any:
        return self.worker(payload)


class ShardPool:
    """Actors that each hold one worker object built by ``factory`` (called inside the actor: load the
    model there) and run ``worker(payload)`` per shard.

    A shard whose attempt raises, or whose actor dies (the process killed, out of memory), is tried again
    up to ``options.max_retries`` more times (a dead actor is replaced); a shard that still fails does not
    stop the others, and the VsekitError naming it comes once they are done. A worker that cannot be built
    at all (``factory`` raises: a missing model, another model file) stops the run at once. Use as a
    context manager: the actors are killed on the way out.
    """

    def __init__(self, factory: Callable[[], Any], options: RayOptions) -> None:
        self.ray = require_ray()
        self.options = options
        self.factory = factory
        self._cls = self.ray.remote(num_cpus=options.threads)(_Worker)
        self.actors: list[Any] = []

    def __enter__(self) -> ShardPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the actors (their models go with them)."""
        for actor in self.actors:
            with contextlib.suppress(Exception):
                self.ray.kill(actor)
        self.actors.clear()

    def _size(self) -> int:
        if self.options.workers is not None:
            return self.options.workers
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        return max(1, cpus // self.options.threads)

    def _new_actor(self) -> Any:
        actor = self._cls.remote(self.factory, self.options.threads)
        self.actors.append(actor)
        return actor

    def attr(self, name: str) -> Any:
        """An attribute of the workers' object, None if it has none (asked of the first actor, started if
        need be)."""
        if not self.actors:
            self._start([self._new_actor()])
        return self.ray.get(self.actors[0].attr.remote(name))

    def _start(self, actors: list[Any]) -> None:
        """Wait until ``actors`` have built their workers; a VsekitError with the cause if one could not."""
        try:
            self.ray.get([actor.ready.remote() for actor in actors])
        except self.ray.exceptions.RayError as exc:
            self.close()
            raise VsekitError(f"a Ray worker could not start: {_cause(exc)}") from None

    def run(self, shards: Sequence[tuple[K, Any]]) -> Iterator[tuple[K, Any]]:
        """``(key, worker(payload))`` for each ``(key, payload)``, in the order shards finish.

        A shard that fails for good does not stop the others (their results are yielded, so the caller
        commits them and a rerun has less to do); the VsekitError naming it comes at the end."""
        ray = self.ray
        queue = list(reversed(shards))
        attempts: dict[Hashable, int] = {}
        given_up: list[str] = []
        idle = list(self.actors)
        new = [self._new_actor() for _ in range(min(self._size(), len(shards)) - len(self.actors))]
        self._start(new)
        idle.extend(new)
        running: dict[Any, tuple[Any, K, Any]] = {}
        while running or queue:
            while queue and idle:
                key, payload = queue.pop()
                actor = idle.pop()
                running[actor.run.remote(payload)] = (actor, key, payload)
            [ref], _ = ray.wait(list(running), num_returns=1)
            actor, key, payload = running.pop(ref)
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError as exc:  # the process died: replace it
                self.actors.remove(actor)
                with contextlib.suppress(Exception):
                    ray.kill(actor)
                idle.append(self._new_actor())
                self._retry(key, payload, exc, attempts, queue, given_up)
                continue
            except ray.exceptions.RayTaskError as exc:
                idle.append(actor)
                self._retry(key, payload, exc, attempts, queue, given_up)
                continue
            idle.append(actor)
            yield key, result
        if given_up:
            raise VsekitError(
                f"{len(given_up)} shard(s) failed: {'; '.join(given_up[:3])}; the finished shards are "
                "kept, run the same command again to do the rest"
            )

    def _retry(
        self, key: Hashable, payload: Any, exc: Exception, attempts: dict, queue: list, given_up: list[str]
    ) -> None:
        attempts[key] = attempts.get(key, 0) + 1
        if attempts[key] > self.options.max_retries:
            given_up.append(f"shard {key} failed {attempts[key]} time(s), last: {_cause(exc)}")
            return
        logger.warning("shard %s failed (%s); retrying (attempt %d)", key, _cause(exc), attempts[key] + 1)
        queue.append((key, payload))


def _cause(exc: Exception) -> str:
    """One line for a Ray error: the original exception where there is one."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[-1]
