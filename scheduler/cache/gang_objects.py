"""`GangObjects`: the gang objects `ClusterState` holds -- PodGroups, JobSets, Jobs, Workloads... by (API group,
kind, namespace, name) -- with the epoch that pod fingerprints carry, and the Kueue Topology / Volcano HyperNode
objects whose changes rebuild the topology (through the callback it is given).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable, Iterable

from scheduler.gangs.sources import api_group, split_kind
from topology.explicit import is_hypernode, is_topology_object

ObjectKey = tuple[str, str, str, str]
"""(API group, kind, namespace, name)."""


def _meta(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


def shapes_topology(obj: dict) -> bool:
    """True for a Kueue Topology or a Volcano HyperNode: an object the topology is built from."""
    return is_topology_object(obj) or is_hypernode(obj)


class GangObjects:
    """Gang objects by (API group, kind, namespace, name); a topology object's change calls `topology_changed`."""

    def __init__(self, lock: AbstractContextManager[Any], topology_changed: Callable[[], None]) -> None:
        self.lock = lock
        """The state's lock (re-entrant): every read and change is made under it."""
        self.topology_changed = topology_changed
        """Called (under the lock) when a Kueue Topology or Volcano HyperNode was added, changed or removed."""
        self.objects: dict[ObjectKey, dict] = {}
        """(API group, kind, namespace, name) -> object."""
        self.groups_by_kind: dict[str, set[str]] = {}
        """Kind -> every API group seen with it (a plain kind is looked up in each)."""
        self.epoch = 0
        """Bumped on every change (a pod's cached membership is read again after one)."""

    @staticmethod
    def _key(obj: dict) -> ObjectKey:
        namespace, name = _meta(obj)
        return api_group(obj.get("apiVersion")), str(obj.get("kind") or ""), namespace, name

    def _store(self, obj: dict) -> None:
        key = self._key(obj)
        self.objects[key] = obj
        self.groups_by_kind.setdefault(key[1], set()).add(key[0])

    def _keys_for(self, kind: str, namespace: str, name: str) -> list[ObjectKey]:
        """Candidate keys: the exact group of a `group/Kind`, else every group seen with that kind (sorted)."""
        group, plain = split_kind(kind)
        groups = [group] if group is not None else sorted(self.groups_by_kind.get(plain, ()))
        return [(g, plain, namespace or "default", name) for g in groups]

    def replace(self, objects: Iterable[dict]) -> None:
        """Hold exactly `objects` (a relist); the caller rebuilds the topology itself."""
        self.objects, self.groups_by_kind = {}, {}
        self.epoch += 1
        for obj in objects:
            self._store(obj)

    def upsert(self, obj: dict) -> None:
        """Add or update a gang object (or a Kueue Topology / Volcano HyperNode, which rebuilds)."""
        with self.lock:
            self._store(obj)
            self.epoch += 1
            if shapes_topology(obj):
                self.topology_changed()

    def delete(self, kind: str, namespace: str, name: str) -> None:
        """Forget a gang object (`kind` as `group/Kind`; a plain kind forgets it in every group)."""
        with self.lock:
            removed = [self.objects.pop(key) for key in self._keys_for(kind, namespace, name) if key in self.objects]
            self.epoch += 1
            if any(shapes_topology(obj) for obj in removed):
                self.topology_changed()

    def get(self, kind: str, namespace: str, name: str) -> dict | None:
        """The cached object, or None; `kind` is `group/Kind` (exact) or a plain kind (any group).

        This is the `lookup` given to gang sources, which ask with the group-qualified kind.
        """
        with self.lock:
            for key in self._keys_for(kind, namespace, name):
                obj = self.objects.get(key)
                if obj is not None:
                    return obj
            return None

    def topology_objects(self) -> list[dict]:
        """The Kueue Topology and Volcano HyperNode objects held."""
        return [o for o in self.objects.values() if shapes_topology(o)]
