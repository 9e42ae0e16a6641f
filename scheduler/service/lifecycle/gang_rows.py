"""`GET /gangs` rows and the gang-state counts behind the metrics, read from a `GangRowSource` (the gang lifecycle)."""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Iterable, Protocol

from scheduler.gangs.ledger import Reservation
from scheduler.gangs.profile import INVALID_STATE, invalid_reason


class GangRowSource(Protocol):
    """What the rows are read from (`scheduler.service.lifecycle.gang_lifecycle.GangLifecycle` provides it)."""

    state: Any
    queue: Any
    rolling_back: dict[str, set[str]]
    row_extras: list[Callable[[str, dict], None]]

    def members(self, gang_key: str) -> list[Any]:
        """Known members of a gang."""
        ...


def gang_counts(lifecycle: GangRowSource) -> tuple[Counter, Counter]:
    """(gangs by state as in `gang_rows`, waiting gangs by priority), for the metrics (call under the lock)."""
    by_state, by_priority = Counter(), Counter()
    for row in gang_rows(lifecycle):
        by_state[row["state"]] += 1
        if row["state"] == "waiting":
            by_priority[row["priority"]] += 1
    return by_state, by_priority


def gang_rows(lifecycle: GangRowSource) -> list[dict]:
    """Waiting gangs in queue order, then reserved / bound ones (call under the lock)."""
    rows = [w.to_json(i) for i, w in enumerate(lifecycle.queue.ordered(), 1)]
    ledger = lifecycle.state.ledger.entries
    for key in sorted((set(ledger) | set(lifecycle.rolling_back)) - set(lifecycle.queue.entries)):
        members = lifecycle.members(key)
        row = {"gang": key, "position": None, "priority": max((r.priority for r in members), default=0),
               "bound": sum(1 for r in members if r.node)}
        entry = ledger.get(key)
        if entry is not None:
            row.update(pods=len(entry.gang.pods), gpus_per_pod=entry.gang.gpus_per_pod)
            arrival = lifecycle.queue.arrivals.get(key)
            row["arrived_at"] = arrival[1] if arrival is not None else entry.created_at
            row["state"], row["reason"] = entry_state(entry)
        if key in lifecycle.rolling_back:
            row["state"], row["reason"] = "rolling-back", "evicted members terminating; placed afresh afterwards"
        for extend in lifecycle.row_extras:
            extend(key, row)
        rows.append(row)
    add_invalid_rows(rows, lifecycle.state.invalid_pods.values())
    return rows


def add_invalid_rows(rows: list[dict], records: Iterable[Any]) -> None:
    """Show the gangs of pods whose spec cannot be read as `invalid`, with the hint, as `meshfit gangs` does
    through the kubeconfig: a new row per gang, or the gang's row (one bad member) turned invalid."""
    by_gang: dict[str, list[Any]] = {}
    for record in records:
        if not record.terminating:
            by_gang.setdefault(record.invalid_gang, []).append(record)
    by_key = {row["gang"]: row for row in rows}
    for key in sorted(by_gang):
        members = by_gang[key]
        row = by_key.get(key)
        if row is None:
            row = {"gang": key, "position": None, "priority": max(r.priority for r in members),
                   "pods": len(members), "gpus_per_pod": max(r.gpus for r in members),
                   "bound": sum(1 for r in members if r.node), "arrived_at": None}
            rows.append(row)
        row["position"] = None
        row["state"], row["reason"] = INVALID_STATE, invalid_reason(str(members[0].member_error))


def entry_state(entry: Reservation) -> tuple[str, str]:
    """(state, reason in plain words) of a ledger entry for `GET /gangs`."""
    bound, size = entry.bound_count(), len(entry.gang.pods)
    if entry.status == "bound":
        return "bound", "all members bound"
    if entry.status == "reserved" and not entry.has_bound():
        return "reserved", "reserved; members being scheduled onto their nodes"
    if entry.status == "reserved":
        return "binding", f"{bound} of {size} bound, the rest held for them"
    return "incomplete", f"{bound} of {size} bound, {len(entry.missing_indices())} member(s) being re-placed"
