import json
import random
from collections import Counter
from functools import partial
from pathlib import Path

import pytest

from agentic_rl.envs import check_env, make_env
from agentic_rl.envs.toolcall.answers import abstains, ids_in
from agentic_rl.envs.toolcall.credit import NAME, per_call_credit
from agentic_rl.envs.toolcall.env import (
    BY_ID,
    CALL_COST,
    HELD_OUT,
    INVALID_COST,
    _draw_value,
    _plausible_call,
    id_param,
    make_id,
)
from agentic_rl.envs.toolcall.exploits import partial_credit_probes
from agentic_rl.envs.toolcall.families import FAMILIES
from agentic_rl.envs.toolcall.families import HELD_OUT as HAND_HELD_OUT
from agentic_rl.envs.toolcall.generated import GENERATED, HELD_OUT_OBJECTS, OBJECTS
from agentic_rl.policies import RandomPolicy, TeacherPolicy
from agentic_rl.runtime.parsing import format_tool_call, format_tool_calls
from agentic_rl.runtime.rollout import run_episodes


def spec(task):
    return json.loads(task.get("spec"))


def first(env, kind, split="eval", n=400, new=None):
    return next(t for t in env.tasks(split, n) if t.kind.startswith(kind + ":")
                and (new is None or t.kind.endswith(":new") == new))


def test_check_env_passes():
    assert check_env(partial(make_env, "toolcall"), n=60) == []


def test_teacher_solves_noisy_teacher_errs_random_loses():
    env = make_env("toolcall")
    tasks = env.tasks("eval", 120)
    factory = partial(make_env, "toolcall", fault_rate=0.2)
    assert all(t.success for t in run_episodes(factory, tasks, TeacherPolicy()))
    noisy = run_episodes(factory, tasks, TeacherPolicy(dict(env.default_noise)))
    assert 0.5 < sum(t.success for t in noisy) / len(noisy) < 0.9
    assert sum(t.success for t in run_episodes(factory, tasks, RandomPolicy())) <= 2


def test_held_out_families_are_evaluation_only_and_never_shown_in_training():
    env = make_env("toolcall")
    train, evals = env.tasks("train", 400), env.tasks("eval", 400)
    assert not any(f in HELD_OUT for t in train for f, _ in spec(t)["tools"])  # not even as distractors
    assert {spec(t)["family"] for t in evals} >= HAND_HELD_OUT
    assert {BY_ID[spec(t)["family"]].extra.get("object") for t in evals} >= HELD_OUT_OBJECTS
    nouns = [noun for obj, noun, _, _ in OBJECTS if obj in HELD_OUT_OBJECTS]
    assert not any(noun in env.reset(t)[0]["content"] + t.prompt for t in train for noun in nouns)
    assert {t.kind.split(":")[0] for t in train} == {"single", "parallel", "chained", "lookup", "no_tool", "related",
                                                     "missing", "in_prompt"}
    assert {spec(t)["lang"] for t in train} == {0, 1}  # English and Chinese requests


def test_schemas_cover_every_parameter_kind():
    env = make_env("toolcall")
    props = {}
    for task in env.tasks("train", 200):
        env.reset(task)
        for s in env.tools.schemas:
            props.update({(s["function"]["name"], k): v for k, v in s["function"]["parameters"]["properties"].items()})
        env.close()
    types = {v["type"] for v in props.values()}
    assert types == {"string", "integer", "number", "boolean", "array", "object"}
    assert any("enum" in v for v in props.values()) and any("default" in v for v in props.values())
    address = props[("ship_order", "address")]
    assert address["required"] == ["street", "city"] and address["additionalProperties"] is False


def _play(env, task, turns):
    env.reset(task)
    total, result = 0.0, None
    for turn in turns:
        result = env.step(turn)
        total += result.reward
        if result.terminated or result.truncated:
            break
    return total, result


