"""The per-sample ``config`` YAML text of PDEBench group files: a tiny formatter and parser.

Only the indented ``key: value`` subset is handled (no YAML dependency): :func:`format_config` writes
``sim:`` followed by one ``  name: value`` line per parameter (floats with ``repr``, so they read back
exactly), :func:`parse_config` flattens nested mappings into dotted keys (``sim.dam_radius``).
"""

from __future__ import annotations

__all__ = ["format_config", "parse_config"]


def format_config(values: dict[str, float]) -> str:
    """YAML text ``sim:\\n  key: value`` for per-sample parameters (floats written exactly with ``repr``).

    Example:
        >>> format_config({"dam_radius": 0.5})
        'sim:\\n  dam_radius: 0.5\\n'
    """
    lines = ["sim:"] + [f"  {k}: {v!r}" for k, v in values.items()]
    return "\n".join(lines) + "\n"


def parse_config(text: str) -> dict[str, object]:
    """Flatten the indented ``key: value`` YAML subset PDEBench stores as ``config`` into dotted keys.

    Example:
        >>> parse_config("sim:\\n  dam_radius: 0.5\\n")
        {'sim.dam_radius': 0.5}
    """
    out: dict[str, object] = {}
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#") or ":" not in line:
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key.strip()])
        if value.strip():
            out[dotted] = _scalar(value.strip())
        else:
            stack.append((indent, key.strip()))
    return out


def _scalar(text: str) -> object:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text.strip("'\"")
