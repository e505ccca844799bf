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
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from ..atomic import atomic_write_text
from ..text import encodable

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

W, PLOT_H, PAD_T, PAD_R, GAP = 440, 140, 30, 12, 6  # chart width, plot-area height, fixed margins, spacing (px)
TEXT_PX = {"title": 12, "tick": 10, "legend": 11, "note": 11}  # font sizes of svg text, as CSS sets them
ASCENT, DESCENT = 0.8, 0.25  # how far glyphs reach above and below the baseline, in em
LEGEND_ROW = 16  # px from one legend row to the next
TILT = 30  # degrees the bar charts' category labels are turned
NARROW, WIDE = set("fijlrtI.,:;'|!()[] "), set("mwMW%@#&+=<>^~■✓✗—…")


def text_width(text: str, px: float, bold: bool = False) -> float:
    """An upper estimate of the text's width in px in DejaVu Sans or Verdana (the wide fonts CSS asks for first), so
    that margins and legends laid out with it leave room in any font."""
    em = sum(0.45 if c in NARROW else 1.0 if c in WIDE else 0.8 if c.isupper() else 0.66 for c in text)
    return em * px * (1.15 if bold else 1.0)


def _chart_width(title: str, legend: Sequence[str]) -> float:
    """The chart's width: W, or more where the title or a single legend item would not fit in W."""
    widest = max((text_width(t, TEXT_PX["legend"]) for t in legend), default=0.0)
    return max(W, text_width(title, TEXT_PX["title"], bold=True) + 2 * GAP, widest + 2 * GAP)


def _y_margin(ticks: Sequence[str]) -> float:
    """The left margin that fits the longest y tick label, drawn end-anchored 4 px left of the axis."""
    return GAP + max(text_width(t, TEXT_PX["tick"]) for t in ticks) + 4


def _tilted(label: str) -> tuple[float, float]:
    """How far an end-anchored category label turned by TILT degrees reaches left of and below its anchor."""
    a, px = math.radians(TILT), TEXT_PX["tick"]
    w = text_width(label, px)
    return w * math.cos(a) + ASCENT * px * math.sin(a), w * math.sin(a) + DESCENT * px * math.cos(a)


def _bar_margin(labels: Sequence[str], width: float, least: float) -> float:
    """The left margin at which no tilted category label, each under its group's centre, reaches past the left edge."""
    n, span, need = len(labels), width - PAD_R, least
    for c, label in enumerate(labels):
        f = (c + 0.5) / n  # the label's anchor: left + f * (span - left)
        need = max(need, (GAP + _tilted(label)[0] - f * span) / (1 - f))
    return need


def _legend(entries: Sequence[tuple[str, str]], notes: Sequence[str], width: float, top: float
            ) -> tuple[list[str], float]:
    """Swatches (name, colour) then notes, left to right in rows wrapped at the chart's width from their text widths,
    below the plot area so they cover neither each other nor data; returns the SVG parts and the height they take."""
    items = [(f"■ {name}", f'class="legend" fill="{colour}"') for name, colour in entries]
    items += [(note, 'class="note"') for note in notes]
    parts, x, row = [], float(GAP), 0
    for text, attrs in items:
        w = text_width(text, TEXT_PX["legend"])
        if x > GAP and x + w > width - GAP:
            x, row = float(GAP), row + 1
        y = top + ASCENT * TEXT_PX["legend"] + row * LEGEND_ROW
        parts.append(f'<text x="{x:.1f}" y="{y:.1f}" {attrs}>{esc(text)}</text>')
        x += w + 2 * GAP
    return parts, (row + 1) * LEGEND_ROW if items else 0.0


