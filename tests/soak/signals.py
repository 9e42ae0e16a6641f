"""The soak's service-level invariants: no 5xx reached kube-scheduler from a serving meshfit (read from its log),
and the leader's `/gangs` and `/metrics` answer (a failure longer than a fail-over window is a violation)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

from tests.soak.stack import SoakStack, http_get
from tests.soak.timeline import Timeline

EXTENDER_STATUS = re.compile(r"failed (\w+) with extender at URL (\S+), code (\d{3})")
UNREACHABLE = re.compile(r'Post \\?"\S+/scheduler/(\w+)\\?"?: ')
"""A transport error on an extender call (EOF, refused, reset, broken pipe, closed idle connection, timeout)."""
DECISION = re.compile(r"decision=([a-z-]+)")
GANG_FIELD = re.compile(r"gang=[^/\s]+/(\S+)")
SKIP = ("Error selecting node for pod", "event_broadcaster.go", "Event{")
"""Lines that repeat an extender error already logged: kube-scheduler 1.35 logs a failed call twice (this line, then
"Error scheduling pod; retrying"), and an Event the API server rejected is dumped with its message."""
SETTLE = 6.0
"""Seconds a 503 waits before it is judged (a replica's exit is noticed up to a supervisor round late)."""


class LogTail:
    """New complete lines of a growing file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self._rest = path, 0, b""

    def lines(self, limit: int = 4 << 20) -> list[str]:
        """Lines appended since the last call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read(limit)
        except OSError:
            return []
        self.offset += len(data)
        data, self._rest = (self._rest + data).rsplit(b"\n", 1) if b"\n" in self._rest + data else (b"", self._rest + data)
        return data.decode(errors="replace").splitlines()


class ServiceSignals:
    """Checks kube-scheduler's log for extender 5xx and polls the leader's `/gangs` and `/metrics`."""

    def __init__(self, stack: SoakStack, timeline: Timeline, violations, failover_window: float,
                 endpoint_interval: float = 2.0) -> None:
        self.stack, self.timeline, self.violations = stack, timeline, violations
        self.window, self.endpoint_interval = failover_window, endpoint_interval
        self.scheduler_log = LogTail(stack.plane.logs / "kube-scheduler.log")
        self.meshfit_logs = [LogTail(r.log_path) for r in stack.replicas]
        self.statuses: Counter = Counter()  # extender answers >= 500 by code
        self.failover_503 = 0
        self.unreachable: Counter = Counter()
        self.tracebacks: list[str] = []
        self.decisions: Counter = Counter()  # meshfit's logged decisions (bound, preempted, rolled-back, ...)
        self.errors: list[str] = []  # meshfit's own ERROR lines (it logs what it considers a bug at that level)
        self.error_timelines: list[list[str]] = []  # the first ones naming a gang, with that gang's timeline
        self.endpoint_polls = 0
        self.longest_outage = 0.0
        self.gang_rows: dict[str, dict] = {}
        self.unreachable_outside = 0  # transport errors with no fail-over under way (information, not a violation)
        self._pending: list[tuple[float, str, int]] = []  # (when seen, log line, code; 0: transport error) to judge
        self._failing: dict[str, tuple[float, str]] = {}
        self._last_poll = 0.0

    def check(self, now: float) -> None:
        """One round: new kube-scheduler log lines, meshfit tracebacks, and (every few seconds) the endpoints."""
        for line in self.scheduler_log.lines():
            self._scheduler_line(line, now)
        for tail in self.meshfit_logs:
            lines = tail.lines()
            for i, line in enumerate(lines):
                decision = DECISION.search(line)
                if decision:
                    self.decisions[decision.group(1)] += 1
                if " ERROR " in line[:40]:
                    self._error(line)
                if line.startswith("Traceback") and len(self.tracebacks) < 20:
                    self.tracebacks.append("\n".join(lines[max(0, i - 2):i + 25]))
        self._judge_503s(now)
        if now - self._last_poll >= self.endpoint_interval:
            self._last_poll = now
            self._endpoints(now)

    def _error(self, line: str) -> None:
        """Keep one of meshfit's ERROR lines, with the timeline of the gang it names (while it is fresh)."""
        self.errors.append(f"[t={self.timeline.now():.1f}s] {line}")
        gang = GANG_FIELD.search(line)
        if gang and len(self.error_timelines) < 10:
            self.error_timelines.append([line[:300], *self.timeline.merged(gang.group(1), window=30.0)[-40:]])

    def _scheduler_line(self, line: str, now: float) -> None:
        if any(marker in line for marker in SKIP):
            return
        match = EXTENDER_STATUS.search(line)
        if match:
            code = int(match.group(3))
            if code >= 500:
                self.statuses[code] += 1
                if code == 503:
                    self._pending.append((now, line, code))
                else:
                    self.violations.add("5xx", f"{code} {match.group(1)}",
                                        f"kube-scheduler got HTTP {code} from meshfit's {match.group(1)}: "
                                        f"{line.strip()[:400]}")
            return
        unreachable = UNREACHABLE.search(line)
        if unreachable:
            self.unreachable[unreachable.group(1)] += 1
            self._pending.append((now, line, 0))

    def _judge_503s(self, now: float) -> None:
        keep = []
        for seen, line, code in self._pending:
            if now - seen < SETTLE:
                keep.append((seen, line, code))
            elif self.stack.in_failover(seen, self.window, slack=SETTLE):
                self.failover_503 += code == 503
            elif code == 0:
                self.unreachable_outside += 1
            else:
                self.violations.add("5xx", "503 outside fail-over",
                                    "kube-scheduler got 503 from a replica with no fail-over under way (a serving "
                                    f"replica refused): {line.strip()[:400]}")
        self._pending = keep

    def _endpoints(self, now: float) -> None:
        self.endpoint_polls += 1
        try:
            leader = self.stack.leader()
        except Exception as exc:  # noqa: BLE001 - the Lease could not be read: counts as not answering
            leader, why = None, f"Lease unreadable: {exc}"
        else:
            why = "no live replica holds the Lease"
        for path in ("/gangs", "/metrics"):
            problem = why if leader is None else self._probe(leader.url + path, path)
            if problem is None:
                self._failing.pop(path, None)
                continue
            since, _ = self._failing.setdefault(path, (now, problem))
            self.longest_outage = max(self.longest_outage, now - since)
            if now - since > self.window:
                self.violations.add("endpoints", f"{path} from t={since - self.timeline.started:.0f}s",
                                    f"the leader's {path} has not answered for {now - since:.0f}s "
                                    f"(> {self.window:.0f}s fail-over window): {problem}")

    def healthy(self) -> bool:
        """True when the last poll found the leader's endpoints answering (a process fault waits for this, so one
        fail-over window never runs into the next)."""
        return self.endpoint_polls > 0 and not self._failing

    def _probe(self, url: str, path: str) -> str | None:
        status, body = http_get(url, timeout=5.0)
        if status != 200:
            return f"GET {url}: {status} {body[:200]!r}"
        if path == "/metrics":
            return None if b"meshfit_" in body else f"GET {url}: no meshfit_ metrics in the answer"
        try:
            rows = json.loads(body)["gangs"]
        except (ValueError, KeyError, TypeError) as exc:
            return f"GET {url}: not a gangs document ({exc})"
        self.gang_rows = {row.get("gang", "").split("/")[-1]: row for row in rows if isinstance(row, dict)}
        return None

    def context(self, gang: str) -> list[str]:
        """What the leader's last `/gangs` said about `gang`, and the meshfit log lines naming it."""
        lines = [f"--- leader's last /gangs row: {json.dumps(self.gang_rows.get(gang))}"]
        needle = f"/{gang}"
        for replica in self.stack.replicas:
            try:
                data = replica.log_path.read_bytes()[-(4 << 20):].decode(errors="replace")
            except OSError:
                continue
            hits = [line for line in data.splitlines() if needle in line and (
                line.split(needle, 1)[1][:1] in ("", " ", ":", ",", ")", "'", '"', "]", "-", "."))]
            lines += [f"--- meshfit-{replica.name} log lines naming {gang} (last 25 of {len(hits)}):"] + hits[-25:]
        return lines

