"""The deterministic policy: the same sanitized request and config always give the same decision.

Order: denylist (also over words the gate could not analyze) → mode deny → ordered rules (first match
wins) → asked escalation → allowlist (simple single command) → mode allow → default.

The invariant, in every mode: a request is allowed without approval only if the gate established its
complete intent (``ShellAnalysis.unseen`` is empty, no env key from the request changes what programs
run, no program opaque to the gate is given a shell or a program that runs commands: ``unseen_by_gate``),
or an explicit allow rule on CI context covers what it cannot see (``opaque: true`` with a ``ci:``
condition, refused at load without one); and in every case only if no program opaque to the gate has a
denylisted program among its words. Otherwise every allow — rule, allowlist or mode — asks, saying what
could not be seen.
An allow — from the allowlist or a rule — never lets through a complex shell string (unless the rule
states ``complex: true``: every command must still match its command conditions), an escalation, a risk
above allow_max_risk (unless the rule states its own risk condition) or a program that is not named bare
or from a trusted directory: those ask.
"""

from __future__ import annotations

import logging
import os
import posixpath
import shlex
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from orchestrator.domain.canonical import canonical_sha256
from orchestrator.domain.decisions import Decision, Mode, PolicyDecision
from orchestrator.domain.errors import ConfigInvalid
from orchestrator.domain.hosts import Allowlist, parse_pattern
from orchestrator.domain.sanitized import RiskLevel, SanitizedRequest
from orchestrator.gate.commands import CommandPattern, ParsedCommand, parse_command, program_name
from orchestrator.gate.config import PolicyRule, SafetyConfig, default_safety_config, load_safety_config
from orchestrator.gate.intent import ShellAnalysis
from orchestrator.gate.matching import OPAQUE_TOKENS, WILDCARD, Matcher, RequestFacts, unseen_by_gate

log = logging.getLogger(__name__)

POLICY_ENGINE_VERSION = 3
"""In every policy_version_hash: 3 since an allow rule stating complex: true (or opaque: true) covers what it states."""
_SUFFIX_WORDS = 256
"""Words of an unanalyzed sequence a denylist pattern is matched against, from each program name on."""
_SUFFIX_PARSES = 64
"""Parses spent per decision on unanalyzed words (what is left unmatched still asks: it is unseen)."""


@dataclass(frozen=True, slots=True)
class _CompiledRule:
    index: int
    label: str
    rule: PolicyRule
    matcher: Matcher


class _PatternIndex:
    """Command patterns by program name (glob programs apart), keeping list order for reporting."""

    def __init__(self, texts: list[str]) -> None:
        self._by_program: dict[str, list[tuple[int, CommandPattern]]] = {}
        self._globs: list[tuple[int, CommandPattern]] = []
        for i, text in enumerate(texts):
            pattern = CommandPattern.parse(text)
            if pattern.program == WILDCARD:
                self._globs.append((i, pattern))
            else:
                self._by_program.setdefault(pattern.program, []).append((i, pattern))

    def first_match(self, parsed: ParsedCommand) -> CommandPattern | None:
        found = [(i, p) for i, p in self._by_program.get(parsed.program, ()) if p.matches_parsed(parsed)]
        found += [(i, p) for i, p in self._globs if p.matches_parsed(parsed)]
        return min(found, key=lambda item: item[0])[1] if found else None

    def names_program(self, word: str) -> bool:
        """Whether some pattern's program is the basename of ``word`` (``rm`` for ``/bin/rm``)."""
        name = program_name((word,))
        return name in self._by_program or any(p.program_matches(name) for _, p in self._globs)

    def match_in(self, words: tuple[str, ...], budget: list[int]) -> tuple[CommandPattern, tuple[str, ...]] | None:
        """The first pattern matching ``words`` from any word on (words the gate could not analyze:
        ``nice nice … rm -rf x`` past the nesting limit). ``budget`` bounds the parses across calls."""
        for k in range(len(words)):
            if budget[0] <= 0:
                return None
            if not self.names_program(words[k]):
                continue
            budget[0] -= 1
            suffix = words[k : k + _SUFFIX_WORDS]
            found = self.first_match(parse_command(suffix))
            if found is not None:
                return found, suffix
        return None


