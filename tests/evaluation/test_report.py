"""`agentic-rl report`: one self-contained HTML page, checked in a real headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentic_rl.cli import app

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# CI installs Debian's chromium (.ci/run), so there this test must run; elsewhere it is skipped without one.
needs_chromium = pytest.mark.skipif(CHROMIUM is None and not os.environ.get("CI"),
                                    reason="no chromium on this machine (apt-get install chromium)")


def test_report_is_self_contained_and_has_every_section(short_run):
    out, _, r = short_run
    assert r.exit_code == 0, r.output
    page = (out / "report.html").read_text()
    for section in ("summary", "curves", "families", "viewer", "config"):
        assert f'id="{section}"' in page, section
    for family in ("final answer", "tool calling", "trajectory", "robustness", "cost", "regression"):
        assert f"<h3>{family}</h3>" in page, family
    # nothing fetched from anywhere: no external scripts, styles, images or fonts
    assert not re.search(r'(src|href)="(https?:)?//', page) and "@import" not in page
    assert 'class="gen"' in page  # the policy's own tokens are highlighted in the viewer
    assert "<th>success_rate (greedy)</th><td>—</td>" in page  # the models greedily too; the teacher has no T


def test_report_cli_names_what_is_missing(tmp_path):
    r = CliRunner().invoke(app, ["report", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "run directory not found" in r.output
    r = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 2 and "nothing to report" in r.output


@needs_chromium
def test_report_renders_in_chromium_and_the_viewer_switches(short_run, tmp_path):
    from playwright.sync_api import sync_playwright

    out, _, _ = short_run
    page_path = out / "report.html"
    errors: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])  # root in CI: no setuid sandbox
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(page_path.as_uri())
        # the charts render: every chart is a laid-out SVG with drawn marks
        charts = page.locator("svg.chart")
        assert charts.count() >= 10
        for i in range(charts.count()):
            box = charts.nth(i).bounding_box()
            assert box is not None and box["width"] > 100 and box["height"] > 100
            assert charts.nth(i).locator("polyline, rect").count() >= 1
        # the viewer: the first task shows; clicking the second button shows the second and hides the first
        assert page.locator("#task-0").is_visible() and not page.locator("#task-1").is_visible()
        page.locator(".task-btn").nth(1).click()
        assert page.locator("#task-1").is_visible() and not page.locator("#task-0").is_visible()
        assert page.locator(".task-btn").nth(1).get_attribute("aria-pressed") == "true"
        shot = Path(os.environ.get("REPORT_SCREENSHOT_DIR", tmp_path)) / "report.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert errors == []
    assert shot.stat().st_size > 10_000


def test_report_shows_the_probe_table_where_a_run_has_one(tmp_path):
    from agentic_rl.evaluation.report import build_report

    (tmp_path / "eval").mkdir()
    rows = [{"exploit": "noop", "naive_reward": 0.5, "guarded_reward": 0.7, "noop_reward": 0.7},
            {"exploit": "delete_failing_tests", "naive_reward": 1.0, "guarded_reward": 0.9, "noop_reward": 0.7}]
    (tmp_path / "eval" / "probes.json").write_text(json.dumps(rows))
    page = build_report(tmp_path)
    assert 'id="probes"' in page and "delete_failing_tests" in page
    assert page.count("<td>yes</td>") == 1 and page.count("<td>NO</td>") == 1  # the paying exploit is flagged


def test_report_of_a_single_stage_run_directory(short_run, tmp_path):
    from agentic_rl.evaluation.report import build_report

    out, _, _ = short_run
    for stage, title in (("sft", "SFT loss"), ("grpo", "GRPO reward")):
        page = build_report(out / stage)  # what `agentic-rl sft` / `grpo` leave: metrics.jsonl at the top
        assert title in page and 'id="curves"' in page
