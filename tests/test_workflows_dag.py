"""cronstable.workflows.dag against a brute-force reference, on generated DAGs.

The reference below is written from the rules (docs/workflows.md), not from the
module: a pending task is skipped when *no* way the tasks not done yet could end
makes its ``runWhen`` hold (every assignment of end states to them is tried), and
started when every dependency is done and ``runWhen`` holds over their states.
Small DAGs are checked exhaustively (every DAG on up to four tasks, every
``runWhen``, every outcome of every task, every order of ending); larger ones
with hypothesis.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Mapping

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cronstable.workflows.dag import (
    DONE,
    RUN_WHEN,
    Dag,
    RunWhen,
    TaskState,
    cancel,
    find_cycles,
    levels,
    step,
)

# ---------------------------------------------------------------- the reference


def _holds(run_when: RunWhen, ends: list[TaskState]) -> bool:
    """Whether ``runWhen`` holds over dependencies that all ended as ``ends``."""
    if run_when == "allSucceeded":
        return all(e == "succeeded" for e in ends)
    if run_when == "allFailed":
        return all(e == "failed" for e in ends)
    if run_when == "anyFailed":
        return "failed" in ends
    return True  # allDone


def _possible_ends(state: TaskState) -> list[TaskState]:
    """How a task in ``state`` may yet end."""
    if state in DONE:
        return [state]
    if state == "running":
        return ["succeeded", "failed", "cancelled"]
    return ["succeeded", "failed", "skipped", "cancelled"]


def reference(dag: Dag, states: Mapping[str, TaskState]) -> tuple[set[str], set[str], bool]:
    """(start, skip, done) by brute force."""
    current = {t: states.get(t, "pending") for t in dag.tasks}
    skip: set[str] = set()
    while True:
        more = set()
        for task in dag.tasks:
            deps = dag.depends_on[task]
            if current[task] != "pending" or not deps:
                continue
            choices = [_possible_ends(current[d]) for d in deps]
            if not any(_holds(dag.run_when[task], list(c)) for c in itertools.product(*choices)):
                more.add(task)
        if not more:
            break
        for task in more:
            current[task] = "skipped"
        skip |= more
    start = {
        t
        for t in dag.tasks
        if current[t] == "pending"
        and all(current[d] in DONE for d in dag.depends_on[t])
        and (
            not dag.depends_on[t]
            or _holds(dag.run_when[t], [current[d] for d in dag.depends_on[t]])
        )
    }
    done = not start and all(s != "running" for s in current.values())
    return start, skip, done


def reference_outcome(states: Mapping[str, TaskState]) -> str:
    values = set(states.values())
    if "cancelled" in values:
        return "cancelled"
    return "failed" if "failed" in values else "succeeded"


def check(dag: Dag, states: Mapping[str, TaskState]) -> None:
    got = step(dag, states)
    start, skip, done = reference(dag, states)
    assert set(got.start) == start, (dag, states)
    assert set(got.skip) == skip, (dag, states)
    assert got.done == done, (dag, states)
    assert list(got.start) == [t for t in dag.tasks if t in start]  # definition order
    if done:
        after = dict(states) | {t: "skipped" for t in skip}
        assert got.outcome == reference_outcome(after)
    else:
        assert got.outcome is None


# ---------------------------------------------------------------- generated DAGs


def dags(n: int) -> Iterator[Dag]:
    """Every DAG on tasks t0..t(n-1) whose edges go to earlier tasks, with every
    runWhen on the tasks that have dependencies."""
    names = [f"t{i}" for i in range(n)]
    pairs = [(j, i) for j in range(n) for i in range(j)]
    for mask in range(1 << len(pairs)):
        deps: dict[str, list[str]] = {name: [] for name in names}
        for bit, (j, i) in enumerate(pairs):
            if mask >> bit & 1:
                deps[names[j]].append(names[i])
        dependent = [t for t in names if deps[t]]
        for choice in itertools.product(RUN_WHEN, repeat=len(dependent)):
            yield Dag.of(deps, dict(zip(dependent, choice, strict=True)))


def simulate(dag: Dag, ends: Mapping[str, TaskState], order: random.Random) -> dict[str, str]:
    """Run ``dag`` as the scheduler does, each started task ending as ``ends`` says, in an
    order ``order`` picks; every intermediate state is checked against the reference."""
    states: dict[str, TaskState] = {}
    for _ in range(4 * len(dag.tasks) + 4):
        check(dag, states)
        decided = step(dag, states)
        for task in decided.skip:
            states[task] = "skipped"
        for task in decided.start:
            states[task] = "running"
        if decided.done:
            assert decided.outcome is not None
            assert all(states.get(t) in DONE for t in dag.tasks), "a done run left a task open"
            return {"outcome": decided.outcome}
        running = [t for t in dag.tasks if states.get(t) == "running"]
        assert running, "not done, yet nothing runs and nothing starts"
        finish = order.sample(running, order.randint(1, len(running)))
        for task in finish:
            states[task] = ends[task]
    raise AssertionError("the run never ended")


@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_small_dag_every_outcome(n: int) -> None:
    order = random.Random(n)
    for dag in dags(n):
        for ends in itertools.product(("succeeded", "failed"), repeat=n):
            simulate(dag, dict(zip(dag.tasks, ends, strict=True)), order)


def test_every_four_task_dag_sampled_outcomes() -> None:
    order = random.Random(4)
    for dag in dags(4):
        ends = order.choices(("succeeded", "failed", "cancelled"), k=4)
        simulate(dag, dict(zip(dag.tasks, ends, strict=True)), order)


def test_every_state_map_of_small_dags() -> None:
    """Not only the states a run reaches: every assignment of states (3 tasks)."""
    for dag in dags(3):
        for states in itertools.product(
            ("pending", "running", "succeeded", "failed", "skipped", "cancelled"), repeat=3
        ):
            check(dag, dict(zip(dag.tasks, states, strict=True)))


@st.composite
def dag_and_ends(draw: st.DrawFn) -> tuple[Dag, dict[str, TaskState], int]:
    n = draw(st.integers(1, 9))
    names = [f"t{i}" for i in range(n)]
    deps: dict[str, list[str]] = {}
    for j, name in enumerate(names):
        deps[name] = draw(st.lists(st.sampled_from(names[:j]), unique=True)) if j else []
    run_when = {t: draw(st.sampled_from(RUN_WHEN)) for t in names}
    ends = {t: draw(st.sampled_from(("succeeded", "failed", "cancelled"))) for t in names}
    return Dag.of(deps, run_when), ends, draw(st.integers(0, 2**32))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dag_and_ends())
def test_generated_dags(case: tuple[Dag, dict[str, TaskState], int]) -> None:
    dag, ends, seed = case
    simulate(dag, ends, random.Random(seed))


# ---------------------------------------------------------------- the rules, by example


def test_run_when_examples() -> None:
    deps = {"a": [], "b": [], "c": ["a", "b"]}
    for run_when, a, b, runs in [
        ("allSucceeded", "succeeded", "succeeded", True),
        ("allSucceeded", "succeeded", "failed", False),
        ("allDone", "failed", "skipped", True),
        ("anyFailed", "succeeded", "failed", True),
        ("anyFailed", "succeeded", "succeeded", False),
        ("allFailed", "failed", "failed", True),
        ("allFailed", "failed", "succeeded", False),
    ]:
        decided = step(Dag.of(deps, {"c": run_when}), {"a": a, "b": b})
        assert (decided.start == ("c",)) is runs, run_when
        assert (decided.skip == ("c",)) is not runs, run_when


def test_skip_is_early_and_propagates() -> None:
    dag = Dag.of({"a": [], "b": [], "c": ["a", "b"], "d": ["c"], "e": ["c"]}, {"e": "allDone"})
    decided = step(dag, {"a": "failed", "b": "running"})
    assert decided.skip == ("c", "d")  # without waiting for b
    assert decided.start == ("e",)  # allDone: a skip is an end
    assert not decided.done


def test_outcome() -> None:
    dag = Dag.of({"a": [], "alert": ["a"]}, {"alert": "anyFailed"})
    assert step(dag, {"a": "succeeded"}).outcome == "succeeded"  # alert skipped
    assert step(dag, {"a": "failed", "alert": "succeeded"}).outcome == "failed"
    states = cancel(dag, {"a": "running"})
    assert states == {"a": "running", "alert": "cancelled"}
    assert step(dag, states | {"a": "cancelled"}).outcome == "cancelled"


def test_roots_start_at_once_in_parallel() -> None:
    dag = Dag.of({"extract": [], "t1": ["extract"], "t2": ["extract"], "load": ["t1", "t2"]})
    assert step(dag, {}).start == ("extract",)
    assert step(dag, {"extract": "succeeded"}).start == ("t1", "t2")
    assert step(dag, {"extract": "succeeded", "t1": "succeeded", "t2": "running"}).start == ()
    assert levels(dag) == {"extract": 0, "t1": 1, "t2": 1, "load": 2}


def test_find_cycles() -> None:
    assert find_cycles({"a": [], "b": ["a"]}) == []
    assert find_cycles({"a": ["c"], "b": ["a"], "c": ["b"]}) == [("a", "c", "b", "a")]
    assert find_cycles({"a": ["a"]}) == [("a", "a")]
    assert find_cycles({"x": ["y"], "y": ["x"], "p": ["q"], "q": ["p"], "z": ["nowhere"]}) == [
        ("x", "y", "x"),
        ("p", "q", "p"),
    ]


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 8).flatmap(
        lambda n: st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)))
    )
)
def test_find_cycles_against_reachability(edges: list[tuple[int, int]]) -> None:
    """A graph has a cycle exactly when find_cycles names one, and each named cycle is
    made of edges of the graph."""
    nodes = sorted({x for edge in edges for x in edge}) or [0]
    deps = {f"n{i}": sorted({f"n{b}" for a, b in edges if a == i}) for i in nodes}
    cycles = find_cycles(deps)
    for cycle in cycles:
        assert cycle[0] == cycle[-1]
        for a, b in itertools.pairwise(cycle):
            assert b in deps[a]
    reach = {n: set(d) for n, d in deps.items()}
    for _ in nodes:
        for n in reach:
            reach[n] |= {y for x in list(reach[n]) for y in reach.get(x, ())}
    has_cycle = any(n in reach[n] for n in reach)
    assert bool(cycles) == has_cycle
