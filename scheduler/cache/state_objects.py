"""The gang objects part of `ClusterState`: PodGroups, JobSets, Jobs, Workloads... by (API group, kind, namespace, name).

A mixin so `scheduler.cache.state` stays one screenful per concern; it uses the state's `lock`, `objects`,
`_groups_by_kind`, `_objects_epoch` and `_rebuild_topology`.
"""

from __future__ import annotations

from scheduler.gangs.sources import api_group, split_kind
from topology.explicit import is_hypernode, is_topology_object


def _meta(obj: dict) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "")


class GangObjectsMixin:
    """Gang objects (and Kueue Topology / Volcano HyperNode objects, which rebuild the topology)."""

    # ----- gang objects ------------------------------------------------------------------------
    @staticmethod
    def _object_key(obj: dict) -> tuple[str, str, str, str]:
        namespace, name = _meta(obj)
        return api_group(obj.get("apiVersion")), str(obj.get("kind") or ""), namespace, name

    def _store_object(self, obj: dict) -> None:
        key = self._object_key(obj)
        self.objects[key] = obj
        self._groups_by_kind.setdefault(key[1], set()).add(key[0])

    def _keys_for(self, kind: str, namespace: str, name: str) -> list[tuple[str, str, str, str]]:
        """Candidate keys: the exact group of a `group/Kind`, else every group seen with that kind (sorted)."""
        group, plain = split_kind(kind)
        groups = [group] if group is not None else sorted(self._groups_by_kind.get(plain, ()))
        return [(g, plain, namespace or "default", name) for g in groups]

    def upsert_object(self, obj: dict) -> None:
        """Add or update a gang object (or a Kueue Topology / Volcano HyperNode, which rebuilds)."""
        with self.lock:
            self._store_object(obj)
            self._objects_epoch += 1
            if is_topology_object(obj) or is_hypernode(obj):
                self._rebuild_topology()

    def delete_object(self, kind: str, namespace: str, name: str) -> None:
        """Forget a gang object (`kind` as `group/Kind`; a plain kind forgets it in every group)."""
        with self.lock:
            removed = [self.objects.pop(key) for key in self._keys_for(kind, namespace, name) if key in self.objects]
            self._objects_epoch += 1
            if any(is_topology_object(obj) or is_hypernode(obj) for obj in removed):
                self._rebuild_topology()

    def get_object(self, kind: str, namespace: str, name: str) -> dict | None:
        """The cached object, or None; `kind` is `group/Kind` (exact) or a plain kind (any group).

        This is the `lookup` given to gang sources, which ask with the group-qualified kind.
        """
        with self.lock:
            for key in self._keys_for(kind, namespace, name):
                obj = self.objects.get(key)
                if obj is not None:
                    return obj
            return None

