"""Extender latency measured with wrk (a C load generator) instead of Python clients, on loopback.

The httpx load generator in `extender_load.py` spends more CPU than the server on a 2-core machine,
so its latencies mostly measure the client.  This script drives a real `meshfit serve --cluster`
subprocess with `wrk` (Debian package `wrk`) and prints wrk's latency distribution:

    python tests/bench/extender_wrk.py reserved   # /filter for members of reserved gangs, 5,000 nodes
    python tests/bench/extender_wrk.py first 8    # first-member /filter (places a gang), 16,384 GPUs, 8 conns

`first` sends each of 250 first members once (wrk stops when 250 were answered): every measured
request places a new gang, none is a repeat answered from its reservation.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx  # noqa: E402

from tests.bench.extender_load import filter_body, served  # noqa: E402
from tests.bench.test_extender_bench import gang_member, write_cluster  # noqa: E402

BODY_SCRIPT = """
local bodies = {{}}
for i = 0, {count} - 1 do
  local f = io.open("{folder}/b" .. i .. ".json", "rb"); bodies[i + 1] = f:read("*a"); f:close()
end
local counter = 0
local answered = 0
request = function()
  counter = counter + 1
  return wrk.format("POST", nil, {{["Content-Type"] = "application/json"}}, bodies[{pick}])
end
response = function(status, headers, body)
  answered = answered + 1
  if {stop_after} > 0 and answered >= {stop_after} then wrk.thread:stop() end
end
"""


def run_wrk(url: str, bodies: list[bytes], folder: Path, connections: int, seconds: int, cycle: bool) -> str:
    """POST the bodies in order for `seconds` (cycling), or once each (stopping once as many were answered,
    or after `seconds`); wrk's report."""
    for i, body in enumerate(bodies):
        (folder / f"b{i}.json").write_bytes(body)
    script = folder / "bodies.lua"
    pick = f"((counter - 1) % {len(bodies)}) + 1" if cycle else f"math.min(counter, {len(bodies)})"
    script.write_text(BODY_SCRIPT.format(count=len(bodies), folder=folder, pick=pick,
                                         stop_after=0 if cycle else len(bodies)))
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(script), url]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def reserved_members(folder: Path, connections: int) -> str:
    """Filter calls for pods whose gang already holds a reservation (the common case)."""
    cluster, names = write_cluster(folder, 5000)
    with served(cluster) as url:
        for g in range(60):
            reply = httpx.post(f"{url}/filter", content=filter_body(gang_member(f"g{g}", 0, 8), names),
                               timeout=30).json()
            assert reply["NodeNames"], reply
        bodies = [filter_body(gang_member(f"g{g}", i, 8), names) for g in range(60) for i in range(1, 8)]
        return run_wrk(f"{url}/filter", bodies, folder, connections, 15, cycle=True)


def first_members(folder: Path, connections: int) -> str:
    """Filter calls that each place a new 8 x 8-GPU gang on a 2,048-node (16,384-GPU) cluster."""
    cluster, names = write_cluster(folder, 2048)
    bodies = [filter_body(gang_member(f"first{g}", 0, 8), names) for g in range(250)]
    with served(cluster) as url:
        return run_wrk(f"{url}/filter", bodies, folder, connections, 10, cycle=False)


def main() -> None:
    """`extender_wrk.py reserved|first [connections]`."""
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (apt-get install wrk)")
    kind = sys.argv[1] if len(sys.argv) > 1 else "reserved"
    connections = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    with tempfile.TemporaryDirectory() as tmp:
        measure = first_members if kind == "first" else reserved_members
        print(measure(Path(tmp), connections))


if __name__ == "__main__":
    main()
