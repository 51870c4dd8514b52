"""The pure core of workflows: which task starts, which is skipped, when a run ends.

A workflow run is a :class:`Dag` (its tasks, each one's dependencies and
``runWhen``) and one :data:`TaskState` per task.  :func:`step` is the whole
decision, a function of those two and nothing else (no clock, no I/O); the
scheduler asks it after every change and does what it says.

The rules:

* A task with no dependencies is ready at once.
* A task with dependencies decides once they are all *done* (``succeeded``,
  ``failed``, ``skipped`` or ``cancelled``: :data:`DONE`), by its ``runWhen``
  over their states: ``allSucceeded`` (the default) when every one succeeded,
  ``allDone`` whatever they ended as, ``anyFailed`` when at least one failed,
  ``allFailed`` when every one failed.  ``failed`` is final: a task's retries
  are over before it is ``failed``, so its dependents never decide on an attempt
  that a retry may still redeem.
* A pending task whose ``runWhen`` can no longer hold, however the dependencies
  not done yet end, is ``skipped`` at once, without waiting for them (an
  ``allSucceeded`` task as soon as one dependency ended otherwise, an
  ``allFailed`` one as soon as one did not fail).  A skip is itself an end its
  dependents decide on, so skips propagate: :func:`step` applies them until
  nothing more is decided.
* The run is over when no task is running and none can start.  Its outcome is
  ``cancelled`` if a task was cancelled, else ``failed`` if a task failed, else
  ``succeeded``: a run succeeds only when every task that ran succeeded (a
  skipped task did not run).

:func:`find_cycles` finds the dependency cycles a definition must not have, and
:func:`levels` the depth of each task (for drawing a run as columns).

A leaf module: it imports nothing of cronstable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

TaskState = Literal["pending", "running", "succeeded", "failed", "skipped", "cancelled"]
TASK_STATES: tuple[TaskState, ...] = get_args(TaskState)
DONE: frozenset[TaskState] = frozenset({"succeeded", "failed", "skipped", "cancelled"})
"""The states a task ends in (it never leaves them)."""

RunWhen = Literal["allSucceeded", "allDone", "anyFailed", "allFailed"]
RUN_WHEN: tuple[RunWhen, ...] = get_args(RunWhen)
DEFAULT_RUN_WHEN: RunWhen = "allSucceeded"

Outcome = Literal["succeeded", "failed", "cancelled"]
OUTCOMES: tuple[Outcome, ...] = get_args(Outcome)


@dataclass(frozen=True, slots=True)
class Dag:
    """A workflow's tasks (in definition order), each one's dependencies and ``runWhen``.

    Build it with :meth:`of`; a Dag is expected to be acyclic with every dependency
    a task of it (the loader refuses anything else: :func:`find_cycles`)."""

    tasks: tuple[str, ...]
    depends_on: Mapping[str, tuple[str, ...]]
    run_when: Mapping[str, RunWhen]

    @classmethod
    def of(
        cls,
        depends_on: Mapping[str, Iterable[str]],
        run_when: Mapping[str, RunWhen] | None = None,
    ) -> Dag:
        """``depends_on``: every task (in order) with its dependencies; ``run_when`` by
        task, the default for the others."""
        given = run_when or {}
        deps = {task: tuple(dict.fromkeys(d)) for task, d in depends_on.items()}
        return cls(
            tasks=tuple(deps),
            depends_on=deps,
            run_when={task: given.get(task, DEFAULT_RUN_WHEN) for task in deps},
        )

    def dependents(self) -> dict[str, tuple[str, ...]]:
        """Each task's dependents, in definition order."""
        out: dict[str, list[str]] = {task: [] for task in self.tasks}
        for task in self.tasks:
            for dep in self.depends_on[task]:
                out[dep].append(task)
        return {task: tuple(d) for task, d in out.items()}


@dataclass(frozen=True, slots=True)
class Step:
    """What :func:`step` decided."""

    start: tuple[str, ...]
    """Pending tasks to start now (definition order)."""
    skip: tuple[str, ...]
    """Pending tasks to mark ``skipped`` (definition order)."""
    done: bool
    """The run is over once ``skip`` is applied: nothing runs and nothing can start."""
    outcome: Outcome | None
    """The run's outcome when ``done``; None otherwise."""


def decide(run_when: RunWhen, deps: Sequence[TaskState]) -> bool | None:
    """Whether a task with dependencies in states ``deps`` runs (True), never will
    (False), or cannot tell yet (None: some dependency is not done and its end
    matters)."""
    done = [state for state in deps if state in DONE]
    open_ = len(deps) - len(done)
    if run_when == "allSucceeded":
        if any(state != "succeeded" for state in done):
            return False
        return None if open_ else True
    if run_when == "allFailed":
        if any(state != "failed" for state in done):
            return False
        return None if open_ else True
    if open_:
        return None  # allDone waits for every one; anyFailed may yet see one fail
    if run_when == "allDone":
        return True
    return any(state == "failed" for state in deps)  # anyFailed