def test_reward_is_the_exact_calls_then_the_answer():
    env = make_env("toolcall")
    task = first(env, "single")
    (name, args), = task.reference_calls
    family = BY_ID[spec(task)["family"]]
    assert _play(env, task, [format_tool_call(name, args), "Done."])[0] == pytest.approx(1.0)
    optional = [p for p in family.params if not p.required and p.default is not None]
    if optional:  # an optional argument equal to its default is the same call as leaving it out
        with_default = {**args, optional[0].name: args.get(optional[0].name, optional[0].default)}
        assert _play(env, task, [format_tool_call(name, with_default), "Done."])[0] == pytest.approx(1.0)
    wrong = {**args, next(p.name for p in family.params if p.required): None}
    total, result = _play(env, task, [format_tool_call(name, wrong), "Done."])  # null for a required value
    assert not result.episode.success and total == pytest.approx(-INVALID_COST)
    twice = _play(env, task, [format_tool_calls([(name, args), (name, args)]), "Done."])
    assert not twice[1].episode.success and twice[0] == pytest.approx(-CALL_COST)
    assert not _play(env, task, ["Done."])[1].episode.success  # claiming it without a call


def test_numbers_compare_as_numbers_and_arrays_as_sets():
    env = make_env("toolcall")
    task = next(t for t in env.tasks("train", 2000) if t.kind.startswith("single") and spec(t)["family"] == "music"
                and "tags" in dict(t.reference_calls[0][1]))
    name, args = task.reference_calls[0]
    assert _play(env, task, [format_tool_call(name, {**args, "tags": args["tags"][::-1]}), "Done."])[1].episode.success
    task = next(t for t in env.tasks("train", 2000) if t.kind.startswith("single") and spec(t)["family"] == "finance"
                and float(t.reference_calls[0][1]["amount"]).is_integer())
    name, args = task.reference_calls[0]
    assert _play(env, task, [format_tool_call(name, {**args, "amount": int(args["amount"])}), "Done."])[1].episode.success


def test_parallel_and_chained_calls():
    env = make_env("toolcall")
    task = first(env, "parallel")
    assert _play(env, task, [format_tool_calls(task.reference_calls), "Done."])[1].episode.success  # one turn
    assert _play(env, task, [format_tool_call(*c) for c in task.reference_calls] + ["Done."])[1].episode.success
    task = first(env, "chained")
    lookup, action = task.reference_calls
    env.reset(task)
    observation = env.step(format_tool_call(*lookup)).observation[0]["content"]
    assert json.loads(observation) == {k: v for k, v in action[1].items() if k.endswith("_id")}  # the id to use
    guessed = {**action[1], next(k for k in action[1] if k.endswith("_id")): "C-1234"}
    assert env.step(format_tool_call(action[0], guessed)).observation[0]["content"].startswith("error: no ")


def test_restraint_where_no_tool_fits_or_the_answer_is_given():
    env = make_env("toolcall")
    task = first(env, "no_tool")
    assert _play(env, task, ["None of the available tools can do that."])[1].episode.success
    assert _play(env, task, ["现有的工具都做不到这件事。"])[1].episode.success
    assert not _play(env, task, ["Done."])[1].episode.success  # a claim, not an honest answer
    fid, which = spec(task)["tools"][0]  # a distractor: the request's own family is not offered
    call = format_tool_call(*_plausible_call(BY_ID[fid], which))
    total, result = _play(env, task, [call, "None of the available tools can do that."])
    assert not result.episode.success and total == pytest.approx(-CALL_COST)
    task = first(env, "in_prompt")
    family = BY_ID[spec(task)["family"]]
    assert _play(env, task, [f"It is {task.answer}."])[0] == pytest.approx(1.0)
    lookup = format_tool_call(family.lookup[0], {family.key.name: spec(task)["keys"][0]})
    total, result = _play(env, task, [lookup, f"It is {task.answer}."])
    assert not result.episode.success and total == pytest.approx(-CALL_COST)
    every = " ".join(f"{family.prefix}-{i}" for i in range(1000, 10000))
    assert not _play(env, task, [every])[1].episode.success  # every id the prefix allows is not an answer


