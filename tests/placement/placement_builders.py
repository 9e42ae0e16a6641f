"""Small hand-shaped clusters and gangs for placement tests (links chosen so costs are easy to compute)."""

from __future__ import annotations

from topology.builder import LevelSpec, NodeRecord, build_topology
from topology.model import ClusterTopology, LinkTier

from scheduler.placement.jobs import Gang, ModelShape, Parallelism, PodSlot, TopologyConstraint

HOST_LINK = LinkTier(400.0, 1.0)
RACK_LINK = LinkTier(50.0, 5.0)
SPINE_LINK = LinkTier(25.0, 10.0)
CLUSTER_LINK = LinkTier(10.0, 20.0)
NVLINK = LinkTier(400.0, 2.0)


def make_cluster(spines: int = 1, racks: int = 2, nodes: int = 4, gpus: int = 8, used: dict[int, int] | None = None,
                 down: tuple[int, ...] = (), spine_oversubscription: float = 1.0,
                 nvlink_nodes: int = 0) -> ClusterTopology:
    """spine -> rack [-> nvlink] -> host; node i is the i-th host in spine/rack order; `used` GPUs by node."""
    records = []
    for s in range(spines):
        for r in range(racks):
            for n in range(nodes):
                index = len(records)
                labels = {"test/spine": f"s{s}", "test/rack": f"s{s}-r{r}"}
                if nvlink_nodes:
                    labels["test/nvlink"] = f"s{s}-r{r}-nv{n // nvlink_nodes}"
                records.append(NodeRecord(f"node-{index:03d}", gpus, labels, index not in down,
                                          None if index not in down else "cordoned"))
    specs = [LevelSpec("spine", ("test/spine",), LinkTier(SPINE_LINK.bandwidth_gbps, SPINE_LINK.latency_us,
                                                           spine_oversubscription), "spine"),
             LevelSpec("rack", ("test/rack",), RACK_LINK, "leaf")]
    if nvlink_nodes:
        specs.append(LevelSpec("nvlink", ("test/nvlink",), NVLINK, "nvlink"))
    topo = build_topology(records, specs, HOST_LINK, CLUSTER_LINK)
    for node_index, gpus_used in (used or {}).items():
        topo.add_pod(f"busy/{node_index}", topo.nodes[node_index].name, gpus_used)
    return topo


def make_gang(tp: int = 1, pp: int = 1, dp: int = 1, gpus_per_pod: int = 8, cp: int = 1, ep: int = 1,
              rank_order: str = "tp-cp-ep-dp-pp", model: ModelShape | None = None,
              required: str | None = None, preferred: str | None = None, name: str = "job") -> Gang:
    """A gang whose pod count follows from the degrees and GPUs per pod."""
    par = Parallelism(tp=tp, cp=cp, ep=ep, pp=pp, dp=dp)
    pods = max(par.world_size // gpus_per_pod, 1)
    return Gang("ns", name, tuple(PodSlot(i, f"{name}-{i}", gpus_per_pod) for i in range(pods)), par, rank_order,
                model or ModelShape(), TopologyConstraint(required, preferred))
