"""What the sandbox images are (images/, built by `make setup`): the user every command runs as."""

from __future__ import annotations

SANDBOX_UID = 1000  # user `sandbox`, 1000:1000 (images/base): workspaces the tests make belong to it
