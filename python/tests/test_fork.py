"""fork() after glmnorm's thread pool has started (issue 15 §3).

The parent runs an op large enough to start the pool (x [64, 4096] float32), then forks; a child
that calls the op (numpy and torch paths), calls set_num_threads, or only exits must finish and
get the parent's bits. Each scenario runs in a fresh interpreter (so pytest's own threads are not
forked), and the parent waits for its child with a time limit: a hang fails the test.
"""

import os
import subprocess
import sys
import textwrap

import pytest

# The script run in a fresh interpreter; {child} is the child's body, which returns an int
# (0: success). The parent prints "ok" when its child exited with 0 in time.
_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import torch
    torch.set_num_threads(1)  # torch's own pool is not under test
    import glmnorm
    import glmnorm.torch as gt

    glmnorm.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    rng = np.random.default_rng(1234)
    x = (rng.standard_normal((64, 4096)) + 1.0).astype(np.float32)
    w = (rng.standard_normal(4096) * 0.1 + 1.0).astype(np.float32)
    xt, wt = torch.from_numpy(x), torch.from_numpy(w)
    ref_np = glmnorm.rms_norm(x, w)
    ref_t = gt.rms_norm(xt, wt)
    big = torch.randn(4096, 5120).bfloat16()
    wb = torch.ones(5120, dtype=torch.bfloat16)
    big_ref = torch.ops.glmnorm.rms_norm(big, wb).clone()
    torch.ops.glmnorm.rms_norm(big, wb)  # freed at once: its block waits in the output cache

    def same():
        return (np.array_equal(glmnorm.rms_norm(x, w).view(np.uint32), ref_np.view(np.uint32))
                and torch.equal(gt.rms_norm(xt, wt).view(torch.int32), ref_t.view(torch.int32)))

    def child():
    {child}

    pid = os.fork()
    if pid == 0:
        try:
            code = child()
        except BaseException as e:
            print("child raised", repr(e), flush=True)
            code = 3
        os._exit(code)
    deadline = time.monotonic() + {limit}
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            print("child hung", flush=True)
            sys.exit(1)
        time.sleep(0.01)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0 and same():
        print("ok")
    else:
        print("child status", status, "parent still right:", same())
        sys.exit(1)
""")

_CHILDREN = {
    "ops": """
        return 0 if same() else 1
    """,
    "set_num_threads": """
        glmnorm.set_num_threads(1)
        if glmnorm.num_threads() != 1 or not same():
            return 1
        glmnorm.set_num_threads(2)
        return 0 if same() else 2
    """,
    "exit": """
        return 0
    """,
    # A large output (40 MiB: from glmnorm's output cache, python/src/torch_ops.cc) freed in
    # the parent before the fork: the child reuses the cached block and frees its own.
    "large_output": """
        a = torch.ops.glmnorm.rms_norm(big, wb)
        b = torch.ops.glmnorm.rms_norm(big, wb)
        return 0 if torch.equal(a, b) and torch.equal(a, big_ref) and same() else 1
    """,
}


@pytest.mark.parametrize("child", sorted(_CHILDREN))
def test_fork_child_finishes_with_parents_bits(child):
    body = textwrap.indent(textwrap.dedent(_CHILDREN[child]).strip(), "    ")
    script = _SCRIPT.replace("{child}", body).replace("{limit}", "60")
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), (
        f"child {child!r}: rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
