"""The chart's values.schema.json: generated from the config models (scripts/gen_chart_schema.py) and committed
up to date; the chart's values and the controller's config agree on what they accept, the pool's rule
included, without helm (tests/k8s/test_chart_render.py renders with helm itself)."""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest
import yaml

from orchestrator.domain.errors import ConfigInvalid
from orchestrator.pipeline.config import OrchestratorConfig, ServiceSection, load_config
from tests.support.paths import ROOT

CHART = ROOT / "charts" / "sandbox-orchestrator"
COMMAND = ".venv/bin/python scripts/gen_chart_schema.py"


@cache
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_chart_schema", ROOT / "scripts" / "gen_chart_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gen_chart_schema", module)
    spec.loader.exec_module(module)
    return module


@cache
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    return loaded


@cache
def defaults() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    return loaded


def coalesced(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` over values.yaml as helm merges them: maps key by key, anything else replaced."""

    def merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(base)
        for key, value in over.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merge(out[key], value)
            elif value is None:
                out.pop(key, None)
            else:
                out[key] = copy.deepcopy(value)
        return out

    return merge(defaults(), values)


def schema_errors(values: dict[str, Any]) -> list[str]:
    """What the values schema says about ``values`` (over the defaults): each error's path and message."""
    validator = jsonschema.Draft202012Validator(schema())
    found = []
    for error in validator.iter_errors(coalesced(values)):
        for leaf in [error, *(error.context or [])]:
            found.append(f"{leaf.json_path}: {leaf.message}")
    return found


def config_problem(config: dict[str, Any], tmp_path: Path) -> str | None:
    """What the controller says about a config.yaml: None when it starts, else CONFIG.INVALID's message."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    try:
        load_config(path)
    except ConfigInvalid as err:
        return err.message
    return None


def rendered_config(values: dict[str, Any]) -> dict[str, Any]:
    """The config.yaml the chart renders for ``values``, as far as these tests need it (_helpers.tpl's
    so.config: the config sections as given, the workspace mode into the backend section)."""
    merged = coalesced(values)
    config = {section: value for section, value in merged["config"].items() if value}
    mode = merged["workspaces"]["mode"]
    config["backend"] = {"kind": "kubernetes", "kubernetes": {"workspace": {"mode": mode, "root": "/workspaces"}}}
    config["service"] = {**config.get("service", {}), "workspaces": "/workspaces"}
    return config


# -- the committed file --------------------------------------------------------------------------------


def test_committed_schema_is_the_generated_one() -> None:
    committed = (CHART / "values.schema.json").read_text(encoding="utf-8")
    assert committed == gen().render(), f"values.schema.json is stale: run {COMMAND}"
    assert gen().main(["--check"]) == 0


def test_generation_is_deterministic() -> None:
    assert gen().render() == gen().render()


def test_schema_is_valid_and_accepts_the_defaults() -> None:
    jsonschema.Draft202012Validator.check_schema(schema())
    assert schema_errors({}) == []


def test_config_value_is_the_models_less_what_the_chart_writes() -> None:
    config = schema()["properties"]["config"]
    assert config["additionalProperties"] is False
    sections = config["properties"]
    assert set(sections) == set(OrchestratorConfig.model_fields) - {"backend"}
    assert set(sections["service"]["properties"]) == set(ServiceSection.model_fields) - {
        "tokens",
        "workspaces",
        "workspace_owner",
    }
    # each section is the model's own schema (refs into the generated $defs), not a hand-written copy
    model = OrchestratorConfig.model_json_schema(mode="validation")
    assert sections["pool"]["properties"] == model["$defs"]["PoolSettings"]["properties"]
    assert sections["egress"]["properties"] == model["$defs"]["EgressSettings"]["properties"]
    assert schema()["$defs"]["PolicyRule"] == model["$defs"]["PolicyRule"]


def test_no_marker_is_left() -> None:
    assert gen().MARKER not in json.dumps(schema())


def test_a_marker_may_add_to_the_model_but_not_contradict_it() -> None:
    source = yaml.safe_load((CHART / "values.schema.chart.yaml").read_text(encoding="utf-8"))
    source["properties"]["workspaces"]["properties"]["mode"]["enum"] = ["pvc", "copy", "hostpath"]
    with pytest.raises(gen().SchemaSourceError, match=r"workspaces\.properties\.mode: enum contradicts"):
        gen().build_schema(source)
    source["properties"]["workspaces"]["properties"]["mode"] = {"$config": "backend.kubernetes.workspace.nope"}
    with pytest.raises(gen().SchemaSourceError, match="the config has no field 'nope'"):
        gen().build_schema(source)


# -- the chart and the controller agree -------------------------------------------------------------------

GOOD_CONFIG = {
    "safety": {"mode": "ask", "denylist": ["sudo"], "approval_timeout_s": 120},
    "approvals": {"provider": "queue", "rules": [{"name": "tests", "argv_glob": "pytest*", "outcome": "approved"}]},
    "caps": {"max_memory": "1g", "allowed_runtimes": ["runc", "runsc"]},
    "egress": {"hosts": {"api.internal": "10.0.0.7"}, "max_records": 50},
    "evidence": {"path": "/var/lib/sandbox-orchestrator/evidence/evidence.jsonl"},
    "service": {"allow_self_approval": True, "limits": {"max_page": 100}},
    "pool": {
        "enabled": True,
        "min_ready": 0,
        "max_ready": 6,
        "ttl_s": 120,
        "shrink_after_s": 30,
        "profiles": {"ci": {"min_ready": 2, "max_ready": 20}},
    },
}

# (config values, the field both name)
BAD_CONFIGS = [
    ({"pool": {"per_key": 0}}, "pool.per_key"),
    ({"pool": {"ttl_s": 0}}, "pool.ttl_s"),
    ({"pool": {"warm": True}}, "pool"),
    ({"pool": {"max_ready": 0}}, "pool.max_ready"),
    ({"pool": {"profiles": {"ci": {"min_ready": -1}}}}, "pool.profiles.ci.min_ready"),
    ({"pool": {"profiles": {"ci": {"spare": 1}}}}, "pool.profiles.ci"),
    ({"caps": {"max_memory": "lots"}}, "caps.max_memory"),
    ({"caps": {"allowed_runtimes": ["kata"]}}, "caps.allowed_runtimes"),
    ({"egress": {"max_records": 0}}, "egress.max_records"),
    ({"safety": {"mode": "maybe"}}, "safety.mode"),
    ({"approvals": {"provider": "slack"}}, "approvals.provider"),
    ({"service": {"limits": {"max_page": 5000}}}, "service.limits.max_page"),
]


def test_a_config_of_earlier_releases_is_still_accepted(tmp_path: Path) -> None:
    values = {"config": {"pool": {"enabled": True, "per_key": 3, "ttl_s": 120}}}
    assert schema_errors(values) == []
    assert config_problem(rendered_config(values), tmp_path) is None


def test_both_accept_a_full_config(tmp_path: Path) -> None:
    values = {"config": GOOD_CONFIG}
    assert schema_errors(values) == []
    assert config_problem(rendered_config(values), tmp_path) is None


@pytest.mark.parametrize(("config", "field"), BAD_CONFIGS, ids=[f for _, f in BAD_CONFIGS])
def test_both_refuse(config: dict[str, Any], field: str, tmp_path: Path) -> None:
    errors = schema_errors({"config": config})
    assert errors, "the values schema accepts it"
    assert any(f"$.config.{field}" in e for e in errors), errors
    problem = config_problem(rendered_config({"config": config}), tmp_path)
    assert problem is not None, "the controller accepts it"
    assert f": {field}" in problem, problem


def test_what_the_chart_writes_is_not_a_value() -> None:
    for written in ({"tokens": []}, {"workspaces": "/elsewhere"}, {"workspace_owner": "0:0"}):
        assert any("Additional properties" in e for e in schema_errors({"config": {"service": written}}))
    assert schema_errors({"config": {"backend": {"kind": "docker"}}})


POOL_SENTENCE = "pre-started pods need {} pvc (in copy mode the workspace is copied into a pod as it starts"


def test_a_pool_needs_pvc_workspaces_in_both(tmp_path: Path) -> None:
    """One rule (pipeline/config.py), two readers: the chart's schema refuses the values at install, the
    controller refuses the config at start-up; both name the fields in their own terms."""
    values = {"workspaces": {"mode": "copy"}, "config": {"pool": {"enabled": True}}}
    errors = schema_errors(values)
    assert any(f"config.pool.enabled: {POOL_SENTENCE.format('workspaces.mode')}" in e for e in errors), errors
    problem = config_problem(rendered_config(values), tmp_path)
    assert problem is not None
    assert f"pool: Value error, pool.enabled: {POOL_SENTENCE.format('backend.kubernetes.workspace.mode')}" in problem
    for fine in (
        {"workspaces": {"mode": "copy"}, "config": {"pool": {"enabled": False}}},
        {"workspaces": {"mode": "pvc"}, "config": {"pool": {"enabled": True}}},
        {"workspaces": {"mode": "copy"}},
    ):
        assert schema_errors(fine) == [], fine
        assert config_problem(rendered_config(fine), tmp_path) is None, fine


def test_the_pool_rule_on_docker_is_not_refused(tmp_path: Path) -> None:
    """Docker's pool needs no workspace mode: only the Kubernetes backend's copy mode is refused."""
    assert config_problem({"pool": {"enabled": True}}, tmp_path) is None
    docker = {"pool": {"enabled": True}, "backend": {"kind": "docker", "kubernetes": {"workspace": {"mode": "copy"}}}}
    assert config_problem(docker, tmp_path) is None


COPIED_REFUSALS = [
    # a claim name with a dot: a DNS subdomain, not the DNS label the backend takes
    ({"workspaces": {"claims": {"sandbox": "a.b"}}}, "workspaces.claims.sandbox"),
    ({"sandboxNamespace": {"name": "x" * 64}}, "sandboxNamespace.name"),
    ({"backend": {"seccomp": "unconfined"}}, "backend.seccomp"),
    ({"workspaces": {"copyMaxBytes": 0}}, "workspaces.copyMaxBytes"),
    ({"workspaces": {"owner": "root"}}, "workspaces.owner"),
]


@pytest.mark.parametrize(("values", "value"), COPIED_REFUSALS, ids=[v for _, v in COPIED_REFUSALS])
def test_chart_values_copied_into_the_config_follow_the_model(values: dict[str, Any], value: str) -> None:
    """A value the templates copy into a config field has that field's rules: the chart cannot accept what
    the controller would refuse."""
    assert any(f"$.{value}" in e for e in schema_errors(values)), schema_errors(values)


def test_an_empty_owner_is_the_controllers_user() -> None:
    assert schema_errors({"workspaces": {"owner": ""}}) == []


def test_templates_spell_no_config_rule() -> None:
    """The templates refuse only what is the chart's own (names, mounts, secrets): no `fail` about a
    config field (config.*), whose rules are the models'."""
    for template in sorted((CHART / "templates").glob("*")):
        text = template.read_text(encoding="utf-8")
        for message in re.findall(r"fail\s+(?:\(printf\s+)?\"([^\"]*)\"", text):
            assert not message.startswith("config."), f"{template.name}: {message}"
