"""Load a kubeconfig into the `kubernetes` client, every failure one line naming the file.

The client reads the file itself and raises whatever its YAML reader or its own code meets (a
`UnicodeDecodeError` for a Latin-1 byte, a `YAMLError`, a `TypeError` for a file that is not a mapping);
`load_kubeconfig` turns each of those into a `ValueError` the CLI prints as one line.
"""

from __future__ import annotations

from pathlib import Path

import kubernetes
import yaml

from topology.textfile import decode_text

CLIENT_ERRORS = (kubernetes.config.ConfigException, yaml.YAMLError, OSError, TypeError, AttributeError, ValueError)
"""What `kubernetes.config.load_kube_config` raises for a file it cannot use."""


def load_kubeconfig(kubeconfig: Path | None, context: str | None = None) -> None:
    """Load `kubeconfig` (None: $KUBECONFIG / ~/.kube/config) into the client's default configuration;
    ValueError with one line (`--kubeconfig FILE: why`) when it is not a usable kubeconfig."""
    if kubeconfig is not None:  # checked here: the client would raise a bare UnicodeDecodeError
        try:
            data = Path(kubeconfig).read_bytes()
        except OSError as exc:
            raise ValueError(f"--kubeconfig {kubeconfig}: {exc.strerror or exc}") from None
        decode_text(data, f"--kubeconfig {kubeconfig}", ValueError, utf8_only=True)
    try:
        kubernetes.config.load_kube_config(config_file=str(kubeconfig) if kubeconfig else None, context=context)
    except CLIENT_ERRORS as exc:
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "no kubeconfig ($KUBECONFIG, ~/.kube/config)"
        raise ValueError(f"{where}: {' '.join(str(exc).split())}") from None
