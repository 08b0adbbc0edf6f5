"""The GitHub Actions workflow for forks: valid YAML, the jobs the course promises, targets that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml  # the test extra installs PyYAML

REPO = Path(__file__).resolve().parents[1]
WORKFLOW = REPO / ".github" / "workflows" / "ci.yml"


@pytest.fixture(scope="module")
def workflow() -> dict:
    return yaml.safe_load(WORKFLOW.read_text())


def _commands(job: dict) -> str:
    return "\n".join(step.get("run", "") for step in job["steps"])


def test_it_runs_on_pushes_and_pull_requests(workflow):
    triggers = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    assert {"push", "pull_request"} <= set(triggers)


def test_make_test_on_python_311_and_312(workflow):
    job = workflow["jobs"]["test"]
    assert job["runs-on"].startswith("ubuntu")
    assert {"3.11", "3.12"} <= set(job["strategy"]["matrix"]["python-version"])
    assert re.search(r"^make test\b", _commands(job), re.M)


def test_a_job_without_triton_runs_every_test(workflow):
    commands = _commands(workflow["jobs"]["no-triton"])
    assert re.search(r"^NO_TRITON=1 make test\b", commands, re.M)
    # The Makefile must honour the variable, or the job would silently install Triton.
    assert re.search(r"ifneq \(\$\(NO_TRITON\),1\)", (REPO / "Makefile").read_text())


def test_every_job_uploads_the_artifacts_folder(workflow):
    for name, job in workflow["jobs"].items():
        uploads = [s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
        assert uploads, f"job {name} uploads nothing"
        assert uploads[0]["with"]["path"].rstrip("/") == "artifacts"
        assert uploads[0].get("if") == "always()", f"job {name}: upload the artifacts of failed runs too"


def test_make_targets_used_by_the_workflow_exist():
    targets = set(re.findall(r"^([\w-]+):", (REPO / "Makefile").read_text(), re.M))
    used = set(re.findall(r"\bmake ([\w-]+)", WORKFLOW.read_text()))
    assert used and used <= targets, f"unknown make targets: {sorted(used - targets)}"


def test_a_scheduled_job_tries_the_newest_releases(workflow):
    triggers = workflow.get("on", workflow.get(True))
    assert triggers["schedule"] and re.fullmatch(
        r"[\d*]+ [\d*]+ [\d*]+ [\d*]+ [\d*]+", triggers["schedule"][0]["cron"]
    )
    job = workflow["jobs"]["drift"]
    assert re.search(r"^make drift\b", _commands(job), re.M) and "schedule" in job["if"]
    for name in ("test", "no-triton"):  # the schedule runs the drift job alone
        assert workflow["jobs"][name]["if"] == "github.event_name != 'schedule'"
