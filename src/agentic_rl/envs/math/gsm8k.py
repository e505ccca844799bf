"""GSM8K-format problems through `datasets`: the Hub's `openai/gsm8k` (train → train, test → eval), or a local
.jsonl / .json / .parquet file of {"question", "answer"} rows (split by a hash of the question).

A GSM8K answer is worked reasoning with calculator annotations (`48/2 = <<48/2=24>>24`) and a last line `#### 72`.
The gold is that last line; the annotations are the teacher's calculator calls; the reasoning without them is the
teacher's direct answer.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..base import Split, split_of

HUB_ID = "openai/gsm8k"
ANNOTATION = re.compile(r"<<([^=<>]+)=([^<>]+)>>")
FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}


def load_problems(data: str) -> dict[Split, list[dict[str, Any]]]:
    """{split: [{"question", "gold", "steps": [(expression, value)], "reasoning"}]} from the Hub id or a local file."""
    try:
        import datasets
    except ImportError:
        raise ValueError("env_args.data needs the `datasets` package: pip install 'agentic-rl[data]'") from None
    path = Path(data)
    if data in ("gsm8k", HUB_ID):
        try:
            ds = datasets.load_dataset(HUB_ID, "main")
        except Exception as e:
            raise ValueError(f"could not load {HUB_ID} from the Hugging Face Hub ({type(e).__name__}); offline, give "
                             f"a local file instead: env_args.data=/path/to/gsm8k.jsonl (or .parquet)") from None
        rows = {"train": list(ds["train"]), "eval": list(ds["test"])}
    elif path.suffix in FORMATS and path.is_file():
        every = list(datasets.load_dataset(FORMATS[path.suffix], data_files=str(path), split="train"))
        rows = {s: [r for r in every if split_of(str(r.get("question")), 0.2) == s] for s in ("train", "eval")}
    else:
        raise ValueError(f"env_args.data={data!r}: give 'gsm8k' (the Hub's {HUB_ID}) or a path to an existing "
                         f"{', '.join(FORMATS)} file of GSM8K rows")
    return {split: [_problem(r, data) for r in rs] for split, rs in rows.items()}  # type: ignore[misc]


def _problem(row: dict[str, Any], source: str) -> dict[str, Any]:
    if not isinstance(row.get("question"), str) or "####" not in str(row.get("answer", "")):
        raise ValueError(f"{source}: each row needs a 'question' and an 'answer' ending in '#### <number>', got "
                         f"{str(row)[:120]!r}")
    reasoning, gold = str(row["answer"]).rsplit("####", 1)
    steps = [(e.strip(), v.strip()) for e, v in ANNOTATION.findall(reasoning)]
    return {"question": row["question"].strip(), "gold": gold.strip().replace(",", ""), "steps": steps,
            "reasoning": ANNOTATION.sub("", reasoning).strip()}
