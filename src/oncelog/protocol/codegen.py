"""One place that turns generated source into a function (the compiled entity writers
and request length checks)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def generated_function(signature: str, lines: list[str], names: dict[str, Any], label: str) -> Callable:
    """The function `def <signature>:` with body `lines` (already indented), its globals
    `names`; `label` names it in tracebacks, and its source is its docstring."""
    source = f"def {signature}:\n" + ("\n".join(lines) or "    pass") + "\n"
    namespace = dict(names)
    exec(compile(source, f"<{label}>", "exec"), namespace)
    function = namespace[signature.split("(", 1)[0]]
    function.__doc__ = source
    return function