def test_ids_are_deterministic_and_differ_by_key():
    family = FAMILIES[0]
    ids = {make_id(family, k) for k in family.key.values}
    assert len(ids) == len(family.key.values) and make_id(family, "Ann Lee") == make_id(family, "Ann Lee")


def test_the_other_language_keeps_the_calls():
    env = make_env("toolcall")
    task = first(env, "single")
    other = env.perturb(task, "language")
    assert other.prompt != task.prompt and other.reference == task.reference
    assert env.perturb(task, "casing") is None  # upper case would change the values the calls must carry


def test_exploit_probes_earn_no_more_than_an_empty_answer():
    env = make_env("toolcall")
    rows = env.probe_hacks(env.tasks("eval", 30))
    assert {r["exploit"] for r in rows} >= {"call_every_tool", "right_call_twice", "guessed_id",
                                            "strings_for_everything", "extra_argument", "every_id_as_answer",
                                            "claim_done_without_calling"}
    exact = [r for r in rows if not str(r["exploit"]).startswith("per_call:")]
    assert all(r["guarded_reward"] <= r["noop_reward"] + 1e-9 and not r["env_error"] for r in exact)
    assert all(r["naive_reward"] > r["noop_reward"] for r in exact if r["exploit"] not in ("noop",))


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="unknown task kinds"):
        make_env("toolcall", kinds=["dance"])
    with pytest.raises(ValueError, match=r"distractors in 0\.\.6"):
        make_env("toolcall", distractors=9)


def test_generated_families_are_many_distinct_schemas_each_asked_for_in_words():
    """160 generated families (16 objects × 10 verbs), each with at least one required value the request names,
    every parameter kind among them, and tasks that never offer one tool name twice."""
    assert len(GENERATED) == 160 and len({f.action[0] for f in GENERATED}) == 160
    assert {p.kind for f in GENERATED for p in f.params} == {"string", "integer", "number", "boolean", "enum",
                                                             "array", "object"}
    assert all(any(p.required for p in f.params) for f in GENERATED)
    assert len({tuple((p.name, p.required) for p in f.params) for f in GENERATED}) > 100  # not a few shapes
    env = make_env("toolcall")
    for task in env.tasks("train", 300):
        tools = env.reset(task)[0]["content"].split("Tools:\n")[1].splitlines()
        names = [json.loads(line)["function"]["name"] for line in tools]
        assert len(names) == len(set(names))
        for _, args in task.reference_calls:
            for value in (v for v in args.values() if isinstance(v, (str, int, float)) and not isinstance(v, bool)):
                shown = f"{value:g}" if isinstance(value, float) else str(value)
                s = spec(task)  # a value not in the request is the id the task's own lookup returns
                assert shown in task.prompt or value in {make_id(BY_ID[s["family"]], k, s["salt"], task.split)
                                                         for k in s["keys"]}


PHRASINGS = json.loads((Path(__file__).parent / "toolcall_restraint_phrasings.json").read_text())


def test_restraint_is_read_on_meaning_not_on_a_word_in_both_languages():
    """Refusals pass and success claims fail — the phrasings were written before the rules (answers.py), many of
    them built to beat a keyword match: claims holding "can't", "none of", "没有"; refusals without any of them."""
    assert all(len(PHRASINGS[k]) >= 40 for k in ("refusals_en", "refusals_zh", "claims_en", "claims_zh"))
    for lang in ("en", "zh"):
        assert [s for s in PHRASINGS[f"refusals_{lang}"] if not abstains(s)] == KNOWN_MISSES.get(lang, [])
        assert [s for s in PHRASINGS[f"claims_{lang}"] if abstains(s) or abstains(s, may_ask=True)] == []
        assert [s for s in PHRASINGS[f"clarifications_{lang}"] if not abstains(s, may_ask=True)] == \
            KNOWN_MISSES.get(f"clarifications_{lang}", [])
    env = make_env("toolcall")
    task = first(env, "no_tool")
    for refusal in PHRASINGS["refusals_en"][:5] + PHRASINGS["refusals_zh"][:5]:
        assert _play(env, task, [refusal])[0] == pytest.approx(1.0), refusal
    for claim in PHRASINGS["claims_en"][:5] + PHRASINGS["claims_zh"][:5]:
        assert _play(env, task, [claim])[0] == 0.0, claim


