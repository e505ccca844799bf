"""codefix against an adversary (issue 26's audit): each class of attack, and what must hold after it.

1 the original source through the project's git history · 2 the answer key in the fork server's memory · 3 forged
replies through an inherited descriptor · 4 FIFOs that hang the trusted side · 5 malformed output that crashes the
grader · 6 state that outlives a run · 7 test ids as options, links into .git, workspaces too large to read.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from agentic_rl.envs.codefix.corpus import CORPUS
from agentic_rl.envs.codefix.env import CodeFixEnv
from agentic_rl.envs.codefix.exploits import EXPLOITS, FINDING, probe_task
from agentic_rl.envs.codefix.jail import live_processes
from agentic_rl.envs.codefix.runner import ForkServer, ProtocolError, server
from agentic_rl.envs.codefix.sandbox import Limits, Sandbox, isolation_available, layout
from agentic_rl.envs.codefix.tasks import module_split, valid_mutants
from agentic_rl.policies import TeacherPolicy
from agentic_rl.runtime.parsing import format_tool_call
from agentic_rl.runtime.rollout import run_episodes

isolated = pytest.mark.skipif(not isolation_available(), reason="needs root and Linux namespaces for the sandbox")
CHECKOUT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env_and_task():
    env = CodeFixEnv(limits=Limits(wall_seconds=3, cpu_seconds=3))
    task = next(t for t in env.tasks("eval", 6, 0) if t.get("module") == "truncate")  # a mutant that halts
    return env, task


@pytest.fixture(scope="module")
def noop(env_and_task):
    env, task = env_and_task
    return probe_task(env, task, "noop")["guarded_reward"]


@pytest.fixture(params=[True, False], ids=["warm", "cold"])
def sandbox(tmp_path, request):
    ws = tmp_path / "ws"
    ws.mkdir()
    return Sandbox(ws, Limits(wall_seconds=5, cpu_seconds=5), warm=request.param)


def _alarm(seconds: int):
    def fail(*_):
        raise AssertionError(f"blocked for more than {seconds} s")
    signal.signal(signal.SIGALRM, fail)
    signal.alarm(seconds)


def test_every_finding_has_a_probe():
    assert set(FINDING.values()) == set(range(1, 8))
    assert set(FINDING) <= set(EXPLOITS)


# ---- 1, 6: an allow-list filesystem, its own IPC namespace ---------------------------------------------------------

@isolated
def test_the_sandbox_sees_only_the_runtime_the_test_framework_and_the_workspace(sandbox):
    code = textwrap.dedent(f"""
        import os, sys
        seen = {{p: os.path.exists(p) for p in [{str(CHECKOUT / '.git')!r}, {str(CHECKOUT / 'src')!r},
                 {str(CHECKOUT / 'README.md')!r}, "/proc/self/maps", "/run", "/dev/shm", "/home", "/etc/passwd",
                 "/usr/bin"]}}
        checkout = os.listdir({str(CHECKOUT)!r}) if os.path.isdir({str(CHECKOUT)!r}) else []
        site = [p for p in sys.path if p.endswith("-packages")]
        print({{"seen": seen, "site": sorted(n for p in site for n in os.listdir(p)), "cwd": os.getcwd(),
               "root": sorted(os.listdir("/")), "checkout": checkout}})
    """)
    r = sandbox.run(["python", "-c", code])
    assert r.outcome == "ok", r.stderr
    out = eval(r.stdout)
    assert not any(out["seen"].values()), out["seen"]
    assert set(out["checkout"]) <= {".venv"}  # at most the chain to a venv that lives in the checkout
    assert out["cwd"] == str(sandbox.workspace)
    allowed = {Path(op[1]).name for op in layout() if op[0] == "bind" and "-packages/" in op[1]}
    assert set(out["site"]) == allowed and any(n.startswith("pytest") for n in allowed)
    assert not any("agentic_rl" in n or n.startswith("torch") for n in out["site"])
    chains = {Path(op[1]).parts[1] for op in layout()} | {sandbox.workspace.parts[1]}
    assert set(out["root"]) <= chains, set(out["root"]) - chains  # only the chains to what is bound, wherever it lives


@isolated
def test_the_original_source_cannot_be_read_from_the_projects_git(env_and_task, noop):
    env, task = env_and_task
    r = probe_task(env, task, "git_history_pristine")
    assert not r["env_error"] and r["guarded_reward"] <= noop


# ---- 2: no secret where untrusted code is forked -------------------------------------------------------------------

@isolated
def test_the_fork_server_never_holds_an_original_source_or_an_expected_value():
    modules = [m for m in CORPUS if module_split(m) == "eval"][:4]
    for m in modules:
        valid_mutants.__wrapped__(m)  # task selection: the original source and every case's value go to a child
    srv = server()
    assert srv.proc is not None
    needles = []
    for m in modules:
        needles += [m.source.encode(), json.dumps(m.source)[1:-1].encode()]
        needles += [json.dumps([v for _, v in m.hidden])[1:-1].encode()]
    found = []
    with open(f"/proc/{srv.proc.pid}/mem", "rb", 0) as mem, open(f"/proc/{srv.proc.pid}/maps") as maps:
        for line in maps:
            addr, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in addr.split("-"))
            if not perms.startswith("r"):
                continue
            try:
                mem.seek(lo)
                chunk = mem.read(hi - lo)
            except (OSError, ValueError, OverflowError):
                continue
            found += [n[:40] for n in needles if n in chunk]
    assert found == []


# ---- 3: a protocol that cannot be desynchronised -------------------------------------------------------------------

@isolated
def test_only_descriptors_0_to_2_reach_the_child(sandbox):
    r = sandbox.run(["python", "-c", "import os\nopen_fds = []\nfor fd in range(3, 1024):\n    try:\n"
                                     "        os.fstat(fd)\n        open_fds.append(fd)\n    except OSError:\n"
                                     "        pass\nprint(open_fds)"])
    assert r.stdout.strip() == "[]", r.stderr


@isolated
def test_a_forged_reply_changes_nothing_for_this_or_later_episodes(env_and_task, noop):
    env, task = env_and_task
    r = probe_task(env, task, "forge_server_reply")
    assert not r["env_error"] and r["guarded_reward"] <= noop
    assert probe_task(env, task, "noop")["guarded_reward"] == noop  # the next episode is scored as before
    trajs = run_episodes(lambda: CodeFixEnv(), [task], TeacherPolicy(), seed=0)
    assert trajs[0].success and trajs[0].reward == 1.0


def test_anything_but_the_awaited_reply_on_the_channel_is_a_protocol_error():
    srv = ForkServer()
    read, write = os.pipe()

    class Proc:
        class stdout:
            @staticmethod
            def fileno() -> int:
                return read

    os.write(write, b'{"id": "a"}\n{"id": "b"}\n')
    with pytest.raises(ProtocolError, match="more than one reply"):
        srv._read_line(Proc, deadline=time.monotonic() + 5)
    os.close(read)
    os.close(write)


# ---- 4: nothing the agent makes can block the env -------------------------------------------------------------------

@isolated
def test_fifos_planted_by_module_code_cannot_hang_any_step(env_and_task, noop):
    env, task = env_and_task
    _alarm(60)
    try:
        r = probe_task(env, task, "fifo_hang")
    finally:
        signal.alarm(0)
    assert not r["env_error"] and r["guarded_reward"] <= noop


@isolated
def test_the_episode_time_limit_holds_inside_step():
    env = CodeFixEnv(limits=Limits(wall_seconds=5, cpu_seconds=5), episode_seconds=1.5)
    task = env.tasks("eval", 1, 0)[0]
    env.reset(task)
    test_file = env.workspace.root / f"test_{task.get('module')}.py"
    test_file.write_text(test_file.read_text() + "\n\ndef test_zz_loops():\n    while True:\n        pass\n")
    first = env.step(format_tool_call("run_test", {}))
    assert not first.truncated and first.observation[0]["content"] == "timeout: the episode's time ran out while the tests ran"
    second = env.step(format_tool_call("run_test", {}))
    env.close()
    assert second.truncated and second.info["time_limit"] and env._spent < 4  # not the run's own 5 s


# ---- 5: malformed output is the agent's failed attempt, not an env error -------------------------------------------

@isolated
@pytest.mark.parametrize("exploit", ["result_wrong_type", "result_deep_json", "socket_file", "test_file_as_directory",
                                     "nul_byte_path"])
def test_malformed_output_scores_as_a_failed_attempt(env_and_task, noop, exploit):
    env, task = env_and_task
    r = probe_task(env, task, exploit)
    assert not r["env_error"], exploit
    assert r["guarded_reward"] <= noop


def test_a_fault_outside_the_agents_reach_stays_an_env_error(monkeypatch):
    """The fork server dying is the env's failure: the episode ends as env_error at that run_test, unscored."""
    def dies(self, *a, **k):
        raise EOFError

    monkeypatch.setattr(ForkServer, "_read_line", dies)
    task = CodeFixEnv().tasks("eval", 1, 0)[0]
    trajs = run_episodes(lambda: CodeFixEnv(), [task], TeacherPolicy(), seed=0)
    calls = [m["tool_calls"][0]["function"]["name"] for m in trajs[0].messages if m.get("tool_calls")]
    assert trajs[0].outcome == "env_error" and calls == ["read_file", "run_test"]
    assert "fork server died" in trajs[0].info["error"]


