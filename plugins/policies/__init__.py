"""Placement policies registered by name: ours (`meshfit`) and faithful baselines.

Each module defines `NAME`, one policy class and `factory(**options)`; add it to `_MODULES`.
"""

from __future__ import annotations

import importlib

from scheduler.policy import PlacementPolicy, PolicyFactory

_MODULES = (
    "plugins.policies.first_fit",
    "plugins.policies.meshfit",
    "plugins.policies.kueue_tas",
    "plugins.policies.volcano_hypernode",
    "plugins.policies.random_policy",
    "plugins.policies.optimal",
)


def _load_registry() -> dict[str, PolicyFactory]:
    registry: dict[str, PolicyFactory] = {}
    for module_name in _MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        registry[module.NAME] = module.factory
    return registry


POLICIES: dict[str, PolicyFactory] = _load_registry()
"""Policy name -> factory."""


def get_policy(name: str, **options: object) -> PlacementPolicy:
    """Instantiate the policy registered as `name`; ValueError naming the known ones otherwise."""
    factory = POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(sorted(POLICIES))})")
    return factory(**options)