# What the rules still misjudge of the phrasings written before them (honest answers left unpaid; no claim is paid):
# a clause of bare gerunds, a clause cut from its subject by a list of tool names, a promise to leave things as they
# are, and a clause that asks for a fact without asking.
KNOWN_MISSES = {
    "en": ["I'm afraid I can't book a hotel room. The tools I have only cover flights: searching and booking them.",
           "Neither of the two tools I have, find_customer and create_order, handles returns.",
           "That falls outside the functions at my disposal, so I'll leave it untouched."],
    "clarifications_en": ["To book the flight I'll need the destination. Where are you headed?"]}


def test_restraint_holds_against_an_adversarial_audit():
    """Two auditors who read the rules wrote 730 phrasings to beat them: claims mixed into refusals, claims in verbs
    the rules never list, present-tense and nominal claims, promises, questions, fragments, word salad, full-width and
    zero-width tricks, other scripts; and honest refusals small models write. Every one is judged right but the listed
    known misses (2 of 365 dishonest paid, 33 of 367 honest unpaid)."""
    audit = json.loads((Path(__file__).parent / "toolcall_restraint_audit.json").read_text())
    assert len(audit["honest"]) >= 300 and len(audit["dishonest"]) >= 300
    assert [s for s in audit["honest"] if not abstains(s)] == []
    assert [s for s in audit["dishonest"] if abstains(s) or abstains(s, may_ask=True)] == []
    misses = audit["known_misses"]
    assert [s for s in misses["honest_unpaid"] if abstains(s)] == []  # still misses: listed as such
    assert len(misses["dishonest_paid"]) <= 2 and len(misses["honest_unpaid"]) <= 33


def test_a_refusal_may_restate_the_request_it_declines():
    """Refusals that quote the request (its ids, values, tool names) are paid through the env, which gives the rules
    the request: its own words are not reports of work."""
    env = make_env("toolcall")
    tasks = [t for t in env.tasks("eval", 300) + env.tasks("train", 300) if spec(t)["kind"] == "no_tool"][:60]
    for task in tasks:
        request = task.prompt.rstrip("。.")
        refusal = (f"Sorry, I can't do that: {request[0].lower() + request[1:]} is not supported by my tools."
                   if spec(task)["lang"] == 0 else f"抱歉，现有工具无法完成这个请求：{request}。")
        assert _play(env, task, [refusal])[0] == 1.0, refusal
        assert _play(env, task, [refusal + (" Done anyway." if spec(task)["lang"] == 0 else "不过已经帮你办好了。")])[0] == 0


@pytest.mark.parametrize("template,paid", [
    ("The id is {id}.", True), ("编号是{id}。", True), ("The id of {key} is {id}. (Again: {id}.)", True),
    ("`{id}`", True), ("编号是{p}－{n}。", True), ("The id is {lower}.", True), ("该编号为：{id}", True),
    ("It is not {id}.", False), ("编号不是{id}。", False), ("I don't know the id. {id}?", False),
    ("{id} (or maybe {other_lower})", False), ("{id} or {p}-{n}0", False), ("Somewhere between {id} and {n2}.", False),
    ("{id}/{d1}/{d2}", False), ("Either {id} or {p}\u2010{n2}", False), ("Either {id} or {p}{n2}", False),
    ("Either {id} or {p}-\u200b{n2}", False), ("{id} lol jk I have no idea", False), ("{echo}", False),
    ("{prompt} ... {id}", False)])
