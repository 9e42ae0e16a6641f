"""NCCL (and other transport) settings chosen from a node's labels through a per-fabric config.

A fabric config is YAML: an ordered list of fabrics, each with `match` (label -> value that must
all hold; the value `"*"` only requires the label to exist) and `env` (variables to set).  The
first fabric that matches the node wins; a fabric with an empty `match` is the catch-all (unknown
keys are refused with a did-you-mean hint; see docs/file-formats.md)::

    fabrics:
      - name: infiniband
        match: {feature.node.kubernetes.io/rdma.available: "true"}
        env: {NCCL_IB_DISABLE: "0", NCCL_IB_HCA: "mlx5", NCCL_SOCKET_IFNAME: "eth0"}
      - name: ethernet
        match: {}
        env: {NCCL_IB_DISABLE: "1", NCCL_SOCKET_IFNAME: "eth0"}

`DEFAULT_FABRICS` (used when no config is given) recognises the label schemes meshfit reads.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Mapping

import yaml
from pydantic import ConfigDict, Field, ValidationError, field_validator

from topology.strict import StrictModel, validation_message
from topology.textfile import read_text

ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class FabricConfigError(ValueError):
    """A fabric config file that cannot be read or does not follow the schema."""


class Fabric(StrictModel):
    """One fabric: labels a node must carry, and the environment its processes get."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    match: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env")
    @classmethod
    def _env_names(cls, env: dict[str, str]) -> dict[str, str]:
        bad = [name for name in env if not ENV_NAME.match(name)]
        if bad:
            raise ValueError(f"not an environment variable name: {bad[0]!r}")
        return env

    def matches(self, labels: Mapping[str, str]) -> bool:
        """True when every `match` label is present with the wanted value (`*` = any value)."""
        return all(key in labels and (want == "*" or labels[key] == want) for key, want in self.match.items())


class FabricConfig(StrictModel):
    """An ordered list of fabrics; the first match decides a node's transport settings."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    fabrics: list[Fabric]

    def fabric_for(self, labels: Mapping[str, str]) -> Fabric | None:
        """The first fabric matching `labels`, or None."""
        return next((fabric for fabric in self.fabrics if fabric.matches(labels)), None)


DEFAULT_FABRICS = FabricConfig(fabrics=[
    Fabric(name="aws-efa", match={"topology.k8s.aws/network-node-layer-1": "*"},
           env={"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_SOCKET_IFNAME": "^lo,docker,veth"}),
    Fabric(name="gke-gpudirect", match={"cloud.google.com/gce-topology-block": "*"},
           env={"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}),
    Fabric(name="infiniband-rdma", match={"feature.node.kubernetes.io/rdma.available": "true"},
           env={"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "^lo,docker,veth"}),
    Fabric(name="infiniband-topograph", match={"network.topology.nvidia.com/leaf": "*"},
           env={"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "^lo,docker,veth"}),
    Fabric(name="infiniband-coreweave", match={"ib.coreweave.cloud/leafgroup": "*"},
           env={"NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": "^lo,docker,veth"}),
])
"""Transport settings for the label schemes meshfit knows; unknown nodes get none (NCCL autodetects)."""


def load_fabric_config(path: str | Path) -> FabricConfig:
    """Read and validate a fabric config YAML file; FabricConfigError with one line otherwise."""
    text = read_text(path, "fabric config", FabricConfigError)
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FabricConfigError(f"fabric config {path}: not valid YAML ({getattr(exc, 'problem', exc)})") from None
    try:
        return FabricConfig.model_validate(raw)
    except ValidationError as exc:
        raise FabricConfigError(f"fabric config {path}: {validation_message(exc, FabricConfig, 'fabrics')}") from None


def transport_env(labels: Mapping[str, str], config: FabricConfig | None = None) -> dict[str, str]:
    """Environment for a node's transport (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_DISABLE, ...)."""
    fabric = (config or DEFAULT_FABRICS).fabric_for(labels)
    if fabric is None:
        return {}
    return {**fabric.env, "MESHFIT_FABRIC": fabric.name}
