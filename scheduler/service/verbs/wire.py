"""kube-scheduler extender/v1 wire models (msgspec Structs named and keyed exactly as the Go types).

The scheduler sends Go field names with explicit nulls; Pod and Node objects inside are normal
Kubernetes JSON.  Only what meshfit reads is declared (unknown fields are skipped while decoding),
except `Pod`, kept as a plain dict for the gang sources.  Replies always carry every key.
"""

from __future__ import annotations

import msgspec


class ObjectMeta(msgspec.Struct):
    """`metadata` of a Node: only the name matters."""

    name: str = ""


class NodeItem(msgspec.Struct):
    """One Node of a NodeList (reply items carry just `metadata.name`)."""

    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


class NodeList(msgspec.Struct):
    """A v1.NodeList as the extender sees it."""

    items: list[NodeItem] | None = None
    metadata: dict = msgspec.field(default_factory=dict)


class ExtenderArgs(msgspec.Struct):
    """Filter and prioritize request: `Nodes` (nodeCacheCapable=false) or `NodeNames` (true).

    `NodeNames` stays raw JSON until needed: a reserved gang member only asks whether its one
    node is offered, which `OfferedNames` answers by a byte search instead of decoding 5,000 names.
    """

    Pod: dict | None = None
    Nodes: NodeList | None = None
    NodeNames: msgspec.Raw = msgspec.field(default_factory=lambda: msgspec.Raw(b"null"))


_NAMES = msgspec.json.Decoder(list[str] | None)


class OfferedNames:
    """The `NodeNames` of a request, decoded on first iteration; `in` works on the raw bytes."""

    def __init__(self, raw: bytes) -> None:
        self.raw = bytes(raw)
        self._names: list[str] | None = None

    def names(self) -> list[str]:
        """Every name (ValidationError if `NodeNames` is not a list of strings)."""
        if self._names is None:
            self._names = _NAMES.decode(self.raw) or []
        return self._names

    def __contains__(self, name: object) -> bool:
        if self._names is not None or not isinstance(name, str) or '"' in name or "\\" in name:
            return name in self.names()
        needle = b'"' + name.encode() + b'"'
        start = self.raw.find(needle)
        while start > 0 and self.raw[start - 1:start] == b"\\":
            start = self.raw.find(needle, start + 1)
        return start >= 0

    def __iter__(self):
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())


class ExtenderFilterResult(msgspec.Struct):
    """Filter reply; with nodeCacheCapable=false only `Nodes` is read back."""

    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = msgspec.field(default_factory=dict)
    FailedAndUnresolvableNodes: dict[str, str] = msgspec.field(default_factory=dict)
    Error: str = ""


class HostPriority(msgspec.Struct):
    """One prioritize score (a JSON integer 0..10: a float is dropped by the scheduler)."""

    Host: str
    Score: int


class ExtenderBindingArgs(msgspec.Struct):
    """Bind request."""

    PodName: str
    PodNamespace: str
    PodUID: str
    Node: str


class ExtenderBindingResult(msgspec.Struct):
    """Bind reply; a non-empty `Error` fails the bind and requeues the pod."""

    Error: str = ""


class MetaPod(msgspec.Struct):
    """A victim by UID."""

    UID: str


class MetaVictims(msgspec.Struct):
    """Victims on one node, by UID."""

    Pods: list[MetaPod] = msgspec.field(default_factory=list)
    NumPDBViolations: int = 0


class Victims(msgspec.Struct):
    """Victims on one node, as full pods (nodeCacheCapable=false)."""

    Pods: list[dict] = msgspec.field(default_factory=list)
    NumPDBViolations: int = 0


class ExtenderPreemptionArgs(msgspec.Struct):
    """Preempt request: full victims (nodeCacheCapable=false) or meta victims (true)."""

    Pod: dict | None = None
    NodeNameToVictims: dict[str, Victims] | None = None
    NodeNameToMetaVictims: dict[str, MetaVictims] | None = None


class ExtenderPreemptionResult(msgspec.Struct):
    """Preempt reply, always in the meta form."""

    NodeNameToMetaVictims: dict[str, MetaVictims] = msgspec.field(default_factory=dict)


# ----- the shape of a Kubernetes Pod, as far as meshfit reads it ------------------------------------
Quantity = str | int | float


class _OwnerRef(msgspec.Struct):
    apiVersion: str | None = None
    kind: str | None = None
    name: str | None = None
    uid: str | None = None
    controller: bool | None = None


class _PodMeta(msgspec.Struct):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resourceVersion: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    ownerReferences: list[_OwnerRef] | None = None


class _Resources(msgspec.Struct):
    requests: dict[str, Quantity] | None = None
    limits: dict[str, Quantity] | None = None


class _Container(msgspec.Struct):
    name: str | None = None
    resources: _Resources | None = None
    restartPolicy: str | None = None


class _PodSpec(msgspec.Struct):
    nodeName: str | None = None
    containers: list[_Container] | None = None
    initContainers: list[_Container] | None = None
    overhead: dict[str, Quantity] | None = None


class _PodStatus(msgspec.Struct):
    phase: str | None = None


class PodShape(msgspec.Struct):
    """The fields of a v1.Pod that meshfit reads, with their Kubernetes types (everything else is ignored)."""

    metadata: _PodMeta | None = None
    spec: _PodSpec | None = None
    status: _PodStatus | None = None


class _PodGroupMeta(msgspec.Struct):
    name: str | None = None
    namespace: str | None = None
    annotations: dict[str, str] | None = None


class _PodGroupSpec(msgspec.Struct):
    minMember: int | None = None
    minResources: dict[str, Quantity] | None = None


class PodGroupShape(msgspec.Struct):
    """The fields of a Volcano PodGroup that meshfit reads, with their types."""

    metadata: _PodGroupMeta | None = None
    spec: _PodGroupSpec | None = None


def shape_error(obj: object, shape: type, what: str) -> str:
    """"" when `obj` (a decoded JSON value) has `shape`'s field types, else a one-line reason naming the field.

    Checked where a request hands meshfit a Pod or PodGroup, so the code reading them can rely on
    `metadata`/`spec`/`status`/`containers` being objects and lists of the right kind.
    """
    try:
        msgspec.convert(obj, shape, strict=True)
    except msgspec.ValidationError as exc:
        return f"malformed request body: {what}: {exc}".replace("`$", f"`{what}")
    return ""


def pod_error(pod: object, what: str = "Pod") -> str:
    """`shape_error` of a Pod ("" when well-typed)."""
    return shape_error(pod, PodShape, what)


ENCODER = msgspec.json.Encoder()
DECODE_ARGS = msgspec.json.Decoder(ExtenderArgs)
DECODE_BINDING = msgspec.json.Decoder(ExtenderBindingArgs)
DECODE_PREEMPTION = msgspec.json.Decoder(ExtenderPreemptionArgs)
