"""`agentic-rl report RUN_DIR`: one self-contained HTML file for someone who never used the tool.

What it shows, from what the run directory holds (parts that are missing are left out):
  the run's config (config.yaml) and the comparison table (summary.json);
  learning curves — SFT loss; GRPO reward, success, zero-variance fraction, KL, entropy, loss (*/metrics.jsonl);
  the six-family evaluation of teacher vs SFT vs GRPO, as tables with 95 % intervals and bar charts (eval/*.json);
  the exploit-probe table (eval/probes.json);
  a trajectory viewer: the same held-out tasks for each stage, turn by turn, and the token stream with the tokens
  the policy generated — the ones a loss is taken on — highlighted (eval/*.jsonl).
No network and no CDN: charts are inline SVG drawn here, the only script is a few lines for the viewer's buttons.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_text

STAGES = ("prompted", "teacher", "sft", "grpo")
COLOURS = {"prompted": "#d97706", "teacher": "#6b7280", "sft": "#2563eb", "grpo": "#dc2626"}
PALETTE = ("#2563eb", "#dc2626", "#059669", "#d97706", "#7c3aed", "#6b7280")
VIEWER_TASKS = 12  # held-out tasks in the viewer
OBS_CHARS = 600  # tool observations are cut to this many characters in the viewer

esc = html.escape


# --- loading ---------------------------------------------------------------------------------------------------------

def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- charts: inline SVG --------------------------------------------------------------------------------------------

W, H, PAD_L, PAD_R, PAD_T, PAD_B = 440, 240, 62, 12, 36, 64


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], x_label: str = "step") -> str:
    """A line chart of one or more (x, y) series, with its axis ranges printed on the axes."""
    points = [p for s in series.values() for p in s]
    if not points:
        return ""
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5
    x1 = x1 if x1 > x0 else x0 + 1

    def sx(x: float) -> float:
        return PAD_L + (x - x0) / (x1 - x0) * (W - PAD_L - PAD_R)

    def sy(y: float) -> float:
        return H - PAD_B - (y - y0) / (y1 - y0) * (H - PAD_T - PAD_B)

    parts = [_frame(title, f"{y0:.3g}", f"{y1:.3g}"),
             f'<text x="{PAD_L}" y="{H - PAD_B + 14}" class="tick">{x0:g}</text>',
             f'<text x="{W - PAD_R}" y="{H - PAD_B + 14}" class="tick" text-anchor="end">{x1:g}</text>',
             f'<text x="{(W + PAD_L) / 2}" y="{H - PAD_B + 14}" class="tick" text-anchor="middle">{esc(x_label)}</text>']
    for i, (name, pts) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline class="series" fill="none" stroke="{colour}" stroke-width="1.8" points="{coords}">'
                     f'<title>{esc(name)}</title></polyline>')
        if len(pts) == 1:
            parts.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1]):.1f}" r="3" fill="{colour}"/>')
        parts.append(f'<text x="{PAD_L + 6 + i * 120}" y="{H - PAD_B + 32}" class="legend" fill="{colour}">■ '
                     f'{esc(name)}</text>')
    return _svg(title, parts)


def bar_chart(title: str, categories: Sequence[str], series: dict[str, list[float | None]]) -> str:
    """Grouped bars in [0, 1]: one group per category, one bar per series (a missing value is no bar)."""
    if not categories or not series:
        return ""
    inner = W - PAD_L - PAD_R
    group = inner / len(categories)
    bar = group * 0.8 / len(series)
    parts = [_frame(title, "0", "1")]
    for c, cat in enumerate(categories):
        gx = PAD_L + c * group + group * 0.1
        for s, (name, values) in enumerate(series.items()):
            v = values[c]
            if v is None:
                continue
            v = max(0.0, min(1.0, v))
            h = v * (H - PAD_T - PAD_B)
            parts.append(f'<rect class="bar" x="{gx + s * bar:.1f}" y="{H - PAD_B - h:.1f}" width="{bar * 0.92:.1f}" '
                         f'height="{h:.1f}" fill="{COLOURS.get(name, PALETTE[s % len(PALETTE)])}">'
                         f'<title>{esc(name)} · {esc(cat)}: {v:.3f}</title></rect>')
        lx, ly = gx + group * 0.4, H - PAD_B + 10
        parts.append(f'<text x="{lx:.1f}" y="{ly}" class="tick" text-anchor="end" '
                     f'transform="rotate(-30 {lx:.1f} {ly})">{esc(_short(cat))}</text>')
    for s, name in enumerate(series):
        parts.append(f'<text x="{W - PAD_R - (len(series) - s) * 70}" y="{PAD_T - 8}" class="legend" '
                     f'fill="{COLOURS.get(name, PALETTE[s % len(PALETTE)])}">■ {esc(name)}</text>')
    return _svg(title, parts)


def _short(name: str) -> str:
    for suffix in ("_rate", "_per_episode"):
        name = name.removesuffix(suffix)
    return name.replace("success_", "").replace("_", " ")[:16]


def _frame(title: str, y_low: str, y_high: str) -> str:
    return (f'<text x="{W / 2}" y="16" class="title" text-anchor="middle">{esc(title)}</text>'
            f'<line x1="{PAD_L}" y1="{PAD_T}" x2="{PAD_L}" y2="{H - PAD_B}" class="axis"/>'
            f'<line x1="{PAD_L}" y1="{H - PAD_B}" x2="{W - PAD_R}" y2="{H - PAD_B}" class="axis"/>'
            f'<text x="{PAD_L - 4}" y="{PAD_T + 4}" class="tick" text-anchor="end">{esc(y_high)}</text>'
            f'<text x="{PAD_L - 4}" y="{H - PAD_B}" class="tick" text-anchor="end">{esc(y_low)}</text>')


def _svg(title: str, parts: list[str]) -> str:
    return (f'<svg class="chart" role="img" aria-label="{esc(title)}" viewBox="0 0 {W} {H}" width="{W}" '
            f'height="{H}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


# --- sections --------------------------------------------------------------------------------------------------------

def _curves(run: Path) -> str:
    sft, grpo = _jsonl(run / "sft" / "metrics.jsonl"), _jsonl(run / "grpo" / "metrics.jsonl")
    if not sft and not grpo:  # a single-stage run directory (agentic-rl sft or grpo): GRPO logs a reward
        rows = _jsonl(run / "metrics.jsonl")
        sft, grpo = ([], rows) if any("reward_mean" in r for r in rows) else (rows, [])
    charts = []

    def pts(rows: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
        return [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]

    def evals(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
        return [(r["step"], r["eval"]["success_rate"]) for r in rows if isinstance(r.get("eval"), dict)]

    if sft:
        charts.append(line_chart("SFT loss (masked cross-entropy)", {"loss": pts(sft, "loss")}))
        if evals(sft):
            charts.append(line_chart("SFT success on held-out tasks", {"success": evals(sft)}))
    if grpo:
        charts.append(line_chart("GRPO reward", {"mean": pts(grpo, "reward_mean"), "std": pts(grpo, "reward_std")}))
        charts.append(line_chart("GRPO success", {"batch": pts(grpo, "success_rate"), "held-out": evals(grpo)}))
        charts.append(line_chart("GRPO zero-variance groups (no gradient)", {"fraction": pts(grpo, "zero_variance_frac")}))
        charts.append(line_chart("GRPO KL", {"to sampler": pts(grpo, "approx_kl"), "to reference": pts(grpo, "kl_ref")}))
        charts.append(line_chart("GRPO entropy", {"entropy": pts(grpo, "entropy")}))
        charts.append(line_chart("GRPO loss", {"loss": pts(grpo, "loss")}))
    if not charts:
        return ""
    return '<section id="curves"><h2>Learning curves</h2><div class="charts">' + "".join(charts) + "</div></section>"


def _families(results: dict[str, dict[str, Any]]) -> str:
    if not results:
        return ""
    names = list(results)
    first = results[names[0]]
    out = ['<section id="families"><h2>Held-out evaluation in six families</h2>',
           f'<p>{first["tasks"]} held-out tasks, k = {first["k"]}; robustness on {first.get("robustness_tasks", "all")} '
           f'tasks per condition. Brackets: 95 % bootstrap interval over tasks.</p>']
    for family in first["overall"]:
        metrics = first["overall"][family]
        rows = []
        for metric in metrics:
            cells = []
            for n in names:
                m = results[n]["overall"].get(family, {}).get(metric, {})
                v, ci = m.get("value"), m.get("ci95")
                cells.append("<td>—</td>" if v is None else
                             f'<td>{v:.3g}' + (f' <span class="ci">[{ci[0]:.2f}, {ci[1]:.2f}]</span>' if ci else "")
                             + "</td>")
            better = metrics[metric].get("better")
            rows.append(f'<tr><th>{esc(metric)}</th>{"".join(cells)}<td class="dir">{esc(better or "")}</td></tr>')
        rates = [m for m, d in metrics.items()
                 if all(results[n]["overall"][family].get(m, {}).get("value") is None
                        or 0 <= results[n]["overall"][family][m]["value"] <= 1 for n in names)
                 and any(results[n]["overall"][family].get(m, {}).get("value") is not None for n in names)
                 and d.get("better") is not None and m != "mean_reward"]
        chart = bar_chart(family.replace("_", " "), rates,
                          {n: [results[n]["overall"][family].get(m, {}).get("value") for m in rates] for n in names})
        out.append(f'<h3>{esc(family.replace("_", " "))}</h3><div class="family">{chart}<table><tr><th>metric</th>'
                   + "".join(f"<th>{esc(n)}</th>" for n in names) + '<th>better</th></tr>' + "".join(rows)
                   + "</table></div>")
    out.append('<h3>regression</h3><p>Compare two evaluations with <code>agentic-rl eval --compare A.json B.json'
               '</code>: it lists every metric of B worse than A beyond A\'s interval and exits non-zero if any is.</p>')
    out.append("</section>")
    return "".join(out)


def _probes(rows: list[dict[str, Any]] | None) -> str:
    if not rows:
        return ""
    body = "".join(
        f'<tr><th>{esc(str(r["exploit"]))}</th><td>{"n/a" if r["naive_reward"] is None else format(r["naive_reward"], ".2f")}</td><td>{r["guarded_reward"]:.2f}</td>'
        f'<td>{r["noop_reward"]:.2f}</td><td>{"yes" if r["guarded_reward"] <= r["noop_reward"] + 1e-9 else "NO"}</td>'
        "</tr>" for r in rows)
    return ('<section id="probes"><h2>Reward-hack probes</h2><p>Each known exploit played by a script. Naive: the '
            "reward an unguarded check would pay (codefix: the agent's own test run); guarded: what this env pays. A guard holds "
            "when the exploit earns no more than doing nothing.</p><table><tr><th>exploit</th><th>naive</th>"
            f"<th>guarded</th><th>no-op</th><th>guard holds</th></tr>{body}</table></section>")


def _message_html(m: dict[str, Any], reward: float | None) -> str:
    role = m["role"]
    if role == "assistant":
        calls = m.get("tool_calls") or []
        body = ("call " + ", ".join(f'{c["function"]["name"]}({json.dumps(c["function"]["arguments"], ensure_ascii=False)})'
                                     for c in calls)) if calls else f'answer: {m.get("content", "")!r}'
        r = f' <span class="r">r = {reward:+.2f}</span>' if reward is not None else ""
        return f'<div class="msg assistant"><b>assistant</b> {esc(body)}{r}</div>'
    text = str(m.get("content", ""))
    if len(text) > OBS_CHARS:
        text = text[:OBS_CHARS] + f" … ({len(text) - OBS_CHARS} more characters)"
    return f'<div class="msg {esc(role)}"><b>{esc(role)}</b> <pre>{esc(text)}</pre></div>'


def _tokens_html(traj: dict[str, Any], tokenizer: Any, system_len: int) -> str:
    """The conversation's token stream after the system prompt; the policy's own tokens highlighted."""
    ids, mask = traj.get("ids"), traj.get("mask")
    if not ids or tokenizer is None:
        return ""
    start = system_len if system_len and not any(mask[:system_len]) else 0
    runs, cur, cur_m = [], [], mask[start] if start < len(mask) else 0
    for tok, m in zip(ids[start:], mask[start:]):
        if m != cur_m and cur:
            runs.append((cur_m, cur))
            cur = []
        cur_m = m
        cur.append(tok)
    if cur:
        runs.append((cur_m, cur))
    spans = "".join(f'<span class="{"gen" if m else "ctx"}">'
                    f'{esc(tokenizer.decode(toks, skip_special_tokens=False, clean_up_tokenization_spaces=False))}'
                    "</span>" for m, toks in runs)
    n_gen = sum(mask)
    return (f'<details class="tokens"><summary>tokens: {n_gen} generated (highlighted: the loss is taken on these) '
            f'of {len(ids)}; the {start}-token system prompt not shown</summary><pre>{spans}</pre></details>')


def _viewer(run: Path, stages: list[str]) -> str:
    trajs = {s: _jsonl(run / "eval" / f"{s}.jsonl") for s in stages}
    trajs = {s: t for s, t in trajs.items() if t}
    if not trajs:
        return ""
    tokenizer, system_len = None, 0
    model_dir = next((run / s / "model" for s in ("sft", "grpo") if (run / s / "model" / "tokenizer.json").exists()),
                     None)
    if model_dir is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        first = next(iter(trajs.values()))[0]["messages"][0]
        system_len = len(tokenizer.apply_chat_template([first], tokenize=True, return_dict=True)["input_ids"])
    by_task = {s: {t["task_id"]: t for t in ts if t.get("sample", 0) == 0} for s, ts in trajs.items()}
    order = [t["task_id"] for t in next(iter(trajs.values())) if t.get("sample", 0) == 0]
    task_ids = [tid for tid in order if all(tid in by_task[s] for s in trajs)][:VIEWER_TASKS]
    buttons, panels = [], []
    for i, tid in enumerate(task_ids):
        marks = "".join("✓" if by_task[s][tid]["success"] else "✗" for s in trajs)
        kind = next(iter(by_task.values()))[tid]["task_kind"]
        buttons.append(f'<button class="task-btn" data-target="task-{i}" aria-pressed="{"true" if i == 0 else "false"}" '
                       f'title="{esc(tid)}">{i + 1}. {esc(kind)} {marks}</button>')
        cols = []
        for s in trajs:
            t = by_task[s][tid]
            rewards = list(t["turn_rewards"])
            msgs, k = [], 0
            for m in t["messages"][1:]:  # the system prompt is the same everywhere
                r = None
                if m["role"] == "assistant":
                    r = rewards[k] if k < len(rewards) else None
                    k += 1
                msgs.append(_message_html(m, r))
            head = (f'<h4 style="color:{COLOURS.get(s, "#000")}">{esc(s)} — {"success" if t["success"] else "failure"}, '
                    f'reward {t["reward"]:+.2f}, {esc(t["outcome"])}</h4>')
            cols.append(f'<div class="col">{head}{"".join(msgs)}{_tokens_html(t, tokenizer, system_len)}</div>')
        panels.append(f'<div class="task-panel" id="task-{i}"{"" if i == 0 else " hidden"}>'
                      f'<p class="tid">{esc(tid)}</p><div class="cols">{"".join(cols)}</div></div>')
    return ('<section id="viewer"><h2>Trajectories: the same held-out tasks before and after training</h2>'
            f'<p>Columns: {", ".join(esc(s) for s in trajs)}. ✓/✗ per column on each button.</p>'
            f'<div class="task-list">{"".join(buttons)}</div>{"".join(panels)}</section>')


def _comparison(summary: dict[str, Any] | None) -> str:
    if not summary or "stages" not in summary:
        return ""
    stages = summary["stages"]
    keys = ("success_rate", "mean_reward", "tool_calls_per_episode", "recovery_rate", "correct_stop_rate")
    rows = "".join(f"<tr><th>{k}</th>" + "".join(
        "<td>—</td>" if stages[s]["eval"].get(k) is None else f'<td>{stages[s]["eval"][k]:.3f}</td>' for s in stages)
        + "</tr>" for k in keys)
    if any("greedy" in stages[s] for s in stages):
        rows += "<tr><th>success_rate (greedy)</th>" + "".join(
            "<td>—</td>" if "greedy" not in stages[s] else f'<td>{stages[s]["greedy"]["success_rate"]:.3f}</td>'
            for s in stages) + "</tr>"
    return (f'<section id="summary"><h2>Teacher vs SFT vs GRPO</h2><p>env <b>{esc(str(summary.get("env")))}</b>, '
            f'{summary.get("eval_tasks")} held-out tasks, whole run {summary.get("wall_seconds")} s.</p><table><tr>'
            "<th>metric</th>" + "".join(f"<th>{esc(s)}</th>" for s in stages) + f"</tr>{rows}</table></section>")


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#111;padding:0 16px}
h1{margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0} th,td{border:1px solid #e5e7eb;padding:3px 8px;text-align:right}
th:first-child{text-align:left} .ci{color:#6b7280;font-size:12px} .dir{color:#6b7280}
.charts{display:flex;flex-wrap:wrap;gap:8px} .family{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
svg .axis{stroke:#9ca3af} svg .tick{font-size:10px;fill:#4b5563} svg .title{font-size:12px;font-weight:600}
svg .legend{font-size:11px}
.task-list{display:flex;flex-wrap:wrap;gap:4px;margin:8px 0}
.task-btn{border:1px solid #d1d5db;background:#f9fafb;padding:4px 8px;border-radius:4px;cursor:pointer}
.task-btn[aria-pressed=true]{background:#1f2937;color:#fff}
.cols{display:flex;gap:12px;align-items:flex-start} .col{flex:1;min-width:0}
.msg{margin:4px 0;padding:4px 6px;border-radius:4px;background:#f3f4f6;overflow-wrap:anywhere}
.msg.assistant{background:#eff6ff} .msg.tool{background:#fefce8} .msg pre{display:inline;white-space:pre-wrap;margin:0}
.r{color:#6b7280;font-size:12px} .tid{color:#6b7280;font-family:monospace}
.tokens pre{white-space:pre-wrap;font-size:12px;background:#fafafa;padding:6px}
.gen{background:#fde68a} .ctx{color:#4b5563}
"""

