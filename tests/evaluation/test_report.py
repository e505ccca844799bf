"""`agentic-rl report`: one self-contained HTML page, checked in a real headless Chromium."""

from __future__ import annotations

import html
import json
import math
import os
import re
import shutil
import xml.etree.ElementTree as ET
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


# --- chart layout, measured in DejaVu Sans: the first font the report's CSS asks for ----------------------------------

SVG_NS = "{http://www.w3.org/2000/svg}"
# Advance widths of chr(32) … chr(126) in 1/100 em, from the fonts' hmtx tables (DejaVuSans.ttf, DejaVuSans-Bold.ttf).
DEJAVU = [
    32, 41, 46, 84, 64, 96, 78, 28, 40, 40, 50, 84, 32, 37, 32, 34, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 34, 34, 84,
    84, 84, 54, 100, 69, 69, 70, 78, 64, 58, 78, 76, 30, 30, 66, 56, 87, 75, 79, 61, 79, 70, 64, 62, 74, 69, 99, 69, 62,
    69, 40, 34, 40, 84, 50, 50, 62, 64, 55, 64, 62, 36, 64, 64, 28, 28, 58, 28, 98, 64, 62, 64, 64, 42, 53, 40, 64, 60,
    82, 60, 60, 53, 64, 34, 64, 84
]
DEJAVU_BOLD = [
    35, 46, 53, 84, 70, 101, 88, 31, 46, 46, 53, 84, 38, 42, 38, 37, 70, 70, 70, 70, 70, 70, 70, 70, 70, 70, 40, 40, 84,
    84, 84, 59, 100, 78, 77, 74, 84, 69, 69, 83, 84, 38, 38, 78, 64, 100, 84, 86, 74, 86, 78, 73, 69, 82, 78, 111, 78,
    73, 73, 46, 37, 46, 84, 50, 50, 68, 72, 60, 72, 68, 44, 72, 72, 35, 35, 67, 35, 105, 72, 69, 72, 72, 50, 60, 48, 72,
    66, 93, 65, 66, 59, 72, 37, 72, 84
]
TEXT_PX = {"title": 12, "tick": 10, "legend": 11, "note": 11}  # the sizes the report's CSS gives each class
ASCENT, DESCENT = 0.76, 0.24  # DejaVu Sans' typographic ascender and descender, in em

Box = tuple[float, float, float, float]


def _width(text: str, px: float, bold: bool) -> float:
    """The text's advance width in px in DejaVu Sans (1 em for a character outside ASCII, such as the swatch ■)."""
    table = DEJAVU_BOLD if bold else DEJAVU
    return px * sum(table[ord(c) - 32] / 100 if 32 <= ord(c) < 127 else 1.0 for c in text)


def _charts(page: str) -> list[ET.Element]:
    """Every inline SVG chart of a page, parsed."""
    return [ET.fromstring(s) for s in re.findall(r'<svg class="chart".*?</svg>', page, re.S)]


def _text_boxes(svg: ET.Element) -> list[tuple[str, str, Box]]:
    """Each <text> of a chart as (class, text, bounding box), its anchor and rotation applied."""
    boxes = []
    for t in svg.iter(SVG_NS + "text"):
        cls, text = t.get("class", ""), "".join(t.itertext())
        px = TEXT_PX[cls]
        w = _width(text, px, cls == "title")
        x, y = float(t.get("x")), float(t.get("y"))
        start = x - {"start": 0.0, "middle": w / 2, "end": w}[t.get("text-anchor", "start")]
        corners = [(cx, cy) for cx in (start, start + w) for cy in (y - ASCENT * px, y + DESCENT * px)]
        if rot := re.fullmatch(r"rotate\((\S+) (\S+) (\S+)\)", t.get("transform", "")):
            a, ox, oy = math.radians(float(rot[1])), float(rot[2]), float(rot[3])
            corners = [(ox + (cx - ox) * math.cos(a) - (cy - oy) * math.sin(a),
                        oy + (cx - ox) * math.sin(a) + (cy - oy) * math.cos(a)) for cx, cy in corners]
        xs, ys = zip(*corners)
        boxes.append((cls, text, (min(xs), min(ys), max(xs), max(ys))))
    return boxes


