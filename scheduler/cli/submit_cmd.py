"""`meshfit submit`: try the embedded service out -- a simulation of kube-scheduler's calls for one job's pods.

kube-scheduler schedules one pod at a time; for each it calls the extender's `/filter` with the nodes it found
feasible, `/prioritize` with the nodes left, and `/bind` with the node it picked.  `meshfit submit` makes those
calls against a running `meshfit serve --cluster FILE` for every pod of a job manifest, in pod-index order, offering
each pod every node of the same cluster file, and shows what meshfit answers: the first member's `/filter`
reserves the whole gang (GET /reservations), each member is then offered exactly its reserved node and bound, and
the gang ends `bound` (GET /gangs) with its rank table (GET /ranktables/{ns}/{job}).  It is meant for the embedded
mode: in Kubernetes mode meshfit reads pods from the API server, not from request bodies.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from scheduler.cli.common import (EXIT_UNSCHEDULABLE, OutputFormat, OutputOption, console, fail, names_column,
                                  print_document, print_table)

DEFAULT_URL = "http://127.0.0.1:8888"
"""Where `meshfit serve --cluster` listens by default."""
HTTP_TIMEOUT = 30.0
"""Seconds one call may take."""


class ServiceError(RuntimeError):
    """The service answered a call with an error status, or not at all."""


class ExtenderCalls:
    """kube-scheduler's extender calls (JSON over HTTP, as its extender client sends them) and the service's GETs."""

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def _open(self, path: str, body: Any | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method="GET" if body is None else "POST",
                                         headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as response:  # noqa: S310 - user-given URL
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            detail = " ".join(exc.read().decode(errors="replace").split())[:300]
            raise ServiceError(f"{'POST' if body is not None else 'GET'} {path}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServiceError(f"{self.url}{path}: {reason}") from None

    def wait_healthy(self, seconds: float) -> None:
        """Poll GET /healthz until the service answers (it may still be starting); ServiceError after `seconds`."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=2) as response:  # noqa: S310
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError, ValueError) as exc:
                if time.monotonic() >= deadline:
                    raise ServiceError(f"no meshfit service answers at {self.url} after {seconds:g} s "
                                       f"({getattr(exc, 'reason', exc)}): start `meshfit serve --cluster FILE` "
                                       "first") from None
            time.sleep(0.2)

    def filter(self, pod: dict, nodes: list[str]) -> dict:
        """POST /filter (nodeCacheCapable form: node names only)."""
        return self._open("/filter", {"Pod": pod, "Nodes": None, "NodeNames": nodes})

    def prioritize(self, pod: dict, nodes: list[str]) -> list[dict]:
        """POST /prioritize for the nodes /filter left."""
        return self._open("/prioritize", {"Pod": pod, "Nodes": None, "NodeNames": nodes}) or []

    def bind(self, pod: dict, node: str) -> dict:
        """POST /bind of `pod` to `node`."""
        meta = pod["metadata"]
        return self._open("/bind", {"PodName": meta["name"], "PodNamespace": meta["namespace"],
                                    "PodUID": meta["uid"], "Node": node})

    def get(self, path: str) -> Any:
        """GET a read-only endpoint (/gangs, /reservations, /ranktables/...)."""
        return self._open(path)


def _cluster_nodes(cluster: Path) -> list[str]:
    from topology.loaders import read_objects
    from topology.model import TopologyError

    try:
        names = [str(o.get("metadata", {}).get("name")) for o in read_objects(cluster) if o.get("kind") == "Node"]
    except TopologyError as exc:
        fail(str(exc))
    if not names:
        fail(f"{cluster}: no Node objects found (expected the NodeList or List `meshfit serve --cluster` loaded)")
    return sorted(names)


def _offered(reply: dict) -> list[str]:
    if reply.get("NodeNames") is not None:
        return list(reply["NodeNames"])
    return [item["metadata"]["name"] for item in (reply.get("Nodes") or {}).get("items") or []]


def _row(rows: list[dict], key: str) -> dict | None:
    return next((row for row in rows if row.get("gang") == key), None)


def _say(table_mode: bool, text: str) -> None:
    if table_mode:
        console.print(text, highlight=False, soft_wrap=True)