def _verdict(
    run_when: RunWhen, deps: Sequence[str], current: Mapping[str, TaskState]
) -> bool | None:
    """:func:`decide` over ``current``'s states of ``deps``, in one pass without copies
    (:func:`step` asks it of every pending task after every change)."""
    open_ = 0
    failed = False
    if run_when == "allSucceeded":
        for dep in deps:
            state = current[dep]
            if state == "succeeded":
                continue
            if state in DONE:
                return False
            open_ += 1
        return None if open_ else True
    if run_when == "allFailed":
        for dep in deps:
            state = current[dep]
            if state == "failed":
                continue
            if state in DONE:
                return False
            open_ += 1
        return None if open_ else True
    for dep in deps:
        state = current[dep]
        if state not in DONE:
            return None  # allDone waits for every one; anyFailed may yet see one fail
        failed = failed or state == "failed"
    return True if run_when == "allDone" else failed


def step(dag: Dag, states: Mapping[str, TaskState]) -> Step:
    """What to do now with a run of ``dag`` whose tasks are in ``states`` (a task
    missing from ``states`` is ``pending``); see the module docstring."""
    current: dict[str, TaskState] = {task: states.get(task, "pending") for task in dag.tasks}
    skipped: set[str] = set()
    ready: set[str] = set()
    changed = True
    while changed:  # skips propagate: each pass decides on the ones before
        changed = False
        for task in dag.tasks:
            if current[task] != "pending" or task in ready:
                continue
            deps = dag.depends_on[task]
            verdict = True if not deps else _verdict(dag.run_when[task], deps, current)
            if verdict is True:
                ready.add(task)
            elif verdict is False:
                current[task] = "skipped"
                skipped.add(task)
                changed = True
    start = tuple(task for task in dag.tasks if task in ready)
    skip = tuple(task for task in dag.tasks if task in skipped)
    running = any(state == "running" for state in current.values())
    done = not running and not start
    return Step(start, skip, done, outcome(current.values()) if done else None)


def outcome(states: Iterable[TaskState]) -> Outcome:
    """A finished run's outcome from its tasks' states."""
    seen = set(states)
    if "cancelled" in seen:
        return "cancelled"
    if "failed" in seen:
        return "failed"
    return "succeeded"


def cancel(dag: Dag, states: Mapping[str, TaskState]) -> dict[str, TaskState]:
    """``states`` with every pending task ``cancelled`` (a run cancelled as a whole: the
    running ones are stopped by the caller and end ``cancelled`` too)."""
    return {
        task: "cancelled" if states.get(task, "pending") == "pending" else states[task]
        for task in dag.tasks
    }


def find_cycles(depends_on: Mapping[str, Iterable[str]]) -> list[tuple[str, ...]]:
    """One cycle through each strongly connected group of tasks that depend on each other
    in a ring, as ``(a, b, c, a)`` (a depends on b, b on c, c on a), each starting at its
    first task in definition order; dependencies on unknown tasks are ignored.  Empty for
    an acyclic definition."""
    graph = {task: [d for d in deps if d in depends_on] for task, deps in depends_on.items()}
    order = {task: index for index, task in enumerate(graph)}
    components = _components(graph)
    cycles: list[tuple[str, ...]] = []
    for members in components:
        first = min(members, key=order.__getitem__)
        if len(members) == 1 and first not in graph[first]:
            continue
        path = _path_back(graph, first, members)
        cycles.append((*path, first))
    cycles.sort(key=lambda cycle: order[cycle[0]])
    return cycles


def _components(graph: Mapping[str, Sequence[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work: list[tuple[str, int]] = [(root, 0)]
        while work:
            node, at = work.pop()
            if at == 0:
                index[node] = low[node] = counter
                counter += 1
                stack.append(node)
                on_stack.add(node)
            edges = graph[node]
            if at < len(edges):
                work.append((node, at + 1))
                nxt = edges[at]
                if nxt not in index:
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            if low[node] == index[node]:
                members: set[str] = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                found.append(members)
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return found


def _path_back(graph: Mapping[str, Sequence[str]], start: str, members: set[str]) -> list[str]:
    """The shortest path from ``start`` back to itself inside ``members`` (without the
    final ``start``), edges taken in definition order (breadth first)."""
    parent: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for dep in graph[node]:
                if dep not in members:
                    continue
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return list(reversed(path))
                if dep not in seen:
                    seen.add(dep)
                    parent[dep] = node
                    nxt.append(dep)
        frontier = nxt
    return [start]  # not reached: a component of several members has a cycle through each


def outline(dag: Dag) -> str:
    """The tasks by depth: ``extract → transform-a, transform-b → load``."""
    depth = levels(dag)
    columns: dict[int, list[str]] = {}
    for task in dag.tasks:
        columns.setdefault(depth[task], []).append(task)
    return " → ".join(", ".join(columns[level]) for level in sorted(columns))


def levels(dag: Dag) -> dict[str, int]:
    """Each task's depth: 0 without dependencies, else one more than its deepest
    dependency (the column a drawing of the run puts it in)."""
    depth: dict[str, int] = {}
    remaining = list(dag.tasks)
    while remaining:
        left: list[str] = []
        for task in remaining:
            deps = dag.depends_on[task]
            if all(d in depth for d in deps):
                depth[task] = 1 + max((depth[d] for d in deps), default=-1)
            else:
                left.append(task)
        if len(left) == len(remaining):  # a cycle (never in a loaded definition)
            for task in left:
                depth[task] = 0
            break
        remaining = left
    return depth