def line_chart(title: str, series: dict[str, list[tuple[float, float]]], x_label: str = "step",
               notes: Sequence[str] = (), empty: str = "no data logged") -> str:
    """A line chart of the (x, y) series that have points, with its axis ranges printed on the axes and `notes` under
    the legend; where no series has a point, the title with `empty` and the notes in words instead."""
    series = {name: pts for name, pts in series.items() if pts}
    if not series:
        return _no_data(title, [empty, *notes])
    points = [p for s in series.values() for p in s]
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y0, y1 = min(p[1] for p in points), max(p[1] for p in points)
    if y1 - y0 < 1e-12:
        y0, y1 = y0 - 0.5, y1 + 0.5
    x1 = x1 if x1 > x0 else x0 + 1
    y_ticks = (f"{y1:.3g}", f"{y0:.3g}")
    width = _chart_width(title, [f"■ {n}" for n in series] + list(notes))
    left, right, bottom = _y_margin(y_ticks), width - PAD_R, PAD_T + PLOT_H

    def sx(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * (right - left)

    def sy(y: float) -> float:
        return bottom - (y - y0) / (y1 - y0) * PLOT_H

    parts = [_axes(title, width, left, y_ticks),
             f'<text x="{left}" y="{bottom + 14}" class="tick">{x0:g}</text>',
             f'<text x="{right}" y="{bottom + 14}" class="tick" text-anchor="end">{x1:g}</text>',
             f'<text x="{(left + right) / 2}" y="{bottom + 14}" class="tick" text-anchor="middle">{esc(x_label)}</text>']
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    for name, pts in series.items():
        coords = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline class="series" fill="none" stroke="{colours[name]}" stroke-width="1.8" '
                     f'points="{coords}"><title>{esc(name)}</title></polyline>')
        if len(pts) == 1:
            parts.append(f'<circle cx="{sx(pts[0][0]):.1f}" cy="{sy(pts[0][1]):.1f}" r="3" fill="{colours[name]}"/>')
    legend, legend_h = _legend(list(colours.items()), notes, width, bottom + 24)
    return _svg(title, width, bottom + 24 + legend_h + GAP, parts + legend)


def bar_chart(title: str, categories: Sequence[str], series: dict[str, list[float | None]]) -> str:
    """Grouped bars in [0, 1]: one group per category, one bar per series (a missing value is no bar)."""
    if not categories or not series:
        return ""
    labels = [_short(c) for c in categories]
    colours = {name: COLOURS.get(name, PALETTE[s % len(PALETTE)]) for s, name in enumerate(series)}
    width = _chart_width(title, [f"■ {n}" for n in series])
    left = _bar_margin(labels, width, _y_margin(("0", "1")))
    right, bottom = width - PAD_R, PAD_T + PLOT_H
    group = (right - left) / len(categories)
    bar = group * 0.8 / len(series)
    parts = [_axes(title, width, left, ("1", "0"))]
    for c, (cat, label) in enumerate(zip(categories, labels)):
        gx = left + c * group + group * 0.1
        for s, (name, values) in enumerate(series.items()):
            v = values[c]
            if v is None:
                continue
            v = max(0.0, min(1.0, v))
            h = v * PLOT_H
            parts.append(f'<rect class="bar" x="{gx + s * bar:.1f}" y="{bottom - h:.1f}" width="{bar * 0.92:.1f}" '
                         f'height="{h:.1f}" fill="{colours[name]}"><title>{esc(name)} · {esc(cat)}: {v:.3f}</title>'
                         "</rect>")
        lx, ly = left + (c + 0.5) * group, bottom + 12
        parts.append(f'<text x="{lx:.1f}" y="{ly}" class="tick" text-anchor="end" '
                     f'transform="rotate({-TILT} {lx:.1f} {ly})">{esc(label)}</text>')
    legend_top = bottom + 12 + max(_tilted(label)[1] for label in labels) + GAP
    legend, legend_h = _legend(list(colours.items()), (), width, legend_top)
    return _svg(title, width, legend_top + legend_h + GAP, parts + legend)


def _short(name: str) -> str:
    """A metric's name as a category label: without the family's prefix and the unit suffix."""
    for suffix in ("_rate", "_per_episode"):
        name = name.removesuffix(suffix)
    return name.replace("success_", "").replace("_", " ")


def _axes(title: str, width: float, left: float, y_ticks: tuple[str, str]) -> str:
    """The title, the two axes of the plot area, and the y range (high, low) at the ends of the y axis."""
    right, bottom = width - PAD_R, PAD_T + PLOT_H
    return (f'<text x="{width / 2}" y="16" class="title" text-anchor="middle">{esc(title)}</text>'
            f'<line x1="{left:.1f}" y1="{PAD_T}" x2="{left:.1f}" y2="{bottom}" class="axis"/>'
            f'<line x1="{left:.1f}" y1="{bottom}" x2="{right:.1f}" y2="{bottom}" class="axis"/>'
            f'<text x="{left - 4:.1f}" y="{PAD_T + 4}" class="tick" text-anchor="end">{esc(y_ticks[0])}</text>'
            f'<text x="{left - 4:.1f}" y="{bottom}" class="tick" text-anchor="end">{esc(y_ticks[1])}</text>')


