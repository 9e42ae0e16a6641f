"""The picture `meshfit demo` writes: the topology tree once per policy, with that policy's ranks drawn on the GPUs.

Each panel is the cluster's tree (outermost level at the top, hosts at the bottom, one box per domain).  A host
shows its GPUs as cells: grey for GPUs other pods hold, white for free ones, and the job's ranks coloured by
tensor-parallel group with the rank number written in.  A red dashed line joins the GPUs of a tensor-parallel
group that spans hosts (its all-reduce leaves NVLink); every other parallel axis with a degree above one gets its
own line style (pipeline: blue dotted, data: green dash-dot, context and expert: purple and brown), so each
policy's cross-host groups of every kind show, and each panel's legend counts them per axis (and how many of
them leave their leaf).  Drawn with matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

GPU_COLUMNS = 4
"""GPU cells per row inside a host box."""
USED_COLOUR, FREE_COLOUR = "#b0b0b0", "#ffffff"
"""Cell colours of GPUs other pods hold and of free GPUs."""
HOST_WIDTH, LEVEL_GAP = 1.0, 1.6
"""Width of a host box and height between tree levels, in plot units."""
AXIS_STYLES = {"tp": ("#d62728", "--"), "cp": ("#9467bd", (0, (5, 1, 1, 1))), "ep": ("#8c564b", (0, (1, 2))),
               "pp": ("#1f77b4", ":"), "dp": ("#2ca02c", "-.")}
"""Colour and line style of the lines joining a cross-host group's GPUs, per parallel axis."""


def _host_order(topo: Any) -> list[int]:
    """Node indices in tree order (depth first through the domains, children by name)."""
    order: list[int] = []

    def walk(domain_id: int) -> None:
        domain = topo.domains[domain_id]
        if domain.level == topo.host_level:
            order.extend(sorted(domain.nodes))
            return
        for child in sorted(domain.children, key=lambda c: topo.domains[c].name):
            walk(child)

    for root in sorted(topo.root_domain_ids, key=lambda d: topo.domains[d].name):
        walk(root)
    return order


def _domain_x(topo: Any, host_x: dict[int, float]) -> dict[int, float]:
    """x of every domain: the middle of the hosts under it."""
    return {d.id: sum(host_x[n] for n in d.nodes) / len(d.nodes) for d in topo.domains if d.nodes}


def _gpu_cells(topo: Any, placement: Any) -> dict[int, list[int | None]]:
    """Per node: one entry per GPU, -1 for used by other pods, a rank of this job, or None for free."""
    cells: dict[int, list[int | None]] = {}
    for node in topo.nodes:
        cells[node.index] = [-1] * node.gpus_used + [None] * (node.gpus_total - node.gpus_used)
    if not placement.placed:
        return cells
    next_free = {node.index: node.gpus_used for node in topo.nodes}
    for pod in placement.gang.pods:
        node = topo.node_by_name[placement.pod_nodes[pod.index]].index
        for rank in placement.pod_ranks(pod.index):
            cells[node][next_free[node]] = rank
            next_free[node] += 1
    return cells


def _tp_group(placement: Any, rank: int) -> int:
    """Index of the tensor-parallel group holding `rank`."""
    return next(i for i, group in enumerate(_tp_groups(placement)) if rank in group)


def _tp_groups(placement: Any) -> list[list[int]]:
    return axis_groups_of(placement, "tp")


def axis_groups_of(placement: Any, axis: str) -> list[list[int]]:
    """The process groups of `axis`: ranks that share every other coordinate, each sorted."""
    groups: dict[tuple, list[int]] = {}
    for info in placement.ranks:
        key = tuple(sorted((other, value) for other, value in info.coords.items() if other != axis))
        groups.setdefault(key, []).append(info.rank)
    return sorted(sorted(group) for group in groups.values())


def _leaf_of(topo: Any, node_index: int) -> int:
    """Domain id of the node's outermost-but-host-most fabric level (its leaf), or -1 without levels."""
    path = topo.nodes[node_index].path
    fabric = [level for level, spec in enumerate(topo.levels) if level < topo.host_level
              and getattr(spec, "role", "") not in ("nvlink",)]
    return int(path[fabric[-1]]) if fabric else -1


def _draw_axis_groups(ax: Any, topo: Any, placement: Any, centres: dict[int, tuple[float, float, int]]) -> list[str]:
    """Join the GPUs of every cross-host group, axis by axis; legend lines `axis: N groups across hosts`."""
    labels = []
    axes = [axis for axis in AXIS_STYLES if placement.gang.parallelism.degree(axis) > 1]
    for offset, axis in enumerate(axes):
        colour, style = AXIS_STYLES[axis]
        crossing = leaving = 0
        for group in axis_groups_of(placement, axis):
            spots = [centres[r] for r in group if r in centres]
            nodes = {node for _, _, node in spots}
            if len(nodes) < 2:
                continue
            crossing += 1
            leaving += len({_leaf_of(topo, node) for node in nodes}) > 1
            shift = 0.03 * (offset - (len(axes) - 1) / 2)
            ax.plot([s[0] for s in spots], [s[1] + shift for s in spots], color=colour, lw=1.4, ls=style)
        leaf = f", {leaving} across leaves" if leaving else ""
        labels.append(f"{axis}: {crossing} group{'s' if crossing != 1 else ''} across hosts{leaf}")
        ax.plot([], [], color=colour, ls=style, lw=1.4, label=labels[-1])
    return labels


