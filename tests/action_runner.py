"""A local runner for the repository's composite action (``action.yml``), for machines with
no GitHub Actions runner: it runs the action's own steps, in order, as the Actions runner
does, and stands in only for the two ``uses:`` steps it cannot run here.

- ``run:`` steps run as the runner runs ``shell: bash``
  (``bash --noprofile --norc -eo pipefail FILE``), with the step's ``env``, and with
  ``GITHUB_ACTIONS``, ``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY`` and ``RUNNER_TEMP`` set;
  what a step writes to ``GITHUB_OUTPUT`` becomes ``steps.ID.outputs``.
- ``${{ ... }}`` expressions: ``inputs.NAME`` (the ``with:`` value, else the input's
  default), ``github.action_path``, ``runner.temp`` and ``steps.ID.outputs.NAME``; any
  other expression is an error, so a step is never run with a guess.
- ``if:``: ``always()``; a step without one runs only while every step before it passed.
- Stand-ins: ``actions/setup-python`` puts the given Python's folder first on ``PATH``
  (the test's fresh virtual environment); ``actions/upload-artifact`` copies ``path`` into
  ``artifacts/NAME``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


@dataclass
class Step:
    name: str
    outcome: str  # success, failure, skipped
    output: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class Run:
    steps: list[Step]
    outputs: dict[str, str]
    summary: str
    artifacts: Path

    @property
    def conclusion(self) -> str:
        return "failure" if any(s.outcome == "failure" for s in self.steps) else "success"

    @property
    def output(self) -> str:
        return "\n".join(s.output for s in self.steps)


def run_action(
    action_dir: Path, inputs: dict[str, str], python_bin: Path, work: Path, cwd: Path
) -> Run:
    """Run ``action_dir/action.yml`` with ``inputs`` (its ``with:``), the stand-in for
    setup-python putting ``python_bin`` first on PATH, in ``cwd``; ``work`` holds the
    runner's temp folder, the output files and the artifacts."""
    action = yaml.safe_load((action_dir / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    declared = action.get("inputs", {})
    unknown = set(inputs) - set(declared)
    assert not unknown, f"inputs the action does not declare: {sorted(unknown)}"
    values = {k: str(inputs.get(k, spec.get("default", ""))) for k, spec in declared.items()}
    missing = [k for k, spec in declared.items() if spec.get("required") and not values[k]]
    assert not missing, f"required inputs not given: {missing}"
    temp, artifacts = work / "runner-temp", work / "artifacts"
    temp.mkdir(parents=True, exist_ok=True)
    artifacts.mkdir(exist_ok=True)
    summary = work / "step-summary.md"
    summary.write_text("")
    env = dict(os.environ)
    steps: dict[str, dict[str, str]] = {}

    def expand(text: str) -> str:
        def one(m: re.Match[str]) -> str:
            expr = m.group(1)
            parts = expr.split(".")
            if parts[0] == "inputs" and len(parts) == 2 and parts[1] in values:
                return values[parts[1]]
            if expr == "github.action_path":
                return str(action_dir)
            if expr == "runner.temp":
                return str(temp)
            if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
                return steps.get(parts[1], {}).get(parts[3], "")
            raise AssertionError(f"an expression this runner does not know: {expr}")

        return EXPRESSION.sub(one, text)

    done: list[Step] = []
    for i, spec in enumerate(action["runs"]["steps"]):
        name = spec.get("name") or spec.get("uses") or f"step {i}"
        condition = spec.get("if")
        assert condition in (None, "always()"), f"an if: this runner does not know: {condition}"
        failed = any(s.outcome == "failure" for s in done)
        if failed and condition != "always()":
            done.append(Step(name, "skipped"))
            continue
        if "uses" in spec:
            done.append(_stand_in(spec, expand, env, python_bin, artifacts, name))
            continue
        assert spec.get("shell") == "bash", f"{name}: a composite run step names its shell"
        script = work / f"step-{i}.sh"
        script.write_text(expand(spec["run"]))
        output_file = work / f"output-{i}.txt"
        output_file.write_text("")
        step_env = {
            **env,
            **{k: expand(str(v)) for k, v in (spec.get("env") or {}).items()},
            "GITHUB_ACTIONS": "true",
            "GITHUB_OUTPUT": str(output_file),
            "GITHUB_STEP_SUMMARY": str(summary),
            "RUNNER_TEMP": str(temp),
        }
        done_run = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=cwd,
            env=step_env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        outputs = dict(
            line.split("=", 1) for line in output_file.read_text().splitlines() if "=" in line
        )
        if "id" in spec:
            steps[spec["id"]] = outputs
        outcome = "success" if done_run.returncode == 0 else "failure"
        done.append(Step(name, outcome, done_run.stdout + done_run.stderr, outputs))
    outputs = {k: expand(str(v["value"])) for k, v in (action.get("outputs") or {}).items()}
    return Run(done, outputs, summary.read_text(), artifacts)


def _stand_in(
    spec: dict[str, Any],
    expand: Any,
    env: dict[str, str],
    python_bin: Path,
    artifacts: Path,
    name: str,
) -> Step:
    uses, given = spec["uses"], {k: expand(str(v)) for k, v in (spec.get("with") or {}).items()}
    if uses.startswith("actions/setup-python@"):
        env["PATH"] = f"{python_bin}{os.pathsep}{env.get('PATH', '')}"
        wanted = given.get("python-version")
        return Step(name, "success", f"stand-in: python {wanted} is {python_bin}")
    if uses.startswith("actions/upload-artifact@"):
        source, target = Path(given["path"]), artifacts / given["name"]
        if not source.exists() or not any(source.iterdir()):
            assert given.get("if-no-files-found", "warn") == "warn"
            return Step(name, "success", f"stand-in: nothing to upload at {source}")
        shutil.copytree(source, target)
        return Step(name, "success", f"stand-in: uploaded {source} as {target.name}")
    raise AssertionError(f"a step this runner cannot stand in for: {uses}")