# ---- 6: nothing survives a run -------------------------------------------------------------------------------------

WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def _state(uids: set[int]) -> dict[str, object]:
    """What the sandbox uids `uids` own in the host's writable places: files (any depth) and SysV IPC objects.
    Other processes on the machine may write there as they like: only what this test's episodes could make counts.
    Left out: this test run's own files (pytest's tmp_path, and the checkout and venv when they live under /tmp)."""
    own = (str(CHECKOUT), sys.prefix)
    files = {}
    for top in WRITABLE:
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = [d for d in dirnames if not d.startswith("pytest-of-")
                           and not os.path.join(dirpath, d).startswith(own)]
            for name in filenames + dirnames:
                p = os.path.join(dirpath, name)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                if st.st_uid in uids or st.st_gid in uids:
                    files[p] = (st.st_size, st.st_mtime_ns)
    ipc = {}
    for kind in ("shm", "msg", "sem"):
        head, *rows = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        cols = [head.split().index(c) for c in ("uid", "gid", "cuid", "cgid")]
        ipc[kind] = [r for r in rows if any(int(r.split()[c]) in uids for c in cols)]
    return {"files": files, "ipc": ipc}


@isolated
def test_nothing_survives_hostile_episodes(env_and_task, tmp_path, monkeypatch):
    """No file, IPC object or process of this process's sandbox uids outlives the episodes, and the trusted side
    leaves nothing in its temp directory (a private one here, so other jobs' files in /tmp do not count)."""
    env, task = env_and_task
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    monkeypatch.setenv("TMPDIR", str(private))
    uids = {200_000 + (os.getpid() % 10_000) * 100 + i for i in range(100)}  # this process's sandbox uids
    before = _state(uids)
    for exploit in ("persist_state", "huge_workspace", "fifo_hang", "socket_file"):
        probe_task(env, task, exploit)
    after = _state(uids)
    assert after["ipc"] == before["ipc"]
    new = {p: v for p, v in after["files"].items() if before["files"].get(p) != v}
    assert new == {}
    assert sorted(private.iterdir()) == []
    assert not any(live_processes(uid) for uid in uids)


