"""The doctor's probe as read back, and what it is compared with: a run's own profile (the config's caps
included, one resolution with the runner), every size with its unit."""

from __future__ import annotations

from orchestrator.gate.gate import DEFAULT_PROFILE
from orchestrator.pipeline.doctor import probe_request
from orchestrator.pipeline.probe import parse_probe, probe_verdict
from orchestrator.pipeline.profiles_of import Profiles
from orchestrator.profiles import ProfileCaps, ResolvedProfile

MIB = 1024 * 1024


def probe_output(*, memory: int, nofile: int = 1024, fsize: int = 256 * MIB, pids: int = 256) -> str:
    """What PROBE prints in a runc sandbox of workspace-write (the kernel's own formats)."""
    return "\n".join(
        [
            "NoNewPrivs:\t1",
            "Seccomp:\t2",
            "CapEff:\t0000000000000000",
            "CapBnd:\t0000000000000000",
            f"/sys/fs/cgroup/memory.max={memory}",
            f"/sys/fs/cgroup/pids.max={pids}",
            f"Max file size             {fsize}            {fsize}            bytes     ",
            f"Max open files            {nofile}                 {nofile}                 files     ",
            "1000",
            "root-read-only",
        ]
    )


def run_profile(caps: ProfileCaps | None, name: str = DEFAULT_PROFILE) -> ResolvedProfile:
    """The profile a run of ``name`` gets under ``caps``: the runner's resolution, as the doctor asks it."""
    return Profiles.under(caps).resolve(probe_request(name), session=False)


def test_sizes_are_shown_with_their_unit() -> None:
    profile = run_profile(None)
    seen = parse_probe(probe_output(memory=profile.memory_bytes, pids=profile.pids_limit, fsize=profile.fsize_bytes))
    ok, detail = probe_verdict(profile, seen)
    assert ok, detail
    assert "fsize=256MiB" in detail and "memory=512MiB" in detail and "nofile=1024" in detail
    assert "262144" not in detail and "268435456" not in detail


def test_the_caps_are_what_the_probe_is_held_to() -> None:
    """caps: {max_memory: 256m}: runs get 256 MiB, so a probe that saw 256 MiB passes and one that saw the
    profile's own 512 MiB does not."""
    capped = run_profile(ProfileCaps.model_validate({"max_memory": "256m"}))
    assert capped.memory_bytes == 256 * MIB
    ok, detail = probe_verdict(capped, parse_probe(probe_output(memory=256 * MIB, pids=capped.pids_limit)))
    assert ok, detail
    assert "memory=256MiB" in detail
    ok, detail = probe_verdict(capped, parse_probe(probe_output(memory=512 * MIB, pids=capped.pids_limit)))
    assert not ok
    assert detail.startswith("memory limit 512MiB (want 256MiB)"), detail


def test_rlimits_other_than_the_profiles_fail() -> None:
    profile = run_profile(None)
    seen = parse_probe(probe_output(memory=profile.memory_bytes, pids=profile.pids_limit, nofile=4096, fsize=MIB))
    ok, detail = probe_verdict(profile, seen)
    assert not ok
    assert "open files limit 4096 (want 1024)" in detail and "file size limit 1MiB (want 256MiB)" in detail


def test_an_unreadable_rlimit_is_not_a_pass() -> None:
    """Fail closed: what the probe could not read is not in force as far as the doctor knows."""
    profile = run_profile(None)
    text = "\n".join(
        line
        for line in probe_output(memory=profile.memory_bytes, pids=profile.pids_limit).splitlines()
        if not line.startswith("Max ")
    )
    ok, detail = probe_verdict(profile, parse_probe(text))
    assert not ok
    assert "open files limit ? (want 1024)" in detail and "file size limit ? (want 256MiB)" in detail


def without(text: str, prefix: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith(prefix))


def test_no_memory_or_pids_limit_under_runc_is_a_failure() -> None:
    """cgroup v2 says "max" where there is no limit: under runc the profile's limits are not in force."""
    profile = run_profile(None)
    text = probe_output(memory=profile.memory_bytes, pids=profile.pids_limit)
    text = text.replace(f"memory.max={profile.memory_bytes}", "memory.max=max")
    text = text.replace(f"pids.max={profile.pids_limit}", "pids.max=max")
    ok, detail = probe_verdict(profile, parse_probe(text))
    assert not ok
    assert detail.startswith(f"memory limit max (want 512MiB); pids limit max (want {profile.pids_limit}) — saw "), (
        detail
    )


def test_memory_and_pids_lines_missing_under_runc_are_a_failure() -> None:
    profile = run_profile(None)
    text = without(probe_output(memory=profile.memory_bytes, pids=profile.pids_limit), "/sys/fs/cgroup/")
    ok, detail = probe_verdict(profile, parse_probe(text))
    assert not ok
    assert detail.startswith(f"memory limit ? (want 512MiB); pids limit ? (want {profile.pids_limit}) — saw "), detail


def test_a_missing_capeff_is_a_failure() -> None:
    """Capabilities not read are not known to be none."""
    profile = run_profile(None)
    text = without(probe_output(memory=profile.memory_bytes, pids=profile.pids_limit), "CapEff:")
    ok, detail = probe_verdict(profile, parse_probe(text))
    assert not ok
    assert detail.startswith("effective capabilities ? (want none) — saw "), detail


def test_gvisor_and_node_scoped_pids_are_shown_not_compared() -> None:
    """Under runsc the limits sit on the host cgroup (the sandbox shows its own tree); on a cluster the pids
    limit is the node's: both shown, neither compared, as before."""
    gvisor = run_profile(None, "untrusted")
    assert gvisor.runtime == "runsc"
    text = probe_output(memory=1, pids=1, nofile=gvisor.nofile, fsize=gvisor.fsize_bytes)
    text = text.replace("memory.max=1", "memory.max=max").replace("pids.max=1", "pids.max=max")
    ok, detail = probe_verdict(gvisor, parse_probe(text))
    assert ok, detail
    assert "memory=host-enforced pids=host-enforced" in detail
    runc = run_profile(None)
    text = probe_output(memory=runc.memory_bytes, pids=1).replace("pids.max=1", "pids.max=max")
    ok, detail = probe_verdict(runc, parse_probe(text), node_pids=True)
    assert ok, detail
    assert "memory=512MiB pids=max (the node's pod limit)" in detail
    # the memory limit is still the container's own, and compared
    ok, detail = probe_verdict(runc, parse_probe(text.replace(f"={runc.memory_bytes}", "=max")), node_pids=True)
    assert not ok and detail.startswith("memory limit max (want 512MiB) — saw "), detail
