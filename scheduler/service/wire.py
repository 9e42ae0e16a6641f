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
    """Filter and prioritize request: `Nodes` (nodeCacheCapable=false) or `NodeNames` (true)."""

    Pod: dict | None = None
    Nodes: NodeList | None = None
    NodeNames: list[str] | None = None


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


ENCODER = msgspec.json.Encoder()
DECODE_ARGS = msgspec.json.Decoder(ExtenderArgs)
DECODE_BINDING = msgspec.json.Decoder(ExtenderBindingArgs)
DECODE_PREEMPTION = msgspec.json.Decoder(ExtenderPreemptionArgs)