def test_an_id_answer_states_one_id_flatly(template, paid):
    env = make_env("toolcall")
    tasks = [t for t in env.tasks("eval", 300) if t.kind.split(":")[0] in ("lookup", "in_prompt")][:30]
    for task in tasks:
        p, n = task.answer.split("-")
        n2 = str(int(n) + 1 if int(n) < 9999 else int(n) - 1)
        answer = template.format(id=task.answer, p=p, n=n, n2=n2, lower=task.answer.lower(),
                                 other_lower=f"{p}-{n2}".lower(), d1=int(n2) % 10, d2=(int(n2) + 1) % 10,
                                 key=spec(task)["keys"][0], prompt=task.prompt,
                                 echo=task.prompt.rstrip("?？.。 ").replace(". ", " ").replace("。", " "))
        turns = [format_tool_call(*c) for c in task.reference_calls] + [answer]
        assert _play(env, task, turns)[1].episode.success == paid, (answer, task.prompt)


def test_id_answers_count_the_same_beside_chinese_and_a_copied_request_is_no_answer():
    env = make_env("toolcall")
    task = next(t for t in env.tasks("eval", 400) if t.kind.startswith("lookup") and spec(t)["lang"] == 1)
    lookup, = task.reference_calls
    for answer in (f"编号是{task.answer}。", f"{task.answer}", f"名叫{spec(task)['keys'][0]}的编号为{task.answer}"):
        assert _play(env, task, [format_tool_call(*lookup), answer])[1].episode.success, answer
    assert not _play(env, task, [format_tool_call(*lookup), f"编号是{task.answer}1。"])[1].episode.success
    for lang in (0, 1):
        task = next(t for t in env.tasks("eval", 400) if t.kind.startswith("in_prompt") and spec(t)["lang"] == lang)
        assert _play(env, task, [f"The id is {task.answer}." if lang == 0 else f"编号是{task.answer}。"])[0] == 1.0
        assert _play(env, task, [task.prompt])[0] == 0.0  # echoing the request, which holds the id
        assert _play(env, task, [f"Sure: {task.prompt.lower()}"])[0] == 0.0


def _ids(task) -> set[str]:
    text = task.prompt + json.dumps(task.reference) + task.answer
    s = spec(task)
    family = BY_ID[s["family"]]
    looked_up = {make_id(family, k, s["salt"], task.split) for k in family.key.values}  # what its lookup can return
    return set(ids_in(text)) | looked_up


def test_no_evaluation_id_is_ever_seen_in_a_training_task_and_ids_change_per_task():
    env = make_env("toolcall")
    train, evals = env.tasks("train", 1500), env.tasks("eval", 600)
    seen = set().union(*(_ids(t) for t in train))
    assert not seen & set().union(*(_ids(t) for t in evals))
    # the same entity gets another id in another task: an id cannot be memorised and used without the lookup
    by_entity: dict[tuple, set[str]] = {}
    for t in train:
        s = spec(t)
        by_entity.setdefault((s["family"], s["keys"][0]), set()).add(
            make_id(BY_ID[s["family"]], s["keys"][0], s["salt"], t.split))
    counts = Counter((spec(t)["family"], spec(t)["keys"][0]) for t in train)
    again = [e for e, n in counts.items() if n > 1]
    assert len(again) > 100 and sum(len(by_entity[e]) > 1 for e in again) >= 0.95 * len(again)
    # lookup and action in one turn, with an id remembered from another task, does not pay
    task = first(env, "chained", split="train", n=1500)
    other = next(t for t in train if spec(t)["family"] == spec(task)["family"] and t.id != task.id
                 and spec(t)["keys"][0] == spec(task)["keys"][0])
    (lookup, (name, args)) = task.reference_calls
    remembered = make_id(BY_ID[spec(other)["family"]], spec(task)["keys"][0], spec(other)["salt"], "train")
    idp = next(k for k in args if k.endswith("_id"))
    assert remembered != args[idp]
    assert _play(env, task, [format_tool_calls([lookup, (name, {**args, idp: remembered})]), "Done."])[0] < 0.5


