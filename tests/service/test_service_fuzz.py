"""Fuzz every HTTP endpoint of an in-process app: random, truncated, oversized, wrong-typed and deeply nested
bodies never get a 5xx, and the server still places a valid gang afterwards.  Bounded to ~20 s."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from starlette.testclient import TestClient

from scheduler.service.app import build_scheduler, create_app
from scheduler.service.binding.binder_memory import MemoryBinder
from tests.service.helpers import filter_nodes, gang_pod, make_pod, make_service
from tests.sizes import examples

MAX_BODY = 8192
VOLCANO = ["onSessionOpen", "onSessionClose", "jobEnqueueable", "jobReady", "predicate", "prioritize",
           "preemptable", "reclaimable", "queueOverused"]
POSTS = ([f"{prefix}/{verb}" for prefix in ("", "/scheduler") for verb in ("filter", "prioritize", "bind", "preempt")]
         + [f"/volcano/{verb}" for verb in VOLCANO])
GETS = ["/metrics", "/reservations", "/gangs", "/healthz", "/readyz", "/ranktables/default/g0", "/ranktables/x/y"]

SERVICE = make_service(nodes=None)
SERVICE.client = TestClient(create_app(*build_scheduler(SERVICE.state, MemoryBinder(), "first-fit"),
                                       max_body_bytes=MAX_BODY))
NODE_NAMES = sorted(SERVICE.state.topology.node_by_name)

# ----- values that stress the readers ---------------------------------------------------------------
NASTY_TEXT = st.sampled_from(["", "0", "-1", "1", "2", "3", "8", "1000000000", "1e999999999", "nan", "inf", "tp=8,dp=512",
                              "tp=8,dp=1000000000", "tp=0", "dp=inf", "x", "9" * 5000, "default", "n-0-0", "g0"])
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True), NASTY_TEXT,
                    st.text(max_size=20))
JSON = st.recursive(SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                     st.dictionaries(st.text(max_size=8) | NASTY_TEXT, inner,
                                                                     max_size=4)), max_leaves=20)
ANNOTATION_KEYS = st.sampled_from(["meshfit.io/gang-size", "meshfit.io/pod-index", "meshfit.io/parallelism",
                                   "meshfit.io/rank-order", "meshfit.io/model", "meshfit.io/required-level",
                                   "scheduling.k8s.io/group-name", "batch.kubernetes.io/job-completion-index"])
STRING_MAP = st.dictionaries(ANNOTATION_KEYS | st.sampled_from(["meshfit.io/gang"]), NASTY_TEXT, max_size=4)


def maybe(strategy):
    """`strategy`, or a value of any JSON type in its place (wrong-typed fields)."""
    return st.one_of(strategy, JSON)


GPU_QUANTITIES = st.sampled_from(["0", "1", "8", "8", "16", "-1", "1.5", "x", "1e999999999", 8, 1])
WELL_TYPED_PODS = st.fixed_dictionaries({
    "metadata": st.fixed_dictionaries({
        "name": st.sampled_from(["g0-0", "g0-1", "g1-0", "p", "q"]), "namespace": st.sampled_from(["default", "ns"]),
        "uid": st.sampled_from(["u0", "u1", "u2", "u3"]),
        "labels": st.dictionaries(st.sampled_from(["meshfit.io/gang"]), st.sampled_from(["g0", "g1"]), max_size=1),
        "annotations": st.dictionaries(ANNOTATION_KEYS, NASTY_TEXT | st.sampled_from(["0", "1", "2", "4"]),
                                       max_size=3)}),
    "spec": st.fixed_dictionaries({"containers": st.lists(st.fixed_dictionaries({"resources": st.fixed_dictionaries(
        {"requests": st.dictionaries(st.just("nvidia.com/gpu"), GPU_QUANTITIES, max_size=1)})}), min_size=1,
        max_size=2)}, optional={"nodeName": st.sampled_from(NODE_NAMES)}),
    "status": st.fixed_dictionaries({"phase": st.sampled_from(["Pending", "Running", "Failed"])})})
ILL_TYPED_PODS = st.fixed_dictionaries({}, optional={
    "metadata": maybe(st.fixed_dictionaries({}, optional={
        "name": maybe(NASTY_TEXT), "uid": maybe(NASTY_TEXT), "labels": maybe(STRING_MAP), "annotations": maybe(STRING_MAP),
        "ownerReferences": maybe(st.lists(maybe(st.fixed_dictionaries(
            {"kind": st.sampled_from(["Job", "PodGroup", "JobSet"]), "name": NASTY_TEXT})), max_size=2))})),
    "spec": maybe(st.fixed_dictionaries({}, optional={
        "nodeName": maybe(st.sampled_from(NODE_NAMES)),
        "containers": maybe(st.lists(maybe(st.fixed_dictionaries({"resources": maybe(st.fixed_dictionaries(
            {"requests": maybe(st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu"]), SCALARS, max_size=2))}))})),
            max_size=2))})),
    "status": maybe(st.fixed_dictionaries({}, optional={"phase": maybe(st.sampled_from(["Pending", "Running"]))})),
})
GANG_PODS = st.builds(lambda gang, index, size, gpus, par, ns: gang_pod(gang, min(index, size - 1), size, gpus, par,
                                                                      namespace=ns, uid=f"{ns}-{gang}-{index}"),
                      st.sampled_from(["g0", "g1", "g2"]), st.integers(0, 3), st.integers(1, 4), st.sampled_from([1, 8]),
                      st.sampled_from([None, "tp=8", "tp=8,dp=512", "tp=4,pp=2"]), st.sampled_from(["default", "ns"]))
"""Plausible gang members, so that filters reserve and binds bind."""
PODS = st.one_of(GANG_PODS, GANG_PODS, WELL_TYPED_PODS, ILL_TYPED_PODS)


NAMES = st.one_of(st.lists(st.sampled_from(NODE_NAMES), max_size=8), st.just(NODE_NAMES), JSON)
FILTER = st.one_of(
    st.fixed_dictionaries({"Pod": PODS, "NodeNames": NAMES}),
    st.fixed_dictionaries({"Pod": PODS, "Nodes": maybe(st.fixed_dictionaries({"items": maybe(st.lists(
        st.fixed_dictionaries({"metadata": maybe(st.fixed_dictionaries({"name": st.sampled_from(NODE_NAMES)}))}),
        max_size=3))}))}))
BIND = st.fixed_dictionaries({"PodName": maybe(st.sampled_from(["g0-0", "g0-1", "g1-0", "g2-0", "p", "q"])),
                              "PodNamespace": maybe(st.sampled_from(["default", "ns"])),
                              "PodUID": maybe(st.sampled_from(["u0", "u1", "default-g0-0", "default-g0-1"])),
                              "Node": maybe(st.sampled_from(NODE_NAMES + ["nowhere"]))})
PREEMPT = st.fixed_dictionaries({}, optional={
    "Pod": PODS,
    "NodeNameToVictims": maybe(st.dictionaries(st.sampled_from(NODE_NAMES), maybe(
        st.fixed_dictionaries({"Pods": maybe(st.lists(PODS, max_size=2))})), max_size=2)),
    "NodeNameToMetaVictims": maybe(st.dictionaries(st.sampled_from(NODE_NAMES), maybe(
        st.fixed_dictionaries({"Pods": maybe(st.lists(maybe(st.fixed_dictionaries(
            {"UID": st.sampled_from(["u0", "u1", "u2", "x"])})), max_size=2))})), max_size=2))})
TASKS = st.fixed_dictionaries({}, optional={"UID": maybe(st.sampled_from(["u0", "u1", "u2"])), "Name": NASTY_TEXT,
                                            "Pod": PODS})
PODGROUPS = st.fixed_dictionaries({}, optional={
    "metadata": maybe(st.fixed_dictionaries({}, optional={"annotations": maybe(STRING_MAP)})),
    "spec": maybe(st.fixed_dictionaries({}, optional={
        "minMember": maybe(st.integers(-5, 2**40)),
        "minResources": maybe(st.dictionaries(st.just("nvidia.com/gpu"), GPU_QUANTITIES | SCALARS, max_size=1))}))})
TASK_NODE = st.fixed_dictionaries({"task": maybe(TASKS)}, optional={
    "node": maybe(st.fixed_dictionaries({"Name": maybe(st.sampled_from(NODE_NAMES))})),
    "nodes": maybe(st.lists(st.fixed_dictionaries({"Name": st.sampled_from(NODE_NAMES)}), max_size=3))})
JOB = st.fixed_dictionaries({"job": maybe(st.fixed_dictionaries({}, optional={
    "Name": maybe(st.sampled_from(["j", "g0"])), "Namespace": maybe(st.sampled_from(["default", "ns"])),
    "MinAvailable": maybe(st.integers(-5, 2**40)), "Tasks": maybe(st.dictionaries(NASTY_TEXT, TASKS, max_size=2)),
    "PodGroup": maybe(PODGROUPS)}))})
EVICT = st.fixed_dictionaries({}, optional={"evictor": maybe(TASKS), "evictees": maybe(st.lists(maybe(TASKS), max_size=3))})
SPECIFIC = {"filter": FILTER, "prioritize": FILTER, "bind": BIND, "preempt": PREEMPT, "predicate": TASK_NODE,
            "jobEnqueueable": JOB, "jobReady": JOB, "preemptable": EVICT, "reclaimable": EVICT}
"""Bodies shaped like what each verb expects, with nasty values and wrong-typed fields inside."""
ANY_SHAPED = st.one_of(*SPECIFIC.values())


def encoded(value) -> bytes:
    """JSON bytes of a generated value (NaN and infinities as JSON-ish literals, as a sloppy client sends)."""
    return json.dumps(value).encode()


DEPTHS = st.integers(100, 60_000)
GENERIC = st.one_of(
    st.binary(max_size=200),
    JSON.map(encoded),
    ANY_SHAPED.map(encoded),
    st.tuples(ANY_SHAPED.map(encoded), st.floats(0, 1)).map(lambda pair: pair[0][:int(len(pair[0]) * pair[1])]),
    DEPTHS.map(lambda depth: b"[" * depth + b"]" * depth),
    DEPTHS.map(lambda depth: b'{"Pod":' + b'{"a":' * depth + b"1" + b"}" * (depth + 1)),
    st.integers(MAX_BODY + 1, 4 * MAX_BODY).map(lambda size: b'{"Pod": {"metadata": {"name": "' + b"x" * size + b'"}}}'),
)
"""Random, truncated, deeply nested and oversized bodies."""


@st.composite
def requests(draw) -> tuple[str, bytes]:
    """A verb path and a body: three times in four shaped for that verb, else a generic one."""
    path = draw(st.sampled_from(POSTS))
    shaped = SPECIFIC.get(path.rsplit("/", 1)[-1])
    if shaped is not None and draw(st.integers(0, 3)) > 0:
        return path, encoded(draw(shaped))
    return path, draw(GENERIC)


@settings(max_examples=examples(2000, quick=300), deadline=None, suppress_health_check=list(HealthCheck))
@given(request=requests())
def test_posts_never_get_a_5xx(request):
    path, body = request
    response = SERVICE.client.post(path, content=body)
    assert response.status_code < 500, (path, body[:300], response.text[:300])


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=st.sampled_from(GETS + POSTS), method=st.sampled_from(["GET", "POST", "PUT", "DELETE"]),
       body=st.binary(max_size=64))
def test_every_path_and_method_never_gets_a_5xx(path, method, body):
    response = SERVICE.client.request(method, path, content=body)
    assert response.status_code < 500, (method, path, response.text[:300])


def test_the_server_still_serves_after_the_fuzzing():
    for path in GETS[:3]:
        assert SERVICE.client.get(path).status_code == 200
    assert filter_nodes(SERVICE.filter(make_pod("cpu-after-fuzz", 0))) == NODE_NAMES
    for pod in (gang_pod("after-fuzz", i, 2, gpus=1) for i in range(2)):  # placed, or told why not (fuzz gangs
        reply = SERVICE.filter(pod)                                        # may hold the cluster's GPUs)
        assert filter_nodes(reply) or (reply["FailedNodes"] and not reply["Error"])