def _host_box(topo: Any) -> tuple[float, float, float]:
    """(cell size, bottom, top) of a host box: a name line above rows of GPU cells."""
    size = HOST_WIDTH * 0.8 / GPU_COLUMNS
    rows = -(-max(node.gpus_total for node in topo.nodes) // GPU_COLUMNS)
    return size, -rows * size - 0.08, 0.3


def _cell_xy(host_x: float, index: int, size: float) -> tuple[float, float]:
    column, row = index % GPU_COLUMNS, index // GPU_COLUMNS
    return host_x - HOST_WIDTH * 0.4 + column * size, -(row + 1) * size


def _draw_panel(ax: Any, topo: Any, name: str, placement: Any, colours: Any) -> None:
    from matplotlib.patches import FancyBboxPatch, Rectangle

    hosts = _host_order(topo)
    host_x = {n: i * (HOST_WIDTH + 0.25) for i, n in enumerate(hosts)}
    domain_x = _domain_x(topo, host_x)
    level_y = {level: (topo.host_level - level) * LEVEL_GAP for level in range(len(topo.levels))}
    size, bottom, top = _host_box(topo)
    for domain in topo.domains:  # edges first, boxes on top
        if domain.parent is not None and domain.nodes:
            parent = topo.domains[domain.parent]
            start = top if domain.level == topo.host_level else level_y[domain.level] + 0.25
            ax.plot([domain_x[domain.id], domain_x[parent.id]], [start, level_y[parent.level] - 0.25],
                    color="#888888", lw=0.8)
    for domain in topo.domains:
        if domain.level == topo.host_level or not domain.nodes:
            continue
        x, y = domain_x[domain.id], level_y[domain.level]
        ax.add_patch(FancyBboxPatch((x - 0.9, y - 0.25), 1.8, 0.5, boxstyle="round,pad=0.02", fc="#e8eef7", ec="#4a6fa5"))
        ax.text(x, y, f"{topo.levels[domain.level].name}: {domain.name}", ha="center", va="center", fontsize=7)
    cells = _gpu_cells(topo, placement)
    centres: dict[int, tuple[float, float, int]] = {}
    for node_index in hosts:
        node, x = topo.nodes[node_index], host_x[node_index]
        ours = any(c is not None and c >= 0 for c in cells[node_index])
        ax.add_patch(FancyBboxPatch((x - HOST_WIDTH / 2, bottom), HOST_WIDTH, top - bottom, boxstyle="round,pad=0.02",
                                    fc="#fafafa", ec="#d62728" if ours else "#555555", lw=1.6 if ours else 0.8))
        ax.text(x, top - 0.13, node.name, ha="center", va="center", fontsize=6)
        for i, cell in enumerate(cells[node_index]):
            cx, cy = _cell_xy(x, i, size)
            colour = USED_COLOUR if cell == -1 else FREE_COLOUR if cell is None else colours(_tp_group(placement, cell))
            ax.add_patch(Rectangle((cx, cy), size * 0.9, size * 0.9, fc=colour, ec="#333333", lw=0.5))
            if cell is not None and cell >= 0:
                ax.text(cx + size * 0.45, cy + size * 0.45, str(cell), ha="center", va="center", fontsize=6,
                        color="white", fontweight="bold")
                centres[cell] = (cx + size * 0.45, cy + size * 0.45, node_index)
    if placement.placed and _draw_axis_groups(ax, topo, placement, centres):
        ax.legend(loc="upper right", fontsize=7, frameon=True, title="cross-host groups", title_fontsize=7)
    ax.set_title(_panel_title(name, placement), fontsize=9, loc="left")
    ax.set_xlim(min(host_x.values()) - 1.2, max(host_x.values()) + 1.2)
    ax.set_ylim(bottom - 0.3, level_y[0] + 0.5)
    ax.set_axis_off()


def _panel_title(name: str, placement: Any) -> str:
    if not placement.placed:
        return f"{name}: unschedulable ({placement.reason})"
    cost = placement.cost
    tiers = ", ".join(f"{axis} over {cost.tier_by_axis[axis]}" for axis in ("tp", "pp", "dp")
                      if placement.gang.parallelism.degree(axis) > 1)
    return f"{name}: predicted communication {cost.step_comm_seconds:.4f} s/step ({tiers})"


def write_picture(topo: Any, placements: dict[str, Any], path: Path) -> None:
    """Draw one panel per policy (in `placements` order) and write the PNG to `path`; OSError if it cannot."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = plt.get_cmap("tab10")
    width = max(8.0, 0.95 * len(topo.nodes) + 1.5)
    figure, axes = plt.subplots(len(placements), 1, figsize=(width, 2.6 * len(placements) + 0.6), squeeze=False)
    try:
        for ax, (name, placement) in zip(axes[:, 0], placements.items()):
            _draw_panel(ax, topo, name, placement, colours)
        figure.suptitle("the job's ranks on the topology tree, one panel per policy\ngrey: GPUs other pods hold; "
                        "white: free; numbered colours: the job's ranks, one colour per tensor-parallel group;\n"
                        "lines: groups split across hosts (red dashes tp, blue dots pp, green dash-dots dp); "
                        "red boxes: hosts the job uses", fontsize=9)
        figure.tight_layout(rect=(0, 0, 1, 0.91))
        figure.savefig(path, dpi=110, format="png")  # PNG whatever the file is called
    finally:
        plt.close(figure)