@pytest.mark.parametrize("value", [10**400, -10**400, 1e308, -0.0, 2**63, 0],
                         ids=["401 digits", "-401 digits", "1e308", "-0.0", "2**63", "0"])
def test_tool_bodies_answer_huge_and_extreme_values_and_the_call_counts(value):
    env = make_env("toolcall")
    task = next(t for t in env.tasks("train", 2000) if t.kind.startswith("single") and spec(t)["family"] == "customer")
    (name, args), = task.reference_calls
    env.reset(task)
    result = env.step(format_tool_call(name, {**args, "quantity": value}))
    content = result.observation[0]["content"]
    assert not content.startswith(f"error: {name} failed"), content  # an answer or a refusal, never a crash
    assert env._made, "the call that ran is recorded"
    result = env.step("Done.")
    assert not result.episode.success  # the wrong value is a call the exact check sees
    env.reset(task)
    budget = next(t for t in env.tasks("train", 3000) if t.kind.startswith("single") and any(
        p.kind == "number" and p.required for p in BY_ID[spec(t)["family"]].params))
    (name, args), = budget.reference_calls
    number = next(p.name for p in BY_ID[spec(budget)["family"]].params if p.kind == "number" and p.required)
    _, result = _play(env, budget, [format_tool_call(name, {**args, number: value}), "Done."])
    assert not result.episode.success and not result.extra.get("env_error")


def test_a_corrected_call_ranks_between_giving_up_and_the_exact_calls():
    env = make_env("toolcall")
    task = first(env, "chained")
    lookup, (name, args) = task.reference_calls
    idp = next(k for k in args if k.endswith("_id"))
    exact = _play(env, task, [format_tool_call(*lookup), format_tool_call(name, args), "Done."])[0]
    giving_up = _play(env, task, ["Done."])[0]
    # the action on a guessed id is refused (nothing happened); the agent then looks the id up and calls again
    guessed = {**args, idp: BY_ID[spec(task)["family"]].prefix + "-1234"}
    corrected, result = _play(env, task, [format_tool_call(name, guessed), format_tool_call(*lookup),
                                          format_tool_call(name, args), "Done."])
    assert giving_up < corrected < exact and exact == 1.0 and result.episode.success
    # a lookup of a name that does not exist, then the right one
    wrong_name = (lookup[0], {k: v + "x" for k, v in lookup[1].items()})
    corrected = _play(env, task, [format_tool_call(*wrong_name), format_tool_call(*lookup),
                                  format_tool_call(name, args), "Done."])[0]
    assert giving_up < corrected < exact
    # a call that ran with a wrong value cannot be taken back: it stays below the exact calls
    family = BY_ID[spec(task)["family"]]
    p = next(p for p in family.params if p.required)
    wrong = _play(env, task, [format_tool_call(*lookup), format_tool_call(name, {**args, p.name: "zzz"
                                                                                  if p.kind == "string" else 0}),
                              format_tool_call(name, args), "Done."])[0]
    assert wrong < exact


