"""The soak's invariant checker: a thread reading the API server every ~0.75 s and recording violations with the
timeline of the gang (or node) involved.

Invariants (each can fail; see `check_*`):
- overcommit-capacity: per node and resource (GPUs, cpu, memory, pods, any extended resource), what bound,
  non-terminal pods request (terminating ones included: their containers still run) <= the Node's
  `status.capacity` (the soak only lowers allocatable);
- overcommit-allocatable: a pod newly bound to a node whose allocatable has been stable for 10 s leaves the node
  within that allocatable on every resource (what the kubelet would admit);
- partly-bound: a gang with some but not all members bound (elastic: not an index prefix within its range) for
  longer than the completion timeout plus grace;
- ranks: bound members never share a rank; a whole gang's `meshfit.io/ranks` are exactly 0..world-1;
- rendezvous: every bound member carries a non-empty `meshfit.io/master-addr`, all bound members carry the same
  one, and it is pod 0's node whenever pod 0 is bound (pod 0 never moves while a member that was told is bound);
- no-5xx and endpoints: see `tests.soak.signals`.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable

from tests.realk8s.overcommit import node_resources, pod_resources
from tests.soak import kubeio
from tests.soak.timeline import Timeline
from tests.soak.workload import declared_size, gang_of

RANKS = "meshfit.io/ranks"
MASTER_ADDR = "meshfit.io/master-addr"
ALLOCATABLE_STABLE = 10.0


@dataclass
class Violation:
    """One invariant broken for one subject (gang, node, endpoint): first and last seen, how often, the story."""

    kind: str
    subject: str
    first: float
    last: float
    message: str
    timeline: list[str] = field(default_factory=list)
    count: int = 1


class Violations:
    """Violations keyed by (kind, subject): the first occurrence keeps its message and timeline."""

    def __init__(self, timeline: Timeline, context: Callable[[str], list[str]] | None = None) -> None:
        self.timeline, self.context = timeline, context
        self.found: dict[tuple[str, str], Violation] = {}
        self._lock = threading.Lock()

    def add(self, kind: str, subject: str, message: str, gangs: tuple[str, ...] = ()) -> None:
        """Record a violation (gangs: whose timelines tell the story)."""
        now = self.timeline.now()
        with self._lock:
            known = self.found.get((kind, subject))
            if known is not None:
                known.last, known.count = now, known.count + 1
                return
        story: list[str] = []
        for gang in gangs[:3] or ("",):
            story += ([f"--- gang {gang}"] if gang else []) + self.timeline.merged(gang)
            if gang and self.context is not None:
                story += self.context(gang)
        with self._lock:
            self.found.setdefault((kind, subject), Violation(kind, subject, now, now, message, story))

    def all(self) -> list[Violation]:
        """Every violation, in order of first occurrence."""
        with self._lock:
            return sorted(self.found.values(), key=lambda v: v.first)


@dataclass
class GangView:
    """One gang's members in one snapshot."""

    name: str
    size: int
    min_pods: int
    gpus: int
    pods: dict[int, dict]  # index -> pod

    def bound(self) -> dict[int, dict]:
        """Members bound to a node (terminating ones included)."""
        return {i: p for i, p in self.pods.items() if kubeio.node_name(p)}

    def whole(self) -> bool:
        """All members bound (elastic: an index prefix of a size within its range)."""
        bound = set(self.bound())
        return bound == set(range(len(bound))) and self.min_pods <= len(bound) <= self.size

    def partial(self) -> bool:
        """Some but not a whole set of members bound."""
        return bool(self.bound()) and not self.whole()


def gang_views(pods: list[dict]) -> dict[str, GangView]:
    """The soak gangs present in a pod list."""
    views: dict[str, GangView] = {}
    for pod in pods:
        found = gang_of(pod)
        if found is None:
            continue
        size, min_pods = declared_size(pod)
        view = views.setdefault(found[0], GangView(found[0], size, min_pods, kubeio.pod_gpus(pod), {}))
        view.pods[found[1]] = pod
    return views


def parse_ranks(text: str | None) -> list[int] | None:
    """`meshfit.io/ranks` ("0,1,2,3") as integers; None when absent or malformed."""
    try:
        return [int(part) for part in text.split(",")] if text else None
    except ValueError:
        return None


def check_ranks(view: GangView) -> str | None:
    """What is wrong with the bound members' ranks, None when nothing is."""
    seen: dict[int, str] = {}
    for index, pod in sorted(view.bound().items()):
        name = pod["metadata"]["name"]
        ranks = parse_ranks((pod["metadata"].get("annotations") or {}).get(RANKS))
        if ranks is None:
            return f"{name} is bound without a valid {RANKS}"
        for rank in ranks:
            if rank in seen:
                return f"rank {rank} held by both {seen[rank]} and {name}"
            seen[rank] = name
    if view.whole():
        world = len(view.bound()) * view.gpus
        if sorted(seen) != list(range(world)):
            return f"whole gang's ranks are {sorted(seen)}, not exactly 0..{world - 1}"
    return None