def _drive(calls: ExtenderCalls, gang, pods: list[dict], nodes: list[str], table_mode: bool) -> dict:
    """Each pod in turn through filter, prioritize and bind; the record of what meshfit answered."""
    record: dict[str, Any] = {"job": gang.key, "pods": [], "reservation": None}
    for pod in pods:
        name = pod["metadata"]["name"]
        reply = calls.filter(pod, nodes)
        offered = _offered(reply)
        entry = {"pod": name, "offered": len(nodes), "filter": offered, "prioritize": [], "bound_to": None}
        record["pods"].append(entry)
        if not offered:
            row = _row((calls.get("/gangs") or {}).get("gangs", []), gang.key) or {}
            reason = row.get("reason") or reply.get("Error") or "; ".join(sorted(set((reply.get("FailedNodes") or {}).values())))
            record["waiting"] = reason
            _say(table_mode, f"/filter {name}: no node kept of {len(nodes)}: the gang waits ({reason})")
            return record
        note = ""
        if record["reservation"] is None:
            record["reservation"] = _row(calls.get("/reservations") or [], gang.key)
            reservation = record["reservation"] or {}
            layout = ", ".join(f"{pod_name} -> {node}" for pod_name, node in (reservation.get("pods") or {}).items())
            status = reservation.get("status", "unknown")
            note = (f"; meshfit placed the whole gang and [bold]reserved[/bold] it: {layout}" if status == "reserved"
                    else f"; the gang was already {status} (these pods were submitted before): {layout}")
        _say(table_mode, f"/filter {name} ({len(nodes)} nodes offered) -> kept {', '.join(offered)}{note}")
        scores = calls.prioritize(pod, offered)
        entry["prioritize"] = scores
        best = max(scores, key=lambda s: s.get("Score", 0))["Host"] if scores else offered[0]
        answer = calls.bind(pod, best)
        if answer.get("Error"):
            raise ServiceError(f"/bind {name} -> {best}: {answer['Error']}")
        entry["bound_to"] = best
        row = _row((calls.get("/gangs") or {}).get("gangs", []), gang.key) or {}
        _say(table_mode, f"  /prioritize, /bind {name} -> {best}: gang {row.get('state', '?')}, "
                         f"{row.get('bound', '?')}/{row.get('pods', '?')} pods bound")
    record["gang"] = _row((calls.get("/gangs") or {}).get("gangs", []), gang.key)
    table = calls.get(f"/ranktables/{gang.namespace}/{gang.name}") or {}
    ranks = (table.get("data") or {}).get("ranks.json")
    record["rank_table"] = json.loads(ranks) if ranks else None
    return record


def _summary_table(record: dict) -> Table:
    ranks_by_pod: dict[str, list[int]] = {}
    for entry in (record.get("rank_table") or {}).get("ranks", []):
        ranks_by_pod.setdefault(entry["pod"], []).append(entry["rank"])
    table = Table(title=f"{record['job']} as bound")
    names_column(table, "pod", [p["pod"] for p in record["pods"]])
    names_column(table, "node", [p["bound_to"] or "" for p in record["pods"]])
    table.add_column("ranks", no_wrap=True)
    for entry in record["pods"]:
        table.add_row(entry["pod"], entry["bound_to"] or "-", " ".join(map(str, ranks_by_pod.get(entry["pod"], []))))
    return table


def submit_command(
    job: Path = typer.Option(..., "--job", help="Job manifest (PyTorchJob, JobSet, TrainJob, Volcano Job, Indexed Job)."),
    cluster: Path = typer.Option(..., "--cluster", help="The NodeList / List file `meshfit serve --cluster` loaded: "
                                                        "its nodes are the ones offered to /filter."),
    url: str = typer.Option(DEFAULT_URL, "--url", help="The embedded service (meshfit serve --cluster)."),
    wait: float = typer.Option(30.0, "--wait", min=0, help="Seconds to wait for the service to answer /healthz."),
    output: OutputFormat = OutputOption,
) -> None:
    """Simulate kube-scheduler's extender calls (filter, prioritize, bind) for every pod of a job against an
    embedded `meshfit serve --cluster`, and show the gang being reserved, bound, and its rank table."""
    from scheduler.cli.place_warnings import job_warnings
    from scheduler.cli.submit_pods import member_pods
    from scheduler.handoff.manifests import read_manifest
    from scheduler.placement.jobs import JobSpecError

    try:
        manifest = read_manifest(job)
        gang, pods = member_pods(manifest)
    except JobSpecError as exc:
        fail(str(exc))
    nodes = _cluster_nodes(cluster)  # before any warning: a bad file is one line
    for warning in job_warnings(manifest):
        print(f"warning: {warning}", file=sys.stderr)
    from scheduler.cli.service_url import service_url

    try:
        calls = ExtenderCalls(service_url(url))
    except ValueError as exc:
        fail(str(exc))
    try:
        calls.wait_healthy(wait)
    except ServiceError as exc:
        fail(str(exc))
    table_mode = output == OutputFormat.table
    _say(table_mode, f"simulating kube-scheduler for {gang.key}: {len(pods)} pods x {gang.gpus_per_pod} GPUs, one "
                     f"pod at a time, each offered the {len(nodes)} nodes of {cluster} (POST {url}/filter, "
                     "/prioritize, /bind)")
    try:
        record = _drive(calls, gang, pods, nodes, table_mode)
    except ServiceError as exc:
        fail(str(exc), code=1)
    if not table_mode:
        print_document(record, output)
    if "waiting" in record:
        raise typer.Exit(EXIT_UNSCHEDULABLE)
    if table_mode:
        final = record.get("gang") or {}
        _say(True, f"gang {gang.key}: [bold]{final.get('state', '?')}[/bold] ({final.get('reason', '')}); "
                   f"watch it with `meshfit gangs --url {url}`")
        print_table(_summary_table(record))


def register(app: typer.Typer) -> None:
    """Add `meshfit submit` to the CLI."""
    app.command("submit")(submit_command)
