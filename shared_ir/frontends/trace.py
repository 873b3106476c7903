"""Where in the user's code a traced node came from (for error messages that name file and line)."""
from __future__ import annotations

import re

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def user_frame(stack_trace: str | None) -> str | None:
    """``file:line in fn`` of the first frame of a traceback string outside torch's own sources."""
    if not stack_trace:
        return None
    for m in _FRAME.finditer(stack_trace):
        f = m.group(1)
        if "/torch/" not in f and "/torch\\" not in f:
            return f"{f}:{m.group(2)} in {m.group(3)}"
    return None
