"""glmnorm's torch ops inside PyTorch distributed (issue 18): DTensor sharding rules, tensor /
sequence parallel and FSDP2 of a tiny Glm4MoeForCausalLM, docs/DISTRIBUTED.md's example.

Each test starts 2 ranks (distributed_worker.py, env as torchrun sets it; the docs example
under torchrun itself), gloo on 127.0.0.1 at a free port, each rank limited to 2 threads
in all. A rank that fails or hangs fails the test within LIMIT_S: the others are killed.
Skipped where torch.distributed or its gloo backend is missing, or with
GLMNORM_SKIP_DISTRIBUTED=1.
"""

import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import torch

from conftest import REPO, SEED

pytestmark = pytest.mark.skipif(
    os.environ.get("GLMNORM_SKIP_DISTRIBUTED") == "1" or not torch.distributed.is_available()
    or not torch.distributed.is_gloo_available(),
    reason="torch.distributed with gloo unavailable (or GLMNORM_SKIP_DISTRIBUTED=1)")

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "distributed_worker.py")
LIMIT_S = 150  # per test; a run takes 10-20 s on 2 cores


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra=None):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               WORLD_SIZE="2", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env.update(extra or {})
    return env


def _descendants(pid):
    """The pids of pid's descendants (torchrun starts its workers in sessions of their own,
    so killing torchrun's process group would miss them)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill(procs):
    """SIGKILL to every process we started that is still running, and to its descendants."""
    for p in procs:
        if p.poll() is None:
            for pid in _descendants(p.pid) + [p.pid]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
    for p in procs:
        p.wait()


def run_ranks(commands, limit_s=LIMIT_S):
    """Runs the commands [(argv, env)] together; returns their outputs once all exit 0.
    Fails (killing the rest) as soon as one exits non-zero, or when limit_s passes."""
    logs = [tempfile.TemporaryFile(mode="w+") for _ in commands]
    procs = [subprocess.Popen(argv, env=env, cwd=HERE, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
             for (argv, env), log in zip(commands, logs)]
    deadline = time.monotonic() + limit_s
    failure = None
    try:
        while True:
            codes = [p.poll() for p in procs]
            if any(c not in (None, 0) for c in codes):
                failure = f"a rank exited with {[c for c in codes if c not in (None, 0)]}"
                break
            if all(c == 0 for c in codes):
                break
            if time.monotonic() > deadline:
                failure = f"timed out after {limit_s} s"
                break
            time.sleep(0.1)
    finally:
        _kill(procs)
    outs = []
    for log in logs:
        log.seek(0)
        outs.append(log.read())
        log.close()
    if failure:
        tails = "\n".join(f"--- command {i} ---\n{o[-4000:]}" for i, o in enumerate(outs))
        pytest.fail(f"{failure}\n{tails}")
    return outs


def run_worker(scenario, limit_s=LIMIT_S):
    print(f"seed {SEED} (replay: GLMNORM_TEST_SEED={SEED})")
    env = _env()
    outs = run_ranks([([sys.executable, WORKER, scenario, str(SEED)], dict(env, RANK=str(r)))
                      for r in range(2)], limit_s)
    for o in outs:  # the ranks' own reports (measured tolerances), shown with pytest -s
        print("\n".join(line for line in o.splitlines() if line.startswith("[rank")))
    return outs


def test_ops_on_dtensors_match_the_single_process_bits():
    outs = run_worker("ops")
    assert all("ops: all bit-identical" in o for o in outs)


def test_tensor_and_sequence_parallel_tiny_glm45():
    outs = run_worker("tp")
    for o in outs:
        assert len(re.findall(r"TP=2\+SP (logits|loss|grads): ", o)) == 3


def test_fsdp2_training_step_tiny_glm45():
    outs = run_worker("fsdp")
    for o in outs:
        assert len(re.findall(r"FSDP2 (logits|loss|grads): ", o)) == 3


def test_a_failing_rank_fails_fast_and_the_others_are_killed():
    # Rank 1 raises while rank 0 waits in a barrier (gloo would wait 60 s): the harness
    # reports the failure in seconds and leaves no process behind.
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="a rank exited with"):
        run_worker("fail", limit_s=60)
    assert time.monotonic() - t0 < 45


def test_a_hung_rank_fails_at_the_limit():
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="timed out after 20 s"):
        run_worker("hang", limit_s=20)
    assert time.monotonic() - t0 < 30


def _docs_example():
    text = open(os.path.join(REPO, "docs", "DISTRIBUTED.md")).read()
    section = text.split("\n## Example\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    assert len(blocks) == 1, "docs/DISTRIBUTED.md's Example section has one python block"
    return blocks[0]


def test_docs_example_runs_under_torchrun(tmp_path):
    script = tmp_path / "train_glm45_tp_sp_fsdp.py"
    script.write_text(_docs_example())
    env = _env()
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
            "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
            env["MASTER_PORT"], str(script)]
    out, = run_ranks([(argv, env)])
    assert re.search(r"losses \[", out), out[-2000:]
