"""kube-scheduler extender/v1 verbs: decode the wire body, ask `GangScheduler`, encode the reply.

Every handler takes the raw request body and returns `(status, reply bytes)`.  A body that does
not decode is a 400 with a one-line reason; a protocol-level problem with a pod (disagreeing
gang annotations, unknown gang) is an HTTP 200 with the protocol's `Error` field, which
kube-scheduler shows in the pod's events.  Node names the state does not know fail with a reason.
"""

from __future__ import annotations

import msgspec

from scheduler.service.verbs import wire
from scheduler.service.verbs.scheduling import GangScheduler

BAD_REQUEST = 400


def _bad(reason: str) -> tuple[int, bytes]:
    return BAD_REQUEST, wire.ENCODER.encode({"error": " ".join(reason.split())})


def _decode(decoder: msgspec.json.Decoder, body: bytes) -> tuple[object | None, tuple[int, bytes] | None]:
    try:
        return decoder.decode(body), None
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return None, _bad(f"malformed request body: {exc}")
    except RecursionError:
        return None, _bad("malformed request body: JSON nested too deeply")


def _is_null(raw: msgspec.Raw) -> bool:
    """Whether a raw JSON value is `null` (without copying a 100 kB node-name list to find out)."""
    return len(raw) == 4 and bytes(raw) == b"null"


def _node_names(args: wire.ExtenderArgs) -> tuple[list[str] | wire.OfferedNames, bool]:
    """(node names, nodeCacheCapable) of a filter/prioritize request."""
    if not _is_null(args.NodeNames):
        return wire.OfferedNames(args.NodeNames), True
    items = args.Nodes.items if args.Nodes is not None and args.Nodes.items is not None else []
    return [item.metadata.name for item in items], False


def _args(body: bytes) -> tuple[wire.ExtenderArgs | None, tuple[int, bytes] | None]:
    args, error = _decode(wire.DECODE_ARGS, body)
    if error is None and not isinstance(getattr(args, "Pod", None), dict):
        return None, _bad("malformed request body: Pod is missing")
    if error is None and (reason := wire.pod_error(args.Pod)):
        return None, _bad(reason)
    if error is None and args.Nodes is None and _is_null(args.NodeNames):
        return None, _bad("malformed request body: neither Nodes nor NodeNames is set")
    return args, error


def handle_filter(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """`POST /filter`: the nodes the pod may use, in the request's own mode."""
    args, error = _args(body)
    if error is not None:
        return error
    names, cache_capable = _node_names(args)
    try:
        decision = scheduler.filter(args.Pod, names)
    except msgspec.ValidationError as exc:
        return _bad(f"malformed request body: NodeNames: {exc}")
    return 200, _filter_reply(decision.nodes, decision.failed, decision.error, cache_capable)


def _filter_reply(nodes: list[str], failed: dict[str, str], error: str, cache_capable: bool) -> bytes:
    """An `ExtenderFilterResult` in the request's own mode (node names, or Node items); no nodes with an `error`."""
    result = wire.ExtenderFilterResult(FailedNodes=failed, Error=error)
    if error:
        return wire.ENCODER.encode(result)
    if cache_capable:
        result.NodeNames = nodes
    else:
        result.Nodes = wire.NodeList([wire.NodeItem(wire.ObjectMeta(n)) for n in nodes])
    return wire.ENCODER.encode(result)


def handle_guard(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """`POST /guard`: the nodes a pod kube-scheduler places in its own cycle may use beside the gang members meshfit
    holds, binds or just bound there (`scheduler.service.verbs.room_guard`), in the request's own mode."""
    args, error = _args(body)
    if error is not None:
        return error
    names, cache_capable = _node_names(args)
    try:
        nodes, failed = scheduler.guard(args.Pod, names)
    except msgspec.ValidationError as exc:
        return _bad(f"malformed request body: NodeNames: {exc}")
    if nodes is None:
        try:
            nodes = list(names)  # every offered node (decoded all the same: a malformed list is a 400)
        except msgspec.ValidationError as exc:
            return _bad(f"malformed request body: NodeNames: {exc}")
        if cache_capable:  # the request's own list, not encoded again
            return 200, b'{"NodeNames":' + names.raw + b',"FailedNodes":{},"Error":""}'
    return 200, _filter_reply(nodes, failed, "", cache_capable)


def handle_prioritize(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """`POST /prioritize`: a JSON array of `{"Host", "Score"}` with integer scores 0..10."""
    args, error = _args(body)
    if error is not None:
        return error
    names, _ = _node_names(args)
    try:
        scores = scheduler.prioritize(args.Pod, names)
    except msgspec.ValidationError as exc:
        return _bad(f"malformed request body: NodeNames: {exc}")
    return 200, wire.ENCODER.encode([wire.HostPriority(host, int(score)) for host, score in scores])


def handle_bind(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """`POST /bind`: create the Binding (with rank annotations); `Error` non-empty on failure."""
    args, error = _decode(wire.DECODE_BINDING, body)
    if error is not None:
        return error
    if not args.PodName or not args.Node:
        return _bad("malformed request body: PodName and Node are required")
    message = scheduler.bind(args.PodNamespace or "default", args.PodName, args.PodUID, args.Node)
    return 200, wire.ENCODER.encode(wire.ExtenderBindingResult(message))


def handle_preempt(scheduler: GangScheduler, body: bytes) -> tuple[int, bytes]:
    """`POST /preempt`: nothing for a gang member (meshfit preempts whole gangs itself); for other pods the
    scheduler's victims minus nodes that would evict part of a gang."""
    args, error = _decode(wire.DECODE_PREEMPTION, body)
    if error is not None:
        return error
    victims: dict[str, list[str]] = {}
    full: dict[str, dict] = {}
    for node, meta in (args.NodeNameToMetaVictims or {}).items():
        victims[node] = [p.UID for p in meta.Pods]
    for node, given in (args.NodeNameToVictims or {}).items():
        uids = []
        for i, pod in enumerate(given.Pods):
            if reason := wire.pod_error(pod, f"NodeNameToVictims[{node}].Pods[{i}]"):
                return _bad(reason)
            uid = str((pod.get("metadata") or {}).get("uid") or "")
            full[uid] = pod
            uids.append(uid)
        victims[node] = uids
    pdb = {node: v.NumPDBViolations for node, v in (args.NodeNameToMetaVictims or {}).items()}
    pdb.update({node: v.NumPDBViolations for node, v in (args.NodeNameToVictims or {}).items()})
    pod = args.Pod if isinstance(args.Pod, dict) and not wire.pod_error(args.Pod) else None
    kept = scheduler.preempt(victims, full, pod)
    reply = wire.ExtenderPreemptionResult({
        node: wire.MetaVictims([wire.MetaPod(uid) for uid in uids], pdb.get(node, 0))
        for node, uids in kept.items()})
    return 200, wire.ENCODER.encode(reply)
