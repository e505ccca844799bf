"""Procedurally generated function families for toolcall: many schemas, so a model learns to read one.

With a handful of hand-written families a small model can memorise each tool's arguments instead of reading them
from the schema, and then fails on any tool it has not seen (BFCL). Here every (object, verb) pair is a family: its
lookup `find_<object>` and its action `<verb>_<object>`, whose parameters — a seeded draw of 2 to 4 from PARAMS, of
every type — and request wording follow from the draw. Objects in HELD_OUT_OBJECTS make evaluation-only families:
their nouns, names and parameter sets never appear in training, not even as distractors.
"""

from __future__ import annotations

import random

from .families import CITIES, DATES, EMAILS, NAMES, WORDS, Family, Param

CODENAMES = ("Atlas", "Birch", "Comet", "Delta", "Ember", "Falcon", "Granite", "Harbor", "Iris", "Juniper")

# (object, English noun, Chinese noun, id prefix): the id prefixes are not the hand-written families'
OBJECTS = (
    ("sensor", "sensor", "传感器", "SN"), ("vehicle", "vehicle", "车辆", "VH"), ("room", "meeting room", "会议室", "RM"),
    ("project", "project", "项目", "PJ"), ("server", "server", "服务器", "SV"), ("warehouse", "warehouse", "仓库", "WH"),
    ("campaign", "campaign", "活动", "CP"), ("store", "store", "门店", "ST"), ("team", "team", "团队", "TM"),
    ("employee", "employee", "员工", "EM"), ("article", "article", "文章", "AT"), ("invoice", "invoice", "发票", "IN"),
    # held out: evaluation only
    ("pet", "pet", "宠物", "PT"), ("album", "album", "专辑", "AL"), ("printer", "printer", "打印机", "PR"),
    ("vendor", "vendor", "供应商", "VN"),
)
HELD_OUT_OBJECTS = {"pet", "album", "printer", "vendor"}

# (function verb, English verb, Chinese verb)
VERBS = (("update", "Update", "更新"), ("configure", "Configure", "配置"), ("register", "Register", "登记"),
         ("archive", "Archive", "归档"), ("review", "Review", "审核"), ("assign", "Assign", "分派"),
         ("inspect", "Inspect", "检查"), ("renew", "Renew", "续订"), ("reset", "Reset", "重置"),
         ("schedule", "Schedule", "安排"))

# (parameter, its phrase in a request: English, Chinese) — `{v}` is the value, `{v.field}` an object's field
PARAMS: tuple[tuple[Param, str, str], ...] = (
    (Param("color", "enum", "The color to use.", ("red", "blue", "green", "black")), "color {v}", "颜色为{v}"),
    (Param("priority", "enum", "How urgent it is.", ("low", "medium", "high")), "priority {v}", "优先级为{v}"),
    (Param("region", "enum", "The region it belongs to.", ("north", "south", "east", "west")), "region {v}",
     "区域为{v}"),
    (Param("language", "enum", "The language code.", ("en", "fr", "de", "zh")), "language {v}", "语言为{v}"),
    (Param("channel", "enum", "How to send notices.", ("email", "sms", "phone")), "notices by {v}", "通知渠道为{v}"),
    (Param("level", "integer", "The level, 1 to 10.", (1, 10)), "level {v}", "等级为{v}"),
    (Param("count", "integer", "How many units.", (1, 20)), "count {v}", "数量为{v}"),
    (Param("days", "integer", "How many days it lasts.", (1, 30)), "for {v} days", "为期{v}天"),
    (Param("budget", "number", "The budget in dollars.", (10, 900)), "a budget of {v} dollars", "预算{v}美元"),
    (Param("weight_kg", "number", "The weight in kilograms.", (1, 40)), "weight {v} kg", "重量{v}公斤"),
    (Param("note", "string", "A short note.", ("check twice", "call first", "fragile", "needs review")),
     "the note \"{v}\"", "备注\"{v}\""),
    (Param("owner", "string", "The person in charge.", NAMES), "owner {v}", "负责人为{v}"),
    (Param("city", "string", "The city.", CITIES), "in {v}", "城市为{v}"),
    (Param("start_date", "string", "The start date, YYYY-MM-DD.", DATES), "starting {v}", "从{v}开始"),
    (Param("email", "string", "The email address for updates.", EMAILS), "updates to {v}", "更新发到{v}"),
    (Param("tags", "array", "Labels to attach.", WORDS), "tags {v}", "标签为{v}"),
    (Param("urgent", "boolean", "Handle it first.", (True,)), "marked urgent", "标记为加急"),
    (Param("public", "boolean", "Make it visible to everyone.", (True,)), "made public", "设为公开"),
    (Param("contact", "object", "Who to contact.", fields=(
        Param("name", "string", "Full name.", NAMES), Param("email", "string", "Email address.", EMAILS))),
     "contact {v.name} ({v.email})", "联系人{v.name}（{v.email}）"),
)


