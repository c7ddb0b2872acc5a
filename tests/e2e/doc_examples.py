"""The examples of the README and of every docs/*.md, as written: each shell command of a
fenced `sh` or `bash` block (a line ending in a backslash continues it; blank and
comment-only lines are dropped) and each fenced `python` block whole. A block fenced as
anything else (`text`, `yaml`, none) is not an example: output, a config excerpt."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
_FENCE = re.compile(r"^```(\w*)\s*$")
SHELL = ("sh", "bash")


@dataclass(frozen=True)
class Example:
    source: str   # file and line, e.g. "README.md:52"
    lang: str     # "sh" or "python"
    text: str     # one shell command (continuation lines kept) or a whole python block

    @property
    def command(self) -> str:
        """What runs: the text without the venv's path and trailing comments, spaces collapsed
        (README.md and a doc giving the same command give the same one)."""
        lines = [re.sub(r"\s+#[^'\"]*$", "", line) for line in self.text.replace(".venv/bin/", "").splitlines()]
        return " ".join(" ".join(lines).split())

    @property
    def id(self) -> str:
        words = " ".join(self.text.split()[:4])
        return f"{self.source} {words}"[:80]


def section(text: str, heading: str) -> tuple[int, str]:
    """(its first line number, the text) of `## heading` up to the next `## ` heading."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == f"## {heading}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return start + 1, "\n".join(lines[start:end])


def fenced_blocks(text: str, first_line: int = 1) -> list[tuple[str, int, list[str]]]:
    """(language, line number of the block's first line, its lines) of each fenced block."""
    blocks, lang, start, body = [], None, 0, []
    for n, line in enumerate(text.splitlines(), first_line):
        fence = _FENCE.match(line.strip())
        if fence and lang is None:
            lang, start, body = fence.group(1) or "text", n + 1, []
        elif line.strip() == "```" and lang is not None:
            blocks.append((lang, start, body))
            lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def shell_commands(lines: list[str], first_line: int) -> list[tuple[int, str]]:
    out, current, at = [], [], 0
    for n, line in enumerate(lines, first_line):
        if not current and (not line.strip() or line.strip().startswith("#")):
            continue
        if not current:
            at = n
        current.append(line)
        if not line.rstrip().endswith("\\"):
            out.append((at, "\n".join(current)))
            current = []
    return out


def examples(path: Path, heading: str | None = None) -> list[Example]:
    text = path.read_text()
    first, text = section(text, heading) if heading else (1, text)
    name = path.relative_to(REPO).as_posix()
    out = []
    for lang, start, body in fenced_blocks(text, first):
        if lang in SHELL:
            out += [Example(f"{name}:{n}", "sh", cmd) for n, cmd in shell_commands(body, start)]
        elif lang == "python":
            out.append(Example(f"{name}:{start}", "python", "\n".join(body)))
    return out


def distinct(examples: list[Example]) -> list[Example]:
    """The first of each command (Example.command) in order."""
    seen: set[str] = set()
    return [e for e in examples if not (e.command in seen or seen.add(e.command))]


def documented_examples() -> list[Example]:
    """Every example: the README's, then each doc's in name order."""
    docs = sorted((REPO / "docs").glob("*.md"))
    return [e for path in [REPO / "README.md", *docs] for e in examples(path)]