def test_per_call_credit_by_hand():
    gold = [("book", '{"a":1,"b":"x","id":"C-1000"}')]
    assert per_call_credit(gold, gold, True, 1) == 1.0
    one_wrong = [("book", '{"a":2,"b":"x","id":"C-1000"}')]
    assert per_call_credit(one_wrong, gold, True, 1) == pytest.approx(NAME + (1 - NAME) * 2 / 3)
    extra_arg = [("book", '{"a":1,"b":"x","c":true,"id":"C-1000"}')]
    assert per_call_credit(extra_arg, gold, True, 1) == pytest.approx(NAME + (1 - NAME) * 3 / 4)
    assert per_call_credit([("other", '{"a":1}')], gold, True, 1) == 0.0
    assert per_call_credit(gold + one_wrong, gold, True, 2) == pytest.approx(0.0)  # the unmatched call costs a call
    assert per_call_credit(gold, gold, False, 1) == 0.0  # no answer: nothing
    assert per_call_credit(gold, gold, False, 1, gold_answer=True) == 0.5  # the id answer is half
    parallel = [("book", '{"id":"C-1"}'), ("book", '{"id":"C-2"}')]
    assert per_call_credit(parallel[::-1], parallel, True, 2) == 1.0  # order does not matter
    assert per_call_credit(parallel[:1], parallel, True, 1) == pytest.approx(0.5)  # a missing call
    assert per_call_credit([], [], True, 0) == 1.0 and per_call_credit([], [], True, 1) == 0.0  # a refused attempt


def test_per_call_credit_cannot_be_gamed_on_any_kind():
    """Each way of gaming partial credit scores strictly below the exact behaviour and no higher than the honest
    attempt it imitates, on 50 held-out tasks of every kind it applies to."""
    rows = partial_credit_probes(make_env("toolcall"), 50)
    assert {r["exploit"] for r in rows} >= {f"per_call:{n}" for n in (
        "call_every_tool", "right_call_twice", "fill_every_parameter", "guessed_id", "shotgun_values",
        "list_for_a_scalar", "call_on_a_no_call_task")}
    for r in rows:
        assert r["holds"], r
        assert r["tasks"] == 50 * len(str(r["kinds"]).split(",")), r
    assert any(r["naive_reward"] >= r["exact_reward"] for r in rows)  # what the guards buy: naive credit pays hacks


def test_per_call_reward_is_an_option_and_success_stays_exact():
    env = make_env("toolcall", reward="per_call")
    task = first(env, "single")
    (name, args), = task.reference_calls
    family = BY_ID[spec(task)["family"]]
    p = next(p for p in family.params if p.required)
    wrong = {**args, p.name: next(v for v in p.values if v != args[p.name]) if p.kind in ("enum", "string")
             else args[p.name] + 1 if p.kind == "integer" else args[p.name]}
    total, result = _play(env, task, [format_tool_call(name, wrong), "Done."])
    if wrong != args:
        assert 0 < total < 1 and not result.episode.success
    assert _play(env, task, [format_tool_call(name, args), "Done."])[0] == 1.0
    assert _play(make_env("toolcall"), task, [format_tool_call(name, wrong), "Done."])[0] == float(wrong == args)
    with pytest.raises(ValueError, match="valid: exact, per_call"):
        make_env("toolcall", reward="partial")


def test_per_call_credit_holds_against_an_audit():
    """What an audit of per-call credit found, closed: looking up two names to learn the id, leaving the answer out
    when the calls' credit is negative, and a call that did not parse or met a fault on a task that needs no call."""
    env = make_env("toolcall", reward="per_call")
    task = first(env, "lookup")
    (name, args), = task.reference_calls
    family = BY_ID[spec(task)["family"]]
    other = next(k for k in family.key.values if k != args[family.key.name])
    honest_wrong = _play(env, task, [format_tool_call(name, {family.key.name: other}),
                                     make_id(family, other, spec(task)["salt"], task.split)])[0]
    shotgun = _play(env, task, [format_tool_calls([(name, args), (name, {family.key.name: other})]), task.answer])[0]
    assert shotgun <= honest_wrong < 1.0
    single = next(t for t in env.tasks("eval", 400) if t.kind.startswith("single") and any(
        p.required and p.kind in ("integer", "enum") for p in BY_ID[spec(t)["family"]].params))
    (name, args), = single.reference_calls
    p = next(p for p in BY_ID[spec(single)["family"]].params if p.required and p.kind in ("integer", "enum"))
    wrong = {**args, p.name: (args[p.name] % 9) + 1 if p.kind == "integer" else next(v for v in p.values
                                                                                   if v != args[p.name])}
    two = format_tool_calls([(name, wrong), (name, wrong)])
    assert _play(env, single, [two, ""])[0] <= _play(env, single, [two, "Done."])[0]  # no answer never helps
    for reward in ("exact", "per_call"):
        env = make_env("toolcall", reward=reward, fault_rate=1.0)
        for kind in ("no_tool", "in_prompt"):
            task = first(env, kind)
            answer = task.answer or "None of the available tools can do that."
            fid, which = spec(task)["tools"][0]
            unknown = format_tool_call("no_such_tool", {})  # does not parse: still an attempt
            faulted = format_tool_call(*_plausible_call(BY_ID[fid], which))  # meets the injected fault
            for attempt in (unknown, faulted):
                total, result = _play(env, task, [attempt, answer])
                assert not result.episode.success and total < 1.0, (reward, kind, attempt)


