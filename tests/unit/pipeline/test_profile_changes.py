"""pipeline.profile_changes: a re-read of the profiles on the evidence — one profile_changed record per profile it
changed (its hashes before and after, as a run gets it under the config's caps; the files and their owner), one
profile_change_refused record for a new set refused — in a chain that verifies."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.evidence import EvidenceWriter, verify
from orchestrator.pipeline.observer import GuardedTelemetry
from orchestrator.pipeline.profile_changes import ProfileChanges
from orchestrator.pipeline.recorder import Evidence
from orchestrator.profiles import ProfileCaps, ProfileRegistry
from orchestrator.profiles.paths import builtin_dir
from orchestrator.profiles.source import ProfileSource
from tests.support.evidence import record_dicts

MIB = 1024 * 1024
CAPS = ProfileCaps(max_memory=512 * MIB)


def test_each_changed_profile_is_recorded_with_its_hashes_and_a_refusal_too(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    small = profiles / "small.yaml"
    small.write_text("description: small\nextends: workspace-write\nlimits: {memory: 256m}\n")
    gone = profiles / "gone.yaml"
    gone.write_text("description: gone\nextends: read-only\n")
    # the hashes as a run under these caps gets them, computed apart from the code under test
    old_small = ProfileRegistry([profiles], builtin=True).resolve("small", caps=CAPS)
    old_gone = ProfileRegistry([profiles], builtin=True).resolve("gone", caps=CAPS)
    source = ProfileSource([builtin_dir(), profiles], check_every_s=0)
    path = tmp_path / "evidence.jsonl"
    writer = EvidenceWriter(path)
    source.subscribe(ProfileChanges(Evidence(writer, GuardedTelemetry()), CAPS, None))

    small.write_text("description: small\nextends: workspace-write\nlimits: {memory: 1g, pids: 64}\n")
    gone.unlink()
    source.current()
    new_small = ProfileRegistry([profiles], builtin=True).resolve("small", caps=CAPS)
    assert new_small.memory_bytes == 512 * MIB and new_small.pids_limit == 64  # capped, and changed
    writer.flush_sync()
    changed = record_dicts(path, event="profile_changed")
    assert [r["data"]["profile"] for r in changed] == ["gone", "small"]
    reload_id = changed[0]["execution_id"]
    assert reload_id.startswith("profiles-ex-") and changed[1]["execution_id"] == reload_id  # one re-read
    assert changed[1] == {
        **{k: changed[1][k] for k in ("v", "seq", "ts", "prev_hash", "hash")},
        "event": "profile_changed",
        "execution_id": reload_id,
        "subject": "profiles",
        "status": "changed",
        "profile_hash": new_small.profile_hash,
        "reason": f"profile 'small' changed: {small} (owner uid {os.getuid()})",
        "data": {
            "profile": "small",
            "change": "changed",
            "old_profile_hash": old_small.profile_hash,
            "new_profile_hash": new_small.profile_hash,
            "old_definition_sha256": old_small.definition_sha256,
            "new_definition_sha256": new_small.definition_sha256,
            "files": [{"path": str(small), "owner_uid": os.getuid()}],
        },
    }
    assert "profile_hash" not in changed[0]  # removed: nothing runs with it now
    assert changed[0]["status"] == "removed"
    assert changed[0]["data"] == {
        "profile": "gone",
        "change": "removed",
        "old_profile_hash": old_gone.profile_hash,
        "new_profile_hash": None,
        "old_definition_sha256": old_gone.definition_sha256,
        "new_definition_sha256": None,
        "files": [{"path": str(gone), "owner_uid": None}],
    }

    small.write_text("description: small\nextends: workspace-write\nlimits: {memory: plenty}\n")
    source.current()
    writer.flush_sync()
    [refused] = record_dicts(path, event="profile_change_refused")
    assert (refused["status"], refused["error_code"], refused["subject"]) == ("refused", "CONFIG.INVALID", "profiles")
    assert refused["reason"].startswith(
        f"the profiles were not reloaded, the set in force is kept: profile 'small': {small}:"
    )
    assert refused["data"]["profiles"] == ["small"]
    assert len(refused["data"]["problems"]) == 1 and "limits.memory" in refused["data"]["problems"][0]
    assert refused["data"]["files"] == [{"path": str(small), "owner_uid": os.getuid()}]
    assert source.current().resolve("small", caps=CAPS).profile_hash == new_small.profile_hash  # kept
    writer.close_sync()
    report = verify(path)
    assert report.ok and report.records == 3 and report.complete
