"""A baseline child answers a failing setup with its error and keeps serving the other variants."""
import io
import json
import sys

from chain_fuser.timing import child_serve


def test_a_failing_setup_is_answered_and_the_child_keeps_serving(monkeypatch):
    def bad(j):
        raise RuntimeError("torch.compile gave up")

    cmds = [{"cmd": "bad", "name": "a"}, {"cmd": "ok", "name": "b"}, {"cmd": "time", "name": "b", "n": 2}]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps(c) + "\n" for c in cmds)))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    child_serve({"bad": bad, "ok": lambda j: (lambda: None)})
    answers = [json.loads(x) for x in out.getvalue().splitlines()]
    assert answers[0] == {"error": "RuntimeError: torch.compile gave up"}
    assert answers[1] == {"ok": True} and answers[2]["ms"] >= 0
