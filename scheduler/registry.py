"""Registries of extension points (policies, gang sources, handoffs), filled from Python entry points.

The core never imports `plugins`: each extension is declared in `pyproject.toml` under
`[project.entry-points."meshfit.<group>"]` as `name = "module:factory"`, and a `Registry` loads its
group through `importlib.metadata.entry_points` on first lookup.  Another installed distribution
can add policies, gang sources or handoffs the same way.
"""

from __future__ import annotations

import threading
from importlib.metadata import entry_points
from typing import Any, Callable, Iterator, Mapping

Factory = Callable[..., Any]
"""What an entry point names: a callable building one extension instance."""


def load_group(group: str) -> dict[str, Factory]:
    """Name -> loaded factory for every entry point of `group`, in name order.

    An entry point whose module is not there at all (an optional extension left out of a build) is
    skipped; any other import error propagates.
    """
    factories: dict[str, Factory] = {}
    for entry in sorted(entry_points(group=group), key=lambda e: e.name):
        try:
            factories[entry.name] = entry.load()
        except ModuleNotFoundError as exc:
            if exc.name == entry.module:
                continue
            raise
    return factories


class Registry(Mapping[str, Factory]):
    """Name -> factory for one entry point group (e.g. `meshfit.policies`), loaded once, on first lookup."""

    def __init__(self, group: str, what: str) -> None:
        self.group, self.what = group, what
        self._factories: dict[str, Factory] | None = None
        self._lock = threading.RLock()
        self.version = 0
        """Bumped by `register` / `unregister`, so callers caching instances know to rebuild them."""

    def _loaded(self) -> dict[str, Factory]:
        factories = self._factories
        if factories is None:
            with self._lock:  # service threads may ask at once: load (import) the group only once
                factories = self._factories
                if factories is None:
                    factories = self._factories = load_group(self.group)
        return factories

    def __getitem__(self, name: str) -> Factory:
        return self._loaded()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._loaded())

    def __len__(self) -> int:
        return len(self._loaded())

    def __repr__(self) -> str:
        return f"Registry({self.group!r}, {sorted(self._loaded())})"

    def register(self, name: str, factory: Factory) -> None:
        """Add (or replace) an extension by hand: embedding and tests; installed ones come from entry points."""
        self._loaded()[name] = factory
        self.version += 1

    def unregister(self, name: str) -> None:
        """Remove an extension added by `register` (KeyError when it is not registered)."""
        del self._loaded()[name]
        self.version += 1

    def create(self, name: str, **options: Any) -> Any:
        """Instantiate the extension registered as `name`; ValueError naming the known ones otherwise."""
        factory = self.get(name)
        if factory is None:
            raise ValueError(f"unknown {self.what} {name!r} (known: {', '.join(sorted(self))})")
        return factory(**options)