SCRIPT = """
document.querySelectorAll('.task-btn').forEach(function (b) {
  b.addEventListener('click', function () {
    document.querySelectorAll('.task-panel').forEach(function (p) { p.hidden = p.id !== b.dataset.target; });
    document.querySelectorAll('.task-btn').forEach(function (x) { x.setAttribute('aria-pressed', String(x === b)); });
  });
});
"""


def build_report(run: str | Path) -> str:
    """The report's HTML for a run directory."""
    run = Path(run)
    if not run.is_dir():
        raise ValueError(f"run directory not found: {run}")
    config = (run / "config.yaml").read_text(encoding="utf-8") if (run / "config.yaml").exists() else ""
    stages = [s for s in STAGES if (run / "eval" / f"{s}.json").exists()]
    results = {s: _json(run / "eval" / f"{s}.json") for s in stages}
    body = [f"<h1>agentic-rl report</h1><p class=\"tid\">{esc(str(run.resolve()))}</p>",
            _comparison(_json(run / "summary.json")), _curves(run), _families(results),
            _probes(_json(run / "eval" / "probes.json")), _viewer(run, stages),
            f'<section id="config"><h2>Config</h2><details><summary>config.yaml</summary><pre>{esc(config)}</pre>'
            "</details></section>" if config else ""]
    if not any(body[1:]):
        raise ValueError(f"{run} holds nothing to report: expected summary.json, metrics.jsonl or eval/*.json "
                         "(the output of `agentic-rl run`, `sft` or `grpo`)")
    return ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>agentic-rl report</title>"
            f"<style>{CSS}</style></head><body>{''.join(body)}<script>{SCRIPT}</script></body></html>")


def write_report(run: str | Path) -> Path:
    """Write RUN/report.html atomically and return its path."""
    path = Path(run) / "report.html"
    atomic_write_text(path, build_report(run))
    return path