def _svg(title: str, width: float, height: float, parts: list[str]) -> str:
    """The chart's svg element, its viewBox the size it is drawn at."""
    w, h = math.ceil(width), math.ceil(height)
    return (f'<svg class="chart" role="img" aria-label="{esc(title)}" viewBox="0 0 {w} {h}" width="{w}" '
            f'height="{h}" xmlns="http://www.w3.org/2000/svg">{"".join(parts)}</svg>')


def _no_data(title: str, notes: Sequence[str]) -> str:
    """What stands in a chart's place when it would be empty: its title, and in words why there is nothing to draw."""
    return f'<div class="no-data"><b>{esc(title)}</b>' + "".join(f"<p>{esc(n)}</p>" for n in notes) + "</div>"


# --- sections --------------------------------------------------------------------------------------------------------

NO_HELD_OUT = "no held-out evaluation logged: eval_every is 0, or not below the run's number of steps"
KL_OFF = "to reference: off (beta = 0)"


def _points(rows: list[dict[str, Any]], key: str) -> list[tuple[float, float]]:
    """(step, value) of a metric, from the rows that logged it."""
    return [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]


def _held_out(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(step, success rate) of the periodic held-out evaluations (rows with an `eval` record)."""
    return [(r["step"], r["eval"]["success_rate"]) for r in rows if isinstance(r.get("eval"), dict)]


def _grpo_beta(run: Path, grpo_dir: Path) -> float:
    """β of the GRPO stage, from its own config.yaml or the run's `grpo:` part; 0 (GRPOConfig's default) if absent."""
    for path, keys in ((grpo_dir / "config.yaml", ("beta",)), (run / "config.yaml", ("grpo", "beta"))):
        node: Any = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
        for key in keys:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, (int, float)):
            return float(node)
    return 0.0


def _sft_charts(rows: list[dict[str, Any]]) -> list[str]:
    """SFT's loss and its held-out success, the latter said to be missing where no evaluation was logged."""
    return [line_chart("SFT loss (masked cross-entropy)", {"loss": _points(rows, "loss")}),
            line_chart("SFT success on held-out tasks", {"success": _held_out(rows)}, empty=NO_HELD_OUT)]


def _grpo_charts(rows: list[dict[str, Any]], beta: float) -> list[str]:
    """GRPO's curves; the KL to the reference only where β > 0, since with β = 0 it is never computed (logged as 0)."""
    held_out = _held_out(rows)
    kl = {"to sampler": _points(rows, "approx_kl")} | ({"to reference": _points(rows, "kl_ref")} if beta > 0 else {})
    return [
        line_chart("GRPO reward", {"mean": _points(rows, "reward_mean"), "std": _points(rows, "reward_std")}),
        line_chart("GRPO success", {"batch": _points(rows, "success_rate"), "held-out": held_out},
                   notes=[] if held_out else ["held-out: no evaluation logged"]),
        line_chart("GRPO zero-variance groups (no gradient)", {"fraction": _points(rows, "zero_variance_frac")}),
        line_chart("GRPO KL", kl, notes=[] if beta > 0 else [KL_OFF]),
        line_chart("GRPO entropy", {"entropy": _points(rows, "entropy")}),
        line_chart("GRPO loss", {"loss": _points(rows, "loss")})]


def _curves(run: Path) -> str:
    """The learning curves of the SFT and GRPO stages, from their metrics.jsonl."""
    grpo_dir = run / "grpo"
    sft, grpo = _jsonl(run / "sft" / "metrics.jsonl"), _jsonl(grpo_dir / "metrics.jsonl")
    if not sft and not grpo:  # a single-stage run directory (agentic-rl sft or grpo): GRPO logs a reward
        rows, grpo_dir = _jsonl(run / "metrics.jsonl"), run
        sft, grpo = ([], rows) if any("reward_mean" in r for r in rows) else (rows, [])
    charts = (_sft_charts(sft) if sft else []) + (_grpo_charts(grpo, _grpo_beta(run, grpo_dir)) if grpo else [])
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


def _cut_turns(traj: dict[str, Any], eos_id: int | None) -> list[int]:
    """The assistant turns (from 1) that the sampler cut at its token limit: a turn it ended itself closes with EOS."""
    if eos_id is None:
        return []
    return [i + 1 for i, ids in enumerate(traj.get("assistant_ids") or []) if ids[-1:] != [eos_id]]