RSS_SCRIPT = """
import resource, sys
from agentic_rl.envs.codefix.env import CodeFixEnv
from agentic_rl.envs.codefix.exploits import probe_task
env = CodeFixEnv()
task = next(t for t in env.tasks("eval", 6, 0) if t.get("module") == "truncate")
probe_task(env, task, "noop")
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
probe_task(env, task, sys.argv[1])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
"""


@isolated
def test_the_trainers_memory_does_not_grow_with_what_the_agent_wrote():
    """The agent writes 40 files of 4 MiB; the trusted side reads none of them whole."""
    grew = {}
    for exploit in ("noop", "huge_workspace"):
        out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, exploit], capture_output=True, text=True, check=True)
        grew[exploit] = int(out.stdout.split()[-1]) / 1024  # MiB (ru_maxrss is in KiB on Linux)
    assert grew["huge_workspace"] < grew["noop"] + 20, grew


# ---- 7: test ids, links into .git, --task-id -----------------------------------------------------------------------

@isolated
def test_a_test_id_is_never_an_option(env_and_task):
    env, task = env_and_task
    env.reset(task)
    for bad in ["--junitxml=/tmp/codefix-escape.xml", "-p no:python", "test_x.py --co", "a\x00b"]:
        obs = env.step(format_tool_call("run_test", {"test_id": bad})).observation[0]["content"]
        assert obs.startswith("error: test_id must be"), obs
    ok = env.step(format_tool_call("run_test", {"test_id": f"test_{task.get('module')}.py::test_01"}))
    env.close()
    assert "passed" in ok.observation[0]["content"] or "failed" in ok.observation[0]["content"]
    assert not Path("/tmp/codefix-escape.xml").exists()


@isolated
def test_git_is_unreachable_through_any_link_or_rename(env_and_task):
    env, task = env_and_task
    env.reset(task)
    ws = env.workspace
    sb = Sandbox(ws.root, env.limits)
    r = sb.run(["python", "-c", "import os\nos.symlink('.git', 'history')\nos.symlink('.git/config', 'cfg.txt')\n"
                                "try:\n    os.rename('.git', 'moved')\nexcept OSError as e:\n    print('rename', e.errno)\n"
                                "try:\n    open('.git/config', 'a')\nexcept OSError as e:\n    print('write', e.errno)"])
    assert "rename" in r.stdout and "write" in r.stdout, r.stdout + r.stderr
    for path in ["history/config", "cfg.txt", ".git/config", "./.git/HEAD"]:
        obs = env.step(format_tool_call("read_file", {"path": path})).observation[0]["content"]
        assert obs.startswith("error:") and ".git" in obs, (path, obs)
    env.close()


def test_task_id_works_for_every_env():
    from typer.testing import CliRunner

    from agentic_rl.cli import app
    from agentic_rl.envs import make_env

    for name in ("tool_use", "codefix"):
        task = make_env(name).tasks("eval", 1, 3)[0]
        r = CliRunner().invoke(app, ["rollout", "--env", name, "--policy", "teacher", "--task-id", task.id, "--seed", "3",
                                      "--quiet"])
        assert r.exit_code == 0, r.output
        assert make_env(name).task_by_id(task.id, seed=3) == task
    r = CliRunner().invoke(app, ["rollout", "--env", "codefix", "--policy", "teacher", "--task-id", "codefix/x"])
    assert r.exit_code != 0 and "codefix/<split>/<module>/<operator>/<site>" in r.output