class Policy:
    """A compiled SafetyConfig. Rules are indexed by tool, program and first positional so that a
    request only visits the rules that could match it, in their original order (first match wins)."""

    def __init__(self, config: SafetyConfig, source: str = "<built-in default>") -> None:
        self.config = config
        self.source = source
        self.version_hash = canonical_sha256(
            {"engine": POLICY_ENGINE_VERSION, "safety": config.model_dump(mode="json")}
        )
        self._deny = _PatternIndex(config.denylist)
        self._allow = _PatternIndex(config.allowlist)
        self._allow_max = RiskLevel.parse(config.allow_max_risk)
        self._trusted_dirs = frozenset(posixpath.normpath(d) for d in config.trusted_program_dirs)
        self._network_allow = Allowlist(config.network_allow)
        self._ordered = [
            _CompiledRule(i, f"rule:{i}" + (f":{rule.name}" if rule.name else ""), rule, Matcher.compile(rule))
            for i, rule in enumerate(config.rules, start=1)
        ]
        self._keyed: dict[tuple[str, str | None], list[_CompiledRule]] = {}
        self._any_command: list[_CompiledRule] = []
        for compiled in self._ordered:
            key = compiled.matcher.index_key
            if key is None:
                self._any_command.append(compiled)
            else:
                self._keyed.setdefault(key, []).append(compiled)
        self._merged: dict[tuple[str, frozenset[tuple[str, str | None]]], list[_CompiledRule]] = {}

    def _rules_in_order(self) -> list[_CompiledRule]:
        return list(self._ordered)

    def _candidates(self, tool: str, keys: frozenset[tuple[str, str | None]]) -> list[_CompiledRule]:
        cache_key = (tool, keys)
        merged = self._merged.get(cache_key)
        if merged is None:
            pool = [r for r in self._any_command if r.matcher.tools is None or tool in r.matcher.tools]
            for key in keys:
                pool.extend(r for r in self._keyed.get(key, ()) if r.matcher.tools is None or tool in r.matcher.tools)
            merged = sorted(pool, key=lambda r: r.index)
            if len(self._merged) >= 4096:
                self._merged.clear()  # bounded: arguments vary without end
            self._merged[cache_key] = merged
        return merged

    def _decision(
        self, decision: Decision, reason: str, matched: str | None, sanitized: SanitizedRequest
    ) -> PolicyDecision:
        return PolicyDecision(
            decision=decision,
            reason=reason,
            matched_rule=matched,
            policy_version_hash=self.version_hash,
            risk=sanitized.risk,
            intent=sanitized.intent,
        )

    def _hold_allow(
        self,
        facts: RequestFacts,
        asked: list[str],
        *,
        complex_reason: str | None,
        check_risk: bool,
        covers_blind: bool = False,
    ) -> str | None:
        """Why an allow must become an ask, or None. ``complex_reason``: the command is complex and the allow
        does not cover that; ``covers_blind``: the allow covers what the gate cannot see (a rule stating
        ``opaque: true``; a denylisted program among an opaque program's words is held all the same)."""
        blind = self._denied_in_opaque(facts.analysis) or (None if covers_blind else self._unseen(facts))
        if blind is not None:
            return blind
        if complex_reason is not None:
            return f"an allow does not cover a complex command ({complex_reason})"
        if asked:
            return f"escalation asked: {', '.join(asked)}"
        if check_risk and facts.risk > self._allow_max:
            return f"risk is {facts.risk.label}: {facts.sanitized.risk.reason}"
        for words in facts.commands:
            untrusted = self._untrusted_program(words[0])
            if untrusted is not None:
                return f"program {untrusted!r} is not in a trusted directory"
        return None

    @staticmethod
    def _unseen(facts: RequestFacts) -> str | None:
        return None if facts.blind is None else f"the gate cannot see what would run: {facts.blind}"

    def _blind(self, analysis: ShellAnalysis | None, sanitized: SanitizedRequest) -> str | None:
        """Why the gate has not established the request's complete intent, or None. In every mode, a
        request is allowed without approval only when this is None, or when an allow rule stating
        ``opaque: true`` (and a ``ci:`` condition) covers what it reports but a denylisted program."""
        denied = self._denied_in_opaque(analysis)
        if denied is not None:
            return denied
        unseen = unseen_by_gate(analysis, sanitized)
        return None if unseen is None else f"the gate cannot see what would run: {unseen}"

    def _denied_in_opaque(self, analysis: ShellAnalysis | None) -> str | None:
        """A denylisted program among the words of a program opaque to the gate (or a wrapper's option values):
        an allow asks for it whatever covers the rest."""
        if analysis is None:
            return None
        for program, words in analysis.opaque:
            for word in words:
                for token in OPAQUE_TOKENS.split(word):
                    if token and self._deny.names_program(token):
                        return (
                            f"'{program}' is opaque to the gate and {token!r} (denylisted) is among its words:"
                            " what it runs cannot be told"
                        )
        return None

    def _denied_unanalyzed(self, analysis: ShellAnalysis | None) -> tuple[CommandPattern, tuple[str, ...]] | None:
        """A denylist match in words the gate saw but could not analyze as commands."""
        if analysis is None or not analysis.unanalyzed:
            return None
        budget = [_SUFFIX_PARSES]
        for words in analysis.unanalyzed:
            found = self._deny.match_in(words, budget)
            if found is not None:
                return found
        return None

    def _untrusted_program(self, word: str) -> str | None:
        path = word.replace("\\", "").replace("'", "").replace('"', "")
        if "/" not in path:
            return None  # a bare name, found on the sandbox's PATH
        return None if posixpath.dirname(posixpath.normpath(path)) in self._trusted_dirs else path

    def uncovered_egress(self, sanitized: SanitizedRequest, approved: Collection[str] = ()) -> list[str]:
        """The host:port patterns of the request's egress that ``safety.network_allow`` does not cover and no
        earlier approval of its session (``approved``) did: what is asked about."""
        return [
            text
            for text in sanitized.egress or ()
            if text not in approved and not self._network_allow.covers(parse_pattern(text))
        ]

    def decide(
        self,
        sanitized: SanitizedRequest,
        analysis: ShellAnalysis | None,
        *,
        profile: str,
        egress_approved: Collection[str] = (),
    ) -> PolicyDecision:
        facts = RequestFacts(sanitized, analysis, profile)

        # a script's words are its content (which may hold what the runner put in it): never quoted
        from_script = frozenset(analysis.script_commands) if analysis is not None else frozenset()
        for index, (words, parsed) in enumerate(zip(facts.commands, facts.parsed, strict=True)):
            denied = self._deny.first_match(parsed)
            if denied is not None:
                what = (
                    f"a command of the script {sanitized.script.path}"
                    if index in from_script and sanitized.script
                    else repr(shlex.join(words))
                )
                return self._decision(
                    Decision.DENY,
                    f"denylisted: {denied.text!r} matches {what}",
                    f"denylist:{denied.text}",
                    sanitized,
                )

        hidden = self._denied_unanalyzed(analysis)
        if hidden is not None:
            pattern, words = hidden
            quoted = "" if sanitized.script is not None else f"{shlex.join(words)[:200]!r} in "
            return self._decision(
                Decision.DENY,
                f"denylisted: {pattern.text!r} matches {quoted}words the gate could not analyze as a command",
                f"denylist:{pattern.text}",
                sanitized,
            )

        if self.config.mode is Mode.DENY:
            return self._decision(Decision.DENY, "policy mode is deny", "mode:deny", sanitized)

        escalations = sanitized.sandbox_permissions
        hosts = self.uncovered_egress(sanitized, egress_approved)
        asked = [
            *(["network (unrestricted)"] if escalations.network is True else []),
            *([f"network: {', '.join(hosts)}"] if hosts else []),
            *(["writable_root"] if escalations.writable_root else []),
            *(f"mount {m}" for m in escalations.extra_mounts),
        ]
        complex_reason = analysis.reason if analysis is not None and analysis.is_complex else None

        for rule in self._candidates(facts.tool, facts.index_keys()):
            grants = rule.rule.action is Decision.ALLOW
            if not rule.matcher.matches(facts, every_command=grants):
                continue
            why = rule.rule.reason or f"matched {rule.label}"
            if rule.matcher.uses_risk:
                why += f" (risk {sanitized.risk.risk_level}: {sanitized.risk.reason})"
            if grants:
                covers_complex = rule.rule.complex is True
                covers_blind = rule.rule.opaque is True
                held = self._hold_allow(
                    facts,
                    asked,
                    complex_reason=None if covers_complex else complex_reason,
                    check_risk=not rule.matcher.uses_risk,
                    covers_blind=covers_blind,
                )
                if held is not None:
                    return self._decision(Decision.ASK, f"{why}; but {held}", rule.label, sanitized)
                if covers_complex and complex_reason is not None:
                    why += f" (covers a complex command: {complex_reason})"
                if covers_blind and facts.blind is not None:
                    why += f" (covers what the gate cannot see: {facts.blind})"
            return self._decision(rule.rule.action, why, rule.label, sanitized)

        if asked:
            return self._decision(Decision.ASK, f"escalation asked: {', '.join(asked)}", "escalation", sanitized)

        if complex_reason is None and len(facts.parsed) == 1:
            allowed = self._allow.first_match(facts.parsed[0])
            if allowed is not None:
                label = f"allowlist:{allowed.text}"
                held = self._hold_allow(facts, [], complex_reason=None, check_risk=True)
                if held is not None:
                    return self._decision(Decision.ASK, f"allowlisted {allowed.text!r} but {held}", label, sanitized)
                return self._decision(Decision.ALLOW, f"allowlisted: {allowed.text!r}", label, sanitized)

        if self.config.mode is Mode.ALLOW:
            blind = self._blind(analysis, sanitized)
            if blind is not None:
                return self._decision(Decision.ASK, f"policy mode is allow, but {blind}", "mode:allow", sanitized)
            return self._decision(Decision.ALLOW, "policy mode is allow", "mode:allow", sanitized)

        why = f"complex command ({complex_reason})" if complex_reason else "no rule or allowlist entry matched"
        return self._decision(Decision(self.config.default), why, "default", sanitized)


class PolicySource:
    """The policy in force, reloaded when its file changes.

    A reload that fails keeps the last good policy (so a typo does not halt every agent) and
    exposes the error in ``last_error``; the first load failing raises CONFIG.INVALID.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.last_error: ConfigInvalid | None = None
        self._stamp: tuple[int, int, int] | None = None
        if path is None:
            self._policy = Policy(default_safety_config())
        else:
            self._stamp = self._stat()
            self._policy = Policy(load_safety_config(path), str(path))

    def _stat(self) -> tuple[int, int, int] | None:
        assert self.path is not None
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def current(self) -> Policy:
        if self.path is None:
            return self._policy
        stamp = self._stat()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                self._policy = Policy(load_safety_config(self.path), str(self.path))
                self.last_error = None
                log.info("policy reloaded from %s (%s)", self.path, self._policy.version_hash[:12])
            except ConfigInvalid as err:
                self.last_error = err
                log.error("policy reload failed, keeping the last good policy: %s", err)
        return self._policy
