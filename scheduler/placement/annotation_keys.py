"""Every `meshfit.io/*` key meshfit knows, and the check that refuses the ones it does not.

A misspelled key (`meshfit.io/paralellism`) used to be ignored, so the job was placed with the default
layout.  Now every place a job or a pod is read (`meshfit place`'s manifests, the service's gang
sources) calls `check_meshfit_keys`, which raises a one-line `JobSpecError` with a did-you-mean hint
for an unknown key, a key read only from annotations set as a label, or an empty value.  Keys meshfit
itself writes (bind-time assignment, requeue marks, `meshfit render`'s pinning note) are known too,
so a pod meshfit touched never trips the check.  Keys of other projects (Kueue, Volcano) are not
checked: their own admission does that.
"""

from __future__ import annotations

import difflib
from typing import Any, Mapping

from scheduler.placement.jobs import JobSpecError

MESHFIT_PREFIX = "meshfit.io/"
"""The annotation / label prefix meshfit owns."""

READ_ANNOTATIONS: dict[str, str] = {
    "meshfit.io/parallelism": "tp/cp/ep/pp/dp degrees",
    "meshfit.io/rank-order": "axis order, innermost first, or auto",
    "meshfit.io/model": "model shape for traffic volumes",
    "meshfit.io/required-level": "topology level the gang must fit in",
    "meshfit.io/preferred-level": "topology level the gang should fit in",
    "meshfit.io/max-comm-ratio": "largest predicted comm / lower bound accepted",
    "meshfit.io/elastic": "data-parallel range dp=MIN..MAX",
    "meshfit.io/spares": "spare pod slots held near the gang",
    "meshfit.io/gang-size": "pods in the gang when no owner says",
    "meshfit.io/pod-index": "the pod's index (rank block) in its gang",
}
"""Annotations users set on a job or its pods (docs/annotations.md), with their meaning."""

READ_LABELS: dict[str, str] = {
    "meshfit.io/gang": "makes the pod a member of this gang",
    "meshfit.io/spares": "spare pod slots held near the gang",
    "meshfit.io/gang-size": "pods in the gang when no owner says",
    "meshfit.io/pod-index": "the pod's index (rank block) in its gang",
}
"""Labels users set on pods (or pod templates)."""

WRITTEN_ANNOTATIONS: dict[str, str] = {
    "meshfit.io/gang": "bind: the gang's name",
    "meshfit.io/pod-index": "bind: the pod's index",
    "meshfit.io/ranks": "bind: the pod's ranks",
    "meshfit.io/coords": "bind: each rank's coordinates",
    "meshfit.io/world-size": "bind: ranks in the job",
    "meshfit.io/master-addr": "bind: rendezvous node",
    "meshfit.io/master-port": "bind: rendezvous port",
    "meshfit.io/parallelism": "bind: the degrees the pod was bound at",
    "meshfit.io/rank-order": "bind: the resolved rank order",
    "meshfit.io/reserved-node": "requeue: the node held for the pod",
    "meshfit.io/requeued-at": "requeue: when meshfit requeued the pod",
    "meshfit.io/pod-nodes": "meshfit render: the placed nodes",
}
"""Annotations meshfit writes (scheduler.handoff.assignment, scheduler.kube.actions, plugins.handoffs.render)."""

WRITTEN_LABELS: dict[str, str] = {
    "meshfit.io/gang-name": "rank-table ConfigMap: the gang's name",
}
"""Labels meshfit writes on its own objects."""

KNOWN_ANNOTATIONS = frozenset(READ_ANNOTATIONS) | frozenset(WRITTEN_ANNOTATIONS)
"""Every `meshfit.io/*` annotation key that is not an error."""
KNOWN_LABELS = frozenset(READ_LABELS) | frozenset(WRITTEN_LABELS)
"""Every `meshfit.io/*` label key that is not an error."""
KNOWN_KEYS = KNOWN_ANNOTATIONS | KNOWN_LABELS
"""Every `meshfit.io/*` key meshfit knows, as annotation or label."""


def closest_key(key: str, choices: frozenset[str] | set[str]) -> str | None:
    """The known key closest to a misspelled one (compared without the prefix), None when none is close."""
    suffix = key[len(MESHFIT_PREFIX):] if key.startswith(MESHFIT_PREFIX) else key
    names = {choice[len(MESHFIT_PREFIX):]: choice for choice in choices}
    match = difflib.get_close_matches(suffix.lower(), list(names), n=1, cutoff=0.6)
    return names[match[0]] if match else None


def key_problem(key: str, value: Any, kind: str = "annotation") -> str | None:
    """What is wrong with one `meshfit.io/*` annotation or label (`kind`), None when it is fine or not ours."""
    if not isinstance(key, str) or not key.startswith(MESHFIT_PREFIX):
        return None
    known = KNOWN_ANNOTATIONS if kind == "annotation" else KNOWN_LABELS
    if key not in known:
        if kind == "label" and key in KNOWN_ANNOTATIONS:
            return f"{key} is read from annotations, not labels: move it to metadata.annotations"
        hint = closest_key(key, known) or closest_key(key, KNOWN_KEYS)
        if hint is not None:
            return f"unknown {kind} {key}; did you mean {hint}?"
        return f"unknown {kind} {key} (meshfit reads: {', '.join(sorted(READ_ANNOTATIONS | READ_LABELS))})"
    reads = READ_ANNOTATIONS if kind == "annotation" else READ_LABELS
    if key in reads and (value is None or not str(value).strip()):
        return f"{kind} {key} is empty ({reads[key]}); set a value or remove it"
    return None


def meshfit_key_problems(annotations: Mapping[str, Any] | None, labels: Mapping[str, Any] | None = None) -> list[str]:
    """Every problem with the `meshfit.io/*` keys of one object's annotations and labels, in key order."""
    problems = []
    for kind, mapping in (("annotation", annotations), ("label", labels)):
        if isinstance(mapping, Mapping):
            for key in sorted(k for k in mapping if isinstance(k, str) and k.startswith(MESHFIT_PREFIX)):
                problem = key_problem(key, mapping[key], kind)
                if problem:
                    problems.append(problem)
    return problems


def check_meshfit_keys(annotations: Mapping[str, Any] | None, labels: Mapping[str, Any] | None = None,
                       where: str = "") -> None:
    """JobSpecError (one line, `where: problem`, others counted) if any `meshfit.io/*` key is unknown or empty."""
    problems = meshfit_key_problems(annotations, labels)
    if not problems:
        return
    more = f" (and {len(problems) - 1} more problem(s) with meshfit.io keys)" if len(problems) > 1 else ""
    prefix = f"{where}: " if where else ""
    raise JobSpecError(f"{prefix}{problems[0]}{more}")