def check_rendezvous(view: GangView) -> str | None:
    """What is wrong with the bound members' `meshfit.io/master-addr`, None when nothing is."""
    told: dict[str, list[str]] = defaultdict(list)
    for _, pod in sorted(view.bound().items()):
        addr = ((pod["metadata"].get("annotations") or {}).get(MASTER_ADDR) or "").strip()
        if not addr:
            return f"{pod['metadata']['name']} is bound to {kubeio.node_name(pod)} with an empty {MASTER_ADDR}"
        told[addr].append(pod["metadata"]["name"])
    if len(told) > 1:
        return "bound members were told different rendezvous: " + "; ".join(
            f"{addr}: {', '.join(names)}" for addr, names in sorted(told.items()))
    zero = view.bound().get(0)
    if zero is not None and told and next(iter(told)) != kubeio.node_name(zero):
        return (f"pod 0 ({zero['metadata']['name']}) is bound to {kubeio.node_name(zero)} but members were told "
                f"{next(iter(told))}: {', '.join(next(iter(told.values())))}")
    return None


def _when(pod: dict) -> str:
    """`,priority=P,created=T,bound=T` of a pod (API server times), for an over-commit's listing: who came first."""
    scheduled = next((c.get("lastTransitionTime") for c in (pod.get("status") or {}).get("conditions") or ()
                      if c.get("type") == "PodScheduled" and c.get("status") == "True"), None)
    return (f",priority={(pod.get('spec') or {}).get('priority', 0)},"
            f"created={pod['metadata'].get('creationTimestamp')},bound={scheduled}")


def _short(resources: dict[str, Decimal]) -> str:
    """`gpu=8,cpu=10` for a listing (the pods count left out)."""
    return ",".join(f"{name.rsplit('/', 1)[-1]}={value.normalize():f}" for name, value in resources.items()
                    if name != "pods")


