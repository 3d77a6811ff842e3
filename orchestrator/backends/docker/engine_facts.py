"""What the engine's ``GET /info`` says that the backend checks: its security options, and whether its
runsc applies our seccomp profile (gVisor ignores an OCI seccomp profile unless registered with
``--oci-seccomp``)."""

from __future__ import annotations

from orchestrator.backends.docker.engine import JsonObject, jlist, jobj


def security_options(info: JsonObject) -> list[str]:
    """The engine's security options (``GET /info``): ``name=seccomp,profile=default``, ``name=rootless``, ..."""
    return [s for s in jlist(info, "SecurityOptions") if isinstance(s, str)]


def runsc_seccomp_problem(info: JsonObject) -> str | None:
    """Why the engine's runsc (from ``GET /info``) would not apply our seccomp profile, or None."""
    registered = jobj(info, "Runtimes").get("runsc")
    if not isinstance(registered, dict):
        return "runtime runsc (gVisor) is not registered with this engine (`make setup` registers it)"
    args = registered.get("runtimeArgs")
    if not isinstance(args, list) or "--oci-seccomp" not in args:
        return (
            "runtime runsc is registered without --oci-seccomp: gVisor would ignore the seccomp profile"
            ' (register it with "runtimeArgs": ["--oci-seccomp"]; `make setup` does)'
        )
    return None