def _outcome_label(traj: dict[str, Any], eos_id: int | None) -> str:
    """The trajectory's outcome as the viewer prints it: `truncated` where a turn was cut at the token limit, also
    when the env ended the episode as `ok` by taking the cut text as its answer."""
    cut = _cut_turns(traj, eos_id)
    if not cut:
        return str(traj["outcome"])
    outcome = "truncated" if traj["outcome"] == "ok" else str(traj["outcome"])
    turns = ("turns " if len(cut) > 1 else "turn ") + ", ".join(map(str, cut))
    return f"{outcome}: {turns} cut at the token limit"


def _viewer(run: Path, stages: list[str]) -> str:
    trajs = {s: _jsonl(run / "eval" / f"{s}.jsonl") for s in stages}
    trajs = {s: t for s, t in trajs.items() if t}
    if not trajs:
        return ""
    tokenizer, system_len, eos_id = None, 0, None
    model_dir = next((run / s / "model" for s in ("sft", "grpo") if (run / s / "model" / "tokenizer.json").exists()),
                     None)
    if model_dir is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        first = next(iter(trajs.values()))[0]["messages"][0]
        system_len = len(tokenizer.apply_chat_template([first], tokenize=True, return_dict=True)["input_ids"])
        eos_id = tokenizer.eos_token_id
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
                    f'reward {t["reward"]:+.2f}, {esc(_outcome_label(t, eos_id))}</h4>')
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


def _transfer(run: Path) -> str:
    """BFCL accuracy per category of the prompted, SFT and GRPO models (`run ... bfcl_questions=N`): tools never
    trained on, with 95 % intervals."""
    results = {s: _json(run / "eval" / f"bfcl_{s}.json") for s in ("prompted", "sft", "grpo")}
    results = {s: r for s, r in results.items() if r}
    if not results:
        return ""
    cats = [c for c in next(iter(results.values()))["overall"]["regression"] if c.startswith("bfcl.")]
    cell = lambda m: "<td>—</td>" if m is None else (
        f'<td>{m["value"]:.3f}<br><span class="ci">[{m["ci95"][0]:.2f}, {m["ci95"][1]:.2f}]</span></td>'
        if m["ci95"] else f'<td>{m["value"]:.3f}</td>')
    rows = "".join(f"<tr><th>{esc(c.removeprefix('bfcl.'))}</th>" + "".join(
        cell(r["overall"]["regression"].get(c)) for r in results.values()) + "</tr>" for c in cats)
    handler = next(iter(results.values())).get("bfcl_handler") or "our parser"
    n = max(m["n"] for m in next(iter(results.values()))["overall"]["regression"].values())
    return ('<section id="transfer"><h2>Transfer: BFCL, tools never trained on</h2><p>Berkeley Function Calling '
            f"Leaderboard (bfcl-eval's data and AST checker), scored as {esc(handler)} scores it, up to {n} "
            "questions per category, greedy; irrelevance: no call is right.</p><table><tr><th>category</th>" + "".join(f"<th>{esc(s)}</th>" for s in results)
            + f"</tr>{rows}</table></section>")


CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1200px;color:#111;padding:0 16px}
h1{margin-bottom:4px} h2{border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;margin:8px 0} th,td{border:1px solid #e5e7eb;padding:3px 8px;text-align:right}
th:first-child{text-align:left} .ci{color:#6b7280;font-size:12px} .dir{color:#6b7280}
.charts{display:flex;flex-wrap:wrap;gap:8px} .family{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}
svg .axis{stroke:#9ca3af} svg .tick{font-size:10px;fill:#4b5563} svg .title{font-size:12px;font-weight:600}
svg text{font-family:"DejaVu Sans",Verdana,sans-serif} svg .legend{font-size:11px}
svg .note{font-size:11px;fill:#6b7280;font-style:italic}
.no-data{width:416px;align-self:flex-start;padding:8px 12px;border:1px dashed #d1d5db;color:#4b5563} .no-data p{margin:4px 0 0}
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
            _comparison(_json(run / "summary.json")), _transfer(run), _curves(run), _families(results),
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
    atomic_write_text(path, encodable(build_report(run)))  # a trajectory's lone surrogate shows as U+FFFD
    return path