def generated_families(seed: int = 0) -> tuple[Family, ...]:
    """One family per (object, verb): its parameters and their required/optional split drawn from `seed`."""
    out = []
    for obj, noun, noun_zh, prefix in OBJECTS:
        for verb, verb_en, verb_zh in VERBS:
            rng = random.Random(f"toolcall-gen:{seed}:{obj}:{verb}")
            drawn = sorted(rng.sample(PARAMS, rng.randint(2, 4)), key=lambda d: d[0].kind == "boolean")
            if drawn[0][0].kind == "boolean":  # a request needs one value to ask for
                drawn.insert(0, rng.choice([d for d in PARAMS if d[0].kind != "boolean"]))
            params, parts = [], []
            for i, (p, phrase_en, phrase_zh) in enumerate(drawn):
                required = p.kind != "boolean" and (i == 0 or rng.random() < 0.5)
                default = False if p.kind == "boolean" else (p.values[0] if p.kind == "enum" and not required
                                                               else None)
                params.append(Param(p.name, p.kind, p.description, p.values, required, default, p.fields))
                parts.append((p.name, required, phrase_en.replace("{v", "{" + p.name),
                              phrase_zh.replace("{v", "{" + p.name)))
            out.append(Family(
                f"{verb}_{obj}", prefix, (noun, noun_zh),
                Param("name", "string", f"The {noun}'s name.", CODENAMES),
                (f"find_{obj}", f"Find a {noun} by name and return its id."),
                (f"{verb}_{obj}", f"{verb_en} a {noun}."), tuple(params), request((verb_en, verb_zh), parts),
                extra={"object": obj, "verb": (verb_en, verb_zh), "parts": tuple(parts)}))
    return tuple(out)


def request(verb: tuple[str, str], parts: list[tuple[str, bool, str, str]]) -> tuple[str, str]:
    """A generated family's request templates (English, Chinese): the verb, `{REF}`, the required parameters' phrases,
    then each optional one in `[name|…]`."""
    required_en = [en for _, req, en, _ in parts if req]
    required_zh = [zh for _, req, _, zh in parts if req]
    optional_en = "".join(f"[{name}|, {en}]" for name, req, en, _ in parts if not req)
    optional_zh = "".join(f"[{name}|，{zh}]" for name, req, _, zh in parts if not req)
    en = f"{verb[0]} {{REF}}" + (f" with {' and '.join(required_en)}" if required_en else "") + f"{optional_en}."
    zh = f"请{verb[1]}{{REF}}" + (f"，{'，'.join(required_zh)}" if required_zh else "") + f"{optional_zh}。"
    return en, zh


def request_without(family: Family, missing: str) -> tuple[str, str]:
    """The family's request with one required parameter's words left out: a request a call cannot serve."""
    return request(family.extra["verb"], [part for part in family.extra["parts"] if part[0] != missing])


GENERATED = generated_families()
GENERATED_HELD_OUT = {f.id for f in GENERATED if f.extra["object"] in HELD_OUT_OBJECTS}
