"""The layers written down as import-linter contracts (`[tool.importlinter]` in pyproject.toml) hold."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_RUN = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def test_import_contracts_are_kept() -> None:
    """`lint-imports` passes; on failure the assertion shows the broken contracts and the offending imports."""
    result = subprocess.run(
        [sys.executable, "-c", _RUN, "--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert "No module named 'importlinter'" not in result.stderr, "import-linter missing: pip install -e '.[dev]'"
    assert result.returncode == 0, f"import-linter contracts broken:\n{result.stdout}\n{result.stderr}"
    assert "0 broken" in result.stdout, result.stdout


def test_contracts_cover_the_layers() -> None:
    """The contracts name every top-level package, so a new layer cannot slip past unchecked."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert set(config["root_packages"]) == {"topology", "scheduler", "plugins", "simulations"}
    sources = {source for contract in config["contracts"] for source in contract.get("source_modules", ())}
    assert {"topology", "scheduler", "plugins"} <= sources


def test_no_module_of_ours_imports_itself_back() -> None:
    """No import circle anywhere in our packages, `TYPE_CHECKING` imports included (grimp sees them all)."""
    import grimp
    import networkx as nx

    graph = grimp.build_graph("topology", "scheduler", "plugins", "simulations")
    edges = nx.DiGraph()
    for module in graph.modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if imported.split(".")[0] in ("topology", "scheduler", "plugins", "simulations"):
                edges.add_edge(module, imported)
    cycles = list(nx.simple_cycles(edges))
    assert not cycles, "import circles: " + "; ".join(" -> ".join(c + [c[0]]) for c in cycles[:10])
