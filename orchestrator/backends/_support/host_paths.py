"""Host paths no backend hands a sandbox as its workspace (the pipeline's ``check_workspace`` reads them
from ``Capabilities.protected_paths``, beside the host's system directories it protects itself)."""

from __future__ import annotations

from typing import Final

#: a container engine's state: a workspace there (or containing it) would let a sandbox write other
#: containers' files. Protected on every backend: the controller's host may run an engine beside it (a
#: developer's machine, a test cluster's nodes), and a pod's workspace copied back out writes there too.
ENGINE_STATE: Final = ("/var/lib/docker", "/var/lib/containerd")