class PodInvariants:
    """The pod/node invariants over successive snapshots (partly-bound needs time; new binds need the last one)."""

    def __init__(self, violations: Violations, timeline: Timeline, partial_limit: float) -> None:
        self.violations, self.timeline, self.partial_limit = violations, timeline, partial_limit
        self.partial_since: dict[str, float] = {}
        self.longest_partial = 0.0
        self.longest_partial_gang = ""
        """The gang of the longest partly-bound episode (the report names it: the next place to read logs)."""
        self.whole_seen: set[str] = set()
        self._bound_uids: set[str] = set()
        self._pods: dict[str, tuple] = {}
        self._allocatable: dict[str, tuple[int, float]] = {}

    def check(self, pods: list[dict], nodes: list[dict], now: float) -> None:
        """Check one consistent pods snapshot (and a nodes snapshot taken just before it)."""
        self._observe(pods)
        self._overcommit(pods, nodes, now)
        for view in gang_views(pods).values():
            self._gang(view, now)
        self._bound_uids = {p["metadata"]["uid"] for p in pods if kubeio.node_name(p)}

    def _observe(self, pods: list[dict]) -> None:
        current = {}
        for pod in pods:
            found = gang_of(pod)
            if not found:
                continue
            meta = pod["metadata"]
            state = (meta["uid"], kubeio.node_name(pod), kubeio.terminating(pod),
                     (meta.get("annotations") or {}).get(MASTER_ADDR))
            current[meta["name"]] = (found[0], state)
            before = self._pods.get(meta["name"])
            if before is None or before[1] != state:
                self.timeline.note(found[0], self._describe(meta["name"], before[1] if before else None, state))
        for name, (gang, _) in self._pods.items():
            if name not in current:
                self.timeline.note(gang, f"seen: {name} gone")
        self._pods = current

    @staticmethod
    def _describe(name: str, before: tuple | None, state: tuple) -> str:
        uid, node, terminating, addr = state
        if terminating:
            return f"seen: {name} terminating" + (f" (bound to {node})" if node else "")
        if node:
            return f"seen: {name} bound to {node} (master-addr {addr or '<none>'})"
        return f"seen: {name} pending" + (" (new pod)" if before is None or before[0] != uid else "")

    def _overcommit(self, pods: list[dict], nodes: list[dict], now: float) -> None:
        """Every resource (GPUs, cpu, memory, pods, extended resources) of the bound, unfinished pods of each node
        against its capacity, and a pod newly bound against an allocatable unchanged for `ALLOCATABLE_STABLE` s."""
        capacity, allocatable = {}, {}
        for node in nodes:
            name = node["metadata"]["name"]
            capacity[name] = node_resources(node, "capacity")
            allocatable[name] = node_resources(node, "allocatable")
            known = self._allocatable.get(name)
            if known is None or known[0] != allocatable[name]:
                self._allocatable[name] = (allocatable[name], now)
        used: dict[str, list[dict]] = defaultdict(list)
        for pod in pods:
            if kubeio.node_name(pod) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                used[kubeio.node_name(pod)].append(pod)
        for node, on_node in used.items():
            if node not in capacity:
                continue
            takes = [(p, pod_resources(p)) for p in on_node]
            total: dict[str, Decimal] = defaultdict(Decimal)
            for _, resources in takes:
                for resource, value in resources.items():
                    total[resource] += value
            names = tuple(sorted({gang_of(p)[0] for p in on_node if gang_of(p)}))
            listing = ", ".join(f"{p['metadata']['name']}({_short(r)}{',terminating' if kubeio.terminating(p) else ''}"
                                f"{_when(p)})" for p, r in takes)
            for resource, value in sorted(total.items()):
                if value > 0 and value > capacity[node].get(resource, Decimal(0)) and resource in capacity[node]:
                    self.violations.add("overcommit-capacity", f"{node}:{resource}",
                                        f"{node}: {value} {resource} requested by bound pods > capacity "
                                        f"{capacity[node].get(resource)}: {listing}", names)
            fresh = [p for p, _ in takes if p["metadata"]["uid"] not in self._bound_uids]
            stable = now - self._allocatable[node][1] >= ALLOCATABLE_STABLE
            over = [r for r, v in sorted(total.items()) if v > 0 and r in allocatable[node]
                    and v > allocatable[node][r]]
            if fresh and stable and over and self._bound_uids:
                self.violations.add("overcommit-allocatable", f"{node}:{fresh[0]['metadata']['name']}",
                                    f"{', '.join(p['metadata']['name'] for p in fresh)} newly bound to {node}: "
                                    + "; ".join(f"{total[r]} {r} requested > allocatable {allocatable[node][r]}"
                                                for r in over)
                                    + f" (unchanged for {now - self._allocatable[node][1]:.0f}s): {listing}", names)

    def _gang(self, view: GangView, now: float) -> None:
        if view.whole():
            self.whole_seen.add(view.name)
        if view.partial():
            since = self.partial_since.setdefault(view.name, now)
            if now - since > self.longest_partial:
                self.longest_partial, self.longest_partial_gang = now - since, view.name
            if now - since > self.partial_limit:
                bound = sorted(view.bound())
                self.violations.add("partly-bound", view.name,
                                    f"{view.name}: members {bound} of {view.size} (whole from {view.min_pods}) bound "
                                    f"for {now - since:.0f}s > {self.partial_limit:.0f}s", (view.name,))
        else:
            self.partial_since.pop(view.name, None)
        for kind, problem in (("ranks", check_ranks(view)), ("rendezvous", check_rendezvous(view))):
            if problem:
                self.violations.add(kind, view.name, f"{view.name}: {problem}", (view.name,))

    def forget_missing(self, present: set[str]) -> None:
        """Drop partial timers of gangs no longer present."""
        for name in set(self.partial_since) - present:
            del self.partial_since[name]


class Checker:
    """The thread: every `interval` s a nodes and a pods snapshot through `PodInvariants`, then `signals` (5xx in
    kube-scheduler's log, `/gangs` and `/metrics` on the leader)."""

    def __init__(self, kubeconfig: str, timeline: Timeline, violations: Violations, pod_invariants: PodInvariants,
                 signals: Any, interval: float = 0.75) -> None:
        self.kubeconfig, self.timeline, self.violations = kubeconfig, timeline, violations
        self.pods, self.signals, self.interval = pod_invariants, signals, interval
        self.polls = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-checker", daemon=True)

    def start(self) -> "Checker":
        """Start polling."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling (after one last round)."""
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        core = kubeio.core(kubeio.new_client(self.kubeconfig))
        while True:
            began = time.monotonic()
            try:
                nodes = kubeio.list_nodes(core)
                pods = kubeio.list_pods(core)
                self.pods.check(pods, nodes, time.monotonic())
                self.pods.forget_missing({found[0] for found in map(gang_of, pods) if found})
                self.polls += 1
            except Exception as exc:  # noqa: BLE001 - the API server answered badly: count it, poll again
                self.errors += 1
                self.timeline.cluster(f"checker: API error {type(exc).__name__}: {str(exc)[:160]}")
            self.signals.check(time.monotonic())
            if self._stop.is_set():
                return
            self._stop.wait(max(0.05, self.interval - (time.monotonic() - began)))