def _plot_area(svg: ET.Element) -> Box:
    """The rectangle between a chart's two axis lines."""
    xs = [float(ln.get(k)) for ln in svg.iter(SVG_NS + "line") for k in ("x1", "x2")]
    ys = [float(ln.get(k)) for ln in svg.iter(SVG_NS + "line") for k in ("y1", "y2")]
    return min(xs), min(ys), max(xs), max(ys)


def _overlap(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _outside_view(svg: ET.Element) -> list[str]:
    """The texts of a chart that reach past its viewBox."""
    _, _, w, h = map(float, svg.get("viewBox").split())
    assert (float(svg.get("width")), float(svg.get("height"))) == (w, h)
    return [text for _, text, (x0, y0, x1, y1) in _text_boxes(svg) if x0 < 0 or y0 < 0 or x1 > w or y1 > h]


def _legend_clashes(svg: ET.Element) -> list[tuple[str, str]]:
    """Pairs (legend entry, what it overlaps): another text of the chart, or the plot area."""
    boxes = _text_boxes(svg)
    clashes = [(text, "plot area") for cls, text, box in boxes if cls == "legend" and _overlap(box, _plot_area(svg))]
    for i, (cls, text, box) in enumerate(boxes):
        if cls in ("legend", "note"):
            clashes += [(text, other) for j, (_, other, b) in enumerate(boxes) if j != i and _overlap(box, b)]
    return clashes


def _stress_charts() -> list[str]:
    """Charts with many long series names, long category names and long tick labels."""
    from agentic_rl.evaluation.report import bar_chart, line_chart

    long = {f"KL to the reference policy {i}": [(1.0, -0.000123 * i), (2.0, -0.000456 * i)] for i in range(1, 5)}
    categories = ["argument_accuracy", "success_fault_0", "success_fault_0.2", "success_fault_0.5", "success_rephrase",
                  "success_whitespace", "success_language", "recovery_rate", "retry_after_fault_rate"]
    stages = {s: [0.5] * len(categories) for s in ("prompted", "teacher", "sft", "grpo")}
    return [line_chart("GRPO zero-variance groups (no gradient)", long), bar_chart("robustness", categories, stages)]


def test_chart_legends_overlap_nothing(short_run):
    out, _, _ = short_run
    charts = _charts((out / "report.html").read_text()) + [c for s in _stress_charts() for c in _charts(s)]
    assert len(charts) >= 10
    for svg in charts:
        assert _legend_clashes(svg) == [], svg.get("aria-label")
        assert not [t for t in _outside_view(svg) if t.startswith("■")], svg.get("aria-label")


def test_chart_labels_fit_inside_the_chart(short_run):
    out, _, _ = short_run
    charts = _charts((out / "report.html").read_text()) + [c for s in _stress_charts() for c in _charts(s)]
    for svg in charts:
        assert _outside_view(svg) == [], svg.get("aria-label")
    labels = {text for _, text, _ in _text_boxes(charts[-1])}
    assert {"argument accuracy", "retry after fault"} <= labels  # category names are not cut short to fit


def _chart(page: str, title: str) -> str:
    """The SVG of the chart with that title, or '' where it is not drawn."""
    return next((s for s in re.findall(r'<svg class="chart".*?</svg>', page, re.S) if f'aria-label="{title}"' in s), "")


def _grpo_dir(tmp_path: Path, config: str | None, held_out: bool = False) -> Path:
    """A single-stage GRPO run directory: three steps of metrics.jsonl, and config.yaml where given."""
    rows = [{"step": s, "reward_mean": 0.1 * s, "reward_std": 0.2, "success_rate": 0.1 * s, "zero_variance_frac": 0.5,
             "approx_kl": 0.01 * s, "kl_ref": 0.02 * s, "entropy": 2.0, "loss": 0.1} for s in (1, 2, 3)]
    if held_out:
        rows[-1]["eval"] = {"success_rate": 0.4}
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if config is not None:
        (tmp_path / "config.yaml").write_text(config)
    return tmp_path


def test_a_series_without_points_is_left_out_and_said_in_words(short_run, tmp_path):
    from agentic_rl.evaluation.report import build_report, line_chart

    out, _, _ = short_run
    assert not any("eval" in json.loads(r) for r in (out / "grpo" / "metrics.jsonl").read_text().splitlines())
    page = (out / "report.html").read_text()
    assert "■ held-out" not in page
    success = _chart(page, "GRPO success")
    assert "■ batch" in success and success.count("<polyline") == 1 and "held-out: no evaluation" in success
    sft = re.search(r'<div class="no-data"><b>SFT success on held-out tasks</b>(.*?)</div>', page)
    assert sft and "no held-out evaluation" in sft[1]
    empty = line_chart("nothing", {"a": [], "b": []})
    assert "<svg" not in empty and "no data" in empty
    page = build_report(_grpo_dir(tmp_path, "beta: 0.0\n", held_out=True))
    assert "■ held-out" in _chart(page, "GRPO success") and "held-out: no evaluation" not in page


@pytest.mark.parametrize("config, drawn", [("beta: 0.04\n", True), ("beta: 0\n", False), ("lr: 1.0e-4\n", False),
                                           (None, False)])
def test_kl_to_reference_is_drawn_only_when_beta_is_positive(tmp_path, config, drawn):
    from agentic_rl.evaluation.report import build_report

    kl = _chart(build_report(_grpo_dir(tmp_path, config)), "GRPO KL")
    assert "■ to sampler" in kl
    assert ("■ to reference" in kl) is drawn and ("to reference: off (beta = 0)" in kl) is not drawn
    assert kl.count("<polyline") == 1 + drawn


def test_kl_to_reference_is_off_in_a_run_with_beta_0(short_run):
    out, _, _ = short_run
    assert "beta: 0.0" in (out / "grpo" / "config.yaml").read_text()
    kl = _chart((out / "report.html").read_text(), "GRPO KL")
    assert "■ to reference" not in kl and "to reference: off (beta = 0)" in kl


def _viewer_heads(page: str) -> dict[tuple[str, str], str]:
    """{(task id, stage): the outcome its viewer column prints}."""
    heads = {}
    for panel in page.split('<div class="task-panel"')[1:]:
        tid = html.unescape(re.search(r'<p class="tid">(.*?)</p>', panel)[1])
        for stage, label in re.findall(r"<h4[^>]*>(\w+) — (?:success|failure), reward [^,]+, (.*?)</h4>", panel):
            heads[tid, stage] = html.unescape(label)
    return heads


def test_viewer_shows_a_turn_cut_at_the_token_limit_as_truncated(short_run):
    from transformers import AutoTokenizer

    out, _, _ = short_run
    eos = AutoTokenizer.from_pretrained(str(out / "sft" / "model")).eos_token_id
    heads = _viewer_heads((out / "report.html").read_text())
    cut = 0
    for stage in ("sft", "grpo"):
        for line in (out / "eval" / f"{stage}.jsonl").read_text().splitlines():
            t = json.loads(line)
            if (t["task_id"], stage) not in heads or t["sample"] != 0:
                continue
            turns = [i + 1 for i, ids in enumerate(t["assistant_ids"]) if ids[-1:] != [eos]]
            label = heads[t["task_id"], stage]
            if turns:  # the sampler stopped at max_new_tokens: no closing EOS
                cut += 1
                assert label.startswith("truncated") and "token limit" in label and label != t["outcome"], label
            else:
                assert label == t["outcome"]
    assert cut > 0  # 32 tokens a turn: the small model's turns are cut, and tool_use takes the cut text as an answer
    assert {label for (_, stage), label in heads.items() if stage == "teacher"} == {"ok"}