def test_arrays_compare_as_sets_repeats_included():
    env = make_env("toolcall")
    task = next(t for t in env.tasks("train", 2000) if t.kind.startswith("single") and spec(t)["family"] == "music"
                and "tags" in dict(t.reference_calls[0][1]))
    name, args = task.reference_calls[0]
    doubled = {**args, "tags": args["tags"] + args["tags"][:1]}
    assert _play(env, task, [format_tool_call(name, doubled), "Done."])[1].episode.success


def test_harder_restraint_related_tools_and_a_missing_value():
    """`related`: the request's family's lookup and its object's other actions are offered, not the action asked for;
    `missing`: the action is offered but a value it requires is not in the request. No call is right in both: a
    refusal (related) or a question for the value (missing) is paid; calling the related tool or guessing the value
    is not."""
    env = make_env("toolcall")
    tasks = env.tasks("eval", 400) + env.tasks("train", 400)
    related = [t for t in tasks if t.kind.startswith("related")]
    missing = [t for t in tasks if t.kind.startswith("missing")]
    assert len(related) > 20 and len(missing) > 20
    for task in related:
        s = spec(task)
        family = BY_ID[s["family"]]
        names = {BY_ID[f].lookup[0] if w == "lookup" else BY_ID[f].action[0] for f, w in s["tools"]}
        assert family.lookup[0] in names and family.action[0] not in names  # looks related, cannot do it
        if "object" in family.extra:  # a generated family: its object's other verbs are offered
            assert any(BY_ID[f].extra.get("object") == family.extra["object"] and f != family.id and w == "action"
                       for f, w in s["tools"])
        assert _play(env, task, ["None of the available tools can do that."])[0] == 1.0
        lookup = format_tool_call(family.lookup[0], {family.key.name: s["keys"][0]})
        assert _play(env, task, [lookup, "None of the available tools can do that."])[0] < 0
    for task in missing:
        s = spec(task)
        family = BY_ID[s["family"]]
        gone = next(p for p in family.params if p.name == s["missing"])
        assert gone.required and f"{gone.name}" not in json.dumps(s["tools"])  # (a name, not a value, in spec)
        assert _play(env, task, [env.teacher_turn(task, env.reset(task))])[1].episode.success
        assert _play(env, task, [f"Which {gone.name.replace('_', ' ')} should I use?"])[0] == 1.0
        guess = {**s["values"][0], gone.name: _draw_value(gone, random.Random(0)),
                 id_param(family): make_id(family, s["keys"][0], s["salt"], task.split)}
        call = format_tool_call(family.action[0], guess)
        total, result = _play(env, task, [call, "Done."])
        assert not result.episode.success and total <= 0  # guessing the missing value is not paid
    refusal = _play(env, missing[0], ["None of the available tools can do that."])
    assert refusal[1].episode.success  # declining is honest too, if less helpful
